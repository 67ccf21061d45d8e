"""Linear-algebra ONNX ops: Det, by LU elimination with partial pivoting in ember ops (so on every
device; n steps of batched gathers and updates, fine for the small matrices graphs take a
determinant of).

Example:
    >>> OPS[("", "Det")](call, x)   # (..., n, n) -> (...)
"""

from __future__ import annotations

from ...api import math as M
from ...api import reduce as R
from ...api import shape as S
from ...api.creation import arange
from .registry import op


@op("Det")
def det(call, x):
    n = x.shape[-1]
    a = x.reshape(-1, n, n)
    b = a.shape[0]
    rows = arange(n, device=x.device).reshape(1, n)
    result = a.new_ones(b)
    for k in range(n):
        pivot_row = (R.argmax(M.abs(a[:, k:, k]), 1) + k).reshape(b, 1)
        perm = M.where(rows == k, pivot_row, M.where(rows == pivot_row, rows * 0 + k, rows))
        a = R.gather(a, 1, S.broadcast_to(perm.reshape(b, n, 1), (b, n, n)))
        pivot = a[:, k, k]
        result = M.where(pivot_row.reshape(b) == k, result, -result) * pivot
        if k + 1 < n:
            safe = M.where(pivot == 0, pivot * 0 + 1, pivot)
            lower = a[:, k + 1:, :] - (a[:, k + 1:, k] / safe.reshape(b, 1)).reshape(b, n - k - 1, 1) * a[:, k:k + 1, :]
            a = S.cat([a[:, :k + 1, :], lower], 1)
    return result.reshape(x.shape[:-2]) if x.ndim > 2 else result.reshape(())
