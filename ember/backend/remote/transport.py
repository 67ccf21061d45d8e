"""Transports of the remote device: iroh QUIC to authenticate and agree, then frames over iroh or TCP.

A client connects to the server's iroh endpoint (peers identified by their node keys; relays off
unless the ticket names one) and sends `init` on a bidirectional stream; the server answers `ready` or
an error. With the `iroh` transport the session's frames then flow on that stream. With `tcp` (the
default: the iroh Python bindings move ~6 MB/s here, a loopback TCP socket GB/s; docs/remote.md) the
`ready` message carries a one-time 32-byte session key and a port: the client opens a TCP stream to the
server's address and sends the key first; the server admits one stream per key. That stream is
authenticated but not encrypted: use `--transport iroh` across networks you do not trust.

iroh's futures run on one asyncio loop in a daemon thread (`loop()`); the backend is synchronous.

Example:
    >>> frames, ready, keep = connect(parse_ticket(ticket), init)
    >>> ready["device"]
    'Device("cpu")'
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import threading
from pathlib import Path
from typing import Any

from ...errors import RemoteError
from .protocol import _HEADER, ALPN, INSTALL, LIMITS, Limits, SocketFrames, decode, encode

CONNECT_TIMEOUT = 20.0


def iroh():
    """The `iroh` module, or ImportError naming the extra."""
    try:
        import iroh as module
    except ImportError:
        raise ImportError(f"the remote device needs the iroh package: {INSTALL}") from None
    return module


class Loop:
    """An asyncio loop in a daemon thread; `run(coro)` from any other thread waits for its result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="ember-iroh", daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


_LOOP: Loop | None = None
_LOOP_LOCK = threading.Lock()


def loop() -> Loop:
    """The process's iroh loop (started on first use)."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = Loop()
        return _LOOP


async def bind(secret: bytes | None, alpns: list[bytes], address: str, relays: bool):
    """An iroh endpoint on `address` ("host:port") with node key `secret` (None: a fresh one)."""
    module = iroh()
    options = module.EndpointOptions(
        preset=module.preset_n0() if relays else module.preset_minimal(), bind_addr=address, alpns=alpns,
        secret_key=secret, relay_mode=None if relays else module.RelayMode.disabled())
    return await module.Endpoint.bind(options)


def client_key() -> bytes:
    """This machine's client node key: the file `EMBER_REMOTE_KEY`, else ~/.config/ember/remote.key, made
    on first use (a server's `--allow` lists the node ids of such keys: `ember id` prints this one's)."""
    from ...atomic import write_atomic
    path = Path(os.environ.get("EMBER_REMOTE_KEY") or Path.home() / ".config" / "ember" / "remote.key")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, secrets.token_bytes(32))
        path.chmod(0o600)
    key = path.read_bytes()
    if len(key) != 32:
        raise RemoteError(f"{path} is not an ember client key (32 bytes, made by `ember id`): it has {len(key)} bytes")
    return key


def node_id(key: bytes) -> str:
    """The iroh node id of a 32-byte node key."""
    return str(iroh().SecretKey.from_bytes(key).public())


class IrohFrames:
    """Frames over an iroh bidirectional stream, read and written from a plain thread through `loop`."""

    def __init__(self, loop: Loop, send, recv, limits: Limits = LIMITS) -> None:
        self.loop, self.sender, self.receiver, self.limits = loop, send, recv, limits

    def send(self, *frames: bytes | memoryview) -> None:
        data = b"".join(_HEADER.pack(len(f)) + bytes(f) for f in frames)
        self.loop.run(self.sender.write_all(data))

    def recv(self) -> bytes:
        return self.loop.run(read_frame(self.receiver, self.limits))

    def recv_into(self, view: memoryview) -> None:
        data = self.recv()
        if len(data) != len(view):
            from ...errors import ProtocolError
            raise ProtocolError(f"a chunk of {len(data)} bytes where {len(view)} were due")
        view[:] = data

    def close(self) -> None:
        try:
            self.loop.run(self.sender.finish(), timeout=2)
        except Exception:  # noqa: BLE001 - the stream may be gone already: closing is best effort
            pass


async def read_frame(recv, limits: Limits = LIMITS) -> bytes:
    """One frame from an iroh receive stream; `EOFError` when it ended."""
    from ...errors import ProtocolError
    try:
        size, = _HEADER.unpack(await recv.read_exact(4))
        if size > limits.frame:
            raise ProtocolError(f"a frame of {size} bytes is over the limit of {limits.frame}")
        return await recv.read_exact(size) if size else b""
    except iroh().IrohError as e:
        raise EOFError(f"the stream ended: {e.message()}") from None


def connect(ticket: dict, init: dict) -> tuple[Any, dict, tuple]:
    """Connect to the server of a parsed `ticket` and send `init`: (frames, the `ready` message, the iroh
    objects the session must keep alive). `RemoteError` with the server's reason when it refuses."""
    module = iroh()
    io = loop()
    address = module.EndpointTicket.from_string(ticket["endpoint"]).endpoint_addr()

    async def handshake():
        endpoint = await bind(client_key(), [], "0.0.0.0:0", relays=address.relay_url() is not None)
        connection = await endpoint.connect(address, ALPN)
        stream = await connection.open_bi()
        send, recv = stream.send(), stream.recv()
        await send.write_all(_HEADER.pack(len(frame := encode(init))) + frame)
        reply = decode(await read_frame(recv))
        return endpoint, connection, send, recv, reply
    try:
        endpoint, connection, send, recv, reply = io.run(handshake(), CONNECT_TIMEOUT)
    except (EOFError, TimeoutError) as e:
        raise RemoteError(f"the ember server at {address.direct_addresses()} closed the connection during the "
                          f"handshake ({e or 'timed out'})") from None
    except module.IrohError as e:
        raise RemoteError(f"cannot reach the ember server at {address.direct_addresses()}: {e.message()}") from None
    if not isinstance(reply, dict) or reply.get("t") != "ready":
        why = reply.get("msg") if isinstance(reply, dict) else repr(reply)[:100]
        raise RemoteError(f"the ember server refused this client: {why}")
    keep = (endpoint, connection, send, recv)
    if reply.get("transport") == "iroh":
        return IrohFrames(io, send, recv), reply, keep
    host = _host(address.direct_addresses())
    sock = socket.create_connection((host, int(reply["port"])), timeout=CONNECT_TIMEOUT)
    sock.settimeout(None)
    sock.sendall(reply["key"])
    return SocketFrames(sock), reply, keep


def _host(addresses: list[str]) -> str:
    """The host of the server's first direct address, IPv4 first ("127.0.0.1:4433" -> "127.0.0.1")."""
    if not addresses:
        raise RemoteError("the ticket has no direct address: a TCP transport needs one (serve with --transport iroh)")
    chosen = sorted(addresses, key=lambda a: a.startswith("["))[0]
    return chosen.rsplit(":", 1)[0].strip("[]")
