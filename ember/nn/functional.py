"""Functional forms of layers: activations (from `ember.activation`) and module ops (convolution,
pooling, interpolation, ...) for use without a `Module`.

Example:
    >>> from ember.nn import functional as F
    >>> F.relu(ember.tensor([-1.0, 1.0])).tolist()
    [0.0, 1.0]
"""

from ..api.activation import *  # noqa: F401,F403
from .loss import (  # noqa: F401
    binary_cross_entropy, binary_cross_entropy_with_logits, cosine_embedding_loss, cross_entropy, ctc_loss,
    gaussian_nll_loss, hinge_embedding_loss, huber_loss, kl_div, l1_loss, margin_ranking_loss, mse_loss, nll_loss,
    poisson_nll_loss, smooth_l1_loss, triplet_margin_loss,
)
from .distance import cosine_similarity, pairwise_distance  # noqa: F401
from .norm import group_norm, instance_norm, layer_norm, rms_norm  # noqa: F401
from .norm import normalize  # noqa: F401
from .ops import (  # noqa: F401  (module ops: convolution, pooling, resampling, unfold/fold, embedding)
    adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_max_pool1d, adaptive_max_pool2d, avg_pool1d, avg_pool2d,
    avg_pool3d, conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d, embedding, fold,
    interpolate, max_pool1d, max_pool2d, max_pool3d, unfold,
)
from .ops import affine_grid, grid_sample  # noqa: F401  (sampling at points: spatial transformers)
from .dropout import dropout  # noqa: F401
from .shuffle import pixel_shuffle, pixel_unshuffle  # noqa: F401
from .attention import scaled_dot_product_attention  # noqa: F401
from .linear import linear  # noqa: F401
