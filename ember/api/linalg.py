"""Matrix products: `matmul` (and `@`) with PyTorch's rules for 1-d operands, `outer`, `einsum`.

`einsum` covers the common patterns: any number of operands contracted pairwise, left to right, each
pair becoming one batched `matmul` (so it runs on every backend's matmul), plus single-operand sums and
permutations. Repeated indices within one operand (traces, diagonals) are refused with a clear error.

Example:
    >>> a, b = ember.ones(2, 3), ember.ones(3, 4)
    >>> (a @ b).shape, ember.einsum("ij,jk->ik", a, b).shape, ember.outer(a[0], b[0]).shape
    ((2, 4), (2, 4), (3, 4))
"""

from __future__ import annotations

import math

from ..errors import ShapeError
from .. import amp
from ._common import Tensor, apply, promote


@amp.lower_precision
def matmul(a: Tensor, b: Tensor) -> Tensor:
    """The matrix product; 1-d operands are treated as row/column vectors and their dim removed.

    Example:
        >>> (ember.ones(5, 2, 3) @ ember.ones(3)).shape
        (5, 2)
    """
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError("matmul expects two tensors")
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("matmul", f"both operands need at least 1 dim, got {a.shape} and {b.shape}")
    a, b = promote(a, b)
    a_vector, b_vector = a.ndim == 1, b.ndim == 1
    out = apply("matmul", a.unsqueeze(0) if a_vector else a, b.unsqueeze(-1) if b_vector else b)
    if b_vector:
        out = out.squeeze(-1)
    if a_vector:
        out = out.squeeze(-1 if b_vector else -2)
    return out


def outer(a: Tensor, b: Tensor) -> Tensor:
    """The outer product of two 1-d tensors."""
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError("outer", f"expects two 1-d tensors, got {a.shape} and {b.shape}")
    return a.unsqueeze(1) * b.unsqueeze(0)


@amp.lower_precision
def einsum(equation: str, *operands: Tensor) -> Tensor:
    """Einstein summation, e.g. `"bij,bjk->bik"`, `"ij->ji"`, `"i,i->"`, `"...ij,...jk->...ik"`.

    Example:
        >>> ember.einsum("i,i->", ember.ones(3), ember.ones(3)).item()
        3.0
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    inputs, output = _parse(equation, operands)
    terms = list(zip(inputs, operands))
    while len(terms) > 1:
        (la, a), (lb, b) = terms[0], terms[1]
        later = set("".join(t for t, _ in terms[2:])) | set(output)
        terms[:2] = [_contract(la, a, lb, b, later)]
    labels, x = terms[0]
    drop = [i for i, c in enumerate(labels) if c not in output]
    if drop:
        x = x.sum(dim=tuple(drop))
        labels = "".join(c for c in labels if c in output)
    return x.permute([labels.index(c) for c in output]) if labels != output else x


def _parse(equation: str, operands) -> tuple[list[str], str]:
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(operands):
        raise ShapeError("einsum", f"equation {equation!r} names {len(inputs)} operands, {len(operands)} given")
    spare = iter(c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq)
    ell_dims = max((t.ndim - len(s.replace("...", "")) for s, t in zip(inputs, operands) if "..." in s), default=0)
    ell = "".join(next(spare) for _ in range(ell_dims))
    resolved = []
    for spec, t in zip(inputs, operands):
        if "..." in spec:
            own = t.ndim - len(spec.replace("...", ""))
            spec = spec.replace("...", ell[ell_dims - own:])
        if len(spec) != t.ndim:
            raise ShapeError("einsum", f"term {spec!r} has {len(spec)} labels for an operand of shape {t.shape}")
        if len(set(spec)) != len(spec):
            raise ShapeError("einsum", f"repeated label in {spec!r} (traces and diagonals) is not supported")
        resolved.append(spec)
    if arrow:
        output = rhs.replace("...", ell)
    else:
        counts = {c: "".join(resolved).count(c) for c in set("".join(resolved))}
        output = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    sizes: dict[str, int] = {}
    for spec, t in zip(resolved, operands):
        for c, n in zip(spec, t.shape):
            if sizes.setdefault(c, n) != n and n != 1 and sizes[c] != 1:
                raise ShapeError("einsum", f"label {c!r} has sizes {sizes[c]} and {n}")
            sizes[c] = max(sizes[c], n)
    return resolved, output


def _contract(la: str, a: Tensor, lb: str, b: Tensor, keep: set) -> tuple[str, Tensor]:
    """One pairwise contraction as a batched matmul: (batch, left, k) @ (batch, k, right)."""
    batch = [c for c in la if c in lb and c in keep]
    summed = [c for c in la if c in lb and c not in keep]
    left = [c for c in la if c not in lb]
    right = [c for c in lb if c not in la]
    # Labels that appear only in one operand and nowhere later are summed out first.
    for c in [c for c in left if c not in keep]:
        a, la = a.sum(dim=la.index(c)), la.replace(c, "")
    for c in [c for c in right if c not in keep]:
        b, lb = b.sum(dim=lb.index(c)), lb.replace(c, "")
    left = [c for c in left if c in keep]
    right = [c for c in right if c in keep]
    size = {c: n for c, n in zip(la, a.shape)} | {c: n for c, n in zip(lb, b.shape)}
    a = a.permute([la.index(c) for c in batch + left + summed])
    b = b.permute([lb.index(c) for c in batch + summed + right])
    bshape = tuple(max(a.shape[i], b.shape[i]) for i in range(len(batch)))
    a = a.expand(bshape + a.shape[len(batch):]).reshape(
        bshape + (math.prod(size[c] for c in left), math.prod(size[c] for c in summed)))
    b = b.expand(bshape + b.shape[len(batch):]).reshape(
        bshape + (math.prod(size[c] for c in summed), math.prod(size[c] for c in right)))
    out = matmul(a, b).reshape(bshape + tuple(size[c] for c in left) + tuple(size[c] for c in right))
    return "".join(batch + left + right), out


def trace(x: Tensor) -> Tensor:
    """The sum of the main diagonal of a 2-D tensor (torch.trace).

    Example:
        >>> ember.trace(ember.tensor([[1.0, 2.0], [3.0, 4.0]])).item()
        5.0
    """
    if x.ndim != 2:
        raise ShapeError("trace", f"needs a 2-D tensor, got shape {x.shape}")
    return x.diagonal(0, 0, 1).sum(-1)


METHODS = {"trace": trace, "matmul": matmul, "__matmul__": matmul, "__rmatmul__": lambda a, b: matmul(b, a)}
