"""Training workloads: a small transformer encoder's forward and backward, whole training steps (forward,
backward, AdamW update) of an MLP, of the MNIST CNN and of a character-level GPT, and a BERT-base forward
pass (inference, no autodiff)."""

from __future__ import annotations

import numpy as np

from . import models
from .frameworks import Frameworks
from .harness import Row, Settings

NO_TINYGRAD_ENCODER = "tinygrad has no transformer encoder layer"
CHARS = 65  # the character GPT's vocabulary: tiny Shakespeare's 65 characters
BERT_VOCAB = 30522  # BERT's WordPiece vocabulary


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
                ember_model, torch_model, tinygrad_model, ember_forward=None) -> list[Row]:
    """Time one training step of the same network in each framework; `*_model` build it there (a
    tinygrad reason string where it cannot), `ember_forward(model)` gives ember's forward if not the model."""
    def ember_setup():
        device = fw.device.autodiff()
        model = ember_model(device)
        return models.ember_step(model, fw.modules["ember"].tensor(x, device=device),
                                 fw.modules["ember"].tensor(y, device=device),
                                 ember_forward(model) if ember_forward else None)

    def torch_setup():
        torch = fw.modules["torch"]
        return models.torch_step(torch, *torch_model(torch, fw.torch_device), fw.array("torch", x),
                                 fw.array("torch", y))

    def tinygrad_setup():
        tinygrad = fw.modules["tinygrad"]
        return models.tinygrad_step(tinygrad, *tinygrad_model(tinygrad), fw.array("tinygrad", x),
                                    fw.array("tinygrad", y))

    return fw.compare(bench, case, {"numpy": "NumPy has no autodiff", "ember": ember_setup, "torch": torch_setup,
                                    "tinygrad": tinygrad_model if isinstance(tinygrad_model, str)
                                    else tinygrad_setup}, settings)


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


def gpt_train_step(fw: Frameworks, settings: Settings) -> list[Row]:
    """A character-level GPT (nanoGPT's shakespeare_char at a tenth of its width): `models.ember_gpt` and
    `torch_models.GPT`, the loss over every position."""
    d_model, heads, layers, seq, batch = settings.size((64, 4, 2, 64, 32), (8, 2, 1, 4, 2))
    rng = np.random.default_rng(0)
    idx, target = rng.integers(0, CHARS, (batch, seq)), rng.integers(0, CHARS, batch * seq)

    def torch_model(torch, device: str):
        from . import torch_models
        gpt = torch_models.GPT(CHARS, seq, d_model, heads, layers).to(device)
        return (lambda x: gpt(x).reshape(-1, CHARS)), list(gpt.parameters())

    case = f"char GPT, {layers} layers, d {d_model}, {heads} heads, vocab {CHARS}, batch {batch} x {seq}, AdamW"
    return _train_step(fw, settings, "gpt_train_step", case, idx, target,
                       lambda device: models.ember_gpt(CHARS, seq, d_model, heads, layers, device),
                       torch_model, NO_TINYGRAD_ENCODER,
                       ember_forward=lambda model: (lambda x: model(x).reshape(-1, CHARS)))


def bert_forward(fw: Frameworks, settings: Settings) -> list[Row]:
    """BERT-base's encoder forward pass on one sequence (inference: ember's plain device, torch under
    `inference_mode`): `models.ember_bert` and `torch_models.BERT`."""
    d_model, heads, layers, seq, batch = settings.size((768, 12, 12, 128, 1), (8, 2, 1, 4, 1))
    vocab = settings.size(BERT_VOCAB, 64)
    idx = np.random.default_rng(0).integers(0, vocab, (batch, seq))

    def ember_setup():
        ember = fw.modules["ember"]
        model = models.ember_bert(vocab, seq, d_model, heads, layers, fw.device)
        xs = ember.tensor(idx, device=fw.device)
        return lambda: model(xs)

    def torch_setup():
        from . import torch_models
        torch = fw.modules["torch"]
        model = torch_models.BERT(vocab, seq, d_model, heads, layers).to(fw.torch_device).eval()
        xs = fw.array("torch", idx)
        torch_models.check_fused_attention(model, xs)

        def forward():
            with torch.inference_mode():
                return model(xs)
        return forward

    case = f"BERT-base forward, {layers} layers, d {d_model}, {heads} heads, seq {seq}, batch {batch}"
    return fw.compare("bert_forward", case, {"numpy": "NumPy has no transformer layers", "ember": ember_setup,
                                             "torch": torch_setup, "tinygrad": NO_TINYGRAD_ENCODER}, settings)


BENCHMARKS = {"transformer_encoder": transformer_encoder, "mlp_train_step": mlp_train_step,
              "cnn_train_step": cnn_train_step, "gpt_train_step": gpt_train_step, "bert_forward": bert_forward}
