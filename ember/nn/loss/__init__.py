"""Losses, as functions (`cross_entropy(logits, target)`) and modules (`CrossEntropyLoss()`).

- `regression`: mse, l1, huber, smooth L1, Poisson NLL, Gaussian NLL
- `classification`: cross entropy, NLL, binary cross entropy (probabilities and logits), KL divergence
- `margin`: cosine embedding, margin ranking, hinge embedding, triplet margin
- `ctc`: connectionist temporal classification
- `modules`: the module form of each

Every loss takes `reduction` = `"mean"`, `"sum"` or `"none"` with PyTorch's conventions.

Example:
    >>> from ember.nn import CrossEntropyLoss
    >>> CrossEntropyLoss()(ember.zeros(2, 3), ember.tensor([0, 2])).item()
    1.0986...
"""

from .classification import binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, kl_div, nll_loss
from .ctc import ctc_loss
from .margin import cosine_embedding_loss, hinge_embedding_loss, margin_ranking_loss, triplet_margin_loss
from .modules import (
    BCELoss, BCEWithLogitsLoss, CosineEmbeddingLoss, CrossEntropyLoss, CTCLoss, GaussianNLLLoss, HingeEmbeddingLoss,
    HuberLoss, KLDivLoss, L1Loss, Loss, MarginRankingLoss, MSELoss, NLLLoss, PoissonNLLLoss, SmoothL1Loss,
    TripletMarginLoss,
)
from .regression import gaussian_nll_loss, huber_loss, l1_loss, mse_loss, poisson_nll_loss, smooth_l1_loss

__all__ = [
    "mse_loss", "l1_loss", "huber_loss", "smooth_l1_loss", "poisson_nll_loss", "gaussian_nll_loss",
    "cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
    "cosine_embedding_loss", "margin_ranking_loss", "hinge_embedding_loss", "triplet_margin_loss", "ctc_loss",
    "Loss", "MSELoss", "L1Loss", "HuberLoss", "SmoothL1Loss", "PoissonNLLLoss", "GaussianNLLLoss",
    "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "KLDivLoss", "CosineEmbeddingLoss",
    "MarginRankingLoss", "HingeEmbeddingLoss", "TripletMarginLoss", "CTCLoss",
]
