"""Every user-reachable bad input raises the right error class with a message naming the problem."""

from __future__ import annotations

import importlib
import re
import resource

import numpy as np
import pytest

import ember
from ember import Device, DeviceError, DTypeError, OutOfMemoryError, ShapeError

import ember.limits as limits


@pytest.fixture
def d(device):
    return device


def _raises(kind, fn, *fragments):
    with pytest.raises(kind) as info:
        fn()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def test_error_hierarchy():
    assert issubclass(ShapeError, ValueError) and issubclass(DTypeError, TypeError)
    assert issubclass(DeviceError, RuntimeError) and issubclass(ember.DeviceUnavailableError, DeviceError)
    assert issubclass(OutOfMemoryError, MemoryError) and issubclass(ember.errors.DomainError, ValueError)
    for kind in (ShapeError, DTypeError, DeviceError, OutOfMemoryError, ember.errors.DomainError):
        assert issubclass(kind, ember.EmberError)


def test_broadcast_errors_name_both_shapes_and_the_op(d):
    a, b = ember.ones(2, 3, device=d), ember.ones(4, device=d)
    _raises(ShapeError, lambda: a + b, "add", "(2, 3)", "(4,)")
    _raises(ShapeError, lambda: a * b, "mul", "(2, 3)", "(4,)")
    _raises(ShapeError, lambda: ember.where(a > 0, a, b), "where", "(2, 3)", "(4,)")
    _raises(ShapeError, lambda: a < b, "lt", "(2, 3)", "(4,)")
    _raises(ShapeError, lambda: ember.maximum(a, b), "maximum", "(2, 3)", "(4,)")


def test_matmul_errors(d):
    _raises(ShapeError, lambda: ember.ones(2, 3, device=d) @ ember.ones(4, 5, device=d), "matmul", "(2, 3)", "(4, 5)")
    _raises(ShapeError, lambda: ember.ones(3, device=d) @ ember.ones(4, device=d), "matmul")
    _raises(ShapeError, lambda: ember.ones(2, 2, 3, device=d) @ ember.ones(3, 3, 4, device=d), "matmul", "(2, 2, 3)", "(3, 3, 4)")
    _raises(ShapeError, lambda: ember.matmul(ember.ones((), device=d), ember.ones(3, device=d)), "matmul")
    _raises(DTypeError, lambda: ember.ones(2, 2, dtype="bool", device=d) @ ember.ones(2, 2, dtype="bool", device=d), "matmul", "bool")
    _raises(ShapeError, lambda: ember.outer(ember.ones(2, 2, device=d), ember.ones(3, device=d)), "outer")
    _raises(ShapeError, lambda: ember.einsum("ij,jk->ik", ember.ones(2, 3, device=d), ember.ones(4, 5, device=d)), "einsum")
    _raises(ShapeError, lambda: ember.einsum("ij,jk", ember.ones(2, 3, device=d)), "einsum", "2 operands")
    _raises(ShapeError, lambda: ember.einsum("ii->i", ember.ones(3, 3, device=d)), "einsum", "repeated")


