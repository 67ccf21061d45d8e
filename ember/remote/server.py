"""`ember serve`: a server of one ember device to remote clients (`Device.remote(ticket)`).

The server binds an iroh endpoint (relays off unless asked), prints its ticket and accepts peers. A peer
is admitted when its node id is on the allow list, or when its `init` carries the ticket's credential
(compared in constant time); the protocol versions must match. Anything else is answered with the
reason and closed before a single op runs. Each admitted client gets a `Session` run by its own thread
over its transport (`ember.backend.remote.transport`); the device's own stack (fusion, autotune,
memory pool) serves every session. A session ends when its client disconnects or crashes, or on a
protocol violation (logged with the reason); its tensors are freed then, and the server keeps serving.
Server-to-server moves: a peer whose `init` is a `fetch` presents a transfer token (`tokens.py`) instead
of a credential and gets that one tensor's bytes (`_fetch`); a session's `import` makes this server
pull one from another server as such a peer, from its own node id (`_pull`).

Example:
    >>> server = Server(Device.cpu(), max_memory=1 << 30)
    >>> ticket = server.start()            # in a background thread: server.serve_forever() blocks
    >>> Device.remote(ticket)
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import secrets
import socket
import threading
import time
from typing import Callable, Iterable

import numpy as np

from ..backend.remote.protocol import _HEADER, ALPN, PROTOCOL, SocketFrames, decode, encode, make_ticket
from ..backend.remote.transport import IrohFrames, Loop, Refused, bind, connect, iroh, read_frame
from ..errors import ProtocolError, RemoteError
from ..ops.primitive import Aval
from .session import ServerState, Session, receive, send_value
from .tokens import TokenRefused

log = logging.getLogger("ember.remote")
HANDSHAKE_TIMEOUT = 10.0
PULL_TIMEOUT = 30.0
"""Seconds a pull waits for each frame of the source server before it gives up."""
PEER_IDLE = 60.0
"""Seconds a source keeps a fetching peer's connection open without a fetch."""
PEERS = 64
"""Connections to source servers a server keeps for its next pulls."""


