"""Metrics of training and evaluation: loss, accuracy, top-k accuracy, precision, recall, F-beta, AUROC,
perplexity. System monitors (learning rate, throughput, CPU and memory) are in `ember.train.monitors`.

A metric turns one batch, seen on the host as an `Observation`, into a *state* (`observe`), combines
states (`merge`) and turns a state into a number (`compute`). Most states are additive NumPy arrays of
sufficient statistics (correct and total, per-class true/false positives ...), so an epoch value is
exact, not an average of batch values. The `MetricTracker` (`ember.train.tracker`) keeps two merged
states per metric: the whole epoch so far (the *epoch* value) and the last few batches (the *running*
value shown while training).

Classification outputs are scores of shape (N, C), or (N, C, *extra) with targets (N, *extra) as for
`cross_entropy`; the predicted class is the argmax. Binary outputs of shape (N,) or (N, 1) are logits
(`logits=True`, positive when > 0) or probabilities (`logits=False`, positive when > `threshold`).

Example:
    >>> acc = Accuracy()
    >>> s = acc.observe(Observation(loss=0.3, outputs=np.array([[2.0, 1.0], [0.0, 3.0]]), targets=np.array([0, 0])))
    >>> acc.compute(s)
    0.5
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Observation:
    """One batch as metrics see it, on the host.

    Args:
        loss: the batch's loss (a mean over its items, as losses reduce by default).
        outputs: the model outputs (None when the step returned none).
        targets: the targets (None when the step returned none).
        items: the number of items in the batch.
        seconds: wall time of the batch, loading included.
        cpu_seconds: CPU time this process used during the batch.
        lr: the learning rate of the step (None in evaluation).
        device: the device the batch ran on.
    """

    loss: float
    outputs: np.ndarray | None = None
    targets: np.ndarray | None = None
    items: int = 1
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    lr: float | None = None
    device: Any = None


class Metric:
    """Base of metrics: `observe(obs) -> state`, `merge(a, b) -> state`, `compute(state) -> float | None`.

    Attributes:
        name: the key in logs and files (e.g. "accuracy"); unique within a learner.
        higher_is_better: True or False for metrics that can pick a best epoch, None for monitors.
        splits: the splits ("train", "valid") the metric is recorded on.

    Example:
        >>> class MeanTarget(Metric):
        ...     name = "mean_target"
        ...     def observe(self, obs): return np.array([obs.targets.sum(), obs.targets.size], float)
        ...     def compute(self, state): return state[0] / state[1]
    """

    name: str = "metric"
    higher_is_better: bool | None = True
    splits: tuple[str, ...] = ("train", "valid")

    def observe(self, obs: Observation) -> Any:
        """The state of one batch."""
        raise NotImplementedError(f"{type(self).__name__} defines no observe()")

    def merge(self, a: Any, b: Any) -> Any:
        """Two states combined; the default adds arrays of sufficient statistics."""
        if a is None:
            return b
        if b is None:
            return a
        return a + b

    def compute(self, state: Any) -> float | None:
        """The value of a state (None when it is undefined, e.g. no items yet)."""
        raise NotImplementedError(f"{type(self).__name__} defines no compute()")

    def format(self, value: float | None) -> str:
        """The value as shown in the dashboard and the log."""
        return "n/a" if value is None else f"{value:.4f}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def _ratio(num: float, den: float) -> float | None:
    return float(num / den) if den else None


def _need(obs: Observation, metric: Metric) -> tuple[np.ndarray, np.ndarray]:
    if obs.outputs is None or obs.targets is None:
        raise ValueError(f"{metric.name}: the step returned no outputs or targets; return "
                         f"StepOutput(loss, outputs, targets) from train_step/valid_step")
    return np.asarray(obs.outputs), np.asarray(obs.targets)


def class_scores(outputs: np.ndarray, targets: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(scores of shape (M, C), integer targets of shape (M,)): class dim 1 moved last and flattened.

    Example:
        >>> class_scores(np.zeros((2, 3)), np.array([0, 2]), "accuracy")[0].shape
        (2, 3)
    """
    if outputs.ndim < 2:
        raise ValueError(f"{name}: expected scores of shape (N, C), got {outputs.shape}")
    if targets.shape != outputs.shape[:1] + outputs.shape[2:]:
        raise ValueError(f"{name}: targets of shape {targets.shape} do not fit outputs of shape "
                         f"{outputs.shape} (expected {outputs.shape[:1] + outputs.shape[2:]})")
    classes = outputs.shape[1]
    scores = np.moveaxis(outputs, 1, -1).reshape(-1, classes)
    labels = targets.reshape(-1).astype(np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise ValueError(f"{name}: targets must lie in [0, {classes}), got values in "
                         f"[{labels.min()}, {labels.max()}]")
    return scores, labels


def predictions(outputs: np.ndarray, targets: np.ndarray, name: str, logits: bool = True,
                threshold: float = 0.5) -> tuple[np.ndarray, np.ndarray, int]:
    """(predicted classes, target classes, number of classes) of a batch, binary or multi-class.

    Example:
        >>> predictions(np.array([1.5, -2.0]), np.array([1, 1]), "recall")
        (array([1, 0]), array([1, 1]), 2)
    """
    if outputs.ndim == 1 or (outputs.ndim == 2 and outputs.shape[1] == 1 and targets.ndim == 1):
        scores = outputs.reshape(-1)
        labels = targets.reshape(-1).astype(np.int64)
        if scores.shape != labels.shape:
            raise ValueError(f"{name}: binary outputs of shape {outputs.shape} but targets of shape {targets.shape}")
        if labels.size and not np.isin(labels, (0, 1)).all():
            raise ValueError(f"{name}: binary targets must be 0 or 1")
        cut = 0.0 if logits else threshold
        return (scores > cut).astype(np.int64), labels, 2
    scores, labels = class_scores(outputs, targets, name)
    return scores.argmax(axis=1), labels, scores.shape[1]


class Loss(Metric):
    """The mean loss over the items seen: `sum_b loss_b * n_b / sum_b n_b`.

    Example:
        >>> Loss().compute(Loss().observe(Observation(loss=0.5, items=4)))
        0.5
    """

    name = "loss"
    higher_is_better = False

    def observe(self, obs: Observation) -> np.ndarray:
        return np.array([obs.loss * obs.items, obs.items], dtype=np.float64)

    def compute(self, state: np.ndarray) -> float | None:
        return _ratio(state[0], state[1])


class Perplexity(Metric):
    """`exp(mean loss)` per target element, for a loss that is a mean negative log-likelihood (nats).

    Each batch weighs by its number of target elements (tokens), so the value is exp of the mean NLL
    over every token seen.

    Example:
        >>> p = Perplexity()
        >>> round(p.compute(p.observe(Observation(loss=np.log(4.0), targets=np.zeros((2, 5))))), 6)
        4.0
    """

    name = "perplexity"
    higher_is_better = False

    def observe(self, obs: Observation) -> np.ndarray:
        count = np.asarray(obs.targets).size if obs.targets is not None else obs.items
        return np.array([obs.loss * count, count], dtype=np.float64)

    def compute(self, state: np.ndarray) -> float | None:
        mean = _ratio(state[0], state[1])
        return None if mean is None else float(np.exp(mean))


class Accuracy(Metric):
    """The fraction of items whose predicted class is the target (see the module docs for binary outputs).

    Example:
        >>> a = Accuracy()
        >>> a.compute(a.observe(Observation(0.0, np.array([[0.1, 0.9]]), np.array([1]))))
        1.0
    """

    name = "accuracy"

    def __init__(self, logits: bool = True, threshold: float = 0.5) -> None:
        self.logits, self.threshold = logits, threshold

    def observe(self, obs: Observation) -> np.ndarray:
        pred, labels, _ = predictions(*_need(obs, self), self.name, self.logits, self.threshold)
        return np.array([(pred == labels).sum(), labels.size], dtype=np.float64)

    def compute(self, state: np.ndarray) -> float | None:
        return _ratio(state[0], state[1])


class TopKAccuracy(Metric):
    """The fraction of items whose target is among the `k` highest scores (scikit-learn's
    `top_k_accuracy_score`).

    Example:
        >>> m = TopKAccuracy(2)
        >>> m.compute(m.observe(Observation(0.0, np.array([[0.5, 0.3, 0.2]]), np.array([1]))))
        1.0
    """

    def __init__(self, k: int = 5) -> None:
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"TopKAccuracy: k must be a positive int, got {k!r}")
        self.k = k
        self.name = f"top{k}_accuracy"

    def observe(self, obs: Observation) -> np.ndarray:
        scores, labels = class_scores(*_need(obs, self), self.name)
        k = min(self.k, scores.shape[1])
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        hits = (top == labels[:, None]).any(axis=1)
        return np.array([hits.sum(), labels.size], dtype=np.float64)

    def compute(self, state: np.ndarray) -> float | None:
        return _ratio(state[0], state[1])


