"""Recurrent layers: `RNN` (tanh or relu), `LSTM` and `GRU`, with PyTorch's equations and gate order.

All three share one driver (`Recurrent`): stacked layers, optional reverse direction, dropout between
layers, initial states, batch-first or time-first input. A layer differs only in its step function.
Each direction of each layer is a `RecurrentCell` holding `weight_ih` (G * hidden, input),
`weight_hh` (G * hidden, hidden), `bias_ih` and `bias_hh` (G * hidden), where G is the number of gates:
PyTorch's layout (and `Linear`'s), gate blocks in PyTorch's order.
Every weight and bias starts U(-1/sqrt(hidden), 1/sqrt(hidden)), as in PyTorch.

Example:
    >>> lstm = LSTM(8, 16, num_layers=2, batch_first=True)
    >>> out, (h, c) = lstm(ember.randn(4, 10, 8))
    >>> out.shape, h.shape
    ((4, 10, 16), (2, 4, 16))
"""

from __future__ import annotations

import math

from ..api.activation import relu
from ..api.creation import zeros
from ..api.shape import cat, stack
from ..errors import ShapeError
from ..tensor import Tensor
from . import init
from .dropout import dropout
from .module import Module
from .param import Param


class RecurrentCell(Module):
    """The weights of one direction of one recurrent layer (see the module docs for the layout).

    Args:
        input_size: width of the layer's input.
        hidden_size: width of the state.
        gates: number of gate blocks G (1 for RNN, 4 for LSTM, 3 for GRU).
        bias: whether `bias_ih` and `bias_hh` exist.

    Example:
        >>> RecurrentCell(3, 5, gates=4).weight_ih.shape
        (20, 3)
    """

    def __init__(self, input_size: int, hidden_size: int, gates: int, bias: bool = True,
                 device=None, dtype=None) -> None:
        bound = 1.0 / math.sqrt(hidden_size)
        width = gates * hidden_size
        self.weight_ih = Param(init.uniform((width, input_size), -bound, bound, device, dtype))
        self.weight_hh = Param(init.uniform((width, hidden_size), -bound, bound, device, dtype))
        self.bias_ih = Param(init.uniform((width,), -bound, bound, device, dtype)) if bias else None
        self.bias_hh = Param(init.uniform((width,), -bound, bound, device, dtype)) if bias else None

    def project_input(self, x: Tensor) -> Tensor:
        """`x @ weight_ih^T + bias_ih` for every time step at once (one matmul instead of one per step)."""
        y = x @ self.weight_ih.T
        return y + self.bias_ih if self.bias_ih is not None else y

    def project_hidden(self, h: Tensor) -> Tensor:
        """`h @ weight_hh^T + bias_hh`."""
        y = h @ self.weight_hh.T
        return y + self.bias_hh if self.bias_hh is not None else y


