"""The functional forms of the module ops (convolution, pooling, resampling, unfold/fold, embedding),
composed from the primitives in `ember/ops`. `ember.nn.functional` re-exports them under PyTorch's names;
the layers in `ember/nn` call them.
"""

from .conv import conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d
from .pool import max_pool1d, max_pool2d, max_pool3d, avg_pool1d, avg_pool2d, avg_pool3d
from .adaptive import adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_max_pool1d, adaptive_max_pool2d
from .interpolate import interpolate
from .unfold import unfold, fold
from .embedding import embedding
from .sampling import grid_sample, affine_grid

__all__ = [
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool1d", "adaptive_max_pool2d",
    "interpolate", "unfold", "fold", "embedding", "grid_sample", "affine_grid",
]
