"""The kernel library: cube kernels behind host functions that take and return NumPy arrays.

Inputs may have any strides (views are read in place); outputs are new C-contiguous arrays. Importing
the library gives device arrays their copies and writes (`runtime.arguments.install_array_kernels`).

Example:
    >>> from ember import kernels
    >>> kernels.binary("add", np.ones((2, 1), np.float32), np.arange(3, dtype=np.float32)).shape
    (2, 3)
"""

from ..cube.runtime.arguments import ArrayKernels, install_array_kernels
from .common import assign
from .conv import conv2d
from .elementwise import binary, cast, ternary, unary
from .indexing import gather, index_add, index_select, scatter
from .matmul import matmul
from .norm import layer_norm, rms_norm
from .pool import avg_pool2d, max_pool2d, max_pool2d_indices
from .random import bits, normal, randint, uniform
from .reduce import reduce
from .scan import scan
from .softmax import softmax
from .sort import sort, topk
from .unfold import fold, unfold

install_array_kernels(ArrayKernels(cast=cast, assign=assign))

__all__ = ["unary", "binary", "ternary", "cast", "reduce", "scan", "softmax", "layer_norm", "rms_norm", "matmul",
           "bits", "uniform", "normal", "randint", "gather", "scatter", "index_select", "index_add", "conv2d",
           "max_pool2d", "max_pool2d_indices", "avg_pool2d", "sort", "topk", "unfold", "fold"]
