"""The pieces together, as a training loop uses them: AdamW with a head group, warmup + cosine,
clipping and accumulation bring the MLP's loss down."""

from __future__ import annotations

from ember.nn import ParamGroup
from ember.optim import AdamW, GradientAccumulator
from ember.optim.lr import CosineAnnealing

from .problem import batch, ember_loss_and_grads, make_pair


def test_a_training_loop_lowers_the_loss():
    model = make_pair()[0]
    opt = AdamW(model, lr=0.02, weight_decay=0.01, clip_norm=1.0, groups=[ParamGroup(prefix="l2.", lr=0.05)])
    sched = CosineAnnealing(opt, T_max=55, warmup=5, warmup_start=0.1)
    x, y = batch(n=64)
    first = float(ember_loss_and_grads(model, x, y)[0].item())
    for _ in range(60):
        acc = GradientAccumulator()
        # two halves, each its own mean: the sum is twice the full-batch gradient, which Adam's
        # per-coordinate normalization (and the clipping) absorb
        for half in (slice(0, 32), slice(32, 64)):
            loss, grads = ember_loss_and_grads(model, x[half], y[half])
            acc.accumulate(model, grads)
        opt.step(acc.grads())
        sched.step()
    last = float(ember_loss_and_grads(model, x, y)[0].item())
    assert last < 0.3 * first
    assert sched.lr == opt.lr < 0.02
