"""`Learner`: the training loop, with metrics, a dashboard, checkpoints, resume and early stopping.

Training runs on `device.autodiff()`: each batch goes through `train_step` (forward and loss), then
`loss.backward()`, gradient accumulation over `grad_accumulation` batches, optional clipping,
`optimizer.step(grads)` and `scheduler.step()`. With `precision="bf16"` or `"f16"` both steps run under
`ember.autocast` (docs/training.md, "Mixed precision"); "f16" also scales the loss with a `GradScaler`,
skipping the optimizer steps whose gradients overflow. Validation runs on the inner device under
`ember.no_grad()` with the model in eval mode. Metrics are updated after each optimizer step, so the
state saved at a step boundary is always consistent.

With a `run_dir`, each epoch writes a checkpoint, metrics.jsonl/csv, and at the end summary.json and
plots (see `ember.train.run_dir`). `fit(..., resume=run_dir)` restores the model, optimizer, scheduler,
RNG streams, data order and metric states of the newest checkpoint and continues; on a deterministic
device (NumPy) the final weights equal an uninterrupted run's bit for bit. Ctrl-C stops after the
current optimizer step and saves a checkpoint; a second Ctrl-C interrupts at once.

`strategy="ddp"` trains data-parallel over the ranks of `ember.distributed` (`DataParallel`; with
`zero=True` the optimizer state is sharded, `ZeroRedundancyOptimizer`): inner accumulation steps run
without a collective, metrics are merged over the ranks, rank 0 writes the run directory, and a run
resumes from an epoch's end on any number of ranks. `strategy="multi_device"` trains on `devices` from
threads of this process (`MultiDevice`). docs/distributed.md.

Example:
    >>> learner = Learner(model, AdamW(model, lr=1e-3), loss=cross_entropy,
    ...                   metrics=[Accuracy()], run_dir="runs/mnist")
    >>> result = learner.fit(train_loader, valid_loader, epochs=3)
    >>> result.best
    {'metric': 'valid/loss', 'value': 0.12, 'epoch': 3}
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import time
from typing import Any, Callable, Iterable, Sequence

from .. import random as ember_random
from ..amp import GradScaler, autocast
from ..autodiff.grad_mode import no_grad
from ..device import Device
from ..nn.module import Module
from .callbacks import Callback
from .checkpoint import Checkpointer, checkpoint_name, find_checkpoint, load_checkpoint
from .dashboard import Display, EpochView, make_display
from .early_stopping import EarlyStopping
from .interrupt import StopRequest, catch_interrupts
from .metrics import Loss, Metric
from .plots import RECORD_KEYS
from .run_dir import RunDirectory
from .run_state import FitResult, RunState
from .step import Clock, StepOutput, checked, detached, move_to, observe
from .tracker import MetricTracker

SPLITS = ("train", "valid")
STRATEGIES = (None, "ddp", "multi_device")
PRECISIONS = ("f32", "bf16", "f16")
StepFn = Callable[[Module, Any], StepOutput]


class _Interrupted(Exception):
    """Raised inside fit when a stop was requested at a step boundary."""


class Learner:
    """Trains a model (see the module docs).

    Args:
        model: the module to train; it is moved to `device.autodiff()`.
        optimizer: an `ember.optim` optimizer built on `model` (`step(grads)`, `state_dict()`).
        scheduler: optional; `step()` after every optimizer step (or epoch, `scheduler_interval`).
        loss: `loss(outputs, targets) -> scalar` for the default steps, whose batches are
            `(inputs, targets)`. Not needed when `train_step` is given or overridden.
        train_step: `fn(model, batch) -> StepOutput`, instead of overriding `train_step`.
        valid_step: the same for validation; defaults to the training step (forward and loss).
        metrics: `Metric`s recorded per split (a `Loss` is added when missing).
        device: where to train; default: the model's device, else `Device.default()`.
        run_dir: folder for checkpoints, metric files, summary and plots; None keeps nothing.
        grad_accumulation: batches whose gradients are summed per optimizer step (each loss is divided
            by the window's size, the last window of an epoch may be shorter).
        clip_norm: rescale the gradients to this global L2 norm at most, before each step.
        keep_last: checkpoints to keep besides the best.
        best_metric: "split/name" that picks the best epoch; default "valid/loss" (or "train/loss"
            without validation).
        checkpoint_every: also checkpoint every this many optimizer steps (None: epoch ends only).
        early_stopping: an `EarlyStopping`.
        display: "auto", "rich", "plain", "none" or a `Display`.
        config: a `Config` or dict saved as config.json in `run_dir`.
        callbacks: `Callback`s.
        scheduler_interval: "step" or "epoch".
        window: batches in a metric's running value.
        plots: draw PNG curves in `run_dir` at the end (metrics with a direction, and the lr).
        precision: "f32" (as written), "bf16" or "f16": the steps' forward runs under `ember.autocast`
            in that dtype; "f16" adds dynamic loss scaling (`grad_scaler`, a `GradScaler()` by default;
            its scale is not saved in checkpoints).
        grad_scaler: the `GradScaler` for precision="f16".
        strategy: None (one device), "ddp" (data-parallel over the `ember.distributed` group: `group`, by
            default `ember.distributed.init()`) or "multi_device" (threads over `devices`).
        devices: the devices of strategy="multi_device", the first one the main device.
        zero: with strategy="ddp", shard the optimizer state over the ranks (ZeRO-1).
        group: the process group of strategy="ddp".

    Example:
        >>> Learner(model, SGD(model, lr=0.1), loss=mse_loss, display="none").fit(loader, epochs=2)
    """

    def __init__(self, model: Module, optimizer: Any, scheduler: Any = None,
                 loss: Callable[[Any, Any], Any] | None = None, *, train_step: StepFn | None = None,
                 valid_step: StepFn | None = None, metrics: Sequence[Metric] = (), device: Any = None,
                 run_dir: str | None = None, grad_accumulation: int = 1, clip_norm: float | None = None,
                 keep_last: int = 2, best_metric: str | None = None, checkpoint_every: int | None = None,
                 early_stopping: EarlyStopping | None = None, display: str | Display = "auto",
                 config: Any = None, callbacks: Iterable[Callback] = (), scheduler_interval: str = "step",
                 window: int = 20, plots: bool = True, precision: str = "f32",
                 grad_scaler: GradScaler | None = None, strategy: str | None = None,
                 devices: Sequence[Any] | None = None, zero: bool = False, group: Any = None) -> None:
        if not isinstance(model, Module):
            raise TypeError(f"Learner needs an ember.nn.Module, got {type(model).__name__}")
        if loss is None and train_step is None and type(self).train_step is Learner.train_step:
            raise ValueError("Learner needs loss=, train_step= or a subclass overriding train_step")
        for name, value in (("grad_accumulation", grad_accumulation), ("checkpoint_every", checkpoint_every)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"Learner {name} must be an int >= 1, got {value!r}")
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError(f"Learner clip_norm must be > 0, got {clip_norm!r}")
        if precision not in PRECISIONS:
            raise ValueError(f"Learner precision must be one of {PRECISIONS}, got {precision!r}")
        if grad_scaler is not None and precision != "f16":
            raise ValueError(f"Learner grad_scaler is for precision='f16', got precision={precision!r}")
        if scheduler_interval not in ("step", "epoch"):
            raise ValueError(f"scheduler_interval must be 'step' or 'epoch', got {scheduler_interval!r}")
        for m in metrics:
            if not isinstance(m, Metric):
                raise TypeError(f"metrics must be ember.train Metrics, got {type(m).__name__}")
            if m.name in RECORD_KEYS:
                raise ValueError(f"metric name {m.name!r} is reserved for the metric files ({RECORD_KEYS})")
        if strategy not in STRATEGIES:
            raise ValueError(f"Learner strategy must be one of {STRATEGIES}, got {strategy!r}")
        if (devices is not None) != (strategy == "multi_device"):
            raise ValueError("Learner devices= goes with strategy='multi_device' (and that strategy needs it)")
        if zero and strategy != "ddp":
            raise ValueError("Learner zero=True shards the optimizer over ranks: it needs strategy='ddp'")
        if zero and (clip_norm is not None or precision == "f16"):
            raise ValueError("Learner zero=True: clip_norm and precision='f16' read every gradient before the "
                             "step, which ZeRO-1 reduces inside it; use strategy='ddp' without zero")
        if strategy == "multi_device" and (precision != "f32" or type(self).train_step is not Learner.train_step):
            raise ValueError("Learner strategy='multi_device' runs precision='f32' steps given by loss= or "
                             "train_step=fn(model, batch) (not a subclass's train_step: it runs on each device)")
        self.model, self.optimizer, self.scheduler, self.loss = model, optimizer, scheduler, loss
        self._train_fn, self._valid_fn = train_step, valid_step
        if strategy == "multi_device":
            device = devices[0] if devices else device
        self.device = Device(device).inner if device is not None else _device_of(model)
        self.model.to(self.device.autodiff())
        self.strategy, self.zero, self.group = strategy, zero, None
        self.parallel = self.multi = None
        if strategy == "ddp":
            from .. import distributed
            self.group = group if group is not None else distributed.init()
            from .ddp import DataParallel
            self.parallel = DataParallel(model, self.group)
            if zero:
                from .zero import ZeroRedundancyOptimizer
                self.optimizer = ZeroRedundancyOptimizer(optimizer, self.group)
        elif strategy == "multi_device":
            from .multi_device import MultiDevice
            self.multi = MultiDevice(model, devices)
        self._writes = self.group is None or self.group.rank == 0  # who writes the run directory
        if not self._writes:
            display = "none"
        metrics = list(metrics) if any(m.name == "loss" for m in metrics) else [Loss(), *metrics]
        self.trackers = {split: MetricTracker([copy.deepcopy(m) for m in metrics if split in m.splits], window)
                         for split in SPLITS}
        self.run_dir = RunDirectory(run_dir) if run_dir is not None and self._writes else None
        self._run_dir_path = run_dir
        self.checkpointer = Checkpointer(self.run_dir.checkpoints, keep_last) if self.run_dir else None
        self._checkpoints = run_dir is not None  # every rank takes part in a save (ZeRO gathers)
        self.grad_accumulation, self.clip_norm = grad_accumulation, clip_norm
        self.best_metric, self.checkpoint_every = best_metric, checkpoint_every
        self.early_stopping, self.config, self.callbacks = early_stopping, config, list(callbacks)
        self.display = display
        self.scheduler_interval = scheduler_interval
        self.plots = plots
        self.precision = precision
        self.grad_scaler = (grad_scaler or GradScaler()) if precision == "f16" else None
        self._run = RunState()
        self._stop = StopRequest()
        self._data_seed: int | None = None
        self._started = time.perf_counter()  # of the current fit
        self._best: tuple[str, str, Metric] | None = None  # split, name, metric; set by fit

    # ---- the steps (override, or pass train_step= / valid_step=) ----------------------------------
    def train_step(self, batch: Any) -> StepOutput:
        """Forward and loss of one training batch (on the autodiff device).

        Default: `inputs, targets = batch; outputs = model(inputs)`, `loss(outputs, targets)`.
        """
        return self._step_with(self.model, batch)

    def _step_with(self, model: Module, batch: Any) -> StepOutput:
        """The default training step on `model` (a device's copy under strategy="multi_device")."""
        if self._train_fn is not None:
            return self._train_fn(model, batch)
        inputs, targets = _pair(batch)
        outputs = model(inputs)
        return StepOutput(self.loss(outputs, targets), outputs, targets)

    def valid_step(self, batch: Any) -> StepOutput:
        """Forward and loss of one validation batch (inner device, no_grad); default: as training."""
        if self._valid_fn is not None:
            return self._valid_fn(self.model, batch)
        return self.train_step(batch)

    # ---- public state ----------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """Whole epochs done."""
        return self._run.epoch

    @property
    def step(self) -> int:
        """Optimizer steps done."""
        return self._run.step

    @property
    def train_device(self) -> Device:
        return self.device.autodiff()

    def request_stop(self) -> None:
        """Stop after the current optimizer step and save a checkpoint, as Ctrl-C does."""
        self._stop.request()

    # ---- fit and evaluate ------------------------------------------------------------------------
    def fit(self, train_loader: Iterable, valid_loader: Iterable | None = None, epochs: int = 1,
            resume: str | None = None) -> FitResult:
        """Train until `epochs` whole epochs are done (counting those of a resumed run).

        Args:
            train_loader: batches for training (a `DataLoader` or any re-iterable).
            valid_loader: batches for validation after each epoch, or None.
            epochs: the total number of epochs.
            resume: a run directory or checkpoint folder to continue from.

        Example:
            >>> result = learner.fit(train, valid, epochs=5, resume="runs/mnist")
        """
        if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
            raise ValueError(f"fit: epochs must be an int >= 1, got {epochs!r}")
        best_key = self.best_metric or ("valid/loss" if valid_loader is not None else "train/loss")
        self._best = (*best_key.split("/", 1), self._metric_key(best_key, valid_loader, "best_metric"))
        if self.early_stopping is not None:
            metric = self._metric_key(self.early_stopping.metric, valid_loader, "early_stopping")
            if self.early_stopping.higher_is_better is None:
                self.early_stopping.higher_is_better = metric.higher_is_better
        run = self._run = RunState()
        self._data_seed = getattr(train_loader, "seed", None)
        display = make_display(self.display) if isinstance(self.display, str) else self.display
        if resume is not None:
            path = find_checkpoint(resume)
            self._restore(path, run)
            display.message(f"resumed from {path} (epoch {run.epoch}, step {run.step})")
        else:
            for tracker in self.trackers.values():
                tracker.reset()
            run.rng = ember_random.get_state()  # what a stop before the first step saves
        if self.run_dir is not None and self.config is not None:  # rank 0 only
            self.run_dir.write_config(self.config)
        self._started = time.perf_counter()
        last_checkpoint = None
        with catch_interrupts() as self._stop:
            for callback in self.callbacks:
                callback.on_fit_start(self)
            display.start(epochs, min(run.epoch + 1, epochs))
            try:
                while run.epoch < epochs and not run.stopped_early:
                    epoch_started = time.perf_counter()
                    self._train_epoch(run, train_loader, display)
                    if self._stop.requested:
                        raise _Interrupted
                    last_checkpoint = self._end_epoch(run, valid_loader, display, epochs,
                                                      time.perf_counter() - epoch_started)
                    if self._stop.requested:
                        raise _Interrupted
            except (KeyboardInterrupt, _Interrupted):
                run.interrupted = True
                last_checkpoint = self._save(run) or last_checkpoint
                where = f"; checkpoint {last_checkpoint}" if last_checkpoint else " (no run_dir: nothing saved)"
                display.message(f"interrupted at epoch {run.epoch + 1}, step {run.step}{where}")
            finally:
                display.close()
        if run.stopped_early:
            display.message(f"stopped early after epoch {run.epoch}: {self.early_stopping.metric} did not "
                            f"improve for {self.early_stopping.patience} epochs")
        result = self._result(run, last_checkpoint)
        for callback in self.callbacks:
            callback.on_fit_end(self, result)
        return result

    def evaluate(self, loader: Iterable) -> dict[str, float | None]:
        """The validation metrics over `loader` (inner device, no_grad, eval mode).

        Example:
            >>> learner.evaluate(test_loader)["accuracy"]
            0.97
        """
        return self._validate(loader, Display(), self._run.epoch + 1)

    # ---- training --------------------------------------------------------------------------------
    def _train_epoch(self, run: RunState, loader: Iterable, display: Display) -> None:
        total = _length(loader)
        tracker = self.trackers["train"]
        if run.position == 0:
            tracker.reset()
        display.split_start("train", run.epoch + 1, total)
        if total is not None and run.position >= total:
            return  # stopped after the last step, before validation
        batches = _seek(loader, run.epoch, run.position)
        self.model.train()
        accumulator = None
        carried = self.parallel is not None and not self.zero  # DataParallel sums a window itself
        if carried and self.grad_accumulation > 1 and total is None:
            raise ValueError("Learner strategy='ddp' with grad_accumulation needs a train loader with a length "
                             "(every rank must know where a window ends)")
        if self.grad_accumulation > 1 and not carried:
            from ..optim import GradientAccumulator
            accumulator = GradientAccumulator()
        pending = []
        window_start = index = run.position
        clock = Clock()
        for batch in batches:
            index += 1
            size = self.grad_accumulation if total is None else min(self.grad_accumulation, total - window_start)
            lr = self.optimizer.lr
            if self.multi is not None:
                grads, out = self.multi.step(self._step_with, batch, loss_scale=1 / size)
            else:
                with self._autocast():
                    out = checked(self.train_step(move_to(batch, self.train_device)))
                loss = out.loss / size if size > 1 else out.loss
                loss = self.grad_scaler.scale(loss) if self.grad_scaler is not None else loss
                grads = self._backward(loss, last=index - window_start >= size)
            # Read on the host after the optimizer step (_after_step): a read here would cut the
            # recorded stream between forward and backward and cost a lazy device one more flush.
            pending.append((detached(out), *clock.lap(), lr))
            if accumulator is not None:
                accumulator.accumulate(self.model, grads)
            if index - window_start < size:
                continue
            self._optimizer_step(accumulator.grads() if accumulator is not None else grads)
            window_start = index
            self._after_step(run, index, total, pending, display)
            if self._stop.requested:
                return
        if pending:  # a loader without a length ended inside a window
            self._optimizer_step(accumulator.grads())
            self._after_step(run, index, total, pending, display)

    def _backward(self, loss: Any, last: bool) -> Any:
        """loss.backward(); under strategy="ddp" reduced over the ranks at the window's `last` batch."""
        if self.parallel is None or self.zero:
            return loss.backward()
        with contextlib.nullcontext() if last else self.parallel.no_sync():
            return self.parallel.backward(loss)

    def _epoch_values(self, tracker: MetricTracker) -> dict[str, float | None]:
        """The tracker's epoch values; under strategy="ddp" of the states merged over every rank."""
        if self.group is None or self.group.size == 1:
            return tracker.epoch()
        return tracker.epoch_over(self.group.all_gather_object(tracker.state_dict()["epoch"]))

    def _autocast(self) -> autocast:
        """The autocast the steps run under (a disabled one at precision="f32")."""
        return autocast(self.device, "bf16" if self.precision == "f32" else self.precision,
                        enabled=self.precision != "f32")

    def _optimizer_step(self, grads: Any) -> None:
        scaler = self.grad_scaler
        if scaler is not None:
            grads = scaler.unscale(grads)
        if self.clip_norm is not None:
            from ..optim import clip_grad_norm
            clip_grad_norm(grads, self.clip_norm, self.model)
        if scaler is not None:
            scaler.step(self.optimizer, grads)
            scaler.update()
        else:
            self.optimizer.step(grads)
        if self.scheduler is not None and self.scheduler_interval == "step":
            self.scheduler.step()

    def _after_step(self, run: RunState, index: int, total: int | None, pending: list, display: Display) -> None:
        tracker = self.trackers["train"]
        for out, wall, cpu, lr in pending:
            tracker.update(observe(out, wall, cpu, lr, self.device))
        pending.clear()
        run.position, run.step = index, run.step + 1
        run.rng = ember_random.get_state()
        display.batch("train", index, total, tracker.formatted_running())
        for callback in self.callbacks:
            callback.on_step_end(self)
        if self.checkpoint_every is not None and run.step % self.checkpoint_every == 0:
            self._save(run)

    # ---- validation and epoch end ----------------------------------------------------------------
    def _validate(self, loader: Iterable, display: Display, epoch: int) -> dict[str, float | None]:
        tracker = self.trackers["valid"]
        tracker.reset()
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(0)  # the same order every time, so validation sums in the same order
        total = _length(loader)
        display.split_start("valid", epoch, total)
        self.model.eval()
        self.model.to(self.device)
        clock = Clock()
        try:
            with no_grad():
                for index, batch in enumerate(loader, start=1):
                    with self._autocast():
                        out = checked(self.valid_step(move_to(batch, self.device)))
                    tracker.update(observe(out, *clock.lap(), None, self.device))
                    display.batch("valid", index, total, tracker.formatted_running())
        finally:
            self.model.to(self.train_device)
            self.model.train()
        return self._epoch_values(tracker)

    def _end_epoch(self, run: RunState, valid_loader: Iterable | None, display: Display, epochs: int,
                   seconds: float) -> str | None:
        values = {"train": self._epoch_values(self.trackers["train"])}
        if valid_loader is not None:
            values["valid"] = self._validate(valid_loader, display, run.epoch + 1)
        run.epoch, run.position = run.epoch + 1, 0
        elapsed = round(self._elapsed(run), 3)
        for split, split_values in values.items():
            run.history.append({"epoch": run.epoch, "split": split, "step": run.step, "time": elapsed,
                                **split_values})
        split, name, metric = self._best
        value = values.get(split, {}).get(name)
        improved = value is not None and (run.best is None or _better(value, run.best["value"], metric))
        if improved:
            run.best = {"metric": f"{split}/{name}", "value": value, "epoch": run.epoch}
        if self.early_stopping is not None:
            es_split, es_name = self.early_stopping.metric.split("/", 1)
            run.stopped_early = self.early_stopping.update(run.epoch, values.get(es_split, {}).get(es_name))
        if self.scheduler is not None and self.scheduler_interval == "epoch":
            self.scheduler.step()
        run.rng = ember_random.get_state()
        path = self._save(run, best=run.best if improved else None)
        if self.run_dir is not None:
            self.run_dir.write_metrics(run.history)
        display.epoch_end(self._view(run, values, epochs, seconds))
        for callback in self.callbacks:
            callback.on_epoch_end(self, values)
        return path

    def _metric_key(self, key: str, valid_loader: Iterable | None, what: str) -> Metric:
        split, _, name = key.partition("/")
        if split not in SPLITS or not name:
            raise ValueError(f"{what}: expected 'train/<metric>' or 'valid/<metric>', got {key!r}")
        if split == "valid" and valid_loader is None:
            raise ValueError(f"{what} is {key!r} but fit() got no valid_loader")
        found = {m.name: m for m in self.trackers[split].metrics}
        if name not in found:
            raise ValueError(f"{what}: no metric {name!r} on split {split!r}; known: {sorted(found)}")
        if found[name].higher_is_better is None:
            raise ValueError(f"{what}: {key!r} is a monitor with no better direction")
        return found[name]

    def _view(self, run: RunState, values: dict, epochs: int, seconds: float) -> EpochView:
        formatted = {split: self.trackers[split].format(v) for split, v in values.items()}
        best, curves = {}, {}
        for metric in self.trackers["train"].metrics + self.trackers["valid"].metrics:
            split = "valid" if "valid" in values and metric in self.trackers["valid"].metrics else "train"
            series = [(r["epoch"], r.get(metric.name)) for r in run.history if r["split"] == split]
            series = [(e, v) for e, v in series if v is not None]
            curves[metric.name] = [v for _, v in series]
            if metric.higher_is_better is not None and series:
                pick = max if metric.higher_is_better else min
                epoch, value = pick(series, key=lambda ev: ev[1])
                best[metric.name] = f"{metric.format(value)} (epoch {epoch})"
        return EpochView(run.epoch, epochs, seconds, formatted, best, curves)

    # ---- checkpoints -----------------------------------------------------------------------------
    def _elapsed(self, run: RunState) -> float:
        """Wall time of the run: earlier sessions plus this one."""
        return run.seconds + time.perf_counter() - self._started

    def _save(self, run: RunState, best: dict | None = None) -> str | None:
        if not self._checkpoints:
            return None
        seconds = self._elapsed(run)
        training = {
            "world_size": self.group.size if self.group is not None else 1,
            **run.tree(seconds),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if hasattr(self.scheduler, "state_dict") else None,
            "trackers": {split: t.state_dict() for split, t in self.trackers.items()},
            "early_stopping": self.early_stopping.state_dict() if self.early_stopping else None,
            "data_seed": self._data_seed,
        }
        path = None
        if self.checkpointer is not None:  # rank 0
            path = str(self.checkpointer.save(checkpoint_name(run.epoch, run.step), self.model.state_dict(),
                                              training, best))
        return self.group.broadcast_object(path) if self.group is not None else path

    def _restore(self, path: Any, run: RunState) -> None:
        model_state, tree = load_checkpoint(path)
        saved_world, world = tree.get("world_size", 1), self.group.size if self.group is not None else 1
        if saved_world != world and tree["position"] != 0:
            raise ValueError(f"{path} was saved mid-epoch (after {tree['position']} batches) on {saved_world} "
                             f"rank(s); this run has {world}: resume from an epoch's end, where batches do "
                             f"not depend on the number of ranks")
        if tree["data_seed"] != self._data_seed:
            raise ValueError(f"{path} was saved with a train loader of seed {tree['data_seed']}, this one has "
                             f"seed {self._data_seed}: the batch order would differ")
        self.model.load_state_dict(model_state)
        self.optimizer.load_state_dict(tree["optimizer"])
        if tree["scheduler"] is not None:
            if not hasattr(self.scheduler, "load_state_dict"):
                raise ValueError(f"{path} holds a scheduler state but this learner has no scheduler")
            self.scheduler.load_state_dict(tree["scheduler"])
        for split, state in tree["trackers"].items():
            self.trackers[split].load_state_dict(state)
        if tree["early_stopping"] is not None and self.early_stopping is not None:
            self.early_stopping.load_state_dict(tree["early_stopping"])
        run.load(tree)
        ember_random.set_state(run.rng)

    def _result(self, run: RunState, checkpoint: str | None) -> FitResult:
        final = {f"{r['split']}/{k}": v for r in run.history if r["epoch"] == run.epoch
                 for k, v in r.items() if k not in RECORD_KEYS}
        result = FitResult(run.epoch, run.step, run.best, final, run.interrupted, run.stopped_early,
                           round(self._elapsed(run), 3), checkpoint)
        if self.run_dir is not None:
            if self.plots:
                names = [m.name for m in self.trackers["train"].metrics + self.trackers["valid"].metrics
                         if m.higher_is_better is not None or m.name == "lr"]
                result.plots, result.plots_note = self.run_dir.write_plots(run.history, list(dict.fromkeys(names)))
            else:
                result.plots_note = "plots=False"
            self.run_dir.write_summary(result.to_dict())
        return result


def _device_of(model: Module) -> Device:
    for p in model.parameters():
        return p.device.inner
    return Device.default()


def _pair(batch: Any) -> tuple[Any, Any]:
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0], batch[1]
    raise ValueError("the default train_step takes (inputs, targets) batches; got "
                     f"{type(batch).__name__}; pass train_step= for other batches")


def _length(loader: Iterable) -> int | None:
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return None


def _seek(loader: Iterable, epoch: int, position: int) -> Iterable:
    """An iterator over `loader` for `epoch`, starting after `position` batches."""
    if hasattr(loader, "state_dict") and hasattr(loader, "load_state_dict"):
        state = dict(loader.state_dict())
        state.update(epoch=epoch, position=position)
        loader.load_state_dict(state)
        return iter(loader)
    if hasattr(loader, "set_epoch"):
        loader.set_epoch(epoch)
    return itertools.islice(iter(loader), position, None)


def _better(value: float, best: float, metric: Metric) -> bool:
    return value > best if metric.higher_is_better else value < best
