"""Model files: writing and reading a 50 MiB state (many f32 tensors) in ember's native format and in
safetensors with `ember.store`, against `torch.save`/`torch.load`, safetensors' own NumPy functions and
NumPy's `.npz`.

Loads read the whole file into memory (ember with `mmap=False`), as torch.load and safetensors'
`load_file` do. Files live in a temporary directory, so reads come from the page cache: this measures
the formats' parsing and copying, not the disk.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from .frameworks import Frameworks, fixed
from .harness import Row, Settings, peer

NO_SAFETENSORS = "safetensors is not installed"
NO_TORCH = "torch, which writes the .pt file, is not in this run"
NOT_COMPARED = "its safetensors loader maps the file lazily onto its DISK device; not compared"


def _state(settings: Settings) -> dict[str, np.ndarray]:
    count, shape = settings.size((50, (512, 512)), (2, (4, 4)))  # 50 x 1 MiB
    rng = np.random.default_rng(0)
    return {f"layers.{i}.weight": rng.standard_normal(shape, dtype=np.float32) for i in range(count)}


def _numpy_load(path: str) -> dict[str, np.ndarray]:
    """Every array of an .npz file, read (`np.load` alone reads each lazily on access)."""
    with np.load(path) as archive:
        return {k: archive[k] for k in archive.files}


def load_record(fw: Frameworks, settings: Settings) -> list[Row]:
    from ember import store
    state = _state(settings)
    mib = sum(a.nbytes for a in state.values()) / 2**20
    safetensors = peer("safetensors.numpy")
    torch = fw.modules.get("torch")
    with tempfile.TemporaryDirectory() as tmp:
        paths = {fmt: os.path.join(tmp, f"model.{ext}")
                 for fmt, ext in (("native", "ember"), ("safetensors", "safetensors"), ("torch", "pt"),
                                  ("numpy", "npz"))}
        torch_state = {k: torch.from_numpy(v) for k, v in state.items()} if torch else {}

        saves = {"ember native": fixed(store.save, paths["native"], state),
                 "ember safetensors": fixed(store.save, paths["safetensors"], state),
                 "torch.save": fixed(torch.save, torch_state, paths["torch"]) if torch else NO_TORCH,
                 "safetensors": fixed(safetensors.save_file, state, paths["safetensors"])
                 if safetensors else NO_SAFETENSORS,
                 "numpy.savez": fixed(np.savez, paths["numpy"], **state), "tinygrad": NOT_COMPARED}
        atomic = "atomic: written beside, fsynced, renamed"
        rows = fw.compare("load_record", f"save {mib:g} MiB ({len(state)} f32 tensors)", saves, settings,
                          notes={"ember native": atomic, "ember safetensors": atomic})
        # Each load reads the file its format's save left above.
        loads = {"ember native": fixed(store.load, paths["native"], mmap=False),
                 "ember safetensors": fixed(store.load, paths["safetensors"], mmap=False),
                 "ember .pt": fixed(store.load, paths["torch"], mmap=False) if torch else NO_TORCH,
                 "torch.load": fixed(torch.load, paths["torch"]) if torch else NO_TORCH,
                 "safetensors": fixed(safetensors.load_file, paths["safetensors"]) if safetensors else NO_SAFETENSORS,
                 "numpy.load": fixed(_numpy_load, paths["numpy"]), "tinygrad": NOT_COMPARED}
        rows += fw.compare("load_record", f"load {mib:g} MiB into memory", loads, settings,
                           notes={"ember .pt": "torch.save's file, read without unpickling code"})
    return rows


BENCHMARKS = {"load_record": load_record}
