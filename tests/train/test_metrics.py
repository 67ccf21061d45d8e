"""Metrics against scikit-learn on random data (scikit-learn is a test-only dependency) and against
hand-derived values; epoch values from many batches equal the value over all items at once."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.train import (
    AUROC, Accuracy, CpuUsage, DeviceMemory, FBeta, ItemsPerSecond, LearningRate, Loss, MemoryUsage,
    MetricTracker, Observation, Perplexity, Precision, Recall, TopKAccuracy,
)
from ember.train.metrics import average_ranks

sklearn_metrics = pytest.importorskip("sklearn.metrics")


def _batches(outputs, targets, size=37):
    return [Observation(0.0, outputs[i:i + size], targets[i:i + size], len(targets[i:i + size]))
            for i in range(0, len(targets), size)]


def _epoch(metric, outputs, targets):
    tracker = MetricTracker([metric], window=3)
    for obs in _batches(outputs, targets):
        tracker.update(obs)
    return tracker.epoch()[metric.name]


def _multiclass(seed, n=300, classes=5):
    rng = np.random.default_rng(seed)
    targets = rng.integers(0, classes, n)
    logits = rng.normal(size=(n, classes)) + 1.5 * np.eye(classes)[targets]  # better than chance
    return logits.astype(np.float32), targets


@pytest.mark.parametrize("seed", range(3))
def test_accuracy_and_top_k(seed):
    logits, targets = _multiclass(seed)
    assert _epoch(Accuracy(), logits, targets) == pytest.approx(
        sklearn_metrics.accuracy_score(targets, logits.argmax(1)), abs=1e-12)
    for k in (1, 2, 3):
        assert _epoch(TopKAccuracy(k), logits, targets) == pytest.approx(
            sklearn_metrics.top_k_accuracy_score(targets, logits, k=k, labels=range(5)), abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("average", ["macro", "micro"])
def test_precision_recall_fbeta_multiclass(seed, average):
    logits, targets = _multiclass(seed, classes=6)
    logits[:, 5] -= 10  # class 5 is never predicted: its precision is 0 by convention
    pred = logits.argmax(1)
    sk = dict(average=average, zero_division=0)
    assert _epoch(Precision(average=average), logits, targets) == pytest.approx(
        sklearn_metrics.precision_score(targets, pred, **sk), abs=1e-12)
    assert _epoch(Recall(average=average), logits, targets) == pytest.approx(
        sklearn_metrics.recall_score(targets, pred, **sk), abs=1e-12)
    for beta in (0.5, 1.0, 2.0):
        assert _epoch(FBeta(beta, average=average), logits, targets) == pytest.approx(
            sklearn_metrics.fbeta_score(targets, pred, beta=beta, **sk), abs=1e-12)


def test_macro_averages_over_classes_seen_like_sklearn():
    # Class 2 of 4 occurs in neither targets nor predictions; scikit-learn leaves it out of the mean.
    logits = np.eye(4)[[0, 1, 3, 3, 0]].astype(np.float32)
    targets = np.array([0, 1, 3, 0, 1])
    pred = logits.argmax(1)
    assert _epoch(Recall(), logits, targets) == pytest.approx(
        sklearn_metrics.recall_score(targets, pred, average="macro", zero_division=0))


@pytest.mark.parametrize("seed", range(3))
def test_binary_metrics_from_logits_and_probabilities(seed):
    rng = np.random.default_rng(seed)
    targets = rng.integers(0, 2, 200)
    logits = (rng.normal(size=200) + 1.2 * (targets - 0.5)).astype(np.float32)
    pred = (logits > 0).astype(int)
    probs = 1 / (1 + np.exp(-logits))
    for metric, sk in ((Precision(average="binary"), sklearn_metrics.precision_score),
                       (Recall(average="binary"), sklearn_metrics.recall_score),
                       (FBeta(2.0, average="binary"), lambda t, p: sklearn_metrics.fbeta_score(t, p, beta=2.0))):
        assert _epoch(metric, logits, targets) == pytest.approx(sk(targets, pred), abs=1e-12)
    assert _epoch(Accuracy(logits=False, threshold=0.5), probs, targets) == pytest.approx(
        sklearn_metrics.accuracy_score(targets, probs > 0.5))
    assert _epoch(AUROC(), logits, targets) == pytest.approx(sklearn_metrics.roc_auc_score(targets, logits), abs=1e-12)


def test_auroc_with_ties_and_two_column_scores():
    rng = np.random.default_rng(7)
    targets = rng.integers(0, 2, 120)
    scores = rng.integers(0, 4, 120).astype(np.float32)  # many ties
    assert _epoch(AUROC(), scores, targets) == pytest.approx(sklearn_metrics.roc_auc_score(targets, scores))
    two = np.stack([np.zeros(120, np.float32), scores], axis=1)
    assert _epoch(AUROC(), two, targets) == pytest.approx(sklearn_metrics.roc_auc_score(targets, scores))


@pytest.mark.parametrize("seed", range(3))
def test_auroc_one_vs_rest_macro(seed):
    logits, targets = _multiclass(seed, classes=4)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    expected = sklearn_metrics.roc_auc_score(targets, probs, multi_class="ovr", average="macro")
    assert _epoch(AUROC(), logits, targets) == pytest.approx(expected, abs=1e-9)
    assert _epoch(AUROC(logits=False), probs, targets) == pytest.approx(expected, abs=1e-9)


def test_auroc_undefined_with_one_class():
    metric = AUROC()
    assert metric.compute(metric.observe(Observation(0.0, np.array([0.2, 0.9]), np.array([1, 1])))) is None


def test_average_ranks():
    np.testing.assert_array_equal(average_ranks(np.array([10.0, 30.0, 20.0, 30.0, 10.0])),
                                  [1.5, 4.5, 3.0, 4.5, 1.5])


def test_loss_and_perplexity_weigh_by_items():
    loss = Loss()
    state = loss.merge(loss.observe(Observation(1.0, items=3)), loss.observe(Observation(3.0, items=1)))
    assert loss.compute(state) == pytest.approx((1.0 * 3 + 3.0) / 4)
    ppl = Perplexity()
    a = ppl.observe(Observation(np.log(2.0), targets=np.zeros((2, 3))))  # 6 tokens
    b = ppl.observe(Observation(np.log(8.0), targets=np.zeros((1, 2))))  # 2 tokens
    assert ppl.compute(ppl.merge(a, b)) == pytest.approx(np.exp((6 * np.log(2.0) + 2 * np.log(8.0)) / 8))


def test_classification_over_extra_dims():
    # (N, C, T) scores with (N, T) targets, the cross_entropy layout for sequences.
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 3, 5))
    targets = rng.integers(0, 3, (4, 5))
    assert _epoch(Accuracy(), logits, targets) == pytest.approx((logits.argmax(1) == targets).mean())


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="targets must lie in"):
        Accuracy().observe(Observation(0.0, np.zeros((2, 3)), np.array([0, 3])))
    with pytest.raises(ValueError, match="do not fit"):
        Accuracy().observe(Observation(0.0, np.zeros((2, 3)), np.array([0, 1, 2])))
    with pytest.raises(ValueError, match="no outputs or targets"):
        Accuracy().observe(Observation(0.0))
    with pytest.raises(ValueError, match="two classes"):
        Precision(average="binary").observe(Observation(0.0, np.zeros((2, 3)), np.array([0, 1])))
    with pytest.raises(ValueError, match="average"):
        Recall(average="weighted")
    with pytest.raises(ValueError, match="k must be"):
        TopKAccuracy(0)


def test_running_value_covers_the_last_window():
    tracker = MetricTracker([Accuracy()], window=2)
    for correct in (1, 0, 0):
        tracker.update(Observation(0.0, np.array([[0.0, 1.0]]), np.array([1 if correct else 0])))
    assert tracker.running()["accuracy"] == 0.0
    assert tracker.epoch()["accuracy"] == pytest.approx(1 / 3)


def test_formatted_running_is_computed_on_first_read_only():
    tracker = MetricTracker([Accuracy(), Loss()], window=2)
    calls = []
    running = tracker.running
    tracker.running = lambda: calls.append(1) or running()  # type: ignore[method-assign]
    tracker.update(Observation(0.25, np.array([[0.0, 1.0]]), np.array([1])))
    unread = tracker.formatted_running()
    shown = tracker.formatted_running()
    assert calls == []
    assert dict(shown) == tracker.format(running()) == {"accuracy": "1.0000", "loss": "0.2500"}
    tracker.update(Observation(0.75, np.array([[0.0, 1.0]]), np.array([0])))
    assert shown["loss"] == "0.2500" and len(calls) == 1  # kept from its first read
    assert dict(unread) == {"accuracy": "0.5000", "loss": "0.5000"}  # read later: the values then


def test_tracker_rejects_duplicate_names():
    with pytest.raises(ValueError, match="unique"):
        MetricTracker([Loss(), Loss()])


def test_monitors():
    obs = Observation(0.0, items=50, seconds=0.5, cpu_seconds=0.25, lr=0.01, device=ember.Device.numpy())
    ips, cpu, lr = ItemsPerSecond(), CpuUsage(), LearningRate()
    assert ips.compute(ips.merge(ips.observe(obs), ips.observe(obs))) == pytest.approx(100.0)
    assert cpu.compute(cpu.observe(obs)) == pytest.approx(50.0)
    assert lr.compute(lr.merge(lr.observe(obs), lr.observe(Observation(0.0, lr=0.5)))) == 0.5
    memory = MemoryUsage()
    assert memory.compute(memory.observe(obs)) > 1.0  # MiB of a running Python process
    assert memory.compute(memory.merge(np.array([3.0]), np.array([2.0]))) == 3.0  # epoch value: the peak
    device_memory = DeviceMemory()
    assert device_memory.compute(device_memory.observe(obs)) is None
    assert device_memory.format(None) == "n/a"


def test_device_memory_reads_a_pool_backend():
    from types import SimpleNamespace

    from ember.cube.runtime.memory_pool import MemoryStats
    stats = MemoryStats(reserved=8 << 20, in_use=3 << 20, peak_reserved=8 << 20, peak_in_use=4 << 20,
                        pages=1, slices=2)
    device = SimpleNamespace(backend=SimpleNamespace(memory_stats=lambda: stats))
    metric = DeviceMemory()
    assert metric.compute(metric.observe(Observation(0.0, device=device))) == 3.0