def test_reshape_and_movement_errors(d):
    x = ember.ones(2, 3, device=d)
    _raises(ShapeError, lambda: x.reshape(4, 2), "reshape", "(2, 3)", "(4, 2)")
    _raises(ShapeError, lambda: x.reshape(-1, 4), "reshape", "(2, 3)")
    _raises(ShapeError, lambda: x.reshape(-1, -1), "reshape")
    _raises(ShapeError, lambda: x.permute(0), "permute", "(2, 3)")
    _raises(ShapeError, lambda: x.permute(0, 0), "permute")
    _raises(ShapeError, lambda: x.expand(4, 3), "expand", "(2, 3)", "(4, 3)")
    _raises(ShapeError, lambda: x.expand(3), "expand")
    _raises(ShapeError, lambda: ember.cat([x, ember.ones(2, 4, device=d)]), "cat", "(2, 3)", "(2, 4)")
    _raises(ShapeError, lambda: ember.cat([x, ember.ones(3, device=d)]), "cat")
    _raises(ShapeError, lambda: ember.cat([ember.ones((), device=d)]), "cat", "zero-dimensional")
    _raises(ValueError, lambda: ember.cat([]), "cat")
    _raises(ShapeError, lambda: ember.stack([x, ember.ones(3, 2, device=d)]), "stack", "(2, 3)", "(3, 2)")
    _raises(ShapeError, lambda: x.narrow(1, 2, 2), "narrow", "(2, 3)")
    _raises(ShapeError, lambda: x.split([1, 1], 1), "split", "(2, 3)")
    _raises(ShapeError, lambda: x.unflatten(1, (2, 2)), "unflatten", "(2, 3)")
    _raises(ShapeError, lambda: x.flatten(1, 0), "flatten")
    _raises(ShapeError, lambda: x.pad((1, 2, 3)), "pad")
    _raises(ShapeError, lambda: x.pad((3, 0), mode="reflect"), "pad", "reflect")
    _raises(ValueError, lambda: x.pad((1, 1), mode="circular"), "circular")
    _raises(ShapeError, lambda: x.roll((1, 2), 0), "roll")
    _raises(ShapeError, lambda: ember.ones(3, device=d).tril(), "tril", "(3,)")
    _raises(ShapeError, lambda: x.diagonal(0, 1, 1), "diagonal")
    _raises(ShapeError, lambda: x.movedim((0, 1), 0), "movedim")
    _raises(ShapeError, lambda: x.repeat(2), "repeat", "(2, 3)")
    _raises(ValueError, lambda: x.chunk(0), "chunk")
    _raises(ShapeError, lambda: ember.activation.glu(x), "glu", "(2, 3)")


@pytest.mark.parametrize("call", [
    lambda x: x.sum(dim=2), lambda x: x.mean(dim=-3), lambda x: x.amax(dim=(0, 5)), lambda x: x.argmax(dim=2),
    lambda x: x.cumsum(3), lambda x: x.sort(dim=2), lambda x: x.transpose(0, 2), lambda x: x.unsqueeze(4),
    lambda x: x.squeeze(2), lambda x: x.flip(2), lambda x: x.softmax(2), lambda x: ember.cat([x, x], dim=2),
    lambda x: x.gather(2, ember.zeros(2, 3, dtype="i64", device=x.device)), lambda x: x.size(2),
    lambda x: x.index_select(-3, ember.zeros(1, dtype="i64", device=x.device)), lambda x: x.max(dim=-3),
    lambda x: ember.stack([x, x], dim=4), lambda x: x.topk(1, dim=2), lambda x: x.median(dim=2)],
    ids=["sum", "mean", "amax", "argmax", "cumsum", "sort", "transpose", "unsqueeze", "squeeze", "flip", "softmax",
         "cat", "gather", "size", "index_select", "max", "stack", "topk", "median"])
def test_out_of_range_dims(call, d):
    x = ember.ones(2, 3, device=d)
    message = _raises(ShapeError, lambda: call(x), "out of range")
    assert re.search(r"dim -?\d", message), message


def test_duplicate_dims(d):
    _raises(ShapeError, lambda: ember.ones(2, 3, device=d).sum(dim=(0, 0)), "sum", "twice")
    _raises(ShapeError, lambda: ember.ones(2, 3, device=d).sum(dim=(1, -1)), "sum", "twice")


def test_empty_reductions(d):
    e = ember.ones(0, 3, device=d)
    _raises(ShapeError, lambda: e.amax(dim=0), "amax", "empty", "(0, 3)")
    _raises(ShapeError, lambda: e.argmin(dim=0), "argmin", "empty", "(0, 3)")
    _raises(ShapeError, lambda: e.max(), "amax", "empty")
    _raises(ShapeError, lambda: e.median(), "median", "empty")
    _raises(ShapeError, lambda: ember.ones(3, device=d).topk(4), "topk", "k=4")


