"""The rich dashboard rendered to a string, the plain log, sparklines and the choice between them."""

from __future__ import annotations

import io

import pytest

from ember.train import Accuracy, Display, EpochView, PlainLog, RichDashboard, make_display, sparkline

from .problem import learner, loaders

rich_console = pytest.importorskip("rich.console")


def _console():
    return rich_console.Console(file=io.StringIO(), width=110, record=True, force_terminal=False)


def test_dashboard_renders_progress_metrics_best_and_curves():
    dash = RichDashboard(_console())
    dash.start(epochs=3, first_epoch=1)
    dash.split_start("train", 2, total=10)
    dash.batch("train", 4, 10, {"loss": "0.3000", "accuracy": "0.9100"})
    dash.split_start("valid", 2, total=5)
    dash.batch("valid", 5, 5, {"loss": "0.2500", "accuracy": "0.9300"})
    dash.epoch_end(EpochView(2, 3, 1.5, {"train": {"loss": "0.3000", "accuracy": "0.9100"},
                                         "valid": {"loss": "0.2500", "accuracy": "0.9300"}},
                             best={"loss": "0.2500 (epoch 2)"}, curves={"loss": [0.5, 0.25], "accuracy": [0.8, 0.93]}))
    console = dash.console
    console.print(dash.render())
    dash.close()
    text = console.export_text()
    assert "epoch 2/3" in text and "last epoch 1.5 s" in text
    assert "train" in text and "valid" in text and "5/5" in text
    assert "0.2500 (epoch 2)" in text and "0.9300" in text
    assert "█▁" in text and "▁█" in text  # loss falls, accuracy rises


def test_dashboard_in_a_learner_run():
    train, valid = loaders()
    dash = RichDashboard(_console())
    learner(display=dash, metrics=[Accuracy()]).fit(train, valid, epochs=2)
    text = dash.console.export_text()
    assert "epoch 2/2" in text and "accuracy" in text and "6/6" in text


def test_plain_log_prints_a_line_per_epoch():
    out = io.StringIO()
    train, valid = loaders()
    learner(display=PlainLog(out), metrics=[Accuracy()]).fit(train, valid, epochs=2)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[1].startswith("epoch 2/2 | train loss ") and "| valid loss " in lines[1] and "accuracy" in lines[1]


def test_sparkline():
    assert sparkline([]) == ""
    assert sparkline([1.0, 1.0]) == "▅▅"
    assert sparkline([0.0, 0.5, 1.0]) == "▁▅█"
    assert len(sparkline(list(range(100)), width=30)) == 30


def test_make_display():
    assert type(make_display("plain")) is PlainLog
    assert type(make_display("none")) is Display
    assert type(make_display("auto", file=io.StringIO())) is PlainLog  # not a terminal
    with pytest.raises(ValueError, match="display must be"):
        make_display("fancy")


def test_missing_rich_names_the_extra(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_rich(name, *args, **kwargs):
        if name.startswith("rich"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_rich)
    with pytest.raises(ImportError, match=r"ember\[train\]"):
        RichDashboard()
    assert type(make_display("auto")) is PlainLog
