"""The user-facing functions of ember, composed from primitives, one module per topic.

Each module's `METHODS` lists what also becomes a `Tensor` method or operator; importing this package
attaches them to `Tensor` (`ember.tensor` sits below this package and never imports it).
"""

from ..tensor import Tensor
from . import activation, creation, index, linalg, math, reduce, shape
from . import complex, distance, dlpack, quantize, statistics

METHODS = {**creation.METHODS, **math.METHODS, **reduce.METHODS, **shape.METHODS, **index.METHODS,
           **linalg.METHODS, **activation.METHODS, **statistics.METHODS, **distance.METHODS,
           **dlpack.METHODS, **quantize.METHODS, **complex.METHODS}

for _name, _fn in METHODS.items():
    setattr(Tensor, _name, _fn)
