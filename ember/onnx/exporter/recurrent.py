"""A recurrent layer's call as ONNX `RNN` / `LSTM` / `GRU` ops, one per layer (both directions in one).

The trace of `LSTM(...)(x)` unrolls its time loop, which fixes the sequence length; the layer's call
is exported instead as the ONNX op, whose sequence length is free. The weights stay the state_dict's
initializers: the op's gate order is a `Gather` of their rows (PyTorch's LSTM i, f, g, o is ONNX's
i, o, f, c; GRU's r, z, n is z, r, h, with `linear_before_reset=1`, PyTorch's candidate).

Example:
    >>> emit_region(builder, trace, region, names)   # adds the nodes computing region.outputs
"""

from __future__ import annotations

import numpy as np

from ...nn.rnn import GRU, LSTM, RNN
from .graph import Builder
from .trace import Region, Trace

_GATE_ORDER = {LSTM: (0, 3, 1, 2), GRU: (1, 0, 2), RNN: (0,)}
_OP = {LSTM: "LSTM", GRU: "GRU", RNN: "RNN"}


def _params(region: Region):
    for cells in region.module.layers:
        for cell in cells:
            for p in (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh):
                if p is not None:
                    yield p


def region_inputs(region: Region) -> list[int]:
    """The record ids a recurrent call reads: its input, initial states and parameters."""
    return [region.x, *(region.state or ()), *(p._handle.id for p in _params(region))]


def _stacked(b: Builder, names: list[str], rows: str) -> str:
    """(directions, G * hidden, n): each direction's matrix with its rows in ONNX's gate order."""
    zero = b.const(np.array([0], np.int64))
    parts = [b.node("Unsqueeze", [b.node("Gather", [n, rows], axis=0), zero]) for n in names]
    return parts[0] if len(parts) == 1 else b.node("Concat", parts, axis=0)


def _name(p, names: dict[int, str]) -> str:
    return names[p._handle.id]


def emit_region(b: Builder, t: Trace, region: Region, names: dict[int, str]) -> None:
    """Add the nodes computing `region.outputs` (output, final h, final c for LSTM)."""
    module = region.module
    kind = type(module) if type(module) in _OP else next(k for k in _OP if isinstance(module, k))
    hidden, directions = module.hidden_size, len(module.layers[0])
    order = np.concatenate([np.arange(g * hidden, (g + 1) * hidden) for g in _GATE_ORDER[kind]])
    rows, bias_rows = b.const(order), b.const(np.concatenate([order, order + len(order)]))
    x = names[region.x]
    unbatched = len(t.records[region.x].aval.shape) == 2
    one, zero = b.const(np.array([1], np.int64)), b.const(np.array([0], np.int64))
    if unbatched:
        x = b.node("Unsqueeze", [x, one])
    elif module.batch_first:
        x = b.node("Transpose", [x], perm=[1, 0, 2])
    states = [names[s] for s in region.state] if region.state else []
    if unbatched:
        states = [b.node("Unsqueeze", [s, one]) for s in states]
    attrs = {"hidden_size": hidden, "direction": "bidirectional" if directions == 2 else "forward"}
    if kind is RNN:
        attrs["activations"] = ["Tanh" if module.nonlinearity == "tanh" else "Relu"] * directions
    if kind is GRU:
        attrs["linear_before_reset"] = 1
    finals: list[list[str]] = [[] for _ in range(module.STATES)]
    for layer, cells in enumerate(module.layers):
        w = _stacked(b, [_name(c.weight_ih, names) for c in cells], rows)
        r = _stacked(b, [_name(c.weight_hh, names) for c in cells], rows)
        bias = ""
        if cells[0].bias_ih is not None:
            per = [b.node("Concat", [_name(c.bias_ih, names), _name(c.bias_hh, names)], axis=0) for c in cells]
            bias = _stacked(b, per, bias_rows)
        span = [b.const(np.array([layer * directions], np.int64)),
                b.const(np.array([(layer + 1) * directions], np.int64)), zero]
        initial = [b.node("Slice", [s, *span]) for s in states]
        inputs = [x, w, r, bias, "", *initial]
        while inputs[-1] == "":
            inputs.pop()
        outs = b.node(_OP[kind], inputs, outputs=1 + module.STATES, **attrs)
        x = b.node("Reshape", [b.node("Transpose", [outs[0]], perm=[0, 2, 1, 3]),
                               b.const(np.array([0, 0, -1], np.int64))])
        for kept, state in zip(finals, outs[1:]):
            kept.append(state)
    finals_joined = [f[0] if len(f) == 1 else b.node("Concat", f, axis=0) for f in finals]
    if unbatched:
        x = b.node("Squeeze", [x, one])
        finals_joined = [b.node("Squeeze", [f, one]) for f in finals_joined]
    elif module.batch_first:
        x = b.node("Transpose", [x], perm=[1, 0, 2])
    for value, out in zip([x, *finals_joined], region.outputs):
        b.node("Identity", [value], names[out])
