"""Rows of the reduction, scan and sort primitives, and of `matmul`.

Integer sums, products and scans accumulate in torch's int64 and are cast back, which wraps as the
references do (modular arithmetic does not depend on the accumulator's width); bool sums are `any`, bool
products `all`. f16 and bf16 accumulate in f32. A reduction over no dims is the identity (torch would
reduce over all of them).

Example:
    >>> ROWS["sum"](Aval((), f32), torch.ones(2, 3), dims=(0, 1), keepdim=False)
    tensor(6.)
"""

from __future__ import annotations

import torch

from .convert import f32_for_halves, tdtype


def _reduction(fn):
    def run(out, x, *, dims, keepdim):
        if not dims:
            return x.to(tdtype(out.dtype), copy=True)
        return fn(x, dim=dims, keepdim=keepdim).to(tdtype(out.dtype))

    return f32_for_halves(run)


def _prod(x, *, dim, keepdim):
    for d in sorted(dim, reverse=True):  # torch.prod takes one dim at a time
        x = torch.prod(x, dim=d, keepdim=keepdim)
    return x


def _comparable(x):
    """`x` in a dtype torch's argmax, argsort and cummax take (bool as u8; halves as f32, exactly)."""
    if x.dtype == torch.bool:
        return x.to(torch.uint8)
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _arg(fn):
    def run(out, x, *, dim, keepdim):
        if x.ndim == 0:
            return torch.zeros((), dtype=torch.int64, device=x.device)
        return fn(_comparable(x), dim=dim, keepdim=keepdim)

    return run


def _scan(fn):
    def run(out, x, *, dim):
        if x.ndim == 0:
            return x.clone()
        return fn(x, dim=dim).to(tdtype(out.dtype))

    return f32_for_halves(run)


def _cumextreme_index(out, x, *, dim, largest):
    if x.ndim == 0:
        return torch.zeros((), dtype=torch.int64, device=x.device)
    return (torch.cummax if largest else torch.cummin)(_comparable(x), dim=dim).indices


def _argsort(out, x, *, dim, descending):
    if x.ndim == 0:
        return torch.zeros((), dtype=torch.int64, device=x.device)
    return torch.sort(_comparable(x), dim=dim, descending=descending, stable=True).indices


def _matmul(out, a, b):
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return torch.matmul(a, b)
    # Integers: products summed in int64 and wrapped back (torch has no integer GEMM on most devices).
    return (a.unsqueeze(-1).to(torch.int64) * b.unsqueeze(-3)).sum(-2).to(a.dtype)


ROWS = {
    "sum": _reduction(torch.sum),
    "prod": _reduction(_prod),
    "amax": _reduction(torch.amax),
    "amin": _reduction(torch.amin),
    "argmax": _arg(torch.argmax),
    "argmin": _arg(torch.argmin),
    "cumsum": _scan(torch.cumsum),
    "cumprod": _scan(torch.cumprod),
    "cumextreme_index": _cumextreme_index,
    "argsort": _argsort,
    "matmul": f32_for_halves(_matmul),
}
"""Primitive name -> `row(out_aval, *tensors, **params) -> tensor`."""
