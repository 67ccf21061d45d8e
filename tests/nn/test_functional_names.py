"""`ember.nn.functional` is the one place of the nn functions: every name that worked before it became
a package (`ember/nn/functional/`) still works, each a function that computes (checked on one case)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import ember
from ember.nn import functional as F

NAMES = (
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool1d", "adaptive_max_pool2d",
    "affine_grid", "avg_pool1d", "avg_pool2d", "avg_pool3d", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "cosine_embedding_loss", "cosine_similarity", "cross_entropy", "ctc_loss", "dropout",
    "elu", "embedding", "fold", "gaussian_nll_loss", "gelu", "glu", "grid_sample", "group_norm",
    "hard_sigmoid", "hard_swish", "hinge_embedding_loss", "huber_loss", "instance_norm", "interpolate",
    "kl_div", "l1_loss", "layer_norm", "leaky_relu", "linear", "log_softmax", "margin_ranking_loss",
    "max_pool1d", "max_pool2d", "max_pool3d", "mish", "mse_loss", "nll_loss", "normalize",
    "pairwise_distance", "pixel_shuffle", "pixel_unshuffle", "poisson_nll_loss", "relu", "rms_norm",
    "scaled_dot_product_attention", "selu", "sigmoid", "silu", "smooth_l1_loss", "softmax", "softplus",
    "softsign", "tanh", "triplet_margin_loss", "unfold",
)
"""The public callables of `ember.nn.functional` before the package (`dir()`, listed then)."""


@pytest.mark.parametrize("name", NAMES)
def test_every_public_name_is_still_there(name):
    assert callable(getattr(F, name)), name


def test_the_functions_are_the_package_and_the_old_module_is_gone():
    assert F.__file__.endswith("functional/__init__.py")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ember.nn.ops")


def test_a_module_op_and_a_re_exported_function_compute(rng=np.random.default_rng(0)):
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    pooled = F.avg_pool1d(ember.tensor(x), 2).numpy()
    np.testing.assert_allclose(pooled, x[..., :4].reshape(2, 3, 2, 2).mean(-1), rtol=1e-6)
    np.testing.assert_allclose(F.relu(ember.tensor(x)).numpy(), np.maximum(x, 0))
