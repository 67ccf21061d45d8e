"""The networks the training benchmarks run, built alike in each framework from the same sizes, and one
training step (forward, cross entropy, backward, AdamW update) per framework.

A network is its forward function and its parameters, so the step builders need not know its shape.
ember's networks are `Module`s (its optimizer walks a module); the CNN is the MNIST example's `ConvNet`.
The transformers (`ember_encoder`, `ember_gpt`, `ember_bert`) have their torch peers in
bench/torch_models.py.

torch's optimizer is `torch_adamw`: AdamW with `fused=True`, one kernel over all parameters on CUDA and on
the CPU (torch 2.13), the fastest of torch's AdamW implementations on both (bench/RESULTS.md, "Peers").
"""

from __future__ import annotations

from typing import Callable, Sequence

LR = 1e-3

Forward = Callable[[object], object]
Step = Callable[[], None]


def mlp_forward(layers: Sequence[Callable]) -> Forward:
    """Linear layers with relu between them (not after the last), in any framework."""
    def forward(x):
        for i, layer in enumerate(layers):
            x = layer(x)
            if i < len(layers) - 1:
                x = x.relu()
        return x
    return forward


def ember_mlp(sizes: Sequence[int], device):
    """An ember `Module` of `Linear(sizes[i], sizes[i + 1])` layers with relu between them."""
    from ember.nn import Linear, Module

    class MLP(Module):
        def __init__(self) -> None:
            self.layers = [Linear(a, b, device=device) for a, b in zip(sizes, sizes[1:])]

        def forward(self, x):
            return mlp_forward(self.layers)(x)

    return MLP()


def torch_mlp(torch, sizes: Sequence[int], device: str) -> tuple[Forward, list]:
    layers = [torch.nn.Linear(a, b, device=device) for a, b in zip(sizes, sizes[1:])]
    return mlp_forward(layers), [p for layer in layers for p in layer.parameters()]


def tinygrad_mlp(tinygrad, sizes: Sequence[int]) -> tuple[Forward, list]:
    layers = [tinygrad.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])]
    return mlp_forward(layers), tinygrad.nn.state.get_parameters(layers)


def cnn_forward(conv1: Callable, conv2: Callable, head: Callable, pool: Callable) -> Forward:
    """conv, relu, pool, conv, relu, pool, flatten, linear: the MNIST CNN in any framework."""
    def forward(x):
        x = pool(conv1(x).relu())
        x = pool(conv2(x).relu())
        return head(x.reshape(x.shape[0], -1))
    return forward


def ember_cnn(width: int, device):
    from ember.examples.mnist import ConvNet
    return ConvNet(width, device)


def torch_cnn(torch, width: int, device: str) -> tuple[Forward, list]:
    nn = torch.nn
    layers = [nn.Conv2d(1, width, 3, padding=1, device=device), nn.Conv2d(width, 2 * width, 3, padding=1, device=device),
              nn.Linear(2 * width * 7 * 7, 10, device=device)]
    forward = cnn_forward(*layers, pool=lambda x: nn.functional.max_pool2d(x, 2))
    return forward, [p for layer in layers for p in layer.parameters()]


def tinygrad_cnn(tinygrad, width: int) -> tuple[Forward, list]:
    nn = tinygrad.nn
    layers = [nn.Conv2d(1, width, 3, padding=1), nn.Conv2d(width, 2 * width, 3, padding=1),
              nn.Linear(2 * width * 7 * 7, 10)]
    return cnn_forward(*layers, pool=lambda x: x.max_pool2d(2)), nn.state.get_parameters(layers)


def ember_encoder(d_model: int, heads: int, d_ff: int, layers: int, device, activation: str = "relu"):
    """ember's `TransformerEncoder` (post-norm layers, ReLU or GELU, no dropout); its torch peer is
    `torch_models.Encoder`."""
    from ember.nn import TransformerEncoder
    return TransformerEncoder(d_model, heads, d_ff, num_layers=layers, dropout=0.0, activation=activation,
                              device=device)


