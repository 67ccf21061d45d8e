"""The implementations a benchmark compares: ember on the device under test and the peers (NumPy, torch
eager, tinygrad), with what every case needs from them: host arrays turned into their tensors, a way to
wait until a result is really computed (tinygrad is lazy, GPUs run asynchronously), and the timing of
each implementation into rows.

Example:
    >>> fw = Frameworks("numpy", ["numpy", "torch"])
    >>> host = np.ones(1000, np.float32)
    >>> rows = fw.compare_op("unary", "exp", tensor_op(lambda x: x.exp(), np.exp), [host], Settings())
    >>> [r.impl for r in rows]
    ['numpy', 'ember', 'torch']
"""

from __future__ import annotations

from typing import Callable, Mapping, NamedTuple, Sequence

import numpy as np

from .harness import Row, Settings, framework_of, peer, time_together

PEERS = ("numpy", "torch", "tinygrad")
# Frameworks whose tensors spell these methods alike (x.exp(), x.relu(), x @ w, ...).
TENSORS = ("ember", "torch", "tinygrad")

Setup = Callable[[], Callable[[], object]]


class Frameworks:
    """ember on `device` and the requested peers that can run here; `missing` says why the others cannot."""

    def __init__(self, device: str, peers: Sequence[str]) -> None:
        import ember
        unknown = [p for p in peers if p not in PEERS]
        if unknown:
            raise ValueError(f"unknown peer(s) {unknown}; known: {list(PEERS)}")
        self.device = ember.Device(device)
        self.modules: dict[str, object] = {"ember": ember}
        self.missing: dict[str, str] = {}
        for name in peers:
            module, why = _open(name)
            if module is None:
                self.missing[name] = why
            else:
                self.modules[name] = module
        # Peers run where ember runs when they can, so a GPU run compares GPUs.
        torch = self.modules.get("torch")
        self.torch_device = "cuda" if self.device.kind == "cuda" and torch and torch.cuda.is_available() else "cpu"

    def array(self, name: str, host: np.ndarray, requires_grad: bool = False):
        """`host` as a tensor of framework `name`; `requires_grad` makes it a leaf that autodiff tracks
        (for ember, on the device under test's autodiff variant)."""
        if name == "ember":
            ember = self.modules["ember"]
            if requires_grad:
                return ember.tensor(host, device=self.device.autodiff()).require_grad()
            return ember.tensor(host, device=self.device)
        if name == "torch":
            return self.modules["torch"].tensor(host, device=self.torch_device, requires_grad=requires_grad)
        if name == "tinygrad":
            return self.modules["tinygrad"].Tensor(host).realize()  # its backward reaches every float tensor
        if requires_grad:
            raise ValueError(f"{name} has no autodiff")
        return host.copy()

    def finish(self, name: str, value: object) -> None:
        """Wait until `value` (a tensor, a sequence of them, or None) and all work before it is computed."""
        if name == "ember":
            self.device.sync()
        elif name == "torch" and self.torch_device == "cuda":
            self.modules["torch"].cuda.synchronize()
        elif name == "tinygrad":
            values = value if isinstance(value, (tuple, list)) else [value]
            for v in values:
                if isinstance(v, self.modules["tinygrad"].Tensor):
                    v.realize()

    def compare(self, bench: str, case: str, impls: Mapping[str, Setup | str], settings: Settings,
                notes: Mapping[str, str] | None = None) -> list[Row]:
        """Time each implementation of one case, and note every framework that sits it out.

        `impls` maps a label ("ember", "ember+autodiff", "torch.load", "safetensors", ...) to a setup that
        builds the call to time, or to a reason why that framework cannot express the case; a setup that
        raises `Unavailable` (e.g. torch.compile failing on this build) is skipped with its message. The label's
        leading word names the framework; a setup only runs when that framework is present. A framework of
        this run with no label at all is noted as unable to express the case. `notes` annotate measured
        rows by label (what exactly an implementation does, where that is not obvious).
        """
        notes = notes or {}
        rows = []
        calls: dict[str, Callable[[], object]] = {}
        for label, impl in impls.items():
            name = framework_of(label)
            if name in PEERS and name not in self.modules and name not in self.missing:
                continue  # a peer this run did not ask for
            if name in self.missing:
                rows.append(Row(bench, case, label, None, f"skipped: {self.missing[name]}"))
            elif isinstance(impl, str):
                rows.append(Row(bench, case, label, None, f"skipped: {impl}"))
            else:
                try:
                    call = impl()
                except Unavailable as e:
                    rows.append(Row(bench, case, label, None, f"skipped: {e}"))
                    continue
                calls[label] = lambda name=name, call=call: self.finish(name, call())
        # the implementations' repeats taken in turn (`time_together`), rows in the order of `impls`
        for label, (us, runs) in time_together(calls, settings).items():
            slow = "" if runs >= settings.repeats else _runs(runs)
            rows.append(Row(bench, case, label, us, "; ".join(n for n in (notes.get(label, ""), slow) if n)))
        order = list(impls)
        rows.sort(key=lambda row: order.index(row.impl))
        labelled = {framework_of(label) for label in impls}
        rows += [Row(bench, case, name, None, f"skipped: {self.missing.get(name, 'cannot express this case')}")
                 for name in [*self.modules, *self.missing] if name not in labelled]
        return rows

    def compare_op(self, bench: str, case: str, ops: Mapping[str, Callable | str], hosts: Sequence[np.ndarray],
                   settings: Settings) -> list[Row]:
        """`compare` for a function of arrays: `ops[name](*hosts as that framework's tensors)`; an op wrapped
        in `OnHost` gets copies of the NumPy arrays (ember's kernel library called directly), one wrapped
        in `Compiled` runs under `torch.compile`."""
        def setup(name: str, op: Callable) -> Setup:
            def build():
                if isinstance(op, OnHost):
                    arrays = [h.copy() for h in hosts]
                    return lambda: op.fn(*arrays)
                fn = self.modules["torch"].compile(op.fn) if isinstance(op, Compiled) else op
                arrays = [self.array(framework_of(name), h) for h in hosts]
                return lambda: fn(*arrays)
            return build
        return self.compare(bench, case, {name: op if isinstance(op, str) else setup(name, op)
                                          for name, op in ops.items()}, settings)


