"""`embedding` against PyTorch's F.embedding: rows, the gradient of the table (padding_idx,
scale_grad_by_freq, repeated indices), index shapes, and the errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember.nn import functional as F
from ops.torch_check import FLOAT_DTYPES, check_op, random


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("options", [{}, {"padding_idx": 2}, {"padding_idx": -1, "scale_grad_by_freq": True},
                                     {"scale_grad_by_freq": True}])
def test_embedding_matches_torch(device, rng, dtype, options):
    table = random(rng, (7, 4), dtype)
    for shape in [(5,), (3, 6), (0,), (2, 0, 3), ()]:
        idx = rng.integers(0, 7, size=shape)
        check_op(lambda i, w: F.embedding(i, w, **options), lambda i, w: torch.nn.functional.embedding(i, w, **options),
                 [np.asarray(idx), table], device, grads=(1,), rng=rng)


def test_embedding_errors():
    table = ember.ones(5, 3)
    with pytest.raises(IndexError, match="index 5 is out of range for a table of 5 rows"):
        F.embedding(ember.tensor([1, 5]), table)
    with pytest.raises(IndexError, match="index -1 is out of range"):
        F.embedding(ember.tensor([-1]), table)
    with pytest.raises(ember.DTypeError, match="indices must be an integer tensor"):
        F.embedding(ember.tensor([1.0]), table)
    with pytest.raises(ember.ShapeError, match="weight of shape \\(5,\\)"):
        F.embedding(ember.tensor([1]), ember.ones(5))
    with pytest.raises(ember.ShapeError, match="padding_idx 5 is out of range"):
        F.embedding(ember.tensor([1]), table, padding_idx=5)
