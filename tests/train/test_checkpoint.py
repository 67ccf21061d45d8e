"""Checkpoint folders: atomic writes, keep-last-N, keep-best, the state tree round trip, finding the newest."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import ember
from ember.train import Accuracy, Checkpointer, find_checkpoint, load_checkpoint
from ember.train.checkpoint import checkpoint_name, flatten_tree, unflatten_tree

from kill_points import run_killed_at

from .problem import learner, loaders


def _save(ckpt, epoch, step, best=None):
    return ckpt.save(checkpoint_name(epoch, step), {"w": np.full(3, step, np.float32)}, {"step": step}, best)


def test_keep_last_and_best(tmp_path):
    ckpt = Checkpointer(tmp_path, keep_last=2)
    _save(ckpt, 1, 10, best={"metric": "valid/loss", "value": 0.5, "epoch": 1})
    for epoch in (2, 3, 4):
        _save(ckpt, epoch, epoch * 10)
    assert [p.name for p in ckpt.checkpoints()] == [checkpoint_name(1, 10), checkpoint_name(3, 30),
                                                    checkpoint_name(4, 40)]
    assert ckpt.best()["checkpoint"] == checkpoint_name(1, 10)
    _save(ckpt, 5, 50, best={"metric": "valid/loss", "value": 0.1, "epoch": 5})
    assert [p.name for p in ckpt.checkpoints()] == [checkpoint_name(4, 40), checkpoint_name(5, 50)]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_order_is_by_step_then_epoch(tmp_path):
    ckpt = Checkpointer(tmp_path, keep_last=5)
    _save(ckpt, 2, 12)      # end of epoch 2 (after validation)
    _save(ckpt, 1, 12)      # stopped after the last step of epoch 2, before validation: older
    _save(ckpt, 0, 3)
    assert ckpt.latest().name == checkpoint_name(2, 12)
    assert find_checkpoint(tmp_path) == ckpt.latest()


def test_saving_a_name_again_replaces_it(tmp_path):
    ckpt = Checkpointer(tmp_path)
    path = _save(ckpt, 1, 5)
    ckpt.save(path.name, {"w": np.zeros(2, np.float32)}, {"step": 99})
    state, training = load_checkpoint(path)
    assert training == {"step": 99} and state["w"].shape == (2,)


def test_a_failed_save_leaves_no_partial_folder(tmp_path):
    ckpt = Checkpointer(tmp_path)
    with pytest.raises(TypeError, match="cannot store"):
        ckpt.save(checkpoint_name(1, 1), {"w": np.zeros(2, np.float32)}, {"bad": object()})
    assert list(tmp_path.iterdir()) == []


def test_tree_round_trip_is_exact():
    tree = {"m": np.random.default_rng(0).normal(size=(3, 2)).astype(np.float32), "step": np.int64(4),
            "lr": 1e-3 / 3, "nested": [{"x": np.arange(3)}, (1, 2)], "t": ember.tensor([1.5, 2.5]),
            "none": None, "flag": True}
    flat, arrays = flatten_tree(tree)
    back = unflatten_tree(json.loads(json.dumps(flat)), arrays)
    np.testing.assert_array_equal(back["m"], tree["m"])
    assert back["m"].dtype == np.float32 and back["step"] == 4 and back["lr"] == tree["lr"]
    assert back["nested"][1] == [1, 2] and back["t"].tolist() == [1.5, 2.5]
    assert back["none"] is None and back["flag"] is True


def test_bad_names_and_settings():
    with pytest.raises(ValueError, match="keep_last"):
        Checkpointer("x", keep_last=0)
    with pytest.raises(ValueError, match="must look like"):
        Checkpointer("x").save("latest", {}, {})
    with pytest.raises(TypeError, match="keys must be str"):
        flatten_tree({1: 2})


def test_load_checkpoint_names_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="model.ember is missing"):
        load_checkpoint(tmp_path)


def test_learner_keeps_last_and_best(tmp_path):
    train, valid = loaders()
    lrn = learner(tmp_path, keep_last=1, best_metric="valid/accuracy", metrics=[Accuracy()])
    result = lrn.fit(train, valid, epochs=4)
    folder = tmp_path / "checkpoints"
    best = json.loads((folder / "best.json").read_text())
    assert best["metric"] == "valid/accuracy" and best["epoch"] == result.best["epoch"]
    names = sorted(p.name for p in folder.iterdir() if p.is_dir())
    expected = {checkpoint_name(4, 24), best["checkpoint"]}
    assert set(names) == expected
    # The model file stands alone: it loads into a fresh model with Module.load_state_dict.
    state, _ = ember.store.load(folder / best["checkpoint"] / "model.ember")
    assert lrn.model.load_state_dict(state).ok


def _state(rng, step):
    return ({"w": rng.standard_normal((3, 5)).astype(np.float32), "b": np.full(2, step, np.int64)},
            {"step": step, "adam": {"m": rng.standard_normal(4), "t": step}, "history": [0.5, 0.25]})


@pytest.mark.skipif(sys.platform == "win32", reason="kills a forked child")
@pytest.mark.parametrize("exchange", [True, False], ids=["swap", "rename-aside"])
def test_resaving_a_name_killed_at_any_rename_leaves_a_complete_checkpoint(tmp_path, exchange):
    """Saving a checkpoint name again (a Ctrl-C at a checkpoint_every step), SIGKILLed at each rename
    event in turn: the newest checkpoint is always the old or the new one, complete; with the folder
    swap its name never goes missing, even before tidying."""
    rng = np.random.default_rng(0)
    name, old, new = checkpoint_name(1, 7), _state(rng, 7), _state(rng, 8)
    seen, gaps = set(), 0
    for n in range(1, 40):
        folder = tmp_path / str(n)
        ckpt = Checkpointer(folder, keep_last=1)
        ckpt.save(checkpoint_name(0, 3), *_state(rng, 3), best={"metric": "valid/loss", "value": 0.9})
        ckpt.save(name, *old)
        killed = run_killed_at(n, lambda: ckpt.save(name, *new, best={"metric": "valid/loss", "value": 0.5}),
                               exchange)
        gaps += not (folder / name).exists()
        state, training = load_checkpoint(find_checkpoint(folder))
        which = [label for label, (s, t) in (("old", old), ("new", new))
                 if all(np.array_equal(state[k], s[k]) for k in s) and state.keys() == s.keys()
                 and training["step"] == t["step"] and np.array_equal(training["adam"]["m"], t["adam"]["m"])]
        assert len(which) == 1, f"killed at rename event {n}: the checkpoint is neither the old nor the new one"
        seen.add(which[0])
        assert (folder / ckpt.best()["checkpoint"] / "training.ember").is_file()
        assert [p.name for p in folder.rglob(".*")] == [], f"killed at rename event {n}: leftovers"
        ckpt.save(checkpoint_name(2, 9), *_state(rng, 9))
        assert [p.name for p in folder.rglob(".*")] == []
        if not killed:
            break
    assert seen == {"old", "new"} and n > 4, (n, seen)
    assert (gaps == 0) if exchange else (gaps > 0), f"{gaps} kill points left no folder named {name}"
