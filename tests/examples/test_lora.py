"""The LoRA example end to end, briefly: the loss falls with under 1% of the parameters trainable, and the
saved adapter reloads into a fresh base model with the same outputs."""

from __future__ import annotations

import json

from ember.examples import lora


def test_a_few_steps_learn_and_the_adapter_reloads(tmp_path, capsys):
    result = lora.main(["--steps", "8", "--lr", "1e-2", "--out", str(tmp_path)])
    assert result.trainable / result.total < 0.01
    assert result.losses[-1] < result.losses[0] - 0.1
    assert result.max_reload_difference == 0.0
    config = json.loads((tmp_path / "adapter_config.json").read_text())
    assert config["r"] == 4 and sorted(config["target_modules"]) == sorted(lora.TARGETS)
    assert (tmp_path / "adapter_model.safetensors").is_file()
    assert "trainable%: 0.7244" in capsys.readouterr().out
