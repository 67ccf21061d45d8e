"""The remote protocol: versioned MessagePack messages in length-prefixed frames, tickets, limits.

A frame is a 4-byte big-endian length and that many bytes: a MessagePack map with a type `t`, or raw
tensor bytes (a `put` or `data` message says how many chunk frames follow it). Params travel with
ext types for what MessagePack lacks (`DType`, ndarray, NumPy scalar); sequences arrive as tuples.
`decode` refuses anything past `Limits` (frame bytes, array and map lengths, nesting) with a
`ProtocolError`: a hostile message costs a bounded amount of work. A ticket is "ember" and the
lowercase base32 of a MessagePack map: protocol version, the server's iroh endpoint ticket, and the
credential (absent when the server admits only its allow list).

Example:
    >>> decode(encode({"t": "free", "ids": (1, 2)}))
    {'t': 'free', 'ids': (1, 2)}
    >>> parse_ticket(make_ticket("endpoint...", b"k" * 32))["cred"] == b"k" * 32
    True
"""

from __future__ import annotations

import base64
import socket
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...dtype import _BY_NAME, DType
from ...errors import ProtocolError

PROTOCOL = 2
"""The protocol version; client and server must agree (the init exchange checks it)."""
ALPN = b"ember/remote/1"
CHUNK = 4 << 20
"""Bytes of tensor data per chunk frame."""
_HEADER = struct.Struct(">I")
_TICKET = "ember"
INSTALL = "pip install 'ember[remote]'"


@dataclass(frozen=True)
class Limits:
    """What one message may hold; past any of these the message is refused and its session closed."""

    frame: int = CHUNK + 4096          # bytes of one frame
    items: int = 1 << 16               # elements of one array or map
    nodes: int = 1 << 14               # ops of one registered graph
    graphs: int = 1 << 12              # graphs registered by one session
    handles: int = 1 << 20             # tensors held by one session
    rank: int = 32                     # dims of one shape
    exports: int = 64                  # transfer tokens one session holds unredeemed


LIMITS = Limits()

_EXT_DTYPE, _EXT_ARRAY, _EXT_SCALAR = 1, 2, 3


def _default(value: Any):
    import msgpack
    if isinstance(value, DType):
        return msgpack.ExtType(_EXT_DTYPE, value.name.encode())
    if isinstance(value, np.ndarray):
        return msgpack.ExtType(_EXT_ARRAY, _packer().pack((value.dtype.str, value.shape, value.tobytes())))
    if isinstance(value, np.generic):
        return msgpack.ExtType(_EXT_SCALAR, _packer().pack((value.dtype.str, value.tobytes())))
    raise TypeError(f"the remote protocol cannot send a {type(value).__name__}: {value!r}")


def _ext(code: int, data: bytes):
    if code == _EXT_DTYPE:
        dtype = _BY_NAME.get(data.decode("ascii", "replace"))
        if dtype is None:
            raise ProtocolError(f"unknown dtype {data[:32]!r}")
        return dtype
    if code in (_EXT_ARRAY, _EXT_SCALAR):
        fields = decode(data)
        if code == _EXT_ARRAY and (type(fields) is not tuple or len(fields) != 3):
            raise ProtocolError("malformed array")
        if code == _EXT_SCALAR and (type(fields) is not tuple or len(fields) != 2):
            raise ProtocolError("malformed scalar")
        dtype = np.dtype(_numpy_dtype(fields[0]))
        raw = fields[-1]
        shape = fields[1] if code == _EXT_ARRAY else ()
        if type(raw) is not bytes or not _is_shape(shape) or np.prod(shape, dtype=np.int64) * dtype.itemsize != len(raw):
            raise ProtocolError("malformed array: its bytes do not match its shape and dtype")
        array = np.frombuffer(raw, dtype).reshape(shape)
        return array.copy() if code == _EXT_ARRAY else array[()]
    raise ProtocolError(f"unknown ext type {code}")


_NUMPY_DTYPES = {np.dtype(d.np).str: d.np for d in _BY_NAME.values() if d.name != "bf16"}


def _numpy_dtype(name: Any):
    found = _NUMPY_DTYPES.get(name) if type(name) is str else None
    if found is None:
        raise ProtocolError(f"unsupported array dtype {str(name)[:32]!r}")
    return found


def _is_shape(shape: Any) -> bool:
    return type(shape) is tuple and len(shape) <= LIMITS.rank and all(
        type(n) is int and 0 <= n < 1 << 40 for n in shape)


_PACKER = None


def _packer():
    global _PACKER
    if _PACKER is None:
        import msgpack
        _PACKER = msgpack.Packer(default=_default, use_bin_type=True)
    return _PACKER


