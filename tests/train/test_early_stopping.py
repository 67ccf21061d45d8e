"""Early stopping: patience, warm-up, min_delta, direction, and inside a Learner run."""

from __future__ import annotations

import pytest

from ember.train import Callback, EarlyStopping

from .problem import learner, loaders


def _run(stop, values):
    return [stop.update(epoch, v) for epoch, v in enumerate(values, start=1)]


def test_patience_counts_epochs_without_improvement():
    stop = EarlyStopping("valid/loss", patience=2, higher_is_better=False)
    assert _run(stop, [3.0, 2.0, 2.5, 1.0, 1.5, 1.2]) == [False, False, False, False, False, True]
    assert stop.best == 1.0 and stop.best_epoch == 4


def test_warmup_epochs_are_ignored():
    # Without warm-up, epoch 1's lucky 0.1 would stop the run at epoch 3.
    stop = EarlyStopping("valid/loss", patience=2, warmup=2, higher_is_better=False)
    assert _run(stop, [0.1, 5.0, 4.0, 3.0, 3.5, 3.9]) == [False] * 5 + [True]
    assert stop.best_epoch == 4


def test_min_delta_and_higher_is_better():
    stop = EarlyStopping("valid/accuracy", patience=2, min_delta=0.01, higher_is_better=True)
    assert _run(stop, [0.80, 0.805, 0.809, 0.85]) == [False, False, True, False]


def test_state_round_trip_and_errors():
    stop = EarlyStopping("valid/loss", patience=3, higher_is_better=False)
    _run(stop, [1.0, 2.0])
    other = EarlyStopping("valid/loss", patience=3, higher_is_better=False)
    other.load_state_dict(stop.state_dict())
    assert other.update(3, 3.0) is False and other.update(4, 3.0) is True
    with pytest.raises(ValueError, match="split/name"):
        EarlyStopping("loss")
    with pytest.raises(ValueError, match="patience"):
        EarlyStopping("valid/loss", patience=0)
    with pytest.raises(ValueError, match="higher_is_better is not set"):
        EarlyStopping("valid/loss").update(1, 1.0)


def test_learner_stops_early_with_direction_from_the_metric():
    seen = []

    class Record(Callback):
        def on_epoch_end(self, learner, values):
            seen.append(values["valid"]["loss"])

    train, valid = loaders()
    # min_delta larger than any change: no epoch after the warm-up counts as an improvement.
    stop = EarlyStopping("valid/loss", patience=2, warmup=1, min_delta=100.0)
    result = learner(early_stopping=stop, callbacks=[Record()]).fit(train, valid, epochs=10)
    assert stop.higher_is_better is False
    assert result.stopped_early and result.epochs_completed == 4 == len(seen)


def test_learner_rejects_unknown_or_directionless_metrics():
    train, valid = loaders()
    with pytest.raises(ValueError, match="no metric 'accuracy'"):
        learner(early_stopping=EarlyStopping("valid/accuracy")).fit(train, valid, epochs=1)
    with pytest.raises(ValueError, match="no valid_loader"):
        learner(early_stopping=EarlyStopping("valid/loss")).fit(train, None, epochs=1)