def ember_bert(vocab: int, seq: int, d_model: int, heads: int, layers: int, device):
    """A BERT encoder in ember's public API: token and learned position embeddings, their LayerNorm, then
    `layers` post-norm GELU `TransformerEncoderLayer`s (d_ff = 4 d_model, no mask, no dropout); `model(idx)`
    gives the last hidden states. Its torch peer is `torch_models.BERT`.

    Example:
        >>> ember_bert(64, 8, 16, 2, 1, Device.numpy())(ember.zeros(2, 8, dtype="int64")).shape
        (2, 8, 16)
    """
    import ember
    from ember.nn import Embedding, LayerNorm, Module

    class BERT(Module):
        def __init__(self) -> None:
            self.tok, self.pos = Embedding(vocab, d_model, device=device), Embedding(seq, d_model, device=device)
            self.norm = LayerNorm(d_model, device=device)
            self.encoder = ember_encoder(d_model, heads, 4 * d_model, layers, device, activation="gelu")

        def forward(self, idx):
            return self.encoder(self.norm(self.tok(idx) + self.pos(ember.arange(idx.shape[1], device=device))))

    return BERT()


def ember_gpt(vocab: int, seq: int, d_model: int, heads: int, layers: int, device):
    """A GPT in ember's public API: token and learned position embeddings (N(0, 0.02)), `layers` pre-norm
    causal `TransformerEncoderLayer`s (GELU, d_ff = 4 d_model, no dropout), a final LayerNorm and the
    head tied to the token embedding; `model(idx)` gives the logits. Its torch peer is
    `torch_models.GPT`.

    Example:
        >>> ember_gpt(64, 8, 16, 2, 1, Device.numpy())(ember.zeros(2, 8, dtype="int64")).shape
        (2, 8, 64)
    """
    import ember
    from ember.nn import Embedding, LayerNorm, Module, TransformerEncoderLayer, init

    class GPT(Module):
        def __init__(self) -> None:
            self.tok, self.pos = Embedding(vocab, d_model, device=device), Embedding(seq, d_model, device=device)
            for embedding in (self.tok, self.pos):
                embedding.weight.set(init.normal(embedding.weight.shape, std=0.02, device=device))
            self.blocks = [TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, activation="gelu",
                                                   norm_first=True, device=device) for _ in range(layers)]
            self.norm = LayerNorm(d_model, device=device)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(ember.arange(idx.shape[1], device=device))
            for block in self.blocks:
                x = block(x, is_causal=True)
            return self.norm(x) @ self.tok.weight.transpose(0, 1)

    return GPT()


def torch_adamw(torch, params, lr: float, weight_decay: float = 0.01):
    """torch's AdamW as the peers run it: fused (see the module docstring); the defaults ember's AdamW has."""
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)


def ember_step(model, x, y, forward: Forward | None = None) -> Step:
    """A training step of `model` (its parameters under AdamW) on `cross_entropy(forward(x), y)`;
    `forward` defaults to the model itself."""
    from ember.nn.loss import cross_entropy
    from ember.optim import AdamW
    optimizer = AdamW(model, lr=LR)
    forward = forward or model

    def step() -> None:
        optimizer.step(cross_entropy(forward(x), y).backward())
    return step


def torch_step(torch, forward: Forward, params: list, x, y) -> Step:
    optimizer = torch_adamw(torch, params, lr=LR)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(forward(x), y).backward()
        optimizer.step()
    return step


def tinygrad_step(tinygrad, forward: Forward, params: list, x, y) -> Step:
    from tinygrad.helpers import Context
    optimizer = tinygrad.nn.optim.AdamW(params, lr=LR)

    def step() -> None:
        with Context(TRAINING=1):  # tinygrad's optimizer refuses to step outside training mode
            optimizer.zero_grad()
            forward(x).sparse_categorical_crossentropy(y).backward()
            optimizer.step()  # realizes the new parameters, and with them the whole step
            x.grad = None  # backward gave the input a lazy gradient too; unread, it would pile up over steps
    return step
