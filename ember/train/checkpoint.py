"""Checkpoints: a folder per checkpoint, written atomically, with keep-last-N and keep-best.

    checkpoints/
      epoch0002-step00000126/
        model.ember        the model's state_dict (ember.store native format; load it on its own)
        training.ember     every other array (optimizer moments, metric states) and, in its metadata,
                           the JSON tree of the training state: epoch, step, data-loader position,
                           RNG streams, optimizer/scheduler scalars, history, best, early stopping
      best.json            which checkpoint is the best so far, by which metric, with its value

A checkpoint is built complete in a hidden temporary folder, then moved into place by
`ember.atomic.replace_folder`: saving a name that exists (a Ctrl-C right at a `checkpoint_every`
step) swaps the two folders in one step where the OS can, so a kill at any moment leaves the old
checkpoint or the new one, never none and never a torn one. Saving and finding checkpoints first
run `ember.atomic.tidy` on the folder, which finishes a replacement killed midway and removes the
temporary files and folders of killed saves. Names sort by (step, epoch): the newest is the one to
resume from.

Example:
    >>> ckpt = Checkpointer("runs/mnist/checkpoints", keep_last=2)
    >>> path = ckpt.save("epoch0001-step00000063", model_state, {"epoch": 1})
    >>> model_state, training = load_checkpoint(ckpt.latest())
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..atomic import replace_folder, temp_path, tidy, write_atomic
from ..tensor import Tensor

_NAME = re.compile(r"^epoch(\d+)-step(\d+)$")
_ARRAY = "__ndarray__"
_TREE_KEY = "ember.train"


def checkpoint_name(epoch: int, step: int) -> str:
    """The folder name of a checkpoint taken after `epoch` whole epochs and `step` optimizer steps.

    Example:
        >>> checkpoint_name(2, 126)
        'epoch0002-step00000126'
    """
    return f"epoch{epoch:04d}-step{step:08d}"


class Checkpointer:
    """Writes checkpoints under `folder`, keeps the newest `keep_last` and the best one.

    Args:
        folder: where checkpoint folders go (created on first save).
        keep_last: how many of the newest checkpoints to keep (the best is kept besides).

    Example:
        >>> Checkpointer("run/checkpoints", keep_last=3).latest() is None
        True
    """

    def __init__(self, folder: str | os.PathLike, keep_last: int = 2) -> None:
        if not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 1:
            raise ValueError(f"keep_last must be an int >= 1, got {keep_last!r}")
        self.folder = Path(folder)
        self.keep_last = keep_last

    def save(self, name: str, model_state: Mapping[str, Any], training: Mapping[str, Any],
             best: Mapping[str, Any] | None = None) -> Path:
        """Write checkpoint `name`; with `best` (a JSON-ready dict), mark it the best one. Returns its path.

        A checkpoint already named `name` is replaced by the new one atomically (see the module
        docstring): a kill at any point leaves one of the two, complete.
        """
        if not _NAME.match(name):
            raise ValueError(f"checkpoint name {name!r} must look like {checkpoint_name(1, 10)!r}")
        from ..store import save
        self.folder.mkdir(parents=True, exist_ok=True)
        tidy(self.folder)
        final = self.folder / name
        tmp = temp_path(final)
        tmp.mkdir()
        try:
            save(tmp / "model.ember", {k: _host(v) for k, v in model_state.items()})
            tree, arrays = flatten_tree(dict(training))
            save(tmp / "training.ember", arrays, metadata={_TREE_KEY: json.dumps(tree)})
            replace_folder(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if best is not None:
            write_atomic(self.folder / "best.json", json.dumps({"checkpoint": name, **best}, indent=2).encode())
        self.prune()
        return final

    def checkpoints(self) -> list[Path]:
        """Every complete checkpoint, oldest first (after tidying the folder, see the module docstring)."""
        if not self.folder.is_dir():
            return []
        tidy(self.folder)
        found = [p for p in self.folder.iterdir() if p.is_dir() and _NAME.match(p.name)]
        return sorted(found, key=_order)

    def latest(self) -> Path | None:
        """The newest checkpoint, or None."""
        found = self.checkpoints()
        return found[-1] if found else None

    def best(self) -> dict[str, Any] | None:
        """The contents of best.json (`checkpoint`, `metric`, `value`, `epoch`), or None."""
        path = self.folder / "best.json"
        if not path.exists():
            return None
        return json.loads(path.read_text(encoding="utf-8"))

    def prune(self) -> None:
        """Delete all but the newest `keep_last` checkpoints and the best one."""
        best = self.best()
        keep = {p.name for p in self.checkpoints()[-self.keep_last:]}
        if best is not None:
            keep.add(best["checkpoint"])
        for path in self.checkpoints():
            if path.name not in keep:
                shutil.rmtree(path)


def load_checkpoint(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(model state as NumPy arrays, training state tree) of a checkpoint folder.

    Example:
        >>> state, training = load_checkpoint("runs/mnist/checkpoints/epoch0003-step00000189")
        >>> model.load_state_dict(state)
    """
    from ..store import load
    path = Path(path)
    tidy(path.parent)
    for file in ("model.ember", "training.ember"):
        if not (path / file).is_file():
            raise FileNotFoundError(f"{path} is not a checkpoint: {file} is missing")
    model_state, _ = load(path / "model.ember", mmap=False)
    arrays, metadata = load(path / "training.ember", mmap=False)
    if _TREE_KEY not in metadata:
        raise ValueError(f"{path / 'training.ember'} holds no training state (metadata key {_TREE_KEY!r})")
    return model_state, unflatten_tree(json.loads(metadata[_TREE_KEY]), arrays)


