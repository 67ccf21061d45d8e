"""Recurrent ONNX ops: RNN, GRU and LSTM, every direction, activations, clip, sequence lengths.

A step is a few matmuls and elementwise ops (gate orders: LSTM i, o, f, c; GRU z, r, h), so the
layers run and differentiate on every device. Steps past a batch entry's `sequence_lens` keep its
state and write zeros to Y, as ONNX says; `layout=1` takes batch-first tensors.

Example:
    >>> y, y_h, y_c = OPS[("", "LSTM")](call, x, w, r, b)
"""

from __future__ import annotations

import numpy as np

from ...api import math as M
from ...api import shape as S
from ...api.creation import zeros
from ...api.linalg import matmul
from ...nn import functional as F
from .registry import op


def _activation(call, name: str, alpha, beta):
    table = {
        "Sigmoid": M.sigmoid, "Tanh": M.tanh, "Relu": F.relu,
        "LeakyRelu": lambda x: F.leaky_relu(x, alpha if alpha is not None else 0.01),
        "ThresholdedRelu": lambda x: M.where(x > (alpha if alpha is not None else 1.0), x, x * 0),
        "ScaledTanh": lambda x: (alpha if alpha is not None else 1.0) * M.tanh((beta if beta is not None else 1.0) * x),
        "HardSigmoid": lambda x: M.clamp((alpha if alpha is not None else 0.2) * x + (beta if beta is not None else 0.5), min=0.0, max=1.0),
        "Elu": lambda x: F.elu(x, alpha if alpha is not None else 1.0),
        "Softsign": lambda x: x / (1 + M.abs(x)),
        "Softplus": lambda x: M.log1p(M.exp(x)),
        "Affine": lambda x: (alpha if alpha is not None else 1.0) * x + (beta if beta is not None else 0.0),
    }
    if name not in table:
        call.unsupported(f"activation {name!r}")
    return table[name]


def _activations(call, defaults: list[str], directions: int):
    names = call.attr("activations", defaults * directions)
    alphas, betas = list(call.attr("activation_alpha", [])), list(call.attr("activation_beta", []))
    out = []
    for i, name in enumerate(names):
        out.append(_activation(call, name, alphas[i] if i < len(alphas) else None,
                               betas[i] if i < len(betas) else None))
    k = len(defaults)
    return [out[d * k:(d + 1) * k] for d in range(directions)]


def _recurrent(call, kind: str, x, w, r, b, lens, h0, c0=None, p=None):
    layout = call.attr("layout", 0)
    if layout:
        x = S.transpose(x, 0, 1)
        h0 = S.transpose(h0, 0, 1) if h0 is not None else None
        c0 = S.transpose(c0, 0, 1) if c0 is not None else None
    direction = call.attr("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    hidden = call.attr("hidden_size", r.shape[-1])
    steps, batch = x.shape[0], x.shape[1]
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    defaults = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[kind]
    acts = _activations(call, defaults, dirs)
    clip = call.attr("clip")
    lens_h = call.host(lens).astype(np.int64) if lens is not None else np.full(batch, steps, np.int64)
    ys, hs, cs = [], [], []
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        wd, rd = w[d], r[d]
        bd = b[d] if b is not None else zeros(2 * gates * hidden, dtype=x.dtype, device=x.device)
        wb, rb = bd[:gates * hidden], bd[gates * hidden:]
        h = h0[d] if h0 is not None else zeros(batch, hidden, dtype=x.dtype, device=x.device)
        c = c0[d] if c0 is not None else zeros(batch, hidden, dtype=x.dtype, device=x.device)
        pd = p[d] if p is not None else None
        xw = matmul(x, wd.T) + wb  # (steps, batch, gates*hidden)
        out = [None] * steps
        for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
            live = call.const((t < lens_h).reshape(batch, 1))
            hn, cn = _step(call, kind, xw[t], h, c, rd, rb, pd, acts[d], hidden, clip)
            h = M.where(live, hn, h)
            if kind == "LSTM":
                c = M.where(live, cn, c)
            out[t] = M.where(live, hn, hn * 0)
        ys.append(S.stack(out, 0) if steps else zeros(0, batch, hidden, dtype=x.dtype, device=x.device))
        hs.append(h)
        cs.append(c)
    y = S.stack(ys, 1)  # (steps, dirs, batch, hidden)
    y_h, y_c = S.stack(hs, 0), S.stack(cs, 0)
    if layout:
        y, y_h, y_c = S.permute(y, 2, 0, 1, 3), S.transpose(y_h, 0, 1), S.transpose(y_c, 0, 1)
    return (y, y_h, y_c) if kind == "LSTM" else (y, y_h)


def _clip(v, clip):
    return v if clip is None else M.clamp(v, min=-clip, max=clip)


def _step(call, kind, xw, h, c, r, rb, p, acts, n, clip):
    if kind == "RNN":
        return acts[0](_clip(xw + matmul(h, r.T) + rb, clip)), None
    if kind == "GRU":
        f, g = acts
        hr = matmul(h, r.T)
        z = f(_clip(xw[:, :n] + hr[:, :n] + rb[:n], clip))
        rr = f(_clip(xw[:, n:2 * n] + hr[:, n:2 * n] + rb[n:2 * n], clip))
        if call.attr("linear_before_reset", 0):
            hh = g(_clip(xw[:, 2 * n:] + rr * (hr[:, 2 * n:] + rb[2 * n:]), clip))
        else:
            hh = g(_clip(xw[:, 2 * n:] + matmul(rr * h, r[2 * n:].T) + rb[2 * n:], clip))
        return (1 - z) * hh + z * h, None
    f, g, act_h = acts
    gates = xw + matmul(h, r.T) + rb
    i_, o_, f_, c_ = (gates[:, k * n:(k + 1) * n] for k in range(4))
    if p is not None:
        i_, f_ = i_ + p[:n] * c, f_ + p[2 * n:] * c
    i = f(_clip(i_, clip))
    fg = (1 - i) if call.attr("input_forget", 0) else f(_clip(f_, clip))
    cn = fg * c + i * g(_clip(c_, clip))
    if p is not None:
        o_ = o_ + p[n:2 * n] * cn
    o = f(_clip(o_, clip))
    return o * act_h(cn), cn


@op("RNN")
def rnn(call, x, w, r, b=None, lens=None, h0=None):
    return _recurrent(call, "RNN", x, w, r, b, lens, h0)


@op("GRU")
def gru(call, x, w, r, b=None, lens=None, h0=None):
    return _recurrent(call, "GRU", x, w, r, b, lens, h0)


@op("LSTM")
def lstm(call, x, w, r, b=None, lens=None, h0=None, c0=None, p=None):
    return _recurrent(call, "LSTM", x, w, r, b, lens, h0, c0, p)
