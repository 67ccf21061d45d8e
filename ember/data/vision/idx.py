"""Reader for the IDX format of MNIST and its relatives (Fashion-MNIST, KMNIST, EMNIST).

An IDX file is a 4-byte magic number `0x00 0x00 <type> <ndim>`, then `ndim` big-endian uint32
dimension sizes, then the values in C order, big-endian. Files ending in `.gz` are gunzipped.

Example:
    >>> images = read_idx("train-images-idx3-ubyte.gz", magic=2051)  # doctest: +SKIP
    >>> images.shape, images.dtype  # doctest: +SKIP
    ((60000, 28, 28), dtype('uint8'))
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

from ..errors import DataError

# IDX type byte -> big-endian element dtype.
IDX_TYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path: str | os.PathLike[str], magic: int | None = None) -> np.ndarray:
    """The array stored in IDX file `path`, in native byte order; `magic` checks the header.

    Raises `DataError` naming the file for a bad magic number, an unknown type, or a size that
    does not match the header.

    Example:
        >>> labels = read_idx("t10k-labels-idx1-ubyte", magic=2049)  # doctest: +SKIP
    """
    path = Path(path)
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                raw = f.read()
        else:
            raw = path.read_bytes()
    except (OSError, EOFError) as exc:
        raise DataError(f"{path}: cannot read IDX file ({exc})") from exc
    if len(raw) < 4:
        raise DataError(f"{path}: {len(raw)} bytes is too short for an IDX header")
    found = int.from_bytes(raw[:4], "big")
    if raw[0] != 0 or raw[1] != 0 or raw[2] not in IDX_TYPES or raw[3] == 0:
        raise DataError(f"{path}: not an IDX file: magic number 0x{found:08x} should be 0x0000TTNN "
                        f"with type TT in {sorted(f'0x{t:02x}' for t in IDX_TYPES)} and NN >= 1 dims")
    if magic is not None and found != magic:
        raise DataError(f"{path}: expected IDX magic number {magic} (0x{magic:08x}), found {found} (0x{found:08x})")
    dtype, ndim = IDX_TYPES[raw[2]], raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: truncated IDX header: {ndim} dims need {header} bytes, file has {len(raw)}")
    shape = tuple(int.from_bytes(raw[4 + 4 * k:8 + 4 * k], "big") for k in range(ndim))
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        raise DataError(f"{path}: IDX header says shape {shape} of {dtype.newbyteorder('=')} "
                        f"({expected} bytes with header), file has {len(raw)} bytes")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))
