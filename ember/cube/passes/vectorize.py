"""Vectorization of contiguous loads and stores (superword-level parallelism, seeded by stores).

A kernel that handles `line_size` consecutive elements per unit (a comptime-unrolled loop) stores
`y[b + 0], y[b + 1], ..., y[b + N-1]`. This pass finds such runs of N scalar stores to one array in
one block, replaces them with one N-lane vector store, and builds the stored vector bottom-up: lanes
computed by the same op become one vector op; lanes loaded from consecutive indices of one array
become one vector load; equal lanes become a `splat`; anything else is gathered with `pack`. The
scalar code left unused is removed by DCE afterwards.

Legality is kept simple and conservative: the run's stores (and any load merged into it) must not be
separated by loops, branches, barriers, atomics, returns, or other stores/loads touching the same
array, since the vector store happens at the position of the run's last store.

Example:
    >>> # for j in unroll(range(4)): y[i*4 + j] = x[i*4 + j] * 2.0
    >>> vectorize(kernel, 4)
    >>> # %v = load %base, x : f32x4 ; %w = mul %v, (splat 2.0) : f32x4 ; store %base, %w, y
"""

from __future__ import annotations

from .. import ir
from ..ir import For, If, Instr, Type, Value

_BARRIERS = ("sync_units", "return") + ir.ATOMIC


def vectorize(kernel: ir.Kernel, width: int) -> None:
    """Merge runs of `width` contiguous scalar stores (and what feeds them) into vector ops, in place."""
    defs = {s.result: s for s in ir.walk(kernel.body) if isinstance(s, Instr) and s.result is not None}
    for block in _blocks(kernel.body):
        _Block(kernel, block, defs, width).run()


def _blocks(body: list):
    yield body
    for s in body:
        if isinstance(s, For):
            yield from _blocks(s.body)
        elif isinstance(s, If):
            yield from _blocks(s.then)
            yield from _blocks(s.orelse)


def split_index(v: Value, defs: dict) -> tuple:
    """(base, offset) with v == base + offset for a constant offset (offset 0 if none is visible)."""
    d = defs.get(v)
    if d is not None and d.op == "add":
        a, b = d.args
        for base, off in ((a, b), (b, a)):
            c = defs.get(off)
            if c is not None and c.op == "const":
                return base, c.attr
    return v, 0


class _Block:
    def __init__(self, kernel: ir.Kernel, block: list, defs: dict, width: int) -> None:
        self.k, self.block, self.defs, self.width = kernel, block, defs, width

    def run(self) -> None:
        groups: dict = {}
        for s in self.block:
            if isinstance(s, Instr) and s.op == "store" and s.args[1].type.lanes == 1:
                base, off = split_index(s.args[0], self.defs)
                groups.setdefault((id(s.attr), base), []).append((off, s))
        for members in groups.values():
            members.sort(key=lambda m: m[0])
            run: list = []
            for off, s in members:
                if run and off != run[-1][0] + 1:
                    run = []
                run.append((off, s))
                if len(run) == self.width:
                    self._merge([s for _, s in run])
                    run = []

    def _index_of(self, s) -> int:
        return next(i for i, t in enumerate(self.block) if t is s)

    def _clear_between(self, lo: int, hi: int, arr: ir.Array, allowed: set) -> bool:
        """Moving the stores in `allowed` to position `hi` must not cross anything touching `arr`."""
        for t in self.block[lo:hi]:
            if t in allowed:
                continue
            if not isinstance(t, Instr) or t.op in _BARRIERS:
                return False
            if t.op in ("store", "load") and t.attr is arr:
                return False
        return True

    def _merge(self, stores: list) -> None:
        positions = [self._index_of(s) for s in stores]
        lo, hi = min(positions), max(positions)
        arr = stores[0].attr
        if not self._clear_between(lo, hi, arr, set(stores)):
            return
        self.new: list = []
        self.memo: dict = {}
        self.insert_at = hi
        self.chunk = set(stores)
        vec = self._vector([s.args[1] for s in stores])
        store = Instr("store", (stores[0].args[0], vec), None, arr, stores[0].line)
        for s in stores:
            self.block.remove(s)
        at = hi - (len(stores) - 1)
        self.block[at:at] = self.new + [store]

    def _emit(self, op: str, args: tuple, type: Type, attr=None) -> Value:
        v = Value(self.k.next_id, type)
        self.k.next_id += 1
        instr = Instr(op, args, v, attr)
        self.new.append(instr)
        self.defs[v] = instr
        return v

    def _vector(self, lanes: list) -> Value:
        key = tuple(id(v) for v in lanes)
        if key in self.memo:
            return self.memo[key]
        result = self._build(lanes)
        self.memo[key] = result
        return result

    def _build(self, lanes: list) -> Value:
        n = len(lanes)
        t = lanes[0].type
        if all(v is lanes[0] for v in lanes):
            return self._emit("splat", (lanes[0],), Type(t.dtype, n))
        instrs = [self.defs.get(v) for v in lanes]
        in_block = all(i is not None and any(i is s for s in self.block) for i in instrs)
        same = in_block and all(i.op == instrs[0].op and i.result.type == t and
                                (i.attr is instrs[0].attr or i.attr == instrs[0].attr or i.op == "const")
                                for i in instrs)
        op = instrs[0].op if same else None
        if op == "load" and self._contiguous_load(instrs):
            return self._emit("load", (instrs[0].args[0],), Type(t.dtype, n), instrs[0].attr)
        if same and ir.is_pure(instrs[0]) and op not in ("const", "read", "builtin", "len", "pack",
                                                          "splat", "extract"):
            args = tuple(self._vector([i.args[k] for i in instrs]) for k in range(len(instrs[0].args)))
            return self._emit(op, args, Type(t.dtype, n), instrs[0].attr)
        return self._emit("pack", tuple(lanes), Type(t.dtype, n))

    def _contiguous_load(self, loads: list) -> bool:
        splits = [split_index(l.args[0], self.defs) for l in loads]
        base, first = splits[0]
        if any(b is not base or off != first + k for k, (b, off) in enumerate(splits)):
            return False
        lo = min(self._index_of(l) for l in loads)
        arr = loads[0].attr
        # a store to the loaded array between the first load and the vector op would be skipped
        return all(not (isinstance(t, Instr) and t.op == "store" and t.attr is arr and t not in self.chunk)
                   and not (isinstance(t, Instr) and t.op in _BARRIERS) and isinstance(t, Instr)
                   for t in self.block[lo:self.insert_at])