_AVERAGES = ("macro", "micro", "binary")


class _ClassCounts(Metric):
    """Per-class true positives, false positives and false negatives: a (3, C) additive state."""

    def __init__(self, average: str = "macro", pos_label: int = 1, logits: bool = True,
                 threshold: float = 0.5) -> None:
        if average not in _AVERAGES:
            raise ValueError(f"{type(self).__name__}: average must be one of {_AVERAGES}, got {average!r}")
        self.average, self.pos_label = average, pos_label
        self.logits, self.threshold = logits, threshold

    def observe(self, obs: Observation) -> np.ndarray:
        pred, labels, classes = predictions(*_need(obs, self), self.name, self.logits, self.threshold)
        if self.average == "binary" and classes != 2:
            raise ValueError(f"{self.name}: average='binary' needs two classes, the outputs have {classes}")
        tp = np.bincount(labels[pred == labels], minlength=classes)
        fp = np.bincount(pred[pred != labels], minlength=classes)
        fn = np.bincount(labels[pred != labels], minlength=classes)
        return np.stack([tp, fp, fn]).astype(np.float64)

    def compute(self, state: np.ndarray) -> float | None:
        tp, fp, fn = state
        if self.average == "binary":
            return self.score(tp[self.pos_label], fp[self.pos_label], fn[self.pos_label])
        if self.average == "micro":
            return self.score(tp.sum(), fp.sum(), fn.sum())
        # Macro over the classes that occur in the targets or the predictions, as scikit-learn does.
        seen = (tp + fp + fn) > 0
        if not seen.any():
            return None
        return float(np.mean([self.score(*c) for c in zip(tp[seen], fp[seen], fn[seen])]))

    def score(self, tp: float, fp: float, fn: float) -> float:
        raise NotImplementedError


