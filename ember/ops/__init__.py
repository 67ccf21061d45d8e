"""The primitives of the backend protocol, each with its shape rule, NumPy reference and gradient.

`registry` maps a primitive's name to its `Primitive`. The families live in one file each:
`elementwise`, `reduce`, `matmul`, `movement`, `indexing`, `creation` (and module ops such as
convolution beside them). Importing this package registers them all.
"""

from .primitive import Aval, Primitive, VjpContext, registry, primitive
from . import elementwise, reduce, matmul, movement, indexing, creation  # noqa: F401  (registration)
from . import conv, pool, unfold, embedding  # noqa: F401  (module ops: registration)

__all__ = ["Aval", "Primitive", "VjpContext", "registry", "primitive"]
