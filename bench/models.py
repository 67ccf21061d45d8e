"""The networks the training benchmarks run, built alike in each framework from the same sizes, and one
training step (forward, cross entropy, backward, AdamW update) per framework.

A network is its forward function and its parameters, so the step builders need not know its shape.
ember's networks are `Module`s (its optimizer walks a module); the CNN is the MNIST example's `ConvNet`.
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


def ember_step(model, x, y) -> Step:
    from ember.nn.loss import cross_entropy
    from ember.optim import AdamW
    optimizer = AdamW(model, lr=LR)

    def step() -> None:
        optimizer.step(cross_entropy(model(x), y).backward())
    return step


def torch_step(torch, forward: Forward, params: list, x, y) -> Step:
    optimizer = torch.optim.AdamW(params, lr=LR)

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