class Precision(_ClassCounts):
    """`tp / (tp + fp)` per class (0 where nothing was predicted), averaged `macro` (mean over classes
    seen in targets or predictions), `micro` (from total counts) or `binary` (class `pos_label`).

    Example:
        >>> p = Precision(average="binary")
        >>> p.compute(p.observe(Observation(0.0, np.array([2.0, 1.0, -1.0]), np.array([1, 0, 1]))))
        0.5
    """

    name = "precision"

    def score(self, tp: float, fp: float, fn: float) -> float:
        return float(tp / (tp + fp)) if tp + fp else 0.0


class Recall(_ClassCounts):
    """`tp / (tp + fn)` per class (0 where the class never occurs), averaged as `Precision`.

    Example:
        >>> r = Recall(average="binary")
        >>> r.compute(r.observe(Observation(0.0, np.array([2.0, 1.0, -1.0]), np.array([1, 0, 1]))))
        0.5
    """

    name = "recall"

    def score(self, tp: float, fp: float, fn: float) -> float:
        return float(tp / (tp + fn)) if tp + fn else 0.0


class FBeta(_ClassCounts):
    """`(1 + b^2) tp / ((1 + b^2) tp + b^2 fn + fp)` per class, the weighted harmonic mean of precision
    and recall (0 where undefined), averaged as `Precision`. `beta=1` is F1.

    Example:
        >>> f = FBeta(beta=1.0, average="binary")
        >>> f.compute(f.observe(Observation(0.0, np.array([2.0, 1.0, -1.0]), np.array([1, 0, 1]))))
        0.5
    """

    def __init__(self, beta: float = 1.0, average: str = "macro", pos_label: int = 1, logits: bool = True,
                 threshold: float = 0.5) -> None:
        if not beta > 0:
            raise ValueError(f"FBeta: beta must be > 0, got {beta!r}")
        super().__init__(average, pos_label, logits, threshold)
        self.beta = float(beta)
        self.name = "f1" if beta == 1 else f"f{beta:g}"

    def score(self, tp: float, fp: float, fn: float) -> float:
        b2 = self.beta ** 2
        den = (1 + b2) * tp + b2 * fn + fp
        return float((1 + b2) * tp / den) if den else 0.0