class Unavailable(Exception):
    """Raised by a setup of `Frameworks.compare` when its implementation cannot run here after all (a
    compiler that fails on this build, say): the row is skipped with the message instead of the run failing."""


class OnHost(NamedTuple):
    """An op of `compare_op` that takes the host NumPy arrays as they are, e.g. a cube kernel called
    directly: `ops["ember cube kernel"] = OnHost(kernels.softmax)`."""

    fn: Callable


class Compiled(NamedTuple):
    """An op of `compare_op` that torch runs under `torch.compile` (labelled "torch.compile"): how a torch
    user fuses a chain of elementwise ops, as ember's fusion layer does without being asked."""

    fn: Callable


def fixed(fn: Callable, *args, **kwargs) -> Setup:
    """A setup whose call is `fn(*args, **kwargs)`: for cases whose inputs need no conversion."""
    return lambda: (lambda: fn(*args, **kwargs))


def tensor_op(op: Callable, numpy: Callable | str, compiled: bool = False) -> dict[str, Callable | str]:
    """`op` for every framework in `TENSORS` (it uses only methods they share) and `numpy` for NumPy;
    `compiled`: also torch's `op` under `torch.compile` (`Compiled`), for chains a compiler fuses."""
    ops = {"numpy": numpy, **dict.fromkeys(TENSORS, op)}
    return {**ops, "torch.compile": Compiled(op)} if compiled else ops


def _open(name: str) -> tuple[object | None, str]:
    """Import peer `name` and check that it can run here; (None, why) when it cannot."""
    module = peer(name)
    if module is None:
        return None, f"{name} is not installed"
    if name == "tinygrad":
        try:
            module.Device.DEFAULT  # picks a device: raises when none works (its CPU backend needs clang)
        except RuntimeError as e:
            return None, f"tinygrad has no usable device ({e}; its CPU backend needs clang)"
    return module, ""


def _runs(runs: int) -> str:
    return f"median of {runs} run{'s' if runs > 1 else ''} (slow)"
