"""Learning-rate schedules for ember optimizers (`sched.step()` after each `opt.step(...)`).

Example:
    >>> from ember.optim.lr import CosineAnnealing
    >>> sched = CosineAnnealing(opt, T_max=1000, warmup=100)
    >>> opt.step(grads); sched.step(); sched.lr
"""

from .scheduler import Scheduler
from .schedules import Constant, CosineAnnealing, Exponential, Linear, MultiStep, Noam, OneCycle, Step
from .compose import Composed, Sequential

__all__ = ["Scheduler", "Constant", "Step", "MultiStep", "Exponential", "CosineAnnealing", "Linear", "OneCycle",
           "Noam", "Sequential", "Composed"]