def encode(message: Any) -> bytes:
    """`message` (maps, tuples or lists, ints, floats, str, bytes, None, DType, ndarray, NumPy scalars) as
    MessagePack."""
    try:
        return _packer().pack(message)
    except TypeError as e:
        raise ProtocolError(str(e)) from None


def decode(data: bytes, limits: Limits = LIMITS) -> Any:
    """The message in `data`; `ProtocolError` if it is not one MessagePack value within `limits`."""
    try:
        import msgpack
    except ImportError:
        raise ImportError(f"the remote device needs msgpack: {INSTALL}") from None
    if len(data) > limits.frame:
        raise ProtocolError(f"a message of {len(data)} bytes is over the limit of {limits.frame}")
    try:
        return msgpack.unpackb(data, use_list=False, raw=False, strict_map_key=True, ext_hook=_ext,
                               max_bin_len=limits.frame, max_str_len=1 << 16, max_array_len=limits.items,
                               max_map_len=limits.items, max_ext_len=limits.frame)
    except ProtocolError:
        raise
    except (ValueError, TypeError, KeyError, OverflowError, RecursionError, MemoryError) as e:
        # msgpack's ExtraData, FormatError, StackError and UnpackValueError are ValueErrors
        raise ProtocolError(f"undecodable message: {type(e).__name__}: {str(e)[:200]}") from None


def make_ticket(endpoint: str, credential: bytes | None) -> str:
    """The ticket a server prints: its iroh endpoint ticket and credential (None: allow list only)."""
    body = encode({"v": PROTOCOL, "endpoint": endpoint, "cred": credential})
    return _TICKET + base64.b32encode(body).decode().rstrip("=").lower()


def parse_ticket(ticket: str) -> dict:
    """The fields of a ticket (`make_ticket`); `RemoteError` naming what is wrong with a bad one."""
    from ...errors import RemoteError
    if not isinstance(ticket, str) or not ticket.startswith(_TICKET):
        raise RemoteError(f"not an ember ticket (they start with {_TICKET!r}, as `ember serve` prints them): "
                          f"{str(ticket)[:40]!r}")
    text = ticket[len(_TICKET):].upper()
    try:
        fields = decode(base64.b32decode(text + "=" * (-len(text) % 8)))
    except (ValueError, ProtocolError) as e:
        raise RemoteError(f"a damaged ember ticket ({e}): copy it again from `ember serve`") from None
    if not isinstance(fields, dict) or not isinstance(fields.get("endpoint"), str):
        raise RemoteError("a damaged ember ticket (no endpoint): copy it again from `ember serve`")
    if fields.get("v") != PROTOCOL:
        raise RemoteError(f"the ticket is for remote protocol {fields.get('v')}, this ember speaks {PROTOCOL}: "
                          f"use the same ember version on both sides")
    return fields


# ---- frames over a socket ------------------------------------------------------------------------
class SocketFrames:
    """Frames over a connected blocking socket (the TCP transport); `sent` and `received` count the bytes
    of its frames, headers included."""

    def __init__(self, sock: socket.socket, limits: Limits = LIMITS) -> None:
        self.sock = sock
        self.limits = limits
        self.sent = self.received = 0
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, *frames: bytes | memoryview) -> None:
        for frame in frames:
            self.sent += _HEADER.size + len(frame)
            if len(frame) < 1 << 16:  # one write for a message: no copy worth avoiding
                self.sock.sendall(_HEADER.pack(len(frame)) + frame)
            else:
                self.sock.sendall(_HEADER.pack(len(frame)))
                self.sock.sendall(frame)

    def recv(self) -> bytes:
        """The next frame; `EOFError` when the peer closed, `ProtocolError` for an oversized one."""
        size = self._size()
        if size > self.limits.frame:
            raise ProtocolError(f"a frame of {size} bytes is over the limit of {self.limits.frame}")
        buffer = bytearray(size)
        self._fill(memoryview(buffer))
        return bytes(buffer)

    def recv_into(self, view: memoryview) -> None:
        """The next frame written into `view`, which it must fill exactly."""
        size = self._size()
        if size != len(view):
            raise ProtocolError(f"a chunk of {size} bytes where {len(view)} were due")
        self._fill(view)

    def _size(self) -> int:
        header = bytearray(4)
        self._fill(memoryview(header))
        return _HEADER.unpack(header)[0]

    def _fill(self, view: memoryview) -> None:
        got = 0
        while got < len(view):
            n = self.sock.recv_into(view[got:])
            if not n:
                raise EOFError("the peer closed the connection")
            got += n
        self.received += got

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
