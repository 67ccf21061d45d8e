"""Fine-tune a small Llama with LoRA on a text that ships with ember, then save the adapter in PEFT's
format and load it back.

    python -m ember.examples.lora                     # defaults: Device.numpy(), 40 steps, runs/lora
    python -m ember.examples.lora --steps 20 --device cpu --out runs/lora-cpu

The model is a randomly initialised Llama (2 layers, hidden 64, a byte-level vocabulary padded to 8,192
rows, so the embedding and head hold most of its ~1.1M parameters, as in real LLMs); rank-4 adapters on
every projection (q, k, v, o, gate, up, down) make 0.7% of the parameters trainable. It learns to
predict the next byte of `lora_text.txt` (beside this file) (a short story written for ember; licence: ember's, MIT
OR Apache-2.0), windows of 48 bytes, batches of 8, AdamW; the script prints the loss as it falls, saves
the adapter (adapter_config.json, adapter_model.safetensors), loads it into a fresh copy of the base
model and checks that the outputs agree.

Example:
    >>> result = main(["--steps", "10", "--out", "runs/lora-try"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

import ember
from ember.lora import LoraConfig, adapter_group, apply_lora, load_adapter, save_adapter, trainable_parameters
from ember.models import LlamaConfig, LlamaForCausalLM
from ember.nn.loss import cross_entropy
from ember.optim import AdamW

TEXT = Path(__file__).parent / "lora_text.txt"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
BASE = LlamaConfig(vocab_size=8192, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                   tie_word_embeddings=False)


class Result(NamedTuple):
    losses: list[float]
    trainable: int
    total: int
    max_reload_difference: float


def base_model(device, seed: int = 0) -> LlamaForCausalLM:
    """The same random base model for a seed (what the saved adapter is loaded back into)."""
    ember.seed(seed)
    return LlamaForCausalLM(BASE, device=device)


def batches(data: np.ndarray, window: int, batch: int, rng: np.random.Generator):
    """Endless (inputs, next-byte targets) batches of random windows."""
    while True:
        starts = rng.integers(0, len(data) - window - 1, batch)
        rows = np.stack([data[s:s + window + 1] for s in starts]).astype(np.int64)
        yield rows[:, :-1], rows[:, 1:]


def main(argv: Sequence[str] | None = None) -> Result:
    parser = argparse.ArgumentParser(prog="python -m ember.examples.lora", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--device", default="numpy")
    parser.add_argument("--out", default="runs/lora")
    args = parser.parse_args(argv)
    device = ember.Device(args.device).autodiff()
    model = base_model(device)
    apply_lora(model, LoraConfig(rank=args.rank, alpha=2 * args.rank, targets=TARGETS))
    report = trainable_parameters(model)
    print(report)
    optimizer = AdamW(model, lr=args.lr, groups=[adapter_group(weight_decay=0.0)])
    data = np.frombuffer(TEXT.read_bytes(), dtype=np.uint8)
    stream = batches(data, 48, 8, np.random.default_rng(0))
    losses = []
    for step in range(1, args.steps + 1):
        x, y = next(stream)
        logits = model(ember.tensor(x, device=device))
        loss = cross_entropy(logits.reshape(-1, BASE.vocab_size), ember.tensor(y.reshape(-1), device=device))
        optimizer.step(loss.backward())
        losses.append(float(loss.numpy()))
        if step == 1 or step % 10 == 0 or step == args.steps:
            print(f"step {step:4d}  loss {losses[-1]:.3f}")
    save_adapter(model, args.out)
    print(f"saved the adapter to {args.out}/ (adapter_config.json, adapter_model.safetensors)")
    reloaded = load_adapter(base_model(device), args.out)
    probe = ember.tensor(next(stream)[0], device=device)
    difference = float(np.abs(reloaded(probe).numpy() - model(probe).numpy()).max())
    print(f"reloaded into a fresh base model: largest logit difference {difference:.2e}")
    return Result(losses, report.trainable, report.total, difference)


if __name__ == "__main__":
    main(sys.argv[1:])
