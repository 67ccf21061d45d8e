"""The MNIST main job end to end, briefly: a short epoch on a subset must get well above chance, write its
run directory, and resume."""

from __future__ import annotations

import json

import pytest

from ember.examples import mnist


def test_one_short_epoch_learns(tmp_path, capsys):
    result, accuracy = mnist.main(["--epochs", "1", "--train-items", "1200", "--batch-size", "32", "--width", "8",
                                   "--device", "numpy", "--out", str(tmp_path), "--display", "plain"])
    out = capsys.readouterr().out
    assert accuracy > 0.6  # chance is 0.1
    assert f"held-out accuracy: {accuracy:.4f} on 1,000 test images after 1 epoch," in out
    assert result.epochs_completed == 1 and result.steps == 38
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["train_items"] == 1200 and config["width"] == 8
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["best"]["metric"] == "valid/accuracy" and summary["best"]["value"] == pytest.approx(accuracy)


def test_resume_continues_the_run(tmp_path):
    config = mnist.MnistConfig(epochs=1, train_items=256, batch_size=64, width=4, device="numpy")
    mnist.train(config, str(tmp_path), display="none")
    config.epochs = 2
    result, _ = mnist.train(config, str(tmp_path), display="none", resume=True)
    assert result.epochs_completed == 2 and result.steps == 8


def test_bad_flags_exit_with_a_message(capsys):
    with pytest.raises(SystemExit):
        mnist.parse_args(["--epochs", "0"])
    assert "must be >= 1" in capsys.readouterr().err


def test_model_shapes():
    import ember
    model = mnist.ConvNet(width=4)
    assert model(ember.zeros(3, 1, 28, 28)).shape == (3, 10)
    assert model.num_params() == (1 * 4 * 9 + 4) + (4 * 8 * 9 + 8) + (8 * 7 * 7 * 10 + 10)
