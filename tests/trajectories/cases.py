"""The tables of the trajectory suite and the runner that trains a case and records it.

`OPTIMIZERS` maps a name to a constructor (module -> optimizer, with its options), `FAMILIES` a name to
a `Family` (a model builder, a batch maker, a loss, and the training-loop features it exercises), and
`GRID` lists the (optimizer, family) pairs that run (`tests/trajectories/test_against_numpy.py` says
why these). `train` runs a case for some steps on one device from the same initial values and data
as on any other and returns a `Trajectory`: the losses as `.item()` read them, every parameter and
buffer, and the optimizer's `state_dict`, all as NumPy.

Every size is odd or prime (7, 19, 33, ...), never a multiple of 8 or 16, so that no kernel's tiling
divides a parameter evenly.

Example:
    >>> traj = train(Case("adam", "mlp"), ember.Device.cpu(), steps=8)
    >>> len(traj.losses), sorted(traj.module)[:2]
    (8, ['l1.bias', 'l1.weight'])
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

import ember
import ember.debug
from ember import nn
from ember.models.bert import BertConfig, BertModel
from ember.nn import functional as F
from ember.optim import (LBFGS, SGD, AdaGrad, Adam, Adan, AdamW, GradientAccumulator, Lion, Muon, RMSprop,
                         clip_grad_norm)
from ember.store.module import module_state
from ember.train.checkpoint import Checkpointer, checkpoint_name, load_checkpoint

STEPS = 8
SEED = 1234  # ember's random streams (dropout) at the start of every run

# ---- optimizers: name -> constructor --------------------------------------------------------------
OPTIMIZERS: dict[str, Callable[[nn.Module], ember.optim.Optimizer]] = {
    "sgd_momentum": lambda m: SGD(m, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-3),
    "sgd_nesterov": lambda m: SGD(m, lr=0.01, momentum=0.9, nesterov=True),
    "adam": lambda m: Adam(m, lr=0.01, weight_decay=1e-3),
    "adamw": lambda m: AdamW(m, lr=0.01, weight_decay=0.05),
    "amsgrad": lambda m: Adam(m, lr=0.01, betas=(0.8, 0.9), amsgrad=True),
    "adagrad": lambda m: AdaGrad(m, lr=0.05, lr_decay=0.01, weight_decay=1e-3, initial_accumulator_value=0.1),
    "rmsprop": lambda m: RMSprop(m, lr=0.005, momentum=0.5, centered=True, weight_decay=1e-3),
    "adan": lambda m: Adan(m, lr=0.01, weight_decay=0.02),
    "lion": lambda m: Lion(m, lr=0.002, weight_decay=0.1),
    "muon": lambda m: Muon(m, lr=0.02, fallback={"lr": 0.01}),
    "lbfgs": lambda m: LBFGS(m, lr=0.5, max_iter=3, history_size=5, line_search_fn="strong_wolfe"),
    # Without the line search: its branches (extrapolate or bisect, accept or shrink) are step functions
    # of the losses' last bits, so on a model where a branch is a near tie, one ulp sends two backends
    # down different paths (test_against_numpy.py). The MLP keeps the search.
    "lbfgs_fixed": lambda m: LBFGS(m, lr=0.1, max_iter=3, history_size=5),
}


# ---- model families: name -> builder, batch maker, loss -------------------------------------------
@dataclass(frozen=True)
class Family:
    """A model family: `build(device)` makes the model, `batch(rng)` one micro-batch of NumPy arrays,
    `loss(model, *tensors)` the scalar loss. `micro_batches` > 1 accumulates that many backward passes
    (each loss divided by their number) into one step with `GradientAccumulator`; `clip_norm` clips the
    step's gradients by global norm (`clip_grad_norm`); `frozen` is a regex of parameter names frozen
    (`Module.freeze(ParamGroup(regex=...))`) before the optimizer is made.

    Attention's key bias is frozen wherever there is attention: it adds `q . b` to every score of a
    query, which softmax cancels, so its gradient is zero but for rounding, and Adam-like rules (which
    divide by the gradient's own scale) turn that noise into full steps that differ between backends."""

    build: Callable[[ember.Device], nn.Module]
    batch: Callable[[np.random.Generator], tuple[np.ndarray, ...]]
    loss: Callable[..., ember.Tensor]
    micro_batches: int = 1
    clip_norm: float | None = None
    frozen: str | None = None


KEY_BIAS = r"self_attn\.key\.bias$"


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


class MLP(nn.Module):
    """19 -> 33 -> 7, tanh."""

    def __init__(self, device=None) -> None:
        self.l1 = nn.Linear(19, 33, device=device)
        self.l2 = nn.Linear(33, 7, device=device)

    def forward(self, x):
        return self.l2(self.l1(x).tanh())


class CNN(nn.Module):
    """Conv 3 -> 5 (3x3, padded) on 7x7 images, BatchNorm, ReLU, seeded Dropout, then a linear head. The
    conv has no bias, as usual before BatchNorm: the norm cancels it, so its gradient would be rounding
    noise, which Adam's normalization turns into full-size steps that differ between backends."""

    def __init__(self, device=None) -> None:
        self.conv = nn.Conv2d(3, 5, 3, padding=1, bias=False, device=device)
        self.norm = nn.BatchNorm2d(5, device=device)
        self.drop = nn.Dropout(0.25)
        self.head = nn.Linear(5 * 7 * 7, 3, device=device)

    def forward(self, x):
        h = self.drop(F.relu(self.norm(self.conv(x))))
        return self.head(h.reshape(x.shape[0], -1))


class Recurrent(nn.Module):
    """An LSTM (7 -> 13) feeding a GRU (13 -> 11), batch first, and a linear readout of the last step."""

    def __init__(self, device=None) -> None:
        self.lstm = nn.LSTM(7, 13, batch_first=True, device=device)
        self.gru = nn.GRU(13, 11, batch_first=True, device=device)
        self.head = nn.Linear(11, 3, device=device)

    def forward(self, x):
        h, _ = self.lstm(x)
        h, _ = self.gru(h)
        return self.head(h[:, -1])


VOCAB = 29


class CausalLM(nn.Module):
    """Token embedding (29 x 21), one pre-norm causal encoder layer (3 heads, ff 33), a linear head."""

    def __init__(self, device=None) -> None:
        self.embed = nn.Embedding(VOCAB, 21, device=device)
        self.encoder = nn.TransformerEncoder(21, 3, 33, num_layers=1, dropout=0.0, norm_first=True,
                                             final_norm=True, device=device)
        self.head = nn.Linear(21, VOCAB, device=device)

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids), is_causal=True))