class AUROC(Metric):
    """Area under the ROC curve: binary, or one-vs-rest averaged over classes (`macro`).

    Binary outputs are (N,) or (N, 1) scores, or (N, 2) scores whose class-1 softmax is ranked. Multi-class
    scores (N, C) are turned into probabilities with a softmax when `logits=True` (AUROC ranks each
    class's probability, and a softmax changes that ranking), then each class is ranked against the rest
    and the areas averaged over the classes that have both positives and negatives. The area is the
    Mann-Whitney statistic with tied scores given their average rank, which equals scikit-learn's
    `roc_auc_score`. The state keeps every score, so it grows with the epoch.

    Example:
        >>> m = AUROC()
        >>> m.compute(m.observe(Observation(0.0, np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1]))))
        0.75
    """

    name = "auroc"

    def __init__(self, logits: bool = True) -> None:
        self.logits = logits

    def observe(self, obs: Observation) -> list[np.ndarray]:
        outputs, targets = _need(obs, self)
        if outputs.ndim == 1 or (outputs.ndim == 2 and outputs.shape[1] == 1 and targets.ndim == 1):
            scores = outputs.reshape(-1, 1).astype(np.float64)
            labels = targets.reshape(-1).astype(np.int64)
            if scores.shape[0] != labels.shape[0]:
                raise ValueError(f"auroc: binary outputs of shape {outputs.shape} but targets of shape {targets.shape}")
        else:
            scores, labels = class_scores(outputs, targets, self.name)
            scores = scores.astype(np.float64)
            if self.logits:
                scores = np.exp(scores - scores.max(axis=1, keepdims=True))
                scores /= scores.sum(axis=1, keepdims=True)
        return [scores, labels[:, None].astype(np.float64)]

    def merge(self, a: list | None, b: list | None) -> list | None:
        if a is None or b is None:
            return a if b is None else b
        return [np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]])]

    def compute(self, state: list | None) -> float | None:
        if state is None or not len(state[1]):
            return None
        scores, labels = state[0], state[1][:, 0].astype(np.int64)
        if scores.shape[1] == 1:
            return binary_auroc(scores[:, 0], labels == 1)
        if scores.shape[1] == 2:
            return binary_auroc(scores[:, 1], labels == 1)
        areas = [binary_auroc(scores[:, c], labels == c) for c in range(scores.shape[1])]
        defined = [a for a in areas if a is not None]
        return float(np.mean(defined)) if defined else None


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of `x` with ties given the mean of the ranks they span.

    Example:
        >>> average_ranks(np.array([3.0, 1.0, 3.0]))
        array([2.5, 1. , 2.5])
    """
    order = np.argsort(x, kind="mergesort")
    _, first, counts = np.unique(x[order], return_index=True, return_counts=True)
    mean_rank = first + (counts + 1) / 2.0  # ranks first+1 .. first+count, averaged
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.repeat(mean_rank, counts)
    return ranks


def binary_auroc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """`(R+ - n+(n+ + 1)/2) / (n+ n-)` with `R+` the sum of the positives' average ranks; None when
    either class is absent.

    Example:
        >>> binary_auroc(np.array([0.2, 0.8]), np.array([False, True]))
        1.0
    """
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    rank_sum = average_ranks(scores)[positive].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))
