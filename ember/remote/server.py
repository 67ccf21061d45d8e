"""`ember serve`: a server of one ember device to remote clients (`Device.remote(ticket)`).

The server binds an iroh endpoint (relays off unless asked), prints its ticket and accepts peers. A peer
is admitted when its node id is on the allow list, or when its `init` carries the ticket's credential
(compared in constant time); the protocol versions must match. Anything else is answered with the
reason and closed before a single op runs. Each admitted client gets a `Session` run by its own thread
over its transport (`ember.backend.remote.transport`); the device's own stack (fusion, autotune,
memory pool) serves every session. A session ends when its client disconnects or crashes, or on a
protocol violation (logged with the reason); its tensors are freed then, and the server keeps serving.

Example:
    >>> server = Server(Device.cpu(), max_memory=1 << 30)
    >>> ticket = server.start()            # in a background thread: server.serve_forever() blocks
    >>> Device.remote(ticket)
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import socket
import threading
from typing import Iterable

from ..backend.remote.protocol import _HEADER, ALPN, PROTOCOL, SocketFrames, decode, encode, make_ticket
from ..backend.remote.transport import IrohFrames, Loop, bind, iroh, read_frame
from ..errors import ProtocolError
from .session import ServerState, Session

log = logging.getLogger("ember.remote")
HANDSHAKE_TIMEOUT = 10.0


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
        self._pending: dict[bytes, Session] = {}
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
            refusal = self._refusal(peer, init)
            if refusal:
                log.warning("refused %s: %s", peer, refusal)
                await send.write_all(_frame({"t": "error", "op": "init", "type": "RemoteError", "msg": refusal}))
                await send.finish()
                await asyncio.sleep(0.2)  # let the reason reach the peer before the close
                connection.close(1, refusal.encode()[:100])
                return
        except (ProtocolError, EOFError, asyncio.TimeoutError) as e:
            log.warning("refused %s: handshake failed (%s)", peer, e or "timed out")
            return
        except Exception as e:  # noqa: BLE001 - a peer gone mid-handshake (IrohError) must not end the loop
            log.warning("refused %s: handshake failed (%r)", peer, e)
            return
        session = Session(self.state, peer)
        ready = {"t": "ready", "v": PROTOCOL, "device": repr(self.state.device), "transport": self.transport,
                 "dtypes": tuple(d.name for d in self.state.backend.dtypes)}
        if self.transport == "tcp":
            key = secrets.token_bytes(32)
            with self._lock:
                self._pending[key] = session
            ready.update(port=self.listener.getsockname()[1], key=key)
            await send.write_all(_frame(ready))
            session.keep = (connection, send, recv)
        else:
            await send.write_all(_frame(ready))
            session.keep = (connection, send, recv)
            frames = IrohFrames(self.loop, send, recv, self.state.limits)
            threading.Thread(target=self._serve, args=(session, frames), daemon=True).start()

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
            session = next((s for k, s in self._pending.items() if hmac.compare_digest(k, bytes(key))), None)
            if session is not None:
                self._pending = {k: s for k, s in self._pending.items() if s is not session}
        if session is None:
            log.warning("refused a TCP stream from %s: no session has its key", address)
            sock.close()
            return
        sock.settimeout(None)
        self._serve(session, SocketFrames(sock, self.state.limits))

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
            connection = getattr(session, "keep", (None,))[0]
            if connection is not None:
                try:
                    connection.close(0, b"session closed")
                except Exception:  # noqa: BLE001 - already closed
                    pass
            session.keep = ()
            log.info("session of %s closed after %d messages: %s", session.peer, session.messages, reason)


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
