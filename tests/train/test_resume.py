"""Resume: an interrupted run continued from its checkpoint ends with the same weights, bit for bit, as a
run that was never stopped (NumPy device, same seeds), whether stopped mid-epoch, at an epoch's last
step, mid-way through a gradient-accumulation window, or by a real SIGINT."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest

from ember.train import Accuracy, AUROC, Callback, find_checkpoint

from .problem import learner, loaders, noisy_step, weights


class InterruptAt(Callback):
    """Raise KeyboardInterrupt (as Ctrl-C outside the handler would) after optimizer step `step`."""

    def __init__(self, step: int, how: str = "raise") -> None:
        self.step, self.how = step, how

    def on_step_end(self, learner) -> None:
        if learner.step == self.step:
            if self.how == "raise":
                raise KeyboardInterrupt
            if self.how == "signal":
                os.kill(os.getpid(), signal.SIGINT)
            else:
                learner.request_stop()


def _run(tmp_path, name, epochs=3, callbacks=(), resume=False, **kwargs):
    run_dir = tmp_path / name
    train, valid = loaders()
    lrn = learner(run_dir, train_step=noisy_step, metrics=[Accuracy(), AUROC()], callbacks=callbacks, **kwargs)
    result = lrn.fit(train, valid, epochs=epochs, resume=run_dir if resume else None)
    return lrn, result


def _assert_same(a, b):
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)


@pytest.mark.parametrize("how", ["raise", "request", "signal"])
def test_resume_mid_epoch_is_bit_exact(tmp_path, how):
    full, full_result = _run(tmp_path, "full")
    # 6 batches per epoch: step 8 is mid-way through epoch 2.
    stopped, result = _run(tmp_path, "resumed", callbacks=[InterruptAt(8, how)])
    assert result.interrupted and result.steps == 8 and result.epochs_completed == 1
    assert find_checkpoint(tmp_path / "resumed").name == "epoch0001-step00000008"
    resumed, resumed_result = _run(tmp_path, "resumed", resume=True)
    assert not resumed_result.interrupted and resumed_result.steps == full_result.steps == 18
    _assert_same(full, resumed)
    # The metric states were saved too: the resumed run's epoch values match the uninterrupted run's.
    assert resumed_result.final == pytest.approx(full_result.final, rel=1e-12)
    assert resumed_result.best == full_result.best


def test_resume_mid_epoch_is_bit_exact_on_every_device(tmp_path, device):
    # 67 hidden units: weights of 268 and 201 elements, past one 256-unit cube and no multiple of it, so a
    # fused device's optimizer writes over its states with a launch that has a partial last cube.
    options = dict(device=device, hidden=67)
    full, _ = _run(tmp_path, "full", **options)
    _, result = _run(tmp_path, "resumed", callbacks=[InterruptAt(8)], **options)
    assert result.interrupted and result.steps == 8
    resumed, _ = _run(tmp_path, "resumed", resume=True, **options)
    _assert_same(full, resumed)


def test_resume_after_last_step_of_an_epoch(tmp_path):
    full, _ = _run(tmp_path, "full", epochs=2)
    _run(tmp_path, "resumed", epochs=2, callbacks=[InterruptAt(6, "request")])  # before validation of epoch 1
    resumed, result = _run(tmp_path, "resumed", epochs=2, resume=True)
    _assert_same(full, resumed)
    records = [json.loads(line) for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["epoch"], r["split"]) for r in records] == [(1, "train"), (1, "valid"), (2, "train"), (2, "valid")]


def test_resume_inside_an_accumulation_window(tmp_path):
    """Interrupting between the micro-batches of one step resumes from the last whole step."""
    full, _ = _run(tmp_path, "full", epochs=2, grad_accumulation=4)

    calls = {"n": 0}

    def step_then_stop(model, batch):
        calls["n"] += 1
        if calls["n"] == 6:  # the 2nd micro-batch of the 2nd step
            raise KeyboardInterrupt
        return noisy_step(model, batch)

    run_dir = tmp_path / "resumed"
    train, valid = loaders()
    first = learner(run_dir, train_step=step_then_stop, metrics=[Accuracy(), AUROC()], grad_accumulation=4)
    result = first.fit(train, valid, epochs=2)
    assert result.interrupted and result.steps == 1
    train, valid = loaders()
    second = learner(run_dir, train_step=noisy_step, metrics=[Accuracy(), AUROC()], grad_accumulation=4)
    second.fit(train, valid, epochs=2, resume=run_dir)
    _assert_same(full, second)


def test_resume_from_an_epoch_checkpoint_continues_to_more_epochs(tmp_path):
    full, _ = _run(tmp_path, "full", epochs=3)
    _run(tmp_path, "resumed", epochs=1)
    resumed, result = _run(tmp_path, "resumed", epochs=3, resume=True)
    assert result.epochs_completed == 3
    _assert_same(full, resumed)


def test_resume_refuses_a_loader_with_another_seed(tmp_path):
    _run(tmp_path, "run", epochs=1)
    from ember.data import DataLoader
    from .problem import dataset
    lrn = learner(tmp_path / "run", train_step=noisy_step, metrics=[Accuracy(), AUROC()])
    with pytest.raises(ValueError, match="seed"):
        lrn.fit(DataLoader(dataset(), 16, shuffle=True, seed=99), epochs=2, resume=tmp_path / "run")


def test_resume_without_a_checkpoint_raises(tmp_path):
    train, _ = loaders()
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        learner(tmp_path / "empty").fit(train, epochs=1, resume=tmp_path / "empty")
