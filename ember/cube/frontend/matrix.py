"""Matrix fragments and asynchronous copies in kernel code (the IR's `Builder.matrix_*`, `copy_*`).

A plane (warp) multiplies small matrices together: declare fragments, load them from memory, multiply
and accumulate, store the accumulator. Every unit of the plane calls each op with the same arguments
(like CubeCL's `cmma`). Asynchronous copies fill shared memory while the plane computes on what an
earlier copy brought. Only the CUDA target renders these (tensor cores, `cp.async`); the C and WGSL
targets refuse them with an error naming the op.

A plane group (`ir.GROUP_PLANES` planes) shares a larger accumulator (`group_fragment`, 64 x n) that
`group_mma` feeds straight from shared memory, asynchronously (Hopper's `wgmma`): the operands must lie
in the swizzled layout `ir.Builder.group_mma` describes (the kernel places elements with it), and
`group_wait` waits for the batches started. `group_store` writes the accumulator out, masked and rounded.

Example:
    >>> from ember.cube.frontend import matrix as mx
    >>> @cube.kernel
    ... def tile(a: cube.Array[cube.bf16], b: cube.Array[cube.bf16], c: cube.Array[cube.f32]):
    ...     fa = mx.fragment("a", cube.bf16, 16, 16, 16)
    ...     fb = mx.fragment("b", cube.bf16, 16, 16, 16)
    ...     acc = mx.fragment("accumulator", cube.f32, 16, 16, 16)
    ...     mx.fill(acc, 0.0)
    ...     mx.load(fa, a, 0, 16); mx.load(fb, b, 0, 16)
    ...     mx.mma(acc, fa, fb, acc)
    ...     mx.store(c, 0, 16, acc)
"""

from __future__ import annotations

from .. import ir
from ..lang import KernelError
from .source import ArrayRef


class _Op:
    """A kernel-only function that emits its IR directly (the tracer calls `__cube_inline__`)."""

    def __init__(self, name: str, emit) -> None:
        self.__name__ = name
        self._emit = emit

    def __call__(self, *args, **kwargs):
        raise KernelError(f"matrix.{self.__name__} can only be called inside a @cube.kernel or @cube.function")

    def __cube_inline__(self, builder: ir.Builder, args: list, kwargs: dict):
        try:
            return self._emit(builder, *args, **kwargs)
        except TypeError as e:
            raise ir.IRError(f"matrix.{self.__name__}: {e}") from None


def _index(b: ir.Builder, x) -> ir.Value:
    if isinstance(x, ir.Value):
        return b.cast(x, ir.INDEX)
    if isinstance(x, int) and not isinstance(x, bool):
        return b.const(x, ir.INDEX)
    raise ir.IRError(f"an index or stride must be an integer, got {x!r}")


def _array(x) -> ir.Array:
    if not isinstance(x, ArrayRef):
        raise ir.IRError(f"expected an array, got {type(x).__name__}")
    return x.array


def _fragment(b, use, dtype, m, n, k, layout="row"):
    return b.fragment(use, dtype, m, n, k, layout)


def _group_fragment(b, n):
    return b.fragment("accumulator", ir.f32, ir.GROUP_M, n, ir.GROUP_K, scope="group")


def _group_mma(b, acc, a, a_indices, bb, b_indices, b_panel):
    b.group_mma(acc, _array(a), tuple(_index(b, i) for i in a_indices), _array(bb),
                tuple(_index(b, i) for i in b_indices), b_panel)


def _group_store(b, arr, index, stride, acc, rows, cols):
    b.group_store(_array(arr), _index(b, index), _index(b, stride), acc, _index(b, rows), _index(b, cols))


def _fill(b, frag, value):
    v = value if isinstance(value, ir.Value) else b.const(value, frag.dtype)
    b.matrix_fill(frag, v)


def _load(b, frag, arr, index, stride):
    b.matrix_load(frag, _array(arr), _index(b, index), _index(b, stride))


def _mma(b, d, a, bb, c):
    b.matrix_mma(d, a, bb, c)


def _store(b, arr, index, stride, frag, layout="row"):
    b.matrix_store(_array(arr), _index(b, index), _index(b, stride), frag, layout)


def _copy_async(b, dst, dst_index, src, src_index, count, valid=True):
    v = valid if isinstance(valid, ir.Value) else b.const(bool(valid), ir.bool_)
    b.copy_async(_array(dst), _index(b, dst_index), _array(src), _index(b, src_index), count, v)


fragment = _Op("fragment", _fragment)
fill = _Op("fill", _fill)
load = _Op("load", _load)
mma = _Op("mma", _mma)
store = _Op("store", _store)
copy_async = _Op("copy_async", _copy_async)
copy_commit = _Op("copy_commit", lambda b: b.copy_commit())
copy_wait = _Op("copy_wait", lambda b, pending: b.copy_wait(pending))
group_fragment = _Op("group_fragment", _group_fragment)
group_mma = _Op("group_mma", _group_mma)
group_wait = _Op("group_wait", lambda b, acc, pending: b.group_wait(acc, pending))
group_store = _Op("group_store", _group_store)
