"""What every fuzz test shares: the example budget, a time bound per load and the error contract.

The budget is small by default (CI: the whole directory in well under a minute on two cores, with
fixed seeds so a failure reproduces); `EMBER_FUZZ_EXAMPLES=N` (scripts/fuzz.sh) runs N examples
per test with fresh random seeds.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Callable, Iterator

from hypothesis import HealthCheck, settings

from ember.errors import EmberError

_EXAMPLES = os.environ.get("EMBER_FUZZ_EXAMPLES")
FUZZ = settings(max_examples=int(_EXAMPLES or 60), deadline=None, derandomize=_EXAMPLES is None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])
LOAD_SECONDS = 10.0  # far beyond any load of these kilobyte files; only a hang or a bomb gets near it
MESSAGE_CHARS = 1000  # an error quoting a file's contents must stay short


class LoadTookTooLong(BaseException):
    """Raised by the alarm; a BaseException so that no loader's `except Exception` can swallow it."""


@contextlib.contextmanager
def bounded(seconds: float = LOAD_SECONDS) -> Iterator[None]:
    """Fail the test if the block runs longer than `seconds` (SIGALRM; the main thread, on POSIX)."""
    def expire(signum, frame):
        raise LoadTookTooLong(f"a load ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def attempt(load: Callable, *args, error: type[EmberError], names: tuple[str, ...], **kwargs):
    """`(result, None)` if `load(*args)` succeeds within the time bound, else `(None, message)` for one of
    ember's own `error`s, after checking the message names one of `names` (the file) and is short.
    Any other exception propagates and fails the test.
    """
    try:
        with bounded():
            return load(*args, **kwargs), None
    except error as e:
        message = str(e)
        assert any(str(name) in message for name in names), message[:MESSAGE_CHARS]
        assert len(message) < MESSAGE_CHARS, message[:MESSAGE_CHARS]
        return None, message


def assert_same_state(got: tuple, want: tuple) -> None:
    """A loader's `(state, metadata)` is the reference's: the same metadata, names, dtypes, shapes and bytes."""
    (state, metadata), (want_state, want_metadata) = got, want
    assert metadata == want_metadata
    assert set(state) == set(want_state)
    for key, array in want_state.items():
        assert (state[key].dtype, state[key].shape) == (array.dtype, array.shape), key
        assert state[key].tobytes() == array.tobytes(), key
