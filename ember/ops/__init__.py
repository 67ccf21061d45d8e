"""The primitives of the backend protocol, each with its shape rule, NumPy reference and gradient.

`registry` maps a primitive's name to its `Primitive`. The families live in one file each:
`elementwise`, `reduce`, `matmul`, `movement`, `indexing`, `creation` (and module ops such as
convolution beside them). Importing this package registers them all.
"""

import warnings

# NumPy warns when a reference leaves a function's domain (log(-1), 0/0, overflow to inf). PyTorch
# gives the same values silently, so these warnings are silenced for ember's references only, once,
# rather than paying for `np.errstate` on every op.
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"ember\.ops(\..*)?$")

from .primitive import Aval, Primitive, VjpContext, registry, primitive
from . import elementwise, reduce, matmul, movement, indexing, creation  # noqa: F401  (registration)
from . import conv, pool, unfold, embedding  # noqa: F401  (module ops: registration)
from . import search  # noqa: F401  (searchsorted, scatter_reduce, randperm, multinomial)
from . import quant_matmul  # noqa: F401  (quant_matmul, int_matmul)
from . import complex, fft  # noqa: F401  (conj, real, imag, complex; the DFT)

__all__ = ["Aval", "Primitive", "VjpContext", "registry", "primitive"]