def test_indexing_errors(d):
    x = ember.ones(2, 3, device=d)
    _raises(IndexError, lambda: x[2], "index 2", "size 2")
    _raises(IndexError, lambda: x[0, -4], "index -4", "size 3")
    _raises(IndexError, lambda: x[0, 0, 0], "too many indices", "(2, 3)")
    _raises(IndexError, lambda: x[..., ...], "ellipsis")
    _raises(IndexError, lambda: x[[0, 5]], "index 5", "size 2")
    _raises(IndexError, lambda: x[ember.tensor([0.5], device=d)], "integer or bool", "f32")
    _raises(IndexError, lambda: x[ember.tensor([True, False, True], device=d)], "mask", "(3,)", "(2, 3)")
    _raises(IndexError, lambda: x["a"], "unsupported index")
    _raises(IndexError, lambda: x[1.5], "unsupported index")
    _raises(IndexError, lambda: x.index_select(0, ember.tensor([3], device=d)), "index 3", "size 2")
    # negative indices are refused by the index ops, as in PyTorch (NumPy would wrap them around)
    neg = ember.tensor([[-1, 0, 0]], device=d)
    _raises(IndexError, lambda: x.gather(0, neg), "gather", "index -1", "size 2")
    _raises(IndexError, lambda: x.scatter(0, neg, 1.0), "scatter", "index -1")
    _raises(IndexError, lambda: x.scatter_add(0, neg, ember.ones(1, 3, device=d)), "scatter", "index -1")
    _raises(IndexError, lambda: x.gather(1, ember.tensor([[3], [0]], device=d)), "gather", "index 3", "size 3")
    _raises(IndexError, lambda: x.index_select(1, ember.tensor([-1], device=d)), "index_select", "index -1")
    _raises(IndexError, lambda: x.index_add(0, ember.tensor([-1], device=d), ember.ones(1, 3, device=d)), "index_add", "index -1")
    _raises(ShapeError, lambda: x.index_select(0, ember.tensor([[0]], device=d)), "index_select", "1-D")
    _raises(DTypeError, lambda: x.gather(0, ember.zeros(2, 3, device=d)), "gather", "integer")
    _raises(ShapeError, lambda: x.gather(1, ember.zeros(3, 3, dtype="i64", device=d)), "gather", "(3, 3)", "(2, 3)")
    _raises(ShapeError, lambda: x.scatter(1, ember.zeros(2, dtype="i64", device=d), ember.ones(2, device=d)),
            "scatter", "(2,)", "(2, 3)")
    _raises(ShapeError, lambda: x.scatter(1, ember.zeros(3, 3, dtype="i64", device=d), ember.ones(3, 3, device=d)),
            "scatter", "(3, 3)", "(2, 3)")
    _raises(IndexError, lambda: x.take(ember.tensor([6], device=d)), "index 6", "size 6")
    _raises(IndexError, lambda: ember.one_hot(ember.tensor([0, 3], device=d), 3), "one_hot", "class 3", "3 classes")
    _raises(IndexError, lambda: ember.one_hot(ember.tensor([-1, 1], device=d), 3), "one_hot", "class -1")

    def assign():
        y = ember.ones(2, 3, device=d)
        y[0] = ember.ones(4, device=d)
    _raises(ShapeError, assign, "slice_assign", "(4,)", "(3,)")

    def assign_adv():
        y = ember.ones(2, 3, device=d)
        y[[0, 1]] = ember.ones(4, device=d)
    _raises(ShapeError, assign_adv, "slice_assign", "(4,)", "(2, 3)")


