"""Hostile messages: over 1,000,000 random and mutated frames through the server's decoder and dispatcher
(`Session.handle`, in process, on the NumPy device), then a few thousand over a real loopback connection to
an `ember serve` subprocess. A bad frame may only close its own session (a `ProtocolError`) or be
answered as a failed op; the server then still serves a valid client, and its memory is flat."""

from __future__ import annotations

import gc
import random

import numpy as np
import pytest

import ember
from ember.backend.remote.protocol import decode, encode
from ember.backend.remote.transport import endpoint_node
from ember.errors import ProtocolError
from ember.remote import ServerState, Session

iroh = pytest.importorskip("iroh")
ENDPOINT = str(iroh.EndpointTicket.from_addr(iroh.EndpointAddr(iroh.SecretKey.from_bytes(bytes(range(32))).public(),
                                                                None, ["127.0.0.1:9"])))
"""The fuzzed state's own iroh endpoint ticket (nothing listens there: a local `import` needs no network)."""


class Channel:
    """A transport stand-in: every chunk frame is zeros (valid data, in range as an index); replies kept."""

    def __init__(self) -> None:
        self.replies: list[bytes] = []

    def send(self, *frames) -> None:
        self.replies.append(frames[0])

    def recv_into(self, view: memoryview) -> None:
        view[:] = bytes(len(view))


def fuzz_state() -> ServerState:
    """A NumPy-device state whose own node id is that of `ENDPOINT`, so `import`s of it take the local path."""
    state = ServerState(ember.Device.numpy(), max_memory=1 << 24)  # the cpu device: the loopback test below
    state.node = endpoint_node(ENDPOINT)
    return state


def valid_messages() -> list[bytes]:
    """A small valid exchange: uploads, a graph of a few ops (one index op), runs, reads, frees, a transfer
    token minted and a forged one presented."""
    return [encode(m) for m in (
        {"t": "put", "id": 1, "dt": "f32", "sh": (2, 3)},
        {"t": "put", "id": 2, "dt": "i64", "sh": (2,)},
        {"t": "graph", "id": 1, "ext": 2, "live": (2, 3), "nodes": (
            ("exp", {}, (("x", 0),)), ("sum", {"dims": (1,), "keepdim": False}, (("r", 0),)),
            ("mul", {}, (("r", 1), ("r", 1))), ("index_select", {"dim": 0}, (("x", 0), ("x", 1))))},
        {"t": "run", "g": 1, "x": (1, 2), "o": (3, 4), "d": ()},
        {"t": "get", "id": 3}, {"t": "sync"}, {"t": "free", "ids": (3,)}, {"t": "stats"},
        {"t": "graph", "id": 2, "ext": 0, "live": (0,), "nodes": (
            ("full", {"shape": (3,), "dtype": ember.f32}, ()),)},
        {"t": "run", "g": 2, "x": (), "o": (5,), "d": ((0, {"value": 2.5}),)},
        {"t": "export", "id": 1, "to": "node-b", "ttl": 5.0},
        {"t": "import", "id": 6, "from": ENDPOINT, "token": b"t" * 32, "dt": "f32", "sh": (2, 3)},
    )]


def mutate(frame: bytes, rng: random.Random) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        how = rng.random()
        if how < 0.5 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif how < 0.7 and data:
            del data[rng.randrange(len(data)):][:rng.randint(1, 8)]
        elif how < 0.9:
            data.insert(rng.randrange(len(data) + 1), rng.randrange(256))
        else:
            data += rng.randbytes(rng.randint(1, 16))
    return bytes(data)


@pytest.mark.slow
def test_a_million_hostile_frames_only_ever_close_their_own_session():
    state = fuzz_state()
    rng = random.Random(1234)
    valid = valid_messages()
    channel = Channel()
    closed = answered = 0
    total = 1_000_000
    session, step = Session(state, "fuzz"), 0
    for i in range(total):
        pick = rng.random()
        if pick < 0.4:  # the next frame of the valid exchange, mutated
            frame = mutate(valid[step % len(valid)], rng)
            step += 1
        elif pick < 0.7:
            frame = rng.randbytes(rng.randint(0, 24))
        else:  # a valid prefix, so mutations reach the dispatcher with registered graphs and held tensors
            frame = valid[step % len(valid)]
            step += 1
        try:
            session.handle(frame, channel)
            answered += 1
        except (ProtocolError, EOFError):
            session.close()
            session, step = Session(state, "fuzz"), 0
            closed += 1
        if len(channel.replies) > 1000:
            channel.replies.clear()
    assert closed > 100_000 and answered > 100_000 and closed + answered == total
    session.close()
    # the state still serves a valid client from scratch
    fresh, channel = Session(state, "valid"), Channel()
    for frame in valid:
        fresh.handle(frame, channel)
    replies = [decode(r) for r in channel.replies]
    assert [r["t"] for r in replies] == ["data", "ok", "stats", "token", "error"]
    assert "no such token" in replies[-1]["msg"]  # the forged token of the `import`: refused, nothing held
    assert fresh.held == 2 * 3 * 4 + 2 * 8 + 2 * 3 * 4 + 3 * 4  # x, the index, outputs 4 and 5 (3 was freed)
    assert state.tokens.redeem(replies[3]["token"], "node-b").handle is fresh.values[1][0]
    assert len(state.tokens) == 0  # the fuzzed sessions' tokens died with them


@pytest.mark.slow
def test_hostile_clients_over_loopback_leave_the_server_up_and_flat(server, remote):
    from ember.backend.remote.protocol import SocketFrames
    from ember.backend.remote.transport import connect
    from ember.backend.remote.protocol import PROTOCOL, parse_ticket
    ticket = parse_ticket(server.ticket)
    before = remote.backend.stats()
    rng = random.Random(99)
    valid = valid_messages()[:-1]  # not the `import`: a real server would try to pull from ENDPOINT, for 20 s
    sent = 0
    for _ in range(100):  # sessions, each sent frames until the server closes it
        frames, _, keep = connect(ticket, {"t": "init", "v": PROTOCOL, "cred": ticket["cred"]})
        try:
            frames.send(valid[0], np.ones(6, np.float32).tobytes(), valid[1], np.array([1, 0], np.int64).tobytes())
            for _ in range(30):
                frames.send(mutate(rng.choice(valid), rng) if rng.random() < 0.7 else
                            rng.randbytes(rng.randint(0, 24)))
                sent += 1
        except OSError:
            pass  # the server closed this session: as it should, on a bad frame
        frames.close()
        del keep
    assert sent >= 2000
    server.wait_for_log("protocol violation")
    gc.collect()
    after = remote.backend.stats()
    assert after["sessions"] == before["sessions"] and after["in_use"] <= before["in_use"]
    assert after["rss"] < before["rss"] + (64 << 20)
    x = ember.tensor(np.arange(5, dtype=np.float32), device=remote)
    assert (x * 2).numpy().tolist() == [0, 2, 4, 6, 8]
