"""IR passes, each one idea in its own module, and `optimize`, the pipeline the runtimes use.

Every pass rewrites a kernel in place; `optimize` copies first so the traced kernel stays untouched.

Example:
    >>> optimized = optimize(kernel)   # fold -> cse -> vectorize -> fold -> cse -> divmod -> dce
"""

from __future__ import annotations

import copy

from .. import ir
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code
from .divmod import lower_constant_division
from .fold import fold_constants
from .vectorize import vectorize


def optimize(kernel: ir.Kernel, vector_width: int = 4) -> ir.Kernel:
    """A folded, deduplicated, vectorized and dead-code-free copy of `kernel`."""
    memo = {id(d): d for d in ir.DTYPES.values()}  # dtypes are singletons: never copy them
    k = copy.deepcopy(kernel, memo)
    fold_constants(k)
    eliminate_common_subexpressions(k)
    if vector_width > 1:
        vectorize(k, vector_width)
        fold_constants(k)
        eliminate_common_subexpressions(k)
    lower_constant_division(k)
    eliminate_dead_code(k)
    return k


__all__ = ["optimize", "fold_constants", "eliminate_common_subexpressions", "eliminate_dead_code",
           "vectorize", "lower_constant_division"]
