"""Errors raised by `ember.data`, both `EmberError`s.

They live here rather than in `ember/errors.py` because only the data package raises them.

Example:
    >>> raise DataError("data.db: table 'items' expected columns ['id', 'split', 'label'], found ['id']")
    Traceback (most recent call last):
    ember.data.errors.DataError: data.db: table 'items' expected columns ['id', 'split', 'label'], found ['id']
"""

from __future__ import annotations

from ember.errors import EmberError


class DataError(EmberError, ValueError):
    """A data file that is missing, corrupt or of the wrong kind; the message names the file and the problem."""


class WorkerError(EmberError, RuntimeError):
    """A `DataLoader` worker that failed: an exception inside it (the message carries its traceback
    text), its death (worker, pid, exit code or signal) or a batch that missed the loader's timeout."""