def test_dtype_errors(d):
    f = ember.ones(2, device=d)
    b = ember.ones(2, dtype="bool", device=d)
    _raises(DTypeError, lambda: f & f, "bitwise_and", "f32")
    _raises(DTypeError, lambda: ~f, "bitwise_not", "f32")
    _raises(DTypeError, lambda: -b, "neg", "bool")
    _raises(DTypeError, lambda: b - b, "sub", "bool")
    _raises(DTypeError, lambda: f - True, "sub", "bool")
    _raises(DTypeError, lambda: b.abs(), "abs", "bool")
    _raises(DTypeError, lambda: ember.ones(2, dtype="f128", device=d), "f128", "f32")
    _raises(DTypeError, lambda: f.cast("complex32"), "complex32")
    _raises(DTypeError, lambda: ember.rand(2, dtype="i32", device=d), "float dtype", "i32")
    _raises(DTypeError, lambda: ember.randn(2, dtype="bool", device=d), "float dtype", "bool")
    _raises(TypeError, lambda: ember.ones(2, dtype="i64", device=d).require_grad(), "float", "i64")
    _raises(TypeError, lambda: ember.one_hot(f), "one_hot", "f32")
    _raises(DTypeError, lambda: ember.tensor(["a", "b"], device=d), "unsupported data", "<U1")
    _raises(ShapeError, lambda: ember.tensor([[1, 2], [3]], device=d), "tensor", "unequal lengths")
    _raises(TypeError, lambda: ember.from_numpy([1, 2], device=d), "numpy.ndarray", "list")
    _raises(DTypeError, lambda: ember.from_numpy(np.ones(2, np.uint16), device=d), "uint16")
    _raises(TypeError, lambda: f + "a")
    _raises(TypeError, lambda: ember.matmul(f, 2))
    _raises(TypeError, lambda: ember.where(True, f, f), "condition")


def test_device_errors_name_both_devices():
    a = ember.ones(2, device=Device.numpy())
    c = ember.ones(2, device=Device.cpu())
    for fn, op in [(lambda: a + c, "add"), (lambda: a @ ember.ones(2, 2, device=Device.cpu()), "matmul"),
                   (lambda: ember.cat([a, c]), "cat"), (lambda: ember.where(c > 0, a, c), "where"),
                   (lambda: a.gather(0, ember.zeros(2, dtype="i64", device=Device.cpu())), "gather")]:
        with pytest.raises(DeviceError) as info:
            fn()
        message = str(info.value)
        assert op in message and 'Device("numpy")' in message and 'Device("cpu")' in message, message
    tracked = ember.ones(2, device=Device.cpu().autodiff("balanced"))
    plain = ember.ones(2, device=Device.cpu().autodiff())
    _raises(DeviceError, lambda: tracked + plain, "checkpointing")
    # mixing a device with its own autodiff variant is not an error (w - lr * grad)
    assert (ember.ones(2, device=Device.cpu()) + plain).device is Device.cpu().autodiff()


def test_device_strings_and_unavailable(monkeypatch):
    _raises(DeviceError, lambda: Device("tpu"), "tpu", "numpy", "cpu", "cuda", "wgpu")
    _raises(DeviceError, lambda: ember.ones(2, device="metal"), "metal", "cuda")
    _raises(DeviceError, lambda: Device("cpu:1"), "cpu:1")
    from ember import dispatch
    from ember.cube.runtime.cuda import cuda_available
    # Without wgpu-py installed, the message names the extra that installs it.
    monkeypatch.setattr(dispatch.importlib.util, "find_spec", lambda name, *a: None)
    monkeypatch.setattr(Device.wgpu(0), "_backend", None)  # built by earlier tests where wgpu is installed
    _raises(ember.DeviceUnavailableError, lambda: ember.ones(2, device="wgpu"), 'Device("wgpu:0")', "ember[wgpu]")
    # A CUDA device that cannot run (no driver or GPU here) names what is missing, the extra, and what runs.
    if not cuda_available()[0]:
        for spec in ("cuda:0", "cuda:1"):
            _raises(ember.DeviceUnavailableError, lambda: ember.ones(2, device=spec), f'Device("{spec}")',
                    "ember[cuda]", "available", 'Device("numpy")')


