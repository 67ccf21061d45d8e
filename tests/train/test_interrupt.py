"""Ctrl-C: the first SIGINT only asks to stop, a second one interrupts; the old handler comes back."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from ember.train import Callback
from ember.train.interrupt import catch_interrupts

from .problem import learner, loaders


def test_first_sigint_requests_a_stop_second_raises():
    before = signal.getsignal(signal.SIGINT)
    with catch_interrupts() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before


def test_outside_the_main_thread_nothing_is_installed():
    seen = {}

    def run():
        with catch_interrupts() as stop:
            seen["handler"] = signal.getsignal(signal.SIGINT)
            seen["requested"] = stop.requested

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == {"handler": before, "requested": False}


def test_ctrl_c_without_a_run_dir_stops_cleanly():
    class CtrlC(Callback):
        def on_step_end(self, learner):
            if learner.step == 3:
                os.kill(os.getpid(), signal.SIGINT)

    train, valid = loaders()
    result = learner(callbacks=[CtrlC()]).fit(train, valid, epochs=2)
    assert result.interrupted and result.steps == 3 and result.checkpoint is None
