"""`ember.nn.functional`: every nn function, for use without a `Module` (PyTorch's `torch.nn.functional`).

This package is the one place to find them: activations (defined in `ember.api.activation`), losses,
distances, normalizations, dropout, pixel shuffle, attention, `linear` and the quantized `quant_linear`
and `int_linear` (defined beside their layers in `ember/nn`; the fused attention op behind `scaled_dot_product_attention` is
`ember/nn/fused_attention.py`), and the module ops defined here, composed from the primitives in
`ember/ops`:

| module | functions |
|---|---|
| `conv.py` | `conv1d/2d/3d`, `conv_transpose1d/2d/3d` |
| `pool.py`, `adaptive.py` | `max_pool*`, `avg_pool*`, `adaptive_*_pool*` |
| `interpolate.py`, `sampling.py` | `interpolate`; `grid_sample`, `affine_grid` |
| `unfold.py`, `embedding.py` | `unfold`, `fold`; `embedding` |

Example:
    >>> from ember.nn import functional as F
    >>> F.relu(ember.tensor([-1.0, 1.0])).tolist()
    [0.0, 1.0]
"""

from .conv import conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d
from .pool import max_pool1d, max_pool2d, max_pool3d, avg_pool1d, avg_pool2d, avg_pool3d
from .adaptive import adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_max_pool1d, adaptive_max_pool2d
from .interpolate import interpolate
from .unfold import unfold, fold
from .embedding import embedding
from .sampling import grid_sample, affine_grid
from ...api.activation import *  # noqa: F401,F403
from ..loss import (  # noqa: F401
    binary_cross_entropy, binary_cross_entropy_with_logits, cosine_embedding_loss, cross_entropy, ctc_loss,
    gaussian_nll_loss, hinge_embedding_loss, huber_loss, kl_div, l1_loss, margin_ranking_loss, mse_loss, nll_loss,
    poisson_nll_loss, smooth_l1_loss, triplet_margin_loss,
)
from ..distance import cosine_similarity, pairwise_distance  # noqa: F401
from ..norm import group_norm, instance_norm, layer_norm, normalize, rms_norm  # noqa: F401
from ..dropout import dropout  # noqa: F401
from ..shuffle import pixel_shuffle, pixel_unshuffle  # noqa: F401
from ..attention import scaled_dot_product_attention  # noqa: F401
from ..linear import int_linear, linear, quant_linear  # noqa: F401
