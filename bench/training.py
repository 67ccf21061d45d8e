"""Training workloads: a small transformer encoder's forward and backward, and whole training steps
(forward, backward, AdamW update) of an MLP and of the MNIST CNN."""

from __future__ import annotations

import numpy as np

from . import models
from .frameworks import Frameworks
from .harness import Row, Settings

NO_TINYGRAD_ENCODER = "tinygrad has no transformer encoder layer"


def _batch(settings: Settings, x_shape: tuple[int, ...], classes: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal(x_shape, dtype=np.float32),
            rng.integers(0, classes, x_shape[0]).astype(np.int64))


def transformer_encoder(fw: Frameworks, settings: Settings) -> list[Row]:
    d_model, heads, d_ff, seq, batch, layers = settings.size((256, 4, 1024, 128, 8, 2), (8, 2, 16, 4, 2, 1))
    x = np.random.default_rng(0).standard_normal((batch, seq, d_model), dtype=np.float32)

    def ember_setup():
        device = fw.device.autodiff()
        encoder = models.ember_encoder(d_model, heads, d_ff, layers, device)
        xs = fw.modules["ember"].tensor(x, device=device)
        return lambda: encoder(xs).square().mean().backward()

    def torch_setup():
        from . import torch_models
        encoder = torch_models.Encoder(d_model, heads, d_ff, layers).to(fw.torch_device)
        xs = fw.array("torch", x)
        torch_models.check_fused_attention(encoder, xs)

        def step() -> None:
            encoder.zero_grad(set_to_none=True)
            encoder(xs).square().mean().backward()
        return step

    case = f"fwd+bwd, d_model {d_model}, {heads} heads, d_ff {d_ff}, seq {seq}, batch {batch}, {layers} layers"
    return fw.compare("transformer_encoder", case, {"numpy": "NumPy has no autodiff", "ember": ember_setup,
                                                    "torch": torch_setup, "tinygrad": NO_TINYGRAD_ENCODER},
                      settings)


def _train_step(fw: Frameworks, settings: Settings, bench: str, case: str, x: np.ndarray, y: np.ndarray,
                ember_model, torch_model, tinygrad_model) -> list[Row]:
    """Time one training step of the same network in each framework; `*_model` build it there."""
    def ember_setup():
        device = fw.device.autodiff()
        return models.ember_step(ember_model(device), fw.modules["ember"].tensor(x, device=device),
                                 fw.modules["ember"].tensor(y, device=device))

    def torch_setup():
        torch = fw.modules["torch"]
        return models.torch_step(torch, *torch_model(torch, fw.torch_device), fw.array("torch", x),
                                 fw.array("torch", y))

    def tinygrad_setup():
        tinygrad = fw.modules["tinygrad"]
        return models.tinygrad_step(tinygrad, *tinygrad_model(tinygrad), fw.array("tinygrad", x),
                                    fw.array("tinygrad", y))

    return fw.compare(bench, case, {"numpy": "NumPy has no autodiff", "ember": ember_setup, "torch": torch_setup,
                                    "tinygrad": tinygrad_setup}, settings)


def mlp_train_step(fw: Frameworks, settings: Settings) -> list[Row]:
    sizes = settings.size((784, 512, 512, 10), (12, 8, 8, 10))
    batch = settings.size(128, 4)
    x, y = _batch(settings, (batch, sizes[0]), sizes[-1])
    case = f"{'-'.join(map(str, sizes))}, batch {batch}, AdamW"
    return _train_step(fw, settings, "mlp_train_step", case, x, y,
                       lambda device: models.ember_mlp(sizes, device),
                       lambda torch, device: models.torch_mlp(torch, sizes, device),
                       lambda tinygrad: models.tinygrad_mlp(tinygrad, sizes))


def cnn_train_step(fw: Frameworks, settings: Settings) -> list[Row]:
    # The CNN's linear head expects 28x28 inputs, so tiny runs shrink only the batch and the width.
    width, batch = settings.size((16, 64), (2, 2))
    x, y = _batch(settings, (batch, 1, 28, 28), 10)
    case = f"MNIST CNN (width {width}), batch {batch}, AdamW"
    return _train_step(fw, settings, "cnn_train_step", case, x, y,
                       lambda device: models.ember_cnn(width, device),
                       lambda torch, device: models.torch_cnn(torch, width, device),
                       lambda tinygrad: models.tinygrad_cnn(tinygrad, width))


BENCHMARKS = {"transformer_encoder": transformer_encoder, "mlp_train_step": mlp_train_step,
              "cnn_train_step": cnn_train_step}
