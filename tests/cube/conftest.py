"""Compiled kernels go to a fresh temporary cache for the whole test session."""

import os
import tempfile

os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-cube-tests-")
