"""PyTorch's module name for `ember.optim.swa`, so `from ember.optim.swa_utils import AveragedModel` reads
as it does with torch.

Example:
    >>> from ember.optim.swa_utils import AveragedModel, SWALR, update_bn
"""

from .swa import SWALR, AveragedModel, get_ema_avg_fn, get_swa_avg_fn, update_bn

__all__ = ["AveragedModel", "SWALR", "update_bn", "get_ema_avg_fn", "get_swa_avg_fn"]
