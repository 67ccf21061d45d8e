"""A tiny classification problem shared by the learner tests: 2-D blobs, a two-layer MLP."""

from __future__ import annotations

import numpy as np

import ember
from ember.data import DataLoader, InMemoryDataset
from ember.nn import Linear, Module
from ember.nn.loss import cross_entropy
from ember.optim import AdamW
from ember.train import Learner, StepOutput


class MLP(Module):
    def __init__(self, classes: int = 3, hidden: int = 16) -> None:
        self.hidden = Linear(4, hidden)
        self.out = Linear(hidden, classes)

    def forward(self, x):
        return self.out(self.hidden(x).relu())


def dataset(n: int = 96, seed: int = 0, classes: int = 3) -> InMemoryDataset:
    centers = np.random.default_rng(1234).normal(0, 2.0, (classes, 4))  # one problem, many samples
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    points = (centers[labels] + rng.normal(0, 0.7, (n, 4))).astype(np.float32)
    return InMemoryDataset([(points[i], int(labels[i])) for i in range(n)])


def loaders(batch_size: int = 16, seed: int = 3) -> tuple[DataLoader, DataLoader]:
    return (DataLoader(dataset(96, 0), batch_size, shuffle=True, seed=seed),
            DataLoader(dataset(48, 1), 32))


def noisy_step(model, batch) -> StepOutput:
    """Forward with input noise drawn from ember's RNG, so resume must restore the RNG streams."""
    x, y = batch
    x = x + 0.1 * ember.randn(*x.shape, device=x.device)
    logits = model(x)
    return StepOutput(cross_entropy(logits, y), logits, y)


def learner(run_dir=None, seed: int = 0, device=None, hidden: int = 16, **kwargs) -> Learner:
    ember.seed(seed)
    model = MLP(hidden=hidden)
    kwargs.setdefault("loss", cross_entropy)
    kwargs.setdefault("display", "none")
    kwargs.setdefault("plots", False)
    return Learner(model, AdamW(model, lr=1e-2), device=device or ember.Device.numpy(), run_dir=run_dir, **kwargs)


def weights(learner: Learner) -> dict[str, np.ndarray]:
    return {k: np.array(v.numpy()) for k, v in learner.model.state_dict().items()}