BERT = BertConfig(vocab_size=37, hidden_size=18, num_hidden_layers=2, num_attention_heads=3, intermediate_size=33,
                  max_position_embeddings=19, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


class BertRegressor(nn.Module):
    """BERT blocks of a small config (2 layers, hidden 18, 3 heads, ff 33) and a linear head on token 0."""

    def __init__(self, device=None) -> None:
        self.bert = BertModel(BERT, device=device)
        self.head = nn.Linear(18, 1, device=device)

    def forward(self, ids, mask):
        return self.head(self.bert(ids, attention_mask=mask)[:, 0])


class FrozenBody(nn.Module):
    """A 2-layer body (13 -> 19 -> 19) and a head (19 -> 5); the suite freezes the first layer."""

    def __init__(self, device=None) -> None:
        self.body = [nn.Linear(13, 19, device=device), nn.Linear(19, 19, device=device)]
        self.head = nn.Linear(19, 5, device=device)

    def forward(self, x):
        for layer in self.body:
            x = F.gelu(layer(x))
        return self.head(x)


def _mlp_batch(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    x = _f32(rng, 11, 19)
    return x, np.sin(x[:, :7]) + x[:, 7:14] * x[:, 12:]


def _image_batch(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    x = _f32(rng, 5, 3, 7, 7)
    return x, x.mean(axis=(2, 3)).argmax(axis=1).astype(np.int32)  # the class is the brightest channel


def _sequence_batch(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    x = _f32(rng, 3, 5, 7)
    return x, x[:, :, :3].sum(axis=1).argmax(axis=1).astype(np.int32)


def _token_batch(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    start, stride = rng.integers(0, VOCAB, (3, 1)), rng.integers(1, 3, (3, 1))
    # arithmetic sequences mod VOCAB: the next token is learnable from the ones before
    return (((start + stride * np.arange(10)) % VOCAB).astype(np.int32),)


def _bert_batch(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    ids = rng.integers(1, BERT.vocab_size, (3, 7), dtype=np.int32)
    mask = np.ones((3, 7), np.int32)
    mask[1, 5:] = 0  # one padded sequence: the key-padding mask path
    return ids, mask, ((ids[:, :1] % 5 - 2) / 2).astype(np.float32)


def _regression_batch(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    x = _f32(rng, 7, 13)
    return x, np.tanh(x[:, :5] - x[:, 5:10])


FAMILIES: dict[str, Family] = {
    "mlp": Family(MLP, _mlp_batch, lambda m, x, y: F.mse_loss(m(x), y)),
    "cnn": Family(CNN, _image_batch, lambda m, x, y: F.cross_entropy(m(x), y)),
    "rnn": Family(Recurrent, _sequence_batch, lambda m, x, y: F.cross_entropy(m(x), y)),
    "transformer": Family(CausalLM, _token_batch,
                          lambda m, ids: F.cross_entropy(m(ids[:, :-1]).reshape(-1, VOCAB), ids[:, 1:].reshape(-1)),
                          frozen=KEY_BIAS),
    "bert": Family(BertRegressor, _bert_batch, lambda m, ids, mask, y: F.mse_loss(m(ids, mask), y), frozen=KEY_BIAS),
    "frozen_accum": Family(FrozenBody, _regression_batch, lambda m, x, y: F.mse_loss(m(x), y),
                           micro_batches=3, clip_norm=0.5, frozen=r"^body\.0\."),
}


class Case(NamedTuple):
    """One run of the grid: a key of `OPTIMIZERS` and one of `FAMILIES`."""

    optimizer: str
    family: str

    @property
    def id(self) -> str:
        return f"{self.optimizer}-{self.family}"


# Every optimizer on the MLP and on one or more other families, so that every family meets Adam or AdamW
# and at least one optimizer of another kind (test_against_numpy.py's docstring gives the reasons).
GRID = [Case(name, "mlp") for name in OPTIMIZERS if name != "lbfgs_fixed"] + [Case(o, f) for o, f in [
    ("adamw", "cnn"), ("rmsprop", "cnn"), ("sgd_momentum", "cnn"),
    ("adam", "rnn"), ("lion", "rnn"),
    ("adamw", "transformer"), ("amsgrad", "transformer"), ("muon", "transformer"), ("lbfgs_fixed", "transformer"),
    ("adam", "bert"), ("adan", "bert"), ("sgd_nesterov", "bert"),
    ("adamw", "frozen_accum"), ("adagrad", "frozen_accum"),
]]


# ---- the runner -----------------------------------------------------------------------------------
@dataclass
class Trajectory:
    """What a run leaves: the loss of each step (as `.item()` read it), every parameter and buffer by
    name, and the optimizer's `state_dict` flattened to dotted keys (arrays, and scalars as 0-d arrays)."""

    losses: np.ndarray
    module: dict[str, np.ndarray]
    optimizer: dict[str, np.ndarray] = field(default_factory=dict)


@functools.cache
def initial_state(family: str) -> dict[str, np.ndarray]:
    """The initial parameters and buffers of a family, made once on Device.numpy() from a fixed seed
    (every device starts from these values, loaded by name)."""
    ember.seed(0)
    return module_state(FAMILIES[family].build(ember.Device.numpy()))


def batches(family: str, step: int) -> list[tuple[np.ndarray, ...]]:
    """The micro-batches of step `step` (from 0): a function of the family and the step only, so a
    resumed run sees the same data as an uninterrupted one."""
    fam = FAMILIES[family]
    rng = np.random.default_rng([step, len(family)] + [ord(c) for c in family])
    return [fam.batch(rng) for _ in range(fam.micro_batches)]


def start(case: Case, device: ember.Device) -> tuple[nn.Module, ember.optim.Optimizer]:
    """The case's model on `device.autodiff()` with the shared initial values, and its optimizer."""
    fam = FAMILIES[case.family]
    model = fam.build(device)
    model.load_state_dict(initial_state(case.family))
    model.to(device.autodiff())
    if fam.frozen is not None:
        model.freeze(nn.ParamGroup(regex=fam.frozen))
    return model, OPTIMIZERS[case.optimizer](model)


def step(case: Case, model: nn.Module, opt: ember.optim.Optimizer, device: ember.Device, index: int) -> float:
    """One optimizer step on step `index`'s data; the loss, read with `.item()` after the update as a
    training loop logs it (so the forward pass, backward pass and update are recorded together)."""
    fam = FAMILIES[case.family]
    data = [tuple(ember.from_numpy(a, device) for a in b) for b in batches(case.family, index)]
    if isinstance(opt, LBFGS):
        def closure():
            loss = fam.loss(model, *data[0])
            return loss, loss.backward()
        return opt.step(closure)
    if fam.micro_batches == 1:
        loss = fam.loss(model, *data[0])
        grads = loss.backward()
    else:
        acc = GradientAccumulator()
        loss = 0.0
        for micro in data:
            part = fam.loss(model, *micro) / len(data)
            acc.accumulate(model, part.backward())
            loss = loss + part.detach()
        grads = acc.grads()
    if fam.clip_norm is not None:
        clip_grad_norm(grads, fam.clip_norm, model)
    opt.step(grads)
    return float(loss.item())


def record(losses: list[float], model: nn.Module, opt: ember.optim.Optimizer) -> Trajectory:
    return Trajectory(np.array(losses, np.float64), module_state(model), flatten(opt.state_dict()))


def flatten(tree: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """A nested state (dicts, lists, arrays, numbers, strings) as {dotted key: array}; None is left out.

    Example:
        >>> flatten({"params": {"w": {"step": 3}}, "delegates": []})
        {'params.w.step': array(3)}
    """
    if isinstance(tree, dict):
        items = tree.items()
    elif isinstance(tree, (list, tuple)):
        items = ((str(i), v) for i, v in enumerate(tree))
    elif tree is None:
        return {}
    else:
        return {prefix.rstrip("."): np.array(tree)}
    out: dict[str, np.ndarray] = {}
    for key, value in items:
        out.update(flatten(value, f"{prefix}{key}."))
    return out


def train(case: Case, device: ember.Device, steps: int = STEPS, *, checkpoint_at: int | None = None,
          folder: Path | None = None) -> Trajectory:
    """Train `case` for `steps` steps on `device` (seeded, from `initial_state`); with `checkpoint_at`,
    also write a checkpoint into `folder` after that many steps (model, optimizer, random streams)."""
    model, opt = start(case, device)
    ember.seed(SEED)
    losses = []
    for index in range(steps):
        losses.append(step(case, model, opt, device, index))
        if index + 1 == checkpoint_at:
            Checkpointer(folder).save(checkpoint_name(0, index + 1), model.state_dict(),
                                      {"optimizer": opt.state_dict(), "random": ember.random.get_state(),
                                       "losses": losses})
    return record(losses, model, opt)


def resume(case: Case, device: ember.Device, folder: Path, steps: int = STEPS) -> Trajectory:
    """Continue a run from the latest checkpoint in `folder` to `steps` steps (a fresh model and optimizer
    loaded from it: what a new process does)."""
    path = Checkpointer(folder).latest()
    model_state, training = load_checkpoint(path)
    model, opt = start(case, device)
    model.load_state_dict(model_state)
    opt.load_state_dict(training["optimizer"])
    ember.random.set_state(training["random"])
    losses = list(training["losses"])
    for index in range(len(losses), steps):
        losses.append(step(case, model, opt, device, index))
    return record(losses, model, opt)


def device_spec(device: ember.Device) -> tuple[str, bool]:
    """(device string, fused) that names `device` and its fusion state to another process."""
    backend = ember.debug.fusion_backend(device)
    spec = device.kind if device.kind in ("numpy", "cpu") else f"{device.kind}:{device.index}"
    return spec, backend is not None and backend.enabled
