"""ember.train: the `Learner` training loop, metrics, the terminal dashboard, checkpoints, resume and
early stopping. See docs/training.md.

Example:
    >>> from ember.train import Learner, Accuracy
    >>> learner = Learner(model, AdamW(model, lr=1e-3), loss=cross_entropy, metrics=[Accuracy()],
    ...                   run_dir="runs/mnist")
    >>> result = learner.fit(train_loader, valid_loader, epochs=3)
"""

from .callbacks import Callback
from .checkpoint import Checkpointer, find_checkpoint, load_checkpoint
from .ddp import DataParallel, broadcast_parameters
from .dashboard import Display, EpochView, PlainLog, RichDashboard, make_display, sparkline
from .early_stopping import EarlyStopping
from .learner import Learner
from .metrics import AUROC, Accuracy, FBeta, Loss, Metric, Observation, Perplexity, Precision, Recall, TopKAccuracy
from .multi_device import MultiDevice
from .monitors import CpuUsage, DeviceMemory, ItemsPerSecond, LearningRate, MemoryUsage
from .run_dir import RunDirectory
from .run_state import FitResult, RunState
from .step import StepOutput
from .tracker import MetricTracker
from .zero import ZeroRedundancyOptimizer

__all__ = [
    "AUROC", "Accuracy", "Callback", "Checkpointer", "CpuUsage", "DataParallel", "DeviceMemory", "Display", "EarlyStopping",
    "EpochView", "FBeta", "FitResult", "ItemsPerSecond", "Learner", "LearningRate", "Loss", "MemoryUsage",
    "Metric", "MetricTracker", "MultiDevice", "Observation", "Perplexity", "PlainLog", "Precision", "Recall", "RichDashboard",
    "RunDirectory", "RunState", "StepOutput", "TopKAccuracy", "ZeroRedundancyOptimizer", "broadcast_parameters", "find_checkpoint", "load_checkpoint", "make_display",
    "sparkline",
]