def find_checkpoint(path: str | os.PathLike) -> Path:
    """The checkpoint to resume from: `path` itself if it is one, else the newest under
    `path/checkpoints` (a run directory) or under `path` (a checkpoints folder).

    Example:
        >>> find_checkpoint("runs/mnist").name
        'epoch0003-step00000189'
    """
    path = Path(path)
    tidy(path.parent)
    if (path / "training.ember").is_file():
        return path
    for folder in (path / "checkpoints", path):
        latest = Checkpointer(folder).latest()
        if latest is not None:
            return latest
    raise FileNotFoundError(f"no checkpoint to resume from in {path} (looked for epoch*-step* folders "
                            f"in {path / 'checkpoints'} and {path})")


def flatten_tree(tree: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """(JSON-ready tree, arrays): every array or tensor replaced by `{"__ndarray__": key}`.

    Tuples become lists and NumPy scalars Python numbers; dict keys must be strings.

    Example:
        >>> flatten_tree({"m": np.zeros(2), "step": 3})
        ({'m': {'__ndarray__': 'a0'}, 'step': 3}, {'a0': array([0., 0.])})
    """
    arrays: dict[str, np.ndarray] = {}

    def walk(node: Any) -> Any:
        if isinstance(node, Tensor):
            node = np.array(node.numpy())
        if isinstance(node, np.ndarray):
            key = f"a{len(arrays)}"
            arrays[key] = np.ascontiguousarray(node)
            return {_ARRAY: key}
        if isinstance(node, np.generic):
            return node.item()
        if isinstance(node, Mapping):
            bad = [k for k in node if not isinstance(k, str)]
            if bad:
                raise TypeError(f"checkpoint state keys must be str, got {bad[0]!r}")
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [walk(v) for v in node]
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        raise TypeError(f"cannot store a {type(node).__name__} in a checkpoint; use arrays, numbers, "
                        f"strings, lists and dicts")

    return walk(tree), arrays


def unflatten_tree(tree: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    """The inverse of `flatten_tree` (arrays come back writable).

    Example:
        >>> unflatten_tree({"m": {"__ndarray__": "a0"}}, {"a0": np.zeros(2)})
        {'m': array([0., 0.])}
    """
    if isinstance(tree, dict):
        if set(tree) == {_ARRAY}:
            return np.array(arrays[tree[_ARRAY]])
        return {k: unflatten_tree(v, arrays) for k, v in tree.items()}
    if isinstance(tree, list):
        return [unflatten_tree(v, arrays) for v in tree]
    return tree


def _host(value: Any) -> np.ndarray:
    return np.array(value.numpy()) if isinstance(value, Tensor) else np.asarray(value)


def _order(path: Path) -> tuple[int, int]:
    epoch, step = _NAME.match(path.name).groups()
    return int(step), int(epoch)

