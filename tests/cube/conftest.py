"""Compiled kernels go to a fresh temporary cache for the whole test session."""

import os
import tempfile

from ember import settings

os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-cube-tests-")
settings.reload()


import pytest  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402


@pytest.fixture
def parallel():
    """Map a function over cases on 4 threads: each new kernel is a gcc run, and they overlap."""
    def run(fn, cases):
        with ThreadPoolExecutor(4) as pool:
            return list(pool.map(fn, cases))
    return run
