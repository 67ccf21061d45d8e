"""ember.data: datasets, transforms, batchers and the `DataLoader`.

Transforms are methods on `Dataset` and functions in `ember.data.transform` (not re-exported
here: their names `map`, `partial` would shadow builtins on a star import).

Example:
    >>> from ember.data import InMemoryDataset, DataLoader
    >>> ds = InMemoryDataset([(float(i), i % 2) for i in range(6)]).shuffled(seed=0)
    >>> xs, ys = next(iter(DataLoader(ds, batch_size=4)))
    >>> xs.shape, ys.dtype
    ((4,), dtype('int64'))
"""

from .batcher import Batcher, default_batcher, to_device
from .dataset import Dataset, InMemoryDataset, SequenceDataset
from .errors import DataError, WorkerError
from .loader import DataLoader
from .sampler import DistributedSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler, WeightedRandomSampler
from .sqlite import SqliteDataset, SqliteDatasetWriter

__all__ = [
    "Batcher", "DataError", "DataLoader", "Dataset", "DistributedSampler", "InMemoryDataset", "RandomSampler", "Sampler",
    "SequenceDataset", "SequentialSampler", "SqliteDataset", "SqliteDatasetWriter", "SubsetRandomSampler",
    "WeightedRandomSampler", "WorkerError", "default_batcher", "to_device",
]
