"""Train a small CNN on the MNIST sample that ships with ember, with the Learner and its dashboard.

    python -m ember.examples.mnist                  # defaults: Device.default(), runs/mnist
    python -m ember.examples.mnist --epochs 3 --device numpy --out runs/mnist-numpy
    python -m ember.examples.mnist --resume         # continue runs/mnist after Ctrl-C

The model: conv 1->16 3x3, relu, maxpool 2, conv 16->32 3x3, relu, maxpool 2, linear 32*7*7 -> 10
(20,490 parameters; `--width` sets the 16). It trains with AdamW and a cosine learning-rate decay on
the 4,000 training images of `mnist_sample("train")`, each shifted by up to 2 pixels at random
(`--shift`), and is evaluated on the sample's 1,000 held-out test images. Inputs are scaled to [0, 1]
and standardized with MNIST's mean and standard deviation. The script prints the held-out accuracy at
the end. The defaults (4 epochs of batches of 32) reach about 0.96 (docs/training.md has timings); on
a machine whose cores are busy with other work, multi-threaded BLAS can make the NumPy backend's
convolutions many times slower, and `OPENBLAS_NUM_THREADS=1` restores the speed.

Example:
    >>> result, accuracy = main(["--epochs", "1", "--out", "runs/mnist-try"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

import numpy as np

import ember
from ember.config import Config
from ember.data import DataLoader
from ember.data.vision import mnist_sample
from ember.data.vision.augment import random_crop
from ember.nn import Conv2d, Linear, MaxPool2d, Module
from ember.nn.loss import cross_entropy
from ember.optim import AdamW
from ember.optim.lr import CosineAnnealing
from ember.train import Accuracy, CpuUsage, FitResult, ItemsPerSecond, Learner, LearningRate, MemoryUsage

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081  # of the full MNIST training set, as commonly used


class MnistConfig(Config):
    """The settings of a run (saved as config.json in the run directory)."""

    epochs: int = 4
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 1e-4
    seed: int = 0
    device: str = ""
    train_items: int = 4000
    width: int = 16
    shift: int = 2


class ConvNet(Module):
    """conv(1->w, 3x3) relu pool2, conv(w->2w, 3x3) relu pool2, linear(2w*7*7 -> 10); w = `width`.

    Example:
        >>> ConvNet(width=16)(ember.zeros(2, 1, 28, 28)).shape
        (2, 10)
    """

    def __init__(self, width: int = 16, device=None) -> None:
        self.conv1 = Conv2d(1, width, 3, padding=1, device=device)
        self.conv2 = Conv2d(width, 2 * width, 3, padding=1, device=device)
        self.pool = MaxPool2d(2)
        self.head = Linear(2 * width * 7 * 7, 10, device=device)

    def forward(self, x):
        x = self.pool(self.conv1(x).relu())
        x = self.pool(self.conv2(x).relu())
        return self.head(x.reshape(x.shape[0], -1))


def to_input(item: tuple[np.ndarray, int]) -> tuple[np.ndarray, int]:
    """(28, 28) uint8 image -> standardized (1, 28, 28) float32; a module-level function so loader
    workers can pickle it.

    Example:
        >>> to_input((np.zeros((28, 28), np.uint8), 3))[0].shape
        (1, 28, 28)
    """
    image, label = item
    x = (image.astype(np.float32) / 255.0 - MNIST_MEAN) / MNIST_STD
    return x[None], label


class Shift:
    """Move the digit by up to `pixels` in each direction (pad, then crop 28x28 at a random place): with
    4,000 images, this keeps the model from memorizing pixel positions.

    Example:
        >>> Shift(2)((np.zeros((28, 28), np.uint8), 7), np.random.default_rng(0))[0].shape
        (28, 28)
    """

    def __init__(self, pixels: int) -> None:
        self.pixels = pixels

    def __call__(self, item: tuple[np.ndarray, int], rng: np.random.Generator) -> tuple[np.ndarray, int]:
        image, label = item
        return random_crop(image, 28, rng=rng, padding=self.pixels), label


def loaders(config: MnistConfig) -> tuple[DataLoader, DataLoader]:
    """Shuffled, shifted training batches (the sample is sorted by label) and the held-out test batches."""
    train = mnist_sample("train")
    if config.train_items < len(train):
        train = train.shuffled(seed=config.seed).partial(0, config.train_items)
    if config.shift:
        train = train.map_random(Shift(config.shift), seed=config.seed)
    test = mnist_sample("test")
    return (DataLoader(train.map(to_input), config.batch_size, shuffle=True, seed=config.seed),
            DataLoader(test.map(to_input), 500))


def train(config: MnistConfig, out: str | None, display: str = "auto", resume: bool = False
          ) -> tuple[FitResult, float]:
    """Train and evaluate; returns the fit result and the held-out accuracy.

    Example:
        >>> result, accuracy = train(MnistConfig(epochs=1), out=None, display="none")  # doctest: +SKIP
    """
    device = ember.Device(config.device) if config.device else ember.Device.default()
    ember.seed(config.seed)
    model = ConvNet(config.width, device)
    optimizer = AdamW(model, lr=config.lr, weight_decay=config.weight_decay)
    train_loader, test_loader = loaders(config)
    schedule = CosineAnnealing(optimizer, T_max=config.epochs * len(train_loader))
    learner = Learner(model, optimizer, schedule, loss=cross_entropy, device=device, run_dir=out, config=config,
                      metrics=[Accuracy(), LearningRate(), ItemsPerSecond(), CpuUsage(), MemoryUsage()],
                      best_metric="valid/accuracy", display=display)
    result = learner.fit(train_loader, test_loader, epochs=config.epochs, resume=out if resume else None)
    # The last epoch's validation measured these weights on the test images already (the same batches in
    # the same order: `Learner.evaluate` would repeat it); a run stopped mid-epoch has newer weights.
    accuracy = None if result.interrupted else result.final.get("valid/accuracy")
    return result, accuracy if accuracy is not None else learner.evaluate(test_loader)["accuracy"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    defaults = MnistConfig()
    parser = argparse.ArgumentParser(prog="python -m ember.examples.mnist",
                                     description="Train a small CNN on ember's embedded MNIST sample.")
    parser.add_argument("--device", default=defaults.device,
                        help="cpu, numpy, cuda:0, ... (default: EMBER_DEVICE, else the best available)")
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--train-items", type=int, default=defaults.train_items,
                        help="train on the first N of the 4,000 sample images (after a seeded shuffle)")
    parser.add_argument("--width", type=int, default=defaults.width,
                        help="channels of the first conv layer (the second has twice as many)")
    parser.add_argument("--shift", type=int, default=defaults.shift,
                        help="augment: shift training images by up to N pixels (0: off)")
    parser.add_argument("--out", default="runs/mnist", help="run directory (checkpoints, metrics, plots)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--display", default="auto", choices=["auto", "rich", "plain", "none"])
    args = parser.parse_args(argv)
    if min(args.epochs, args.batch_size, args.train_items, args.width) < 1 or args.shift < 0:
        parser.error("--epochs, --batch-size, --train-items and --width must be >= 1, --shift >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> tuple[FitResult, float]:
    """The command line: train, then print the held-out accuracy."""
    args = parse_args(argv)
    config = MnistConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                         device=args.device, train_items=args.train_items, width=args.width, shift=args.shift)
    result, accuracy = train(config, args.out, args.display, args.resume)
    status = " (interrupted: run again with --resume)" if result.interrupted else ""
    epochs = result.epochs_completed
    print(f"held-out accuracy: {accuracy:.4f} on 1,000 test images after {epochs} epoch{'s' * (epochs != 1)}, "
          f"{result.seconds:.1f} s{status}")
    return result, accuracy


if __name__ == "__main__":
    main(sys.argv[1:])