def test_cuda_unavailable_message_names_the_extra_once(monkeypatch):
    """Without cuda-bindings the message gives the pip line once; without a driver it adds it once."""
    import sys
    from ember.cube.runtime.nvrtc import INSTALL
    from ember.device import available_devices
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # `from cuda.bindings import driver` fails
    monkeypatch.setattr(Device.cuda(0), "_backend", None)
    with pytest.raises(ember.DeviceUnavailableError) as info:
        ember.ones(2, device="cuda:0")
    assert str(info.value) == (f'Device("cuda:0") is unavailable: the CUDA runtime needs cuda-bindings: {INSTALL}; '
                               f"available: {available_devices()}")
    monkeypatch.setattr("ember.cube.runtime.cuda.cuda_available", lambda: (False, "the CUDA driver sees no GPU"))
    with pytest.raises(ember.DeviceUnavailableError) as info:
        ember.ones(2, device="cuda:0")
    assert str(info.value) == (f'Device("cuda:0") is unavailable: the CUDA driver sees no GPU (the `cuda` extra: '
                               f"{INSTALL}, and an NVIDIA GPU); available: {available_devices()}")


def test_value_errors(d):
    x = ember.ones(2, 3, device=d)
    _raises(ValueError, lambda: x.item(), "item", "(2, 3)")
    _raises(ValueError, lambda: bool(x), "ambiguous", "(2, 3)")
    _raises(TypeError, lambda: len(ember.ones((), device=d)), "0-d")
    _raises(TypeError, lambda: [0, 1][ember.ones(1, device=d)], "integer")
    _raises(ValueError, lambda: ember.zeros(-1, device=d), "negative")
    _raises(ValueError, lambda: ember.arange(0, 5, 0, device=d), "step")
    _raises(ValueError, lambda: ember.linspace(0, 1, -1, device=d), "steps")
    _raises(ValueError, lambda: ember.randint(5, 5, (2,), device=d), "high")
    _raises(ValueError, lambda: x.clamp(), "clamp")
    _raises(ValueError, lambda: ember.div(x, x, rounding_mode="up"), "rounding_mode")
    _raises(ValueError, lambda: ember.activation.gelu(x, approximate="fast"), "approximate")
    _raises(ValueError, lambda: ember.seed(-3), "seed")
    _raises(ValueError, lambda: d.autodiff(checkpointing="all"), "checkpointing")
    _raises(TypeError, lambda: ember.Tensor(), "ember.tensor")


def test_negative_and_fractional_sizes_name_the_op_and_shape(d):
    for op, make in [("zeros", lambda: ember.zeros(2, -3, device=d)), ("ones", lambda: ember.ones((-1,), device=d)),
                     ("empty", lambda: ember.empty(-4, device=d)), ("full", lambda: ember.full((3, -1), 2.0, device=d)),
                     ("rand", lambda: ember.rand(-2, device=d)), ("randn", lambda: ember.randn(5, -5, device=d)),
                     ("randint", lambda: ember.randint(0, 5, (-1, 2), device=d)),
                     ("eye", lambda: ember.eye(-3, device=d)),
                     ("new_zeros", lambda: ember.ones(2, device=d).new_zeros(-2)),
                     ("expand", lambda: ember.ones(1, device=d).expand(-2)),
                     ("repeat", lambda: ember.ones(2, device=d).repeat(-1))]:
        _raises(ShapeError, make, f"{op}:", "negative dimension")
    _raises(ShapeError, lambda: ember.zeros(2.5, device=d), "zeros:", "integers", "(2.5,)")
    state = ember.random.get_state()
    with pytest.raises(ShapeError):
        ember.randn(-1, device=d)
    assert ember.random.get_state() == state, "a refused draw must not move the random stream"


HUGE = 1 << 20  # (HUGE, HUGE) and (HUGE ** 2,): 2^40 elements, 4 TiB of f32, more than any memory here