class Recurrent(Module):
    """The shared driver of `RNN`, `LSTM` and `GRU`; subclasses define `GATES`, `STATES` and `step`.

    Args:
        input_size: width of the input features.
        hidden_size: width of each state.
        num_layers: stacked layers; layer l > 0 reads the (concatenated) outputs of layer l - 1.
        bias: whether the cells have biases.
        batch_first: input and output are (batch, time, features) instead of (time, batch, features).
        dropout: probability of dropping the outputs of every layer but the last, in training mode.
        bidirectional: add a direction reading the sequence backwards; outputs are concatenated
            [forward, backward] along the feature dim.
    `forward(x, state=None)` takes x as (T, B, F), (B, T, F) with `batch_first`, or unbatched (T, F),
    and initial states of shape (num_layers * directions, B, hidden) (zeros by default). It returns
    `(output, state)` with the final states in the same layout (`(h, c)` for LSTM).

    Example:
        >>> out, h = GRU(3, 5, num_layers=2)(ember.randn(7, 2, 3))
        >>> out.shape, h.shape
        ((7, 2, 5), (2, 2, 5))
    """

    GATES = 1
    STATES = 1

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None) -> None:
        if input_size <= 0 or hidden_size <= 0 or num_layers <= 0:
            raise ValueError(f"{type(self).__name__}: input_size, hidden_size and num_layers must be positive, "
                             f"got {input_size}, {hidden_size}, {num_layers}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"{type(self).__name__}: dropout must be in [0, 1), got {dropout}")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.batch_first, self.dropout, self.bidirectional = batch_first, dropout, bidirectional
        directions = 2 if bidirectional else 1
        self.layers = [[RecurrentCell(input_size if layer == 0 else hidden_size * directions, hidden_size,
                                      self.GATES, bias, device, dtype) for _ in range(directions)]
                       for layer in range(num_layers)]

    def step(self, cell: RecurrentCell, x_t: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        """One time step: projected input (B, G * hidden) and state -> new state (h first)."""
        raise NotImplementedError

    def forward(self, x: Tensor, state=None):
        unbatched = x.ndim == 2
        if x.ndim not in (2, 3) or x.shape[-1] != self.input_size:
            raise ShapeError(type(self).__name__, f"input must be (time, batch, {self.input_size}) "
                                                  f"(batch first if batch_first) or (time, {self.input_size}), "
                                                  f"got {x.shape}")
        x = x.unsqueeze(1) if unbatched else (x.transpose(0, 1) if self.batch_first else x)
        initial = self._initial_states(state, x, unbatched)
        finals: list[list[Tensor]] = [[] for _ in range(self.STATES)]
        directions = len(self.layers[0])
        for layer, cells in enumerate(self.layers):
            outputs = []
            for direction, cell in enumerate(cells):
                index = layer * directions + direction
                out, last = self._run(cell, x, tuple(s[index] for s in initial), reverse=direction == 1)
                outputs.append(out)
                for kept, s in zip(finals, last):
                    kept.append(s)
            x = cat(outputs, dim=-1) if directions == 2 else outputs[0]
            if layer < self.num_layers - 1:
                x = dropout(x, self.dropout, self.training)
        states = [stack(s, dim=0) for s in finals]
        if unbatched:
            x, states = x.squeeze(1), [s.squeeze(1) for s in states]
        elif self.batch_first:
            x = x.transpose(0, 1)
        return x, (tuple(states) if self.STATES > 1 else states[0])

    def _run(self, cell: RecurrentCell, x: Tensor, state: tuple[Tensor, ...], reverse: bool):
        """One direction over the (T, B, F) sequence; returns the (T, B, hidden) outputs and the last state."""
        projected = cell.project_input(x)
        steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
        outputs: list[Tensor] = [None] * x.shape[0]  # type: ignore[list-item]
        for t in steps:
            state = self.step(cell, projected[t], state)
            outputs[t] = state[0]
        return stack(outputs, dim=0), state

    def _initial_states(self, state, x: Tensor, unbatched: bool) -> tuple[Tensor, ...]:
        """The initial states as a tuple of (layers * directions, B, hidden) tensors."""
        count = self.num_layers * len(self.layers[0])
        shape = (count, x.shape[1], self.hidden_size)
        if state is None:
            h = zeros(*shape, dtype=x.dtype, device=x.device)
            return (h,) * self.STATES
        states = tuple(state) if isinstance(state, (tuple, list)) else (state,)
        if len(states) != self.STATES or not all(isinstance(s, Tensor) for s in states):
            raise TypeError(f"{type(self).__name__}: state must be {'(h, c)' if self.STATES > 1 else 'a tensor'}")
        expected = (count, self.hidden_size) if unbatched else shape
        for s in states:
            if s.shape != expected:
                raise ShapeError(type(self).__name__, f"initial state of shape {s.shape}; expected {expected}")
        return tuple(s.unsqueeze(1) for s in states) if unbatched else states

    def extra_repr(self) -> str:
        return (f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
                f"bidirectional={self.bidirectional}, batch_first={self.batch_first}, dropout={self.dropout}")


class RNN(Recurrent):
    """The Elman RNN: `h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`, act = tanh or relu.

    Args: as `Recurrent`, plus `nonlinearity` ("tanh" or "relu").
    Returns `(output, h_n)`.

    Example:
        >>> out, h = RNN(3, 5)(ember.randn(7, 2, 3))
        >>> out.shape, h.shape
        ((7, 2, 5), (1, 2, 5))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, device,
                         dtype)

    def step(self, cell, x_t, state):
        z = x_t + cell.project_hidden(state[0])
        return (z.tanh() if self.nonlinearity == "tanh" else relu(z),)


class LSTM(Recurrent):
    """Long short-term memory, PyTorch's gate order (i, f, g, o):

        i = sigmoid(W_ii x + b_ii + W_hi h + b_hi)      input gate
        f = sigmoid(W_if x + b_if + W_hf h + b_hf)      forget gate
        g = tanh(W_ig x + b_ig + W_hg h + b_hg)         cell candidate
        o = sigmoid(W_io x + b_io + W_ho h + b_ho)      output gate
        c' = f * c + i * g,   h' = o * tanh(c')

    Args: as `Recurrent`. `state` is `(h_0, c_0)`; returns `(output, (h_n, c_n))`.

    Example:
        >>> out, (h, c) = LSTM(3, 5, bidirectional=True)(ember.randn(7, 2, 3))
        >>> out.shape, c.shape
        ((7, 2, 10), (2, 2, 5))
    """

    GATES = 4
    STATES = 2

    def step(self, cell, x_t, state):
        h, c = state
        i, f, g, o = (x_t + cell.project_hidden(h)).chunk(4, dim=-1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        return o.sigmoid() * c.tanh(), c


class GRU(Recurrent):
    """Gated recurrent unit, PyTorch's gate order (r, z, n):

        r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)      reset gate
        z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)      update gate
        n = tanh(W_in x + b_in + r * (W_hn h + b_hn))   candidate
        h' = (1 - z) * n + z * h

    Args: as `Recurrent`. Returns `(output, h_n)`.

    Example:
        >>> out, h = GRU(3, 5, num_layers=2, batch_first=True)(ember.randn(2, 7, 3))
        >>> h.shape
        (2, 2, 5)
    """

    GATES = 3

    def step(self, cell, x_t, state):
        h = state[0]
        x_r, x_z, x_n = x_t.chunk(3, dim=-1)
        h_r, h_z, h_n = cell.project_hidden(h).chunk(3, dim=-1)
        r, z = (x_r + h_r).sigmoid(), (x_z + h_z).sigmoid()
        n = (x_n + r * h_n).tanh()
        return ((1 - z) * n + z * h,)
