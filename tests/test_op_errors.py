"""Every public op's errors name the op the user called, not the op inside it that found the mistake.

The ops come from `ember.errors.public_ops()` (ember's namespace, `ember.nn.functional`, every module of
`ember.api` and `ember.nn.functional`), so an op added later is covered without editing this file. Each op is
called three ways from its signature: with a dim out of range (ops with a `dim`), with bool tensors
(a dtype most float ops refuse) and with tensors of shapes that do not fit; any ember error it raises must
start with the op's name.
"""

from __future__ import annotations

import inspect

import pytest

import ember
from ember import EmberError
from ember.errors import public_ops

OPS = public_ops()
# public names of primitives that keep a shorter name in their messages (PyTorch's operator names)
PRIMITIVE = {"bitwise_left_shift": "left_shift", "bitwise_right_shift": "right_shift"}
SKIP = {"seed", "no_grad", "grad_enabled", "checkpoint", "backend_extension", "promote_types", "result_type"}


def _tensor(shape, dtype="f32"):
    return ember.ones(*shape, dtype=dtype, device=ember.Device.numpy())


def _arguments(fn, first, other, index) -> tuple[list, dict]:
    """Positional values for `fn`'s required parameters: `first` for the first tensor, `other` for the
    rest, `index` (an integer tensor) for index parameters, small ints for sizes; required keyword-only
    `nd` (the shared pooling/convolution bodies) gets 2."""
    args, kwargs = [], {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.VAR_POSITIONAL or p.default is not p.empty:
            continue
        if p.kind is p.KEYWORD_ONLY:
            kwargs[p.name] = 2 if p.name == "nd" else first
        elif p.name in ("index", "indices", "mask"):
            args.append(index)
        elif p.name in ("tensors", "operands"):
            args.append([first, other])
        elif p.name == "equation":
            args.append("ij,jk->ik")
        elif p.name in ("dim", "dim0", "dim1", "start", "k", "chunks", "length", "num_groups", "upscale_factor",
                        "downscale_factor", "split_size_or_sections", "kernel_size", "output_size", "n",
                        "steps", "low", "shifts", "source_dim", "fill_value", "sizes", "shape",
                        "normalized_shape", "pad", "destination", "source", "value", "var", "start_dim"):
            args.append(other if p.name in ("source", "value", "var") else 1)
        else:
            args.append(first if not args else other)
    return args, kwargs


def _error(name: str, fn, *args, **kwargs) -> str | None:
    """The message of the ember error `fn(*args, **kwargs)` raises (checked to name `name`), or None."""
    try:
        fn(*args, **kwargs)
    except EmberError as e:
        message = str(e)
        assert message.startswith(f"{PRIMITIVE.get(name, name)}: "), f"{name} raised {type(e).__name__}: {message}"
        return message
    except (TypeError, ValueError, IndexError, NotImplementedError, AttributeError):
        return None  # not an ember error: Python's own for arguments this generic call gets wrong
    return None


CASES = sorted(n for n in OPS if n not in SKIP)
WITH_DIM = sorted(n for n in CASES if any("dim" in inspect.signature(f).parameters for f in OPS[n]))


@pytest.mark.parametrize("name", WITH_DIM)
def test_bad_dim_names_the_op(name):
    for fn in OPS[name]:
        x = _tensor((2, 3))
        args, kwargs = _arguments(fn, x, x, _tensor((2, 3), "i64").cast("i64") * 0)
        params = list(inspect.signature(fn).parameters)
        if "dim" in params[:len(args)]:
            args[params.index("dim")] = 7
        else:
            kwargs["dim"] = 7
        message = _error(name, fn, *args, **kwargs)
        assert message is not None, f"{name}(dim=7) on a (2, 3) tensor raised no ember error"


@pytest.mark.parametrize("name", CASES)
def test_bad_dtype_and_shape_name_the_op(name):
    index = _tensor((2, 3), "i64") * 0
    for fn in OPS[name]:
        for first, other in ((_tensor((2, 3), "bool"), _tensor((2, 3), "bool")),  # dtype
                             (_tensor((2, 3)), _tensor((5, 7))),  # shapes that do not broadcast
                             (_tensor(()), _tensor((2, 3, 4, 5, 6, 7)))):  # 0-d, and too many dims
            args, kwargs = _arguments(fn, first, other, index)
            _error(name, fn, *args, **kwargs)


def test_the_audit_has_teeth():
    """Enough of the generic calls fail with ember errors for the two tests above to mean something."""
    failing = []
    index = _tensor((2, 3), "i64") * 0
    for name in CASES:
        for fn in OPS[name]:
            args, kwargs = _arguments(fn, _tensor((2, 3)), _tensor((5, 7)), index)
            if _error(name, fn, *args, **kwargs) is not None:
                failing.append(name)
    assert len(set(failing)) >= 60, sorted(set(failing))


def test_composed_ops_name_themselves_and_the_valid_dims():
    x = _tensor((2, 2))
    for call, op in ((lambda: x.softmax(3), "softmax"), (lambda: x.log_softmax(-3), "log_softmax"),
                     (lambda: ember.nn.functional.glu(x, 2), "glu"), (lambda: x.logsumexp(2), "logsumexp")):
        with pytest.raises(ember.ShapeError) as info:
            call()
        assert str(info.value).startswith(f"{op}: dim "), str(info.value)
        assert "valid dims are -2 to 1" in str(info.value), str(info.value)
        assert info.value.op == op
    # an op the user called directly keeps its own name, with nothing added
    with pytest.raises(ember.ShapeError, match=r"^amax: dim 3 is out of range for a tensor of 2 dimensions: "
                                               r"valid dims are -2 to 1$"):
        x.amax(3)
    # an op called from the user's own function is named by that op, not by anything outside ember
    def user_fn(t):
        return t.softmax(5)
    with pytest.raises(ember.ShapeError, match=r"^softmax: "):
        user_fn(x)
