"""Optimizers, gradient clipping and accumulation; learning-rate schedules are in `ember.optim.lr`.

An optimizer is built on a module and steps with the `Gradients` of `backward()` (Burn's design):

Example:
    >>> opt = AdamW(model, lr=1e-3, weight_decay=0.01, groups=[ParamGroup(prefix="head.", lr=1e-2)])
    >>> sched = lr.CosineAnnealing(opt, T_max=1000, warmup=100)
    >>> for x, y in loader:
    ...     grads = loss_fn(model(x), y).backward()
    ...     opt.step(grads)
    ...     sched.step()
"""

from ..nn.param import ParamGroup
from .optimizer import Optimizer
from .sgd import SGD
from .adam import Adam, AdamW
from .adagrad import AdaGrad
from .rmsprop import RMSprop
from .adan import Adan
from .lion import Lion
from .muon import Muon
from .lbfgs import LBFGS
from .clip import clip_grad_norm, clip_grad_value
from .accumulate import GradientAccumulator
from .swa import AveragedModel, SWALR, get_ema_avg_fn, get_swa_avg_fn, update_bn
from .ema import EMA
from . import swa_utils  # PyTorch's module name: from ember.optim.swa_utils import AveragedModel
from . import lr

__all__ = ["Optimizer", "ParamGroup", "SGD", "Adam", "AdamW", "AdaGrad", "RMSprop", "Adan", "Lion", "Muon", "LBFGS",
           "clip_grad_norm", "clip_grad_value", "GradientAccumulator", "lr", "EMA", "AveragedModel", "SWALR",
           "get_ema_avg_fn", "get_swa_avg_fn", "update_bn", "swa_utils"]
