"""Moving data: a 16 MB f32 array from the host to the device and back, through each framework's
ordinary calls (on CPU devices this is the cost of the copies each framework makes)."""

from __future__ import annotations

import numpy as np

from .frameworks import Frameworks, fixed
from .harness import Row, Settings


def to_device(fw: Frameworks, settings: Settings) -> list[Row]:
    n = settings.size(4 << 20, 64)  # f32 elements: 16 MiB
    host = np.random.default_rng(0).standard_normal(n, dtype=np.float32)

    def ember_setup():
        ember = fw.modules["ember"]
        return lambda: ember.tensor(host, device=fw.device).numpy()

    def torch_setup():
        torch = fw.modules["torch"]
        return lambda: torch.tensor(host, device=fw.torch_device).cpu().numpy()

    def tinygrad_setup():
        tensor = fw.modules["tinygrad"].Tensor
        return lambda: tensor(host).realize().numpy()

    impls = {"numpy": fixed(lambda: host.copy().copy()), "ember": ember_setup, "torch": torch_setup,
             "tinygrad": tinygrad_setup}
    return fw.compare("to_device", f"host -> device -> host, {n * 4 / 2**20:g} MiB f32", impls, settings,
                      notes={"numpy": "two host copies: the floor", "torch": f"device {fw.torch_device}"})


BENCHMARKS = {"to_device": to_device}
