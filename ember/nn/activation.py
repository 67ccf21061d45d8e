"""Activations as modules: each calls its function from `ember.activation` (formulas are PyTorch's) with
its settings; `PReLU` learns its negative slope and `SwiGLU` is a gated feed-forward block.

Example:
    >>> GELU(approximate="tanh")(ember.tensor([1.0])).shape
    (1,)
"""

from __future__ import annotations

from ..api import activation as F
from ..errors import ShapeError
from ..tensor import Tensor
from .init import constant
from .linear import Linear
from .module import Module
from .param import Param
from .wrap import FunctionModule


class ReLU(FunctionModule):
    """`max(x, 0)`. Example: `ReLU()(x)`."""

    function = staticmethod(F.relu)


class LeakyReLU(FunctionModule):
    """`x` for x > 0, else `negative_slope * x`.

    Args:
        negative_slope: the slope for negative inputs (default 0.01).

    Example:
        >>> LeakyReLU(0.2)(ember.tensor([-1.0])).tolist()
        [-0.2]
    """

    function = staticmethod(F.leaky_relu)

    def __init__(self, negative_slope: float = 0.01) -> None:
        super().__init__(negative_slope=negative_slope)


class ELU(FunctionModule):
    """`x` for x > 0, else `alpha * (exp(x) - 1)`.

    Args:
        alpha: the saturation value for negative inputs is `-alpha` (default 1).

    Example:
        >>> ELU(alpha=0.5)(x)
    """

    function = staticmethod(F.elu)

    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__(alpha=alpha)


class SELU(FunctionModule):
    """`scale * elu(x, alpha)` with the self-normalizing constants (scale 1.0507, alpha 1.6733).

    Example: `SELU()(x)`.
    """

    function = staticmethod(F.selu)


class GELU(FunctionModule):
    """`x * Phi(x)`, Phi the standard normal CDF.

    Args:
        approximate: `"none"` (exact, with erf) or `"tanh"`
            (`0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`).

    Example:
        >>> GELU("tanh")(x)
    """

    function = staticmethod(F.gelu)

    def __init__(self, approximate: str = "none") -> None:
        super().__init__(approximate=approximate)


class SiLU(FunctionModule):
    """`x * sigmoid(x)` (swish). Example: `SiLU()(x)`."""

    function = staticmethod(F.silu)


class Mish(FunctionModule):
    """`x * tanh(softplus(x))`. Example: `Mish()(x)`."""

    function = staticmethod(F.mish)


class Sigmoid(FunctionModule):
    """`1 / (1 + exp(-x))`. Example: `Sigmoid()(x)`."""

    function = staticmethod(F.sigmoid)


class Tanh(FunctionModule):
    """The hyperbolic tangent. Example: `Tanh()(x)`."""

    function = staticmethod(F.tanh)


class Softplus(FunctionModule):
    """`log(1 + exp(beta x)) / beta`, and `x` where `beta x > threshold` (for stability).

    Args:
        beta: the sharpness (default 1).
        threshold: above this value of `beta x` the function is linear (default 20).

    Example:
        >>> Softplus(beta=2.0)(x)
    """

    function = staticmethod(F.softplus)

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__(beta=beta, threshold=threshold)


class Softsign(FunctionModule):
    """`x / (1 + |x|)`. Example: `Softsign()(x)`."""

    function = staticmethod(F.softsign)


class HardSigmoid(FunctionModule):
    """`clamp(x / 6 + 1/2, 0, 1)` (PyTorch's Hardsigmoid). Example: `HardSigmoid()(x)`."""

    function = staticmethod(F.hard_sigmoid)


class HardSwish(FunctionModule):
    """`x * hard_sigmoid(x)` (PyTorch's Hardswish). Example: `HardSwish()(x)`."""

    function = staticmethod(F.hard_swish)


class Softmax(FunctionModule):
    """`exp(x) / sum(exp(x))` along `dim`.

    Args:
        dim: the dim that sums to 1 (default -1).

    Example:
        >>> Softmax(dim=1)(ember.zeros(2, 4)).sum(dim=1).tolist()
        [1.0, 1.0]
    """

    function = staticmethod(F.softmax)

    def __init__(self, dim: int = -1) -> None:
        super().__init__(dim=dim)


class LogSoftmax(FunctionModule):
    """`x - logsumexp(x)` along `dim`.

    Args:
        dim: the normalized dim (default -1).

    Example:
        >>> LogSoftmax(dim=1)(x)
    """

    function = staticmethod(F.log_softmax)

    def __init__(self, dim: int = -1) -> None:
        super().__init__(dim=dim)


class GLU(FunctionModule):
    """The gated linear unit `a * sigmoid(b)`, with `a, b` the two halves of `x` along `dim`.

    Args:
        dim: the split dim, of even size (default -1).

    Example:
        >>> GLU()(ember.ones(3, 4)).shape
        (3, 2)
    """

    function = staticmethod(F.glu)

    def __init__(self, dim: int = -1) -> None:
        super().__init__(dim=dim)


class PReLU(Module):
    """`x` for x > 0, else `weight * x` with a learned slope.

    Args:
        num_parameters: 1 (one slope shared by everything) or the number of channels (dim 1 of the
            input, which then needs at least 2 dims).
        init: the initial slope (default 0.25).

    Example:
        >>> PReLU(3)(ember.randn(2, 3, 5)).shape
        (2, 3, 5)
    """

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None) -> None:
        self.num_parameters = num_parameters
        self.weight = Param(constant((num_parameters,), init, device, dtype))

    def forward(self, x: Tensor) -> Tensor:
        if self.num_parameters == 1:
            slope = self.weight.reshape(())  # one shared slope keeps the input's shape, even 0-d
        else:
            if x.ndim < 2 or x.shape[1] != self.num_parameters:
                raise ShapeError("PReLU", f"{self.num_parameters} slopes need {self.num_parameters} channels in "
                                          f"dim 1, got input of shape {x.shape}")
            slope = self.weight.reshape((self.num_parameters,) + (1,) * (x.ndim - 2))
        return x.where(x > 0, x * slope)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class SwiGLU(Module):
    """The SwiGLU feed-forward block: `y = W3 (silu(W1 x) * (W2 x))`.

    Args:
        d_input: size of the input's last dim.
        d_hidden: size of the gated hidden layer.
        d_output: size of the output's last dim (default `d_input`: projected back).
        bias: whether the three Linear layers `w1`, `w2` (d_input -> d_hidden) and `w3`
            (d_hidden -> d_output) have biases (default False, as in LLaMA).

    Example:
        >>> SwiGLU(8, 16)(ember.randn(2, 8)).shape
        (2, 8)
    """

    def __init__(self, d_input: int, d_hidden: int, d_output: int | None = None, bias: bool = False,
                 device=None, dtype=None) -> None:
        self.w1 = Linear(d_input, d_hidden, bias, device, dtype)
        self.w2 = Linear(d_input, d_hidden, bias, device, dtype)
        self.w3 = Linear(d_hidden, d_input if d_output is None else d_output, bias, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.w3(F.silu(self.w1(x)) * self.w2(x))
