"""The torch backend's table: primitive name -> the row that runs it with torch ops.

One row per primitive, from the family modules; a name in two families is an error at import. A
primitive without a row (`MISSING`: the random ones, see `creation`; custom ops) runs its NumPy
reference.

Example:
    >>> sorted(MISSING)
    ['normal', 'randint', 'uniform']
"""

from __future__ import annotations

from . import creation, elementwise, indexing, movement, nn, quant, reduce


def _merge(*families: dict) -> dict:
    table: dict = {}
    for family in families:
        twice = table.keys() & family.keys()
        if twice:
            raise ValueError(f"torch rows defined twice: {sorted(twice)}")
        table.update(family)
    return table


TABLE = _merge(elementwise.ROWS, reduce.ROWS, movement.ROWS, indexing.ROWS, nn.ROWS, quant.ROWS, creation.ROWS)
CREATION = frozenset(creation.ROWS)
"""Rows that make a tensor from params alone; they are given the torch device."""
MISSING = frozenset({"uniform", "normal", "randint"})
"""The primitives of `ember.ops` without a row: they always run their NumPy reference (ember's Philox
stream). Custom ops (`ember.extension`) have no row either, and run theirs too."""
