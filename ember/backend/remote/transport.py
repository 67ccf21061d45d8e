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

from ...errors import ProtocolError, RemoteError
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
    """Frames over an iroh bidirectional stream, read and written from a plain thread through `loop`;
    `sent` and `received` count their bytes; `timeout` (seconds, None: none) bounds each wait."""

    def __init__(self, loop: Loop, send, recv, limits: Limits = LIMITS, timeout: float | None = None) -> None:
        self.loop, self.sender, self.receiver, self.limits, self.timeout = loop, send, recv, limits, timeout
        self.sent = self.received = 0

    def send(self, *frames: bytes | memoryview) -> None:
        data = b"".join(_HEADER.pack(len(f)) + bytes(f) for f in frames)
        self.sent += len(data)
        self.loop.run(self.sender.write_all(data), self.timeout)

    def recv(self) -> bytes:
        data = self.loop.run(read_frame(self.receiver, self.limits), self.timeout)
        self.received += _HEADER.size + len(data)
        return data

    def recv_into(self, view: memoryview) -> None:
        data = self.recv()
        if len(data) != len(view):
            raise ProtocolError(f"a chunk of {len(data)} bytes where {len(view)} were due")
        view[:] = data

    def close(self) -> None:
        try:
            self.loop.run(self.sender.finish(), timeout=2)
        except Exception:  # noqa: BLE001 - the stream may be gone already: closing is best effort
            pass


async def read_frame(recv, limits: Limits = LIMITS) -> bytes:
    """One frame from an iroh receive stream; `EOFError` when it ended."""
    try:
        size, = _HEADER.unpack(await recv.read_exact(4))
        if size > limits.frame:
            raise ProtocolError(f"a frame of {size} bytes is over the limit of {limits.frame}")
        return await recv.read_exact(size) if size else b""
    except iroh().IrohError as e:
        raise EOFError(f"the stream ended: {e.message()}") from None


class Refused(RemoteError):
    """The server answered the handshake with a refusal (its reason is the message)."""


def connect(ticket: dict, init: dict, endpoint=None, io: Loop | None = None, timeout: float | None = None,
            connection=None) -> tuple[Any, dict, tuple]:
    """Connect to the server of a parsed `ticket` and send `init`: (frames, the `ready` message, the iroh
    objects the session must keep alive: endpoint, connection, streams). `Refused` with the server's
    reason when it refuses, `RemoteError` when it cannot be reached. `endpoint` (on `io`'s loop): the
    iroh endpoint to connect from, so the server sees its node id (a server pulling a transfer uses its
    own); None: one bound with this machine's client key (`client_key`). `connection`: an open iroh
    connection to that server to reuse (a new stream on it). `timeout` bounds each later wait of the
    frames (None: none)."""
    module = iroh()
    io = io or loop()
    address = module.EndpointTicket.from_string(ticket["endpoint"]).endpoint_addr()
    where = f"the ember server at {address.direct_addresses()}"

    async def handshake():
        own = endpoint
        link = connection
        if link is None:
            own = own or await bind(client_key(), [], "0.0.0.0:0", relays=address.relay_url() is not None)
            link = await own.connect(address, ALPN)
        stream = await link.open_bi()
        send, recv = stream.send(), stream.recv()
        await send.write_all(_HEADER.pack(len(frame := encode(init))) + frame)
        reply = decode(await read_frame(recv))
        return own, link, send, recv, reply
    try:
        own, link, send, recv, reply = io.run(handshake(), CONNECT_TIMEOUT)
    except (EOFError, TimeoutError) as e:
        raise RemoteError(f"{where} closed the connection during the handshake ({e or 'timed out'})") from None
    except module.IrohError as e:
        raise RemoteError(f"cannot reach {where}: {e.message()}") from None
    except ProtocolError as e:
        raise RemoteError(f"{where} answered the handshake with a malformed message ({e})") from None
    if not isinstance(reply, dict) or reply.get("t") != "ready":
        why = reply.get("msg") if isinstance(reply, dict) else repr(reply)[:100]
        raise Refused(f"the ember server refused: {why}")
    keep = (own, link, send, recv)
    if reply.get("transport") == "iroh":
        return IrohFrames(io, send, recv, timeout=timeout), reply, keep
    if type(reply.get("port")) is not int or type(reply.get("key")) is not bytes:
        raise RemoteError(f"{where} sent a malformed 'ready'")
    try:
        sock = socket.create_connection((_host(address.direct_addresses()), reply["port"]), timeout=CONNECT_TIMEOUT)
        sock.settimeout(timeout)
        sock.sendall(reply["key"])
    except OSError as e:
        raise RemoteError(f"cannot open the TCP stream of {where}: {e}") from None
    return SocketFrames(sock), reply, keep


def endpoint_node(endpoint: str) -> str:
    """The node id of an iroh endpoint ticket (a server's address, as its ember ticket holds it);
    `RemoteError` if `endpoint` is not one."""
    module = iroh()
    try:
        return str(module.EndpointTicket.from_string(endpoint).endpoint_addr().id())
    except module.IrohError:
        raise RemoteError(f"not an iroh endpoint ticket: {endpoint[:40]!r}") from None


def _host(addresses: list[str]) -> str:
    """The host of the server's first direct address, IPv4 first ("127.0.0.1:4433" -> "127.0.0.1")."""
    if not addresses:
        raise RemoteError("the ticket has no direct address: a TCP transport needs one (serve with --transport iroh)")
    chosen = sorted(addresses, key=lambda a: a.startswith("["))[0]
    return chosen.rsplit(":", 1)[0].strip("[]")
