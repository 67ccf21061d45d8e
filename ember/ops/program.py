"""`Program`: a normalized elementwise program, what a fused elementwise kernel computes.

Value ids `0 .. len(inputs)-1` are the input arrays (`inputs` holds their dtypes); each later id is
one step `(primitive name, static params, argument ids, dtype)` of the elementwise op table
(`ember.ops.elementwise.TABLE`), or `cast` or `where`. `outputs` are the ids written to memory. The
fusion decorator builds programs (`ember.backend.fusion.fusers`); a backend's kernel generator runs
them (`ember.kernels.elementwise`).

Example:
    >>> p = Program((f32,), (("exp", (), (0,), f32), ("neg", (), (1,), f32)), (2,))
    >>> p.dtype(2).name, p.text().splitlines()[1]
    ('f32', '%1 = exp(%0) : f32')
"""

from __future__ import annotations

from dataclasses import dataclass

from ..dtype import DType


@dataclass(frozen=True)
class Program:
    """A normalized elementwise program (see the module docstring)."""

    inputs: tuple
    steps: tuple
    outputs: tuple

    def __post_init__(self) -> None:  # hashed at every launch (a kernel cache key): once is enough
        object.__setattr__(self, "_hash", hash((self.inputs, self.steps, self.outputs)))

    def __hash__(self) -> int:
        return self._hash

    def dtype(self, value: int) -> DType:
        return self.inputs[value] if value < len(self.inputs) else self.steps[value - len(self.inputs)][3]

    def text(self) -> str:
        """One line per step, e.g. `%2 = exp(%0) : f32`."""
        n = len(self.inputs)
        lines = [f"%{j} = input : {d.name}" for j, d in enumerate(self.inputs)]
        for k, (name, params, args, dtype) in enumerate(self.steps):
            extra = f" {params}" if params else ""
            lines.append(f"%{n + k} = {name}({', '.join(f'%{a}' for a in args)}){extra} : {dtype.name}")
        lines.append(f"write {', '.join(f'%{o}' for o in self.outputs)}")
        return "\n".join(lines)
