"""Detection ONNX ops: NonMaxSuppression (its output is indices, chosen on the host by a greedy
walk over the scores: the data decide how many), MaxUnpool (a scatter on the device).

Example:
    >>> OPS[("", "NonMaxSuppression")](call, boxes, scores, max_per_class, iou, score)   # (k, 3) i64
"""

from __future__ import annotations

import math

import numpy as np

from ...api import shape as S
from ...api.index import scatter
from ...dtype import i64
from .registry import op


def _corners(boxes: np.ndarray, center: bool) -> np.ndarray:
    """Boxes as (y_min, x_min, y_max, x_max), from corners in either order or from centers."""
    if center:
        xc, yc, w, h = (boxes[..., i] for i in range(4))
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], -1)
    y1, x1, y2, x2 = (boxes[..., i] for i in range(4))
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], -1)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    h = min(a[2], b[2]) - max(a[0], b[0])
    w = min(a[3], b[3]) - max(a[1], b[1])
    if h <= 0 or w <= 0:
        return 0.0
    inter = h * w
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@op("NonMaxSuppression")
def non_max_suppression(call, boxes, scores, max_per_class=None, iou=None, score=None):
    limit = int(call.host(max_per_class).reshape(-1)[0]) if max_per_class is not None and max_per_class.numel else 0
    iou_max = float(call.host(iou).reshape(-1)[0]) if iou is not None and iou.numel else 0.0
    floor = float(call.host(score).reshape(-1)[0]) if score is not None and score.numel else None
    box = _corners(call.host(boxes).astype(np.float64), bool(call.attr("center_point_box", 0)))
    s = call.host(scores)
    picked = []
    for b, c in np.ndindex(s.shape[0], s.shape[1]):
        order = sorted((i for i in range(s.shape[2]) if floor is None or s[b, c, i] > floor),
                       key=lambda i: (-s[b, c, i], i))
        chosen: list[int] = []
        for i in order:
            if len(chosen) >= limit:
                break
            if all(_iou(box[b, i], box[b, j]) <= iou_max for j in chosen):
                chosen.append(i)
        picked += [(b, c, i) for i in chosen]
    return call.const(np.array(picked, np.int64).reshape(-1, 3))


@op("MaxUnpool")
def max_unpool(call, x, indices, output_shape=None):
    kernel = call.attr("kernel_shape")
    nd = len(kernel)
    strides, pads = call.attr("strides", [1] * nd), call.attr("pads", [0] * 2 * nd)
    shape = list(x.shape[:2]) + [(n - 1) * s - pads[i] - pads[i + nd] + k for i, (n, s, k) in
                                 enumerate(zip(x.shape[2:], strides, kernel))]
    out = x.new_zeros(math.prod(shape))
    y = scatter(out, 0, indices.reshape(-1).cast(i64), x.reshape(-1)).reshape(*shape)
    if output_shape is None:
        return y
    extra = [o - n for o, n in zip(call.ints(output_shape)[2:], shape[2:])]  # the indices keep
    return S.pad(y, [w for e in reversed(extra) for w in (0, e)])            # their places
