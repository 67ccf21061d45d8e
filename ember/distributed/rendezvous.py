"""The bootstrap of ranks started without mpirun (torchrun's variables): rank 0 listens at
MASTER_ADDR:MASTER_PORT and hands every other rank a few bytes (the NCCL unique id). Only that: the
collectives themselves run on NCCL, never on this socket.

Example:
    >>> payload = share(b"id", rank=0, world_size=1, addr="127.0.0.1", port=29500)
    >>> payload
    b'id'
"""

from __future__ import annotations

import socket
import struct
import time

from ..errors import DistributedError

TIMEOUT = 300.0  # seconds a rank waits for the others (torchrun's default rendezvous timeout is 900)


def share(payload: bytes | None, rank: int, world_size: int, addr: str, port: int,
          timeout: float = TIMEOUT) -> bytes:
    """Rank 0's `payload`, on every rank (others pass None); raises `DistributedError` after `timeout`."""
    if world_size == 1:
        return payload
    if rank == 0:
        return _serve(payload, world_size, port, timeout)
    return _fetch(rank, addr, port, timeout)


def _serve(payload: bytes, world_size: int, port: int, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("", port))
        server.listen(world_size)
        joined: set[int] = set()
        while len(joined) < world_size - 1:
            server.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                conn, _ = server.accept()
            except socket.timeout:
                missing = sorted(set(range(1, world_size)) - joined)
                raise DistributedError(f"rendezvous on port {port}: ranks {missing} did not join within "
                                       f"{timeout:.0f} s") from None
            with conn:
                conn.settimeout(timeout)
                joined.add(struct.unpack("!i", _read(conn, 4))[0])
                conn.sendall(struct.pack("!i", len(payload)) + payload)
    return payload


def _fetch(rank: int, addr: str, port: int, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((addr, port), timeout=max(deadline - time.monotonic(), 0.001)) as conn:
                conn.sendall(struct.pack("!i", rank))
                size = struct.unpack("!i", _read(conn, 4))[0]
                return _read(conn, size)
        except (ConnectionError, socket.timeout, OSError) as e:
            if time.monotonic() > deadline:
                raise DistributedError(f"rendezvous: rank {rank} could not reach rank 0 at {addr}:{port} within "
                                       f"{timeout:.0f} s ({e})") from None
            time.sleep(0.05)


def _read(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        data += chunk
    return data
