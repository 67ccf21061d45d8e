"""Which file format a path holds: by its first bytes, else by its extension.

`.json` is the index of a sharded checkpoint (`model.safetensors.index.json`); `.gguf` (llama.cpp) is
read only. Content wins over the name (a `.bin` that is really safetensors loads as safetensors); the
extension decides only when the bytes say nothing, and chooses the format for files about to be written.

Example:
    >>> format_for_extension("model.safetensors")
    'safetensors'
    >>> sniff_format("resnet.pth")
    'torch'
"""

from __future__ import annotations

import os
import struct

from ..errors import StoreError

__all__ = ["EXTENSIONS", "FORMAT_NAMES", "format_for_extension", "sniff_format", "detect_format"]

FORMAT_NAMES = ("native", "safetensors", "torch", "sharded", "gguf")
EXTENSIONS = {".ember": "native", ".safetensors": "safetensors", ".pt": "torch", ".pth": "torch", ".bin": "torch",
              ".json": "sharded", ".gguf": "gguf"}


def format_for_extension(path: str | os.PathLike) -> str | None:
    """The format a file name's extension promises, or None for an extension ember does not know.

    Example:
        >>> format_for_extension("ckpt.pt")
        'torch'
    """
    return EXTENSIONS.get(os.path.splitext(os.fspath(path))[1].lower())


def sniff_format(path: str | os.PathLike) -> str | None:
    """The format the file's first bytes identify, or None when they match none.

    Example:
        >>> sniff_format("model.ember")
        'native'
    """
    from .gguf import MAGIC as GGUF_MAGIC
    from .native import MAGIC
    from .torch_pickle import ZIP_MAGIC, is_legacy_stream

    with open(path, "rb") as f:
        head = f.read(9)
        size = os.fstat(f.fileno()).st_size
    if head[:4] == MAGIC:
        return "native"
    if head[:4] == GGUF_MAGIC:
        return "gguf"
    # safetensors has no magic: a u64 header length that fits the file, then a JSON object. Tested
    # before torch's pickle check, which a header length like 0x0580 (bytes 80 05) would also pass;
    # neither torch container has "{" at byte 8.
    if len(head) == 9 and head[8:9] == b"{" and struct.unpack_from("<Q", head)[0] <= size - 8:
        return "safetensors"
    if head[:4] == ZIP_MAGIC or is_legacy_stream(head):
        return "torch"
    return None


def detect_format(path: str | os.PathLike, reading: bool) -> str:
    """The format to use for `path`: sniffed then by extension when reading; by extension when writing.

    Raises `StoreError` naming the file and the known extensions when neither tells.

    Example:
        >>> detect_format("new.safetensors", reading=False)
        'safetensors'
    """
    found = (sniff_format(path) if reading else None) or format_for_extension(path)
    if found is None:
        ext = os.path.splitext(os.fspath(path))[1] or "no extension"
        what = "its contents match no known format and " if reading else ""
        raise StoreError(f"{os.fspath(path)}: cannot tell the file format: {what}{ext!r} is not one of "
                         f"{', '.join(EXTENSIONS)}; pass format= one of {', '.join(FORMAT_NAMES)}")
    return found