class Server:
    """Serve `device` (see the module docstring). `allow`: node ids admitted without the credential;
    `credential`: the ticket's secret (None with `allow`: the allow list only; None without: a fresh
    one); `transport`: "tcp" (bulk-speed frames after the iroh handshake) or "iroh" (all on QUIC)."""

    def __init__(self, device, allow: Iterable[str] = (), credential: bytes | None = None,
                 max_memory: int | None = None, transport: str = "tcp", relay: bool = False,
                 host: str = "127.0.0.1") -> None:
        if transport not in ("tcp", "iroh"):
            raise ValueError(f"transport must be 'tcp' or 'iroh', got {transport!r}")
        self.allow = frozenset(allow)
        self.credential = credential if credential or self.allow else secrets.token_bytes(32)
        self.state = ServerState(device, max_memory)
        self.transport, self.relay, self.host = transport, relay, host
        self.loop = Loop()
        self._pending: dict[bytes, tuple[float, Callable]] = {}  # TCP key -> (deadline, what serves its stream)
        self._peers: dict[str, object] = {}  # source endpoint -> the iroh connection kept for the next pull
        self._lock = threading.Lock()
        self.endpoint = self.listener = None
        self.ticket = ""

    def start(self) -> str:
        """Bind and start accepting in background threads; returns the ticket."""
        self.endpoint = self.loop.run(bind(None, [ALPN], f"{self.host}:0", self.relay))
        if self.transport == "tcp":
            self.listener = socket.create_server((self.host, 0))
            threading.Thread(target=self._accept_tcp, name="ember-serve-tcp", daemon=True).start()
        endpoint_ticket = str(iroh().EndpointTicket.from_addr(self.endpoint.addr()))
        self.ticket = make_ticket(endpoint_ticket, self.credential)
        self.state.node, self.state.pull = str(self.endpoint.id()), self._pull
        asyncio.run_coroutine_threadsafe(self._accept_iroh(), self.loop.loop)
        log.info("serving %r as node %s (%s transport)", self.state.device, self.endpoint.id(), self.transport)
        return self.ticket

    def serve_forever(self) -> None:
        self.loop.thread.join()

    # ---- admission -------------------------------------------------------------------------------
    async def _accept_iroh(self) -> None:
        while True:
            incoming = await self.endpoint.accept_next()
            if incoming is None:
                return
            asyncio.ensure_future(self._admit(incoming))

    async def _admit(self, incoming) -> None:
        try:
            await self._handshake(incoming)
        except Exception:  # noqa: BLE001 - one peer's failed handshake must not end the accept loop
            log.exception("a handshake failed")

    async def _handshake(self, incoming) -> None:
        peer = "?"
        try:
            connection = await (await incoming.accept()).connect()
            peer = str(connection.remote_id())
            stream = await asyncio.wait_for(connection.accept_bi(), HANDSHAKE_TIMEOUT)
            send, recv = stream.send(), stream.recv()
            init = decode(await asyncio.wait_for(read_frame(recv), HANDSHAKE_TIMEOUT))
            if type(init) is dict and init.get("t") == "fetch":
                await self._fetches(peer, init, connection, send, recv)
                return
            refusal = self._refusal(peer, init)
            if refusal:
                await _refuse(peer, refusal, connection, send)
                return
        except (ProtocolError, EOFError, asyncio.TimeoutError) as e:
            log.warning("refused %s: handshake failed (%s)", peer, e or "timed out")
            return
        except Exception as e:  # noqa: BLE001 - a peer gone mid-handshake (IrohError) must not end the loop
            log.warning("refused %s: handshake failed (%r)", peer, e)
            return
        session = Session(self.state, peer)
        ready = {"t": "ready", "v": PROTOCOL, "device": repr(self.state.device), "transport": self.transport,
                 "dtypes": tuple(d.name for d in self.state.backend.dtypes), "node": self.state.node}
        session.keep = (connection, send, recv)
        await self._open(ready, send, recv, lambda frames: self._serve(session, frames))

    async def _open(self, ready: dict, send, recv, serve: Callable) -> None:
        """Send `ready` and run `serve(frames)` in a thread on the stream the transport gives: this iroh
        stream, or the TCP stream that presents the one-time key `ready` carries."""
        if self.transport == "tcp":
            key = secrets.token_bytes(32)
            with self._lock:
                now = time.monotonic()
                self._pending = {k: v for k, v in self._pending.items() if v[0] > now}  # never claimed: dropped
                self._pending[key] = (now + HANDSHAKE_TIMEOUT, serve)
            ready.update(port=self.listener.getsockname()[1], key=key)
            await send.write_all(_frame(ready))
        else:
            await send.write_all(_frame(ready))
            frames = IrohFrames(self.loop, send, recv, self.state.limits)
            threading.Thread(target=serve, args=(frames,), daemon=True).start()

    # ---- server-to-server moves ------------------------------------------------------------------
    async def _fetches(self, peer: str, init: dict, connection, send, recv) -> None:
        """Serve a peer presenting transfer tokens, one stream per token, on one connection: each stream's
        tensor, once; the connection closes at a refusal or after `PEER_IDLE` seconds without a stream."""
        while await self._fetch(peer, init, connection, send, recv):
            try:
                stream = await asyncio.wait_for(connection.accept_bi(), PEER_IDLE)
                send, recv = stream.send(), stream.recv()
                init = decode(await asyncio.wait_for(read_frame(recv), HANDSHAKE_TIMEOUT))
            except Exception:  # noqa: BLE001 - idle, closed by the peer, or a bad frame: the connection ends
                break
            if type(init) is not dict or init.get("t") != "fetch":
                await _refuse(peer, "a connection that fetched carries only fetches", connection, send)
                return
        _close(connection)

    async def _fetch(self, peer: str, init: dict, connection, send, recv) -> bool:
        """Serve one fetch: the tensor its token grants, on a stream of the transport; False if refused."""
        token = init.get("token")
        try:
            if init.get("v") != PROTOCOL:
                raise TokenRefused(f"the peer speaks remote protocol {init.get('v')!r}, this server {PROTOCOL}")
            export = self.state.tokens.redeem(token if type(token) is bytes else b"", peer)
        except TokenRefused as e:
            await _refuse(peer, str(e), connection, send)
            return False
        self.state.count("served")

        def serve(frames) -> None:
            try:
                send_value(self.state.backend, export.handle, export.aval, frames)
                log.info("sent a tensor of %d bytes to server %s", export.nbytes, peer)
            except Exception as e:  # noqa: BLE001 - a peer gone mid-transfer must not end the server
                log.warning("a transfer to server %s failed: %r", peer, e)
            finally:
                frames.close()
        await self._open({"t": "ready", "v": PROTOCOL, "transport": self.transport}, send, recv, serve)
        return True

    def _pull(self, source: str, token: bytes, aval: Aval):
        """The tensor `token` grants on the server at iroh endpoint ticket `source`, pulled from it as a
        peer (this server's node id, on a connection kept for the next pull) into a handle of this
        device; `RemoteError` saying why not."""
        where = f"pulling from server {source[:24]}..."
        init = {"t": "fetch", "v": PROTOCOL, "token": token}
        with self._lock:
            connection = self._peers.pop(source, None)  # one pull at a time on a kept connection
        try:
            try:
                frames, _, keep = connect({"endpoint": source}, init, self.endpoint, self.loop, PULL_TIMEOUT, connection)
            except Refused:
                raise
            except RemoteError:
                if connection is None:
                    raise
                _close(connection)  # the kept connection went stale (the source closed it, idle): a new one
                frames, _, keep = connect({"endpoint": source}, init, self.endpoint, self.loop, PULL_TIMEOUT)
        except RemoteError as e:
            raise RemoteError(f"{where}: {e}") from None
        try:
            handle = self._receive(frames, aval)
        except RemoteError as e:
            _close(keep[1])
            raise RemoteError(f"{where}: {e}") from None
        except Exception as e:  # noqa: BLE001 - the source is a peer the client named: whatever it does, the
            _close(keep[1])  # move fails, and this server serves on
            raise RemoteError(f"{where}: {type(e).__name__}: {e}") from None
        finally:
            frames.close()
        with self._lock:
            dropped = self._peers.pop(source, None)  # another pull's, kept meanwhile
            if dropped is None and len(self._peers) >= PEERS:
                dropped = self._peers.pop(next(iter(self._peers)))  # the oldest
            self._peers[source] = keep[1]
        if dropped is not None:
            _close(dropped)
        return handle

    def _receive(self, frames, aval: Aval):
        """The tensor a source server sends on `frames` (a `get` answer of `aval`) as a handle here."""
        header = decode(frames.recv(), self.state.limits)
        if type(header) is dict and header.get("t") == "error":
            raise RemoteError(f"{header.get('op')}: {header.get('type')}: {header.get('msg')}")
        shape, dtype = aval
        if type(header) is not dict or header.get("t") != "data" or header.get("dt") != dtype.name \
                or header.get("sh") != tuple(shape):
            raise RemoteError(f"it sent {str(header)[:80]} where {dtype.name}{list(shape)} was due")
        buffer = receive(frames, math.prod(shape) * dtype.itemsize)
        return self.state.backend.from_host(np.frombuffer(buffer, dtype.np).reshape(shape))

    def _refusal(self, peer: str, init) -> str | None:
        """Why `init` from `peer` is refused, or None to admit it."""
        if type(init) is not dict or init.get("t") != "init":
            return "the first message must be 'init'"
        if init.get("v") != PROTOCOL:
            return (f"the client speaks remote protocol {init.get('v')!r}, this server {PROTOCOL}: use the same "
                    f"ember version on both sides")
        if peer in self.allow:
            return None
        cred = init.get("cred")
        if self.credential is None:
            return f"node {peer} is not on this server's allow list"
        if type(cred) is not bytes or not hmac.compare_digest(cred, self.credential):
            return "wrong or missing credential (use the ticket `ember serve` printed)"
        return None

    def _accept_tcp(self) -> None:
        while True:
            try:
                sock, address = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._tcp_session, args=(sock, address), daemon=True).start()

    def _tcp_session(self, sock: socket.socket, address) -> None:
        sock.settimeout(HANDSHAKE_TIMEOUT)
        try:
            key = bytearray(32)
            SocketFrames(sock)._fill(memoryview(key))
        except (OSError, EOFError):
            sock.close()
            return
        with self._lock:
            found = next((k for k in self._pending if hmac.compare_digest(k, bytes(key))), None)
            serve = self._pending.pop(found)[1] if found is not None else None
        if serve is None:
            log.warning("refused a TCP stream from %s: no session or transfer has its key", address)
            sock.close()
            return
        sock.settimeout(None)
        serve(SocketFrames(sock, self.state.limits))

    # ---- sessions --------------------------------------------------------------------------------
    def _serve(self, session: Session, frames) -> None:
        state = self.state
        state.sessions.add(session)
        log.info("session of %s opened (%d open)", session.peer, len(state.sessions))
        reason = "the client closed the session"
        try:
            while True:
                session.handle(frames.recv(), frames)
        except EOFError:
            pass
        except (ConnectionError, OSError) as e:
            reason = f"the connection failed ({e})"
        except ProtocolError as e:
            reason = f"protocol violation: {e}"
            try:
                frames.send(encode({"t": "error", "op": "protocol", "type": "ProtocolError", "msg": str(e)}))
            except Exception:  # noqa: BLE001 - the peer may be gone: the close below is what matters
                pass
        except Exception as e:  # noqa: BLE001 - a bug here ends this session, never the server
            reason = f"internal error {e!r}"
            log.exception("session of %s failed", session.peer)
        finally:
            session.close()
            state.sessions.discard(session)
            frames.close()
            if session.keep:
                _close(session.keep[0])
            session.keep = ()
            log.info("session of %s closed after %d messages: %s", session.peer, session.messages, reason)


async def _refuse(peer: str, reason: str, connection, send) -> None:
    """Answer `reason` to a peer refused at its handshake, and close its connection."""
    log.warning("refused %s: %s", peer, reason)
    await send.write_all(_frame({"t": "error", "op": "init", "type": "RemoteError", "msg": reason}))
    await send.finish()
    await asyncio.sleep(0.2)  # let the reason reach the peer before the close
    connection.close(1, reason.encode()[:100])


def _close(connection) -> None:
    try:
        connection.close(0, b"done")
    except Exception:  # noqa: BLE001 - already closed
        pass


def _frame(message: dict) -> bytes:
    data = encode(message)
    return _HEADER.pack(len(data)) + data


def serve(device, **options) -> None:
    """Run a server of `device` until interrupted, printing its ticket (what `ember serve` runs)."""
    server = Server(device, **options)
    ticket = server.start()
    print(ticket, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
