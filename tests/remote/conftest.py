"""A real `ember serve` in a subprocess on loopback (relays off), shared by the remote tests of a module.

`start_server(*args)` runs `python -m ember.cli serve --device cpu ARGS` and returns it once it printed
its ticket; `server.log()` is what it logged to stderr. The client's node key lives in a temporary
file (EMBER_REMOTE_KEY), so tests can put it on an allow list.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("iroh", reason="the remote tests need the `remote` extra: pip install 'ember[remote]'")
ROOT = Path(__file__).resolve().parents[2]
KEY = Path(tempfile.mkdtemp(prefix="ember-remote-")) / "client.key"
os.environ["EMBER_REMOTE_KEY"] = str(KEY)


class ServerProcess:
    """An `ember serve` subprocess: its ticket, its log, stop()."""

    def __init__(self, *args: str) -> None:
        self.log_path = Path(tempfile.mkstemp(prefix="ember-serve-", suffix=".log")[1])
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen([sys.executable, "-m", "ember.cli", "serve", *args],
                                        stdout=subprocess.PIPE, stderr=self.log_path.open("w"), text=True, env=env)
        self.ticket = self.process.stdout.readline().strip()
        if not self.ticket.startswith("ember"):
            self.stop()
            raise RuntimeError(f"ember serve did not start: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for_log(self, text: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in (log := self.log()):
                return log
            time.sleep(0.05)
        raise AssertionError(f"the server never logged {text!r}:\n{self.log()}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture(scope="module")
def server():
    """A cpu server with a 64 MiB quota per client."""
    process = ServerProcess("--device", "cpu", "--max-memory", "0.0625")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def remote(server):
    import ember
    return ember.Device.remote(server.ticket)
