"""Strides of arrays seen as few dims: `merge_dims` joins adjacent dims that every operand steps over alike,
so a kernel's layout (`ember/kernels/layout.py`) or a batch of GEMMs (`runtime/blas.py`) has the fewest.

Example:
    >>> merge_dims((4, 5, 6), [[30, 6, 1], [0, 0, 1]])
    ([20, 6], [[6, 1], [0, 1]])
"""

from __future__ import annotations

from typing import Sequence


def merge_dims(shape: Sequence[int], strides: Sequence[Sequence[int]]) -> tuple[list, list]:
    """(shape, strides per operand) with adjacent dims merged where every operand allows it.

    `strides` are element strides, one sequence per operand, 0 where an operand is broadcast.
    Size-1 dims are dropped; the result may be empty (a single element).
    """
    out_shape: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for d, n in enumerate(shape):
        if n == 1:
            continue
        if out_shape and all(s[d] * n == o[-1] for s, o in zip(strides, out_strides)):
            out_shape[-1] *= n
            for s, o in zip(strides, out_strides):
                o[-1] = s[d]
        else:
            out_shape.append(n)
            for s, o in zip(strides, out_strides):
                o.append(s[d])
    return out_shape, out_strides
