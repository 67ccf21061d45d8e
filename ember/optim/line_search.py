"""The strong-Wolfe line search L-BFGS uses, ported from PyTorch's `torch/optim/lbfgs.py` (itself from
minFunc) so that ember's `LBFGS` takes the same steps. Scalars are Python floats; the search
direction and gradients are flat ember tensors.

A step size `t` along direction `d` from `x` is accepted when (sufficient decrease, curvature):

    f(x + t d) <= f(x) + c1 t g.d        and        |g(x + t d).d| <= -c2 g.d
"""

from __future__ import annotations

import math
from typing import Callable

from ..tensor import Tensor

# obj(t) -> (loss, flat gradient) at x + t * d
Objective = Callable[[float], tuple[float, Tensor]]


def _dot(a: Tensor, b: Tensor) -> float:
    return float((a * b).sum().item())


def cubic_interpolate(x1: float, f1: float, g1: float, x2: float, f2: float, g2: float,
                      bounds: tuple[float, float] | None = None) -> float:
    """The minimizer of the cubic through (x1, f1) and (x2, f2) with slopes g1, g2, clamped to
    `bounds` (default: between x1 and x2); their midpoint when the cubic has no minimum.

    Example:
        >>> cubic_interpolate(0.0, 1.0, -1.0, 1.0, 1.0, 1.0)
        0.5
    """
    low, high = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square < 0:
        return (low + high) / 2.0
    d2 = math.sqrt(d2_square)
    if x1 <= x2:
        pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(pos, low), high)


def strong_wolfe(obj: Objective, t: float, d: Tensor, f: float, g: Tensor, gtd: float, c1: float = 1e-4,
                 c2: float = 0.9, tolerance_change: float = 1e-9, max_ls: int = 25
                 ) -> tuple[float, Tensor, float, int]:
    """Search along `d` from the point with loss `f`, gradient `g` and slope `gtd = g.d`, starting at
    step `t`. Returns (loss, gradient, step, evaluations) of the accepted point.

    First it brackets a step (growing `t` by cubic extrapolation), then it zooms into the bracket by
    cubic interpolation, as PyTorch does.

    Example:
        >>> f_new, g_new, t, evals = strong_wolfe(obj, 1.0, d, loss, grad, grad_dot_d)
    """
    d_norm = float(d.abs().max().item())
    f_new, g_new = obj(t)
    evals = 1
    gtd_new = _dot(g_new, d)
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done = False
    ls_iter = 0
    bracket: list[float] = []
    bracket_f: list[float] = []
    bracket_g: list[Tensor] = []
    bracket_gtd: list[float] = []
    while ls_iter < max_ls:
        if f_new > f + c1 * t * gtd or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f, bracket_g, bracket_gtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f, bracket_g, bracket_gtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], [gtd_prev, gtd_new]
            break
        # extrapolate, between a little past t and ten times t
        t_next = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(t + 0.01 * (t - t_prev), t * 10))
        t_prev, f_prev, g_prev, gtd_prev = t, f_new, g_new, gtd_new
        t = t_next
        f_new, g_new = obj(t)
        evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0.0, t], [f, f_new], [g, g_new]
        # PyTorch leaves the bracket slopes unset here: the zoom below cannot run (ls_iter == max_ls)

    # zoom until the bracket is tiny or the conditions hold
    insufficient_progress = False
    low, high = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1])
        # keep away from the bracket's ends, where interpolation makes little progress
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insufficient_progress or t >= max(bracket) or t <= min(bracket):
                t = max(bracket) - eps if abs(t - max(bracket)) < abs(t - min(bracket)) else min(bracket) + eps
                insufficient_progress = False
            else:
                insufficient_progress = True
        else:
            insufficient_progress = False
        f_new, g_new = obj(t)
        evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1
        if f_new > f + c1 * t * gtd or f_new >= bracket_f[low]:
            bracket[high], bracket_f[high], bracket_g[high], bracket_gtd[high] = t, f_new, g_new, gtd_new
            low, high = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high] - bracket[low]) >= 0:
                bracket[high], bracket_f[high] = bracket[low], bracket_f[low]
                bracket_g[high], bracket_gtd[high] = bracket_g[low], bracket_gtd[low]
            bracket[low], bracket_f[low], bracket_g[low], bracket_gtd[low] = t, f_new, g_new, gtd_new
    return bracket_f[low], bracket_g[low], bracket[low], evals
