"""Control flow (If, Loop, Scan), sequences and optionals.

Subgraphs run on the host's control: If reads its condition, Loop its trip count and condition, each
iteration a run of the body graph seeing the outer scope. Sequences are Python lists of tensors, an
empty optional is None.

Example:
    >>> OPS[("", "If")](call, cond)   # then_branch / else_branch from the node
"""

from __future__ import annotations

import numpy as np

from ...api import shape as S
from ...api.creation import tensor
from ...dtype import bool_
from .registry import op


@op("If")
def if_(call, cond):
    branch = "then_branch" if bool(call.host(cond).reshape(-1)[0]) else "else_branch"
    return tuple(call.graph(branch)())


def _stack(values):
    if not values:
        return None
    if isinstance(values[0], list):
        return values
    return S.stack(values, 0)


@op("Loop")
def loop(call, trips=None, cond=None, *carried):
    body = call.graph("body")
    n = int(call.host(trips).reshape(-1)[0]) if trips is not None else None
    keep = bool(call.host(cond).reshape(-1)[0]) if cond is not None else True
    carried = list(carried)
    scans: list[list] = []
    i = 0
    cond_t = cond if cond is not None else tensor(True, device=call.device)
    while keep and (n is None or i < n):
        out = body(tensor(np.array(i, np.int64), device=call.device), cond_t, *carried)
        cond_t, carried, extra = out[0], out[1:1 + len(carried)], out[1 + len(carried):]
        if not scans:
            scans = [[] for _ in extra]
        for acc, v in zip(scans, extra):
            acc.append(v)
        keep = bool(call.host(cond_t).reshape(-1)[0])
        i += 1
    n_scans = call.noutputs - len(carried)
    stacked = [_stack(acc) for acc in scans] or [None] * n_scans
    stacked = [s if s is not None else tensor(np.zeros((0,), np.float32), device=call.device) for s in stacked]
    return tuple(carried) + tuple(stacked)


@op("Scan")
def scan(call, *inputs):
    if call.opset < 9:
        return _scan8(call, *inputs)
    body = call.graph("body")
    m = call.attr("num_scan_inputs")
    state, xs = list(inputs[:len(inputs) - m]), list(inputs[len(inputs) - m:])
    in_axes = call.attr("scan_input_axes", [0] * m)
    in_dirs = call.attr("scan_input_directions", [0] * m)
    xs = [S.movedim(x, a % x.ndim, 0) for x, a in zip(xs, in_axes)]
    xs = [S.flip(x, 0) if d else x for x, d in zip(xs, in_dirs)]
    steps = xs[0].shape[0] if xs else 0
    outs: list[list] = []
    for t in range(steps):
        out = body(*state, *[x[t] for x in xs])
        state, extra = out[:len(state)], out[len(state):]
        if not outs:
            outs = [[] for _ in extra]
        for acc, v in zip(outs, extra):
            acc.append(v)
    k = call.noutputs - len(state)
    out_axes = call.attr("scan_output_axes", [0] * k)
    out_dirs = call.attr("scan_output_directions", [0] * k)
    results = []
    for acc, a, d in zip(outs, out_axes, out_dirs):
        y = S.stack(acc[::-1] if d else acc, 0)
        results.append(S.movedim(y, 0, a % y.ndim))
    return tuple(state) + tuple(results)


def _scan8(call, lengths, *inputs):
    """Scan before opset 9: every input has a leading batch axis, each batch item its own scan of
    `lengths[b]` steps (all of them without `lengths`) along axis 1."""
    body = call.graph("body")
    m = call.attr("num_scan_inputs")
    n_state = len(inputs) - m
    dirs = call.attr("directions", [0] * m)
    batch = inputs[0].shape[0]
    lens = call.ints(lengths) if lengths is not None else [inputs[n_state].shape[1]] * batch
    finals, scans = [], []
    for b in range(batch):
        state = [v[b] for v in inputs[:n_state]]
        xs = [S.flip(S.narrow(x[b], 0, 0, lens[b]), 0) if d else S.narrow(x[b], 0, 0, lens[b])
              for x, d in zip(inputs[n_state:], dirs)]
        outs: list[list] = []
        for t in range(lens[b]):
            out = body(*state, *[x[t] for x in xs])
            state = out[:n_state]
            outs = outs or [[] for _ in out[n_state:]]
            for acc, v in zip(outs, out[n_state:]):
                acc.append(v)
        finals.append(state)
        scans.append([S.stack(acc, 0) for acc in outs])
    return tuple(S.stack([f[i] for f in finals], 0) for i in range(n_state)) + tuple(
        S.stack([s[i] for s in scans], 0) for i in range(len(scans[0])))


@op("SequenceEmpty")
def sequence_empty(call):
    return []


@op("SequenceConstruct")
def sequence_construct(call, *xs):
    return list(xs)


def _position(call, seq, pos, default):
    p = int(call.host(pos).reshape(-1)[0]) if pos is not None else default
    return p + len(seq) if p < 0 else p


@op("SequenceInsert")
def sequence_insert(call, seq, x, pos=None):
    out = list(seq)
    out.insert(_position(call, out, pos, len(out)), x)
    return out


@op("SequenceAt")
def sequence_at(call, seq, pos):
    return seq[_position(call, seq, pos, 0)]


@op("SequenceErase")
def sequence_erase(call, seq, pos=None):
    out = list(seq)
    del out[_position(call, out, pos, len(out) - 1)]
    return out


@op("SequenceLength")
def sequence_length(call, seq):
    return tensor(np.array(len(seq), np.int64), device=call.device)


@op("ConcatFromSequence")
def concat_from_sequence(call, seq):
    axis = call.attr("axis")
    if call.attr("new_axis", 0):
        return S.stack(seq, axis if axis >= 0 else axis + seq[0].ndim + 1)
    return S.cat(seq, axis)


@op("SplitToSequence")
def split_to_sequence(call, x, split=None):
    axis = call.attr("axis", 0) % x.ndim
    n = x.shape[axis]
    if split is None:
        parts = S.split(x, [1] * n, axis)
        return parts if call.attr("keepdims", 1) else [p.squeeze(axis) for p in parts]
    sizes = call.ints(split)
    if call.host(split).ndim == 0:
        size = sizes[0]
        sizes = [size] * (n // size) + ([n % size] if n % size else [])
    return list(S.split(x, sizes, axis))


@op("SequenceMap")
def sequence_map(call, seq, *extra):
    body = call.graph("body")
    outs: list[list] = []
    for i in range(len(seq)):
        args = [e[i] if isinstance(e, list) else e for e in extra]
        out = body(seq[i], *args)
        outs = outs or [[] for _ in out]
        for acc, v in zip(outs, out):
            acc.append(v)
    return tuple(outs) if outs else tuple([] for _ in range(call.noutputs))


@op("Optional")
def optional(call, x=None):
    return x


@op("OptionalHasElement")
def optional_has_element(call, x=None):
    return tensor(x is not None, dtype=bool_, device=call.device)


@op("OptionalGetElement")
def optional_get_element(call, x):
    if x is None:
        call.unsupported("reading an empty optional (ONNX leaves this undefined)")
    return x
