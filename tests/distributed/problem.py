"""The data-parallel problem the rank scripts and the tests share: the MLP and blobs of tests/train,
trained by a Learner, single-process (the oracle) or data-parallel (one shard per rank)."""

from __future__ import annotations

import numpy as np

import ember
from ember.data import DataLoader, DistributedSampler
from ember.nn.loss import cross_entropy
from ember.optim import SGD, AdamW
from ember.train import Learner
from tests.train.problem import MLP, dataset

ITEMS, GLOBAL_BATCH = 48, 8


def fit(ranks: int = 1, rank: int = 0, group=None, epochs: int = 2, optimizer: str = "sgd", accumulation: int = 1,
        run_dir=None, resume=None, **kwargs) -> dict[str, np.ndarray]:
    """Final weights of a run: `ranks` None is the single-process oracle with the whole global batch."""
    ember.seed(0)
    model = MLP(hidden=8)
    opt = SGD(model, lr=0.1, momentum=0.9) if optimizer == "sgd" else AdamW(model, lr=1e-2)
    data = dataset(ITEMS, 0)
    if group is None:
        loader = DataLoader(data, GLOBAL_BATCH, shuffle=True, seed=5)
        learner = Learner(model, opt, loss=cross_entropy, device=ember.Device.cpu(), display="none", plots=False,
                          run_dir=run_dir)
    else:
        batch = GLOBAL_BATCH // (group.size * accumulation)
        loader = DataLoader(data, batch, sampler=DistributedSampler(data, group.size, group.rank), seed=5)
        learner = Learner(model, opt, loss=cross_entropy, device=ember.Device.cpu(), display="none", plots=False,
                          run_dir=run_dir, strategy="ddp", group=group, grad_accumulation=accumulation, **kwargs)
    result = learner.fit(loader, epochs=epochs, resume=resume)
    weights = {k: np.array(v.numpy()) for k, v in learner.model.state_dict().items()}
    weights["train/loss"] = np.array(result.final["train/loss"])
    return weights