def test_sizes_beyond_memory_are_refused_before_allocating(d):
    col, row = ember.ones(HUGE, 1, device=d), ember.ones(1, HUGE, device=d)
    square, flat = f"({HUGE}, {HUGE})", f"({HUGE * HUGE},)"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for op, shape, make in [
            ("zeros", flat, lambda: ember.zeros(HUGE * HUGE, device=d)),
            ("ones", square, lambda: ember.ones(HUGE, HUGE, device=d)),
            ("empty", square, lambda: ember.empty(HUGE, HUGE, device=d)),
            ("full", square, lambda: ember.full((HUGE, HUGE), 1.5, dtype="f32", device=d)),
            ("new_zeros", square, lambda: col.new_zeros(HUGE, HUGE)),
            ("rand", square, lambda: ember.rand(HUGE, HUGE, device=d)),
            ("randn", square, lambda: ember.randn(HUGE, HUGE, device=d)),
            ("randint", square, lambda: ember.randint(0, 9, (HUGE, HUGE), dtype="f32", device=d)),
            ("arange", flat, lambda: ember.arange(HUGE * HUGE, dtype="f32", device=d)),
            ("linspace", flat, lambda: ember.linspace(0, 1, HUGE * HUGE, device=d)),
            ("eye", square, lambda: ember.eye(HUGE, device=d)),
            ("add", square, lambda: (col + row).sum()),
            ("where", square, lambda: ember.where(col > 0, col, row)),
            ("expand", flat, lambda: ember.ones(1, device=d).expand(HUGE * HUGE).sum()),
            ("matmul", square, lambda: col @ row)]:
        _raises(OutOfMemoryError, make, f"{op}:", shape, "f32", f"{4 * HUGE * HUGE} bytes (4.0 TiB)")
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak  # KiB
    assert grown < 256 << 10, f"the refused ops raised the peak memory by {grown} KiB"


def test_the_memory_limit_is_the_largest_memory_here(d, monkeypatch):
    monkeypatch.setattr(limits, "_memory", [1 << 20])  # as if this machine had 1 MiB
    assert ember.zeros(512, 512, device=d).shape == (512, 512)  # 1 MiB of f32: at the limit
    _raises(OutOfMemoryError, lambda: ember.zeros(512, 513, device=d), "zeros:", "(512, 513)",
            f"{4 * 512 * 513} bytes", "(1.0 MiB)")
    _raises(OutOfMemoryError, lambda: ember.ones(511, 1, device=d) * ember.ones(1, 515, device=d), "mul:",
            "(511, 515)")
    assert ember.zeros(512, 513, dtype="f16", device=d).shape == (512, 513)  # the dtype's bytes count
    limits.note_device_memory(4 << 20)  # a GPU with more memory than the host
    assert ember.zeros(512, 513, device=d).shape == (512, 513)
    assert limits.memory_limit() == 4 << 20
    limits.note_device_memory(2 << 20)  # a smaller one lowers nothing
    assert limits.memory_limit() == 4 << 20


def test_no_history_names_the_parameters_device():
    """A model left on a plain device with inputs on its autodiff variant: the message says where the
    parameters are and how to move them; a tensor on a plain device is told to use the autodiff one."""
    from ember import nn
    plain, tracked = Device.numpy(), Device.numpy().autodiff()
    model = nn.Linear(3, 2, device=plain)
    loss = model(ember.ones(4, 3, device=tracked)).sum()
    for call in (loss.backward, lambda: loss.register_hook(lambda g: g)):
        _raises(RuntimeError, call, "no gradient history", "parameters", repr(plain), "without autodiff",
                f"model.to({tracked!r})", "require_grad()")
    model.to(tracked)
    grads = model(ember.ones(4, 3, device=tracked)).sum().backward()
    assert model.weight.grad(grads).shape == (2, 3)
    _raises(RuntimeError, lambda: ember.ones(2, device=plain).backward(), repr(plain), "without autodiff",
            f"model.to({tracked!r})")


def test_autodiff_errors(d):
    x = ember.ones(2, device=d)
    _raises(RuntimeError, lambda: x.backward(), "no gradient history")
    w = ember.ones(2, device=d).require_grad()
    grads = (w * 2).sum().backward()
    _raises(ValueError, lambda: x.grad(grads), "not tracked")
    _raises(ShapeError, lambda: (w * 2).backward(ember.ones(3, device=d)), "backward", "(3,)", "(2,)")
    # no seed is implied for more than one element (PyTorch's rule): the shape and both ways out are named
    for y in (w * 2, (w * 2).reshape(1, 2), (w * 2)[:0]):
        _raises(ShapeError, lambda: y.backward(), "backward", str(y.shape), "y.backward(seed)", "y.sum().backward()")
