"""Learner: fit and evaluate on a tiny problem, the run directory, the steps, accumulation, clipping,
scheduling, and clear errors."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import ember
from ember.config import Config
from ember.nn.loss import cross_entropy
from ember.optim import SGD
from ember.train import Accuracy, Callback, Learner, LearningRate, StepOutput

from .problem import MLP, learner, loaders, weights


class RunConfig(Config):
    lr: float = 0.01
    epochs: int = 3


def test_fit_learns_and_evaluate_agrees():
    train, valid = loaders()
    lrn = learner(metrics=[Accuracy()])
    before = lrn.evaluate(valid)
    result = lrn.fit(train, valid, epochs=4)
    after = lrn.evaluate(valid)
    assert after["accuracy"] > 0.9 > before["accuracy"]
    assert after["loss"] < before["loss"]
    assert result.final["valid/accuracy"] == after["accuracy"]
    assert result.steps == 24 and result.epochs_completed == 4 and not result.interrupted
    assert result.best["metric"] == "valid/loss"


def test_run_directory_contents(tmp_path):
    train, valid = loaders()
    lrn = learner(tmp_path, metrics=[Accuracy(), LearningRate()], config=RunConfig(), plots=True)
    result = lrn.fit(train, valid, epochs=2)
    assert RunConfig.load(tmp_path / "config.json") == RunConfig()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["epoch"], r["split"], r["step"]) for r in records] == [(1, "train", 6), (1, "valid", 6),
                                                                   (2, "train", 12), (2, "valid", 12)]
    assert records[0]["lr"] == 0.01 and "lr" not in records[1]
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["epoch", "split", "step", "time", "loss", "accuracy", "lr"]
    assert float(rows[3]["accuracy"]) == records[3]["accuracy"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["epochs_completed"] == 2 and summary["best"] == result.best
    assert summary["final"]["valid/accuracy"] == records[3]["accuracy"]
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["accuracy.png", "loss.png", "lr.png"]
    assert (tmp_path / "plots" / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in (tmp_path / "checkpoints").iterdir() if p.is_dir()]


def test_plots_are_skipped_with_a_note_without_matplotlib(tmp_path, monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    train, _ = loaders()
    result = learner(tmp_path, plots=True).fit(train, epochs=1)
    assert result.plots == [] and "ember[train]" in result.plots_note
    assert "ember[train]" in json.loads((tmp_path / "summary.json").read_text())["plots_note"]


def test_training_on_autodiff_validation_on_the_inner_device_without_grad():
    seen = {}

    class Probe(Learner):
        def train_step(self, batch):
            x, y = batch
            seen["train"] = (x.device, ember.grad_enabled(), self.model.training)
            logits = self.model(x)
            return StepOutput(cross_entropy(logits, y), logits, y)

        def valid_step(self, batch):
            x, y = batch
            seen["valid"] = (x.device, ember.grad_enabled(), self.model.training,
                             self.model.hidden.weight.device)
            logits = self.model(x)
            return StepOutput(cross_entropy(logits, y), logits, y)

    ember.seed(0)
    model = MLP()
    train, valid = loaders()
    Probe(model, SGD(model, lr=0.1), device="numpy", display="none").fit(train, valid, epochs=1)
    numpy = ember.Device.numpy()
    assert seen["train"] == (numpy.autodiff(), True, True)
    assert seen["valid"] == (numpy, False, False, numpy)
    assert model.hidden.weight.device == numpy.autodiff() and model.training


def test_gradient_accumulation_matches_a_bigger_batch():
    from ember.data import DataLoader
    from .problem import dataset

    def run(batch_size, accumulation):
        ember.seed(0)
        model = MLP()
        lrn = Learner(model, SGD(model, lr=0.1), loss=cross_entropy, device="numpy", display="none",
                      grad_accumulation=accumulation)
        lrn.fit(DataLoader(dataset(96), batch_size), epochs=1)
        return weights(lrn), lrn.step

    big, big_steps = run(32, 1)
    small, small_steps = run(8, 4)
    assert big_steps == small_steps == 3
    for k in big:
        np.testing.assert_allclose(small[k], big[k], rtol=1e-5, atol=1e-6)


def test_short_last_window_is_averaged_over_its_own_batches():
    from ember.data import DataLoader
    from .problem import dataset

    def run(batch_size, accumulation):
        ember.seed(0)
        model = MLP()
        lrn = Learner(model, SGD(model, lr=0.1), loss=cross_entropy, device="numpy", display="none",
                      grad_accumulation=accumulation)
        lrn.fit(DataLoader(dataset(40), batch_size), epochs=1)
        return weights(lrn), lrn.step

    # 40 items: one window of 4 x 8, then a window of 1 x 8; the same as batches of 32 and 8.
    small, steps = run(8, 4)
    assert steps == 2
    ember.seed(0)
    model = MLP()
    opt = SGD(model, lr=0.1)
    model.to(ember.Device.numpy().autodiff())
    data = dataset(40)
    for start, end in ((0, 32), (32, 40)):
        x = ember.tensor(np.stack([data[i][0] for i in range(start, end)]), device=ember.Device.numpy().autodiff())
        y = ember.tensor(np.array([data[i][1] for i in range(start, end)]), device=ember.Device.numpy().autodiff())
        opt.step(cross_entropy(model(x), y).backward())
    for k, v in model.state_dict().items():
        np.testing.assert_allclose(small[k], v.numpy(), rtol=1e-5, atol=1e-6)


def test_clip_norm_limits_each_update():
    def run(clip):
        ember.seed(0)
        model = MLP()
        lrn = Learner(model, SGD(model, lr=1.0), loss=cross_entropy, device="numpy", display="none",
                      clip_norm=clip)
        before = weights(lrn)
        lrn.fit(loaders(batch_size=96)[0], epochs=1)  # one step
        after = weights(lrn)
        return np.sqrt(sum(((after[k] - before[k]) ** 2).sum() for k in before))

    assert run(1e-3) == pytest.approx(1e-3, rel=1e-3)  # update = lr * clipped gradient
    assert run(None) > 1e-2


def test_scheduler_steps_per_step_or_epoch_and_is_checkpointed(tmp_path):
    class Halve:
        def __init__(self, opt):
            self.opt, self.count = opt, 0

        def step(self):
            self.count += 1
            self.opt.lr = self.opt.lr / 2

        def state_dict(self):
            return {"count": self.count}

        def load_state_dict(self, state):
            self.count = state["count"]

    for interval, expected in (("step", 12), ("epoch", 2)):
        ember.seed(0)
        model = MLP()
        opt = SGD(model, lr=0.1)
        sched = Halve(opt)
        lrn = Learner(model, opt, sched, loss=cross_entropy, device="numpy", display="none",
                      scheduler_interval=interval, run_dir=tmp_path / interval, metrics=[LearningRate()])
        result = lrn.fit(loaders()[0], epochs=2)
        assert sched.count == expected
        assert result.final["train/lr"] == pytest.approx(0.1 / 2 ** (expected - 1))
        _, training = ember.train.load_checkpoint(result.checkpoint)
        assert training["scheduler"] == {"count": expected}


def test_step_functions_and_non_pair_batches():
    from ember.data import DataLoader, InMemoryDataset
    from .problem import dataset

    items = [{"x": x, "y": y} for x, y in dataset(32)]

    def step(model, batch):
        logits = model(batch["x"])
        return StepOutput(cross_entropy(logits, batch["y"]), logits, batch["y"])

    ember.seed(0)
    model = MLP()
    lrn = Learner(model, SGD(model, lr=0.1), train_step=step, device="numpy", display="none", metrics=[Accuracy()])
    result = lrn.fit(DataLoader(InMemoryDataset(items), 8), DataLoader(InMemoryDataset(items), 16), epochs=1)
    assert result.steps == 4 and result.final["valid/accuracy"] is not None


def test_callbacks_see_every_event():
    events = []

    class Log(Callback):
        def on_fit_start(self, learner):
            events.append("start")

        def on_step_end(self, learner):
            events.append(f"step{learner.step}")

        def on_epoch_end(self, learner, values):
            events.append(f"epoch{learner.epoch}:{sorted(values)}")

        def on_fit_end(self, learner, result):
            events.append(f"end{result.steps}")

    train, valid = loaders(batch_size=48)
    learner(callbacks=[Log()]).fit(train, valid, epochs=1)
    assert events == ["start", "step1", "step2", "epoch1:['train', 'valid']", "end2"]


def test_bad_arguments_raise_clear_errors():
    ember.seed(0)
    model = MLP()
    opt = SGD(model, lr=0.1)
    with pytest.raises(ValueError, match="loss=, train_step="):
        Learner(model, opt)
    with pytest.raises(TypeError, match="Module"):
        Learner(object(), opt, loss=cross_entropy)
    with pytest.raises(ValueError, match="grad_accumulation"):
        Learner(model, opt, loss=cross_entropy, grad_accumulation=0)
    with pytest.raises(ValueError, match="reserved"):
        acc = Accuracy()
        acc.name = "epoch"
        Learner(model, opt, loss=cross_entropy, metrics=[acc])
    lrn = Learner(model, opt, loss=cross_entropy, display="none")
    with pytest.raises(ValueError, match="epochs"):
        lrn.fit(loaders()[0], epochs=0)
    with pytest.raises(ValueError, match="inputs, targets"):
        lrn.fit([[1, 2, 3]], epochs=1)

    def no_step_output(model, batch):
        return model(batch[0])

    bad = Learner(model, opt, train_step=no_step_output, display="none")
    with pytest.raises(TypeError, match="StepOutput"):
        bad.fit(loaders()[0], epochs=1)


def test_loaders_without_a_length_flush_the_last_window():
    """A re-iterable without len(): windows are cut at `grad_accumulation`, and a short last window still
    makes a step (progress shows no total)."""
    from .problem import dataset

    data = dataset(40)
    batches = [(np.stack([data[i][0] for i in range(s, s + 8)]), np.array([data[i][1] for i in range(s, s + 8)]))
               for s in range(0, 40, 8)]

    class Batches:
        def __iter__(self):
            return iter(batches)

    ember.seed(0)
    model = MLP()
    lrn = Learner(model, SGD(model, lr=0.1), loss=cross_entropy, device="numpy", display="none",
                  grad_accumulation=2)
    result = lrn.fit(Batches(), epochs=2)
    assert result.steps == 6  # 5 batches per epoch: windows of 2, 2 and 1
    assert result.final["train/loss"] is not None


def test_step_results_are_read_on_the_host_after_the_optimizer_step(monkeypatch):
    import ember.train.learner as learner_module

    events = []
    observe = learner_module.observe

    def spy(out, *args):
        events.append(("observe", out.loss.requires_grad, out.outputs.requires_grad))
        return observe(out, *args)

    monkeypatch.setattr(learner_module, "observe", spy)
    train, _ = loaders()
    lrn = learner(metrics=[Accuracy()])
    step = lrn.optimizer.step
    monkeypatch.setattr(lrn.optimizer, "step", lambda grads: events.append("step") or step(grads))
    lrn.fit(train, epochs=1)
    # A read before backward would cut a lazy device's recorded stream; detached outputs hold no graph.
    assert events == ["step", ("observe", False, False)] * 6
    lrn._train_fn = lambda model, batch: (1.0, None)
    with pytest.raises(TypeError, match=r"must return StepOutput\(loss, outputs, targets\), got tuple"):
        lrn.fit(train, epochs=1)
