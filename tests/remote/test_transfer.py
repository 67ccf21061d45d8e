"""Server-to-server moves: two `ember serve --device cpu` subprocesses on loopback, a tensor moved A -> B
by `Tensor.to` with only a transfer token passing through the client (its channels' bytes counted
against the tensor's), bit for bit, a training step on B after the move equal to the local one, a move
between two devices of one server that stays on it, and the tokens' refusals (reused, expired, forged,
bound to another node, over the destination's quota), after which both servers still serve."""

from __future__ import annotations

import time

import numpy as np
import pytest

import ember
from ember.errors import RemoteError
from ember.nn.loss import cross_entropy
from ember.ops.primitive import Aval
from ember.optim import AdamW
from ember.remote.tokens import TTL, TokenRefused, TransferTokens

from .conftest import ServerProcess

CONTROL = 2048
"""Bytes a move may cost the client on its two channels together: the export and import messages."""


@pytest.fixture(scope="module")
def pair():
    """Devices of two servers: A with a 64 MiB quota per client, B with 20 MiB."""
    a = ServerProcess("--device", "cpu", "--max-memory", "0.0625")
    b = ServerProcess("--device", "cpu", "--max-memory", "0.02")
    yield ember.Device.remote(a.ticket), ember.Device.remote(b.ticket)
    a.stop()
    b.stop()


def client_bytes(*devices) -> int:
    """Every byte the client's channels to `devices` sent and received so far, frame headers included."""
    return sum(d.backend.channel.sent + d.backend.channel.received for d in devices)


def transfers(device) -> dict:
    return device.backend.stats()["transfers"]


def test_a_move_between_servers_is_bitwise_and_its_bytes_skip_the_client(pair, rng):
    a, b = pair
    cases = [rng.standard_normal((1031, 2309)).astype(np.float32),  # 9.5 MB: three chunks
             rng.standard_normal((3, 5, 7)).astype(np.float64), rng.integers(-9, 9, (13,)).astype(np.int64),
             rng.standard_normal((6, 11)).astype(np.float16), rng.random((5,)) < 0.5, np.zeros((0, 3), np.float32)]
    cases[0][0, :3] = (np.nan, -0.0, np.inf)
    before_a, before_b = transfers(a)["served"], transfers(b)["pulled"]
    for array in cases:
        on_a = ember.tensor(array, device=a).flip(0)  # a value the server computed
        start = client_bytes(a, b)
        moved = on_a.to(b)
        assert client_bytes(a, b) - start < CONTROL, array.shape  # a token, not the tensor, went through
        assert moved.device is b and moved.shape == array.shape and moved.dtype == on_a.dtype
        got = moved.numpy()
        assert got.dtype == array.dtype and got.tobytes() == np.ascontiguousarray(array[::-1]).tobytes()
    assert transfers(a)["served"] - before_a == len(cases) and transfers(b)["pulled"] - before_b == len(cases)
    assert a.backend.stats()["tokens"] == 0  # every token was redeemed


def test_a_training_step_on_b_after_a_move_equals_the_local_step(pair, rng):
    a, b = pair
    x = rng.standard_normal((9, 13)).astype(np.float32)
    y = rng.integers(0, 5, (9,)).astype(np.int64)
    results = []
    for device, via in ((ember.Device.cpu().autodiff(), None), (b.autodiff(), a)):
        ember.seed(3)
        model = ember.nn.Sequential(ember.nn.Linear(13, 7), ember.nn.Tanh(), ember.nn.Linear(7, 5))
        if via is not None:
            model.to(via)  # uploaded to A, then moved A -> B server to server
            pulled = transfers(b)["pulled"]
            model.to(device)
            assert transfers(b)["pulled"] - pulled == len(list(model.parameters())) == 4
        else:
            model.to(device)
        optimizer = AdamW(model, lr=1e-2)
        losses = []
        for _ in range(2):
            loss = cross_entropy(model(ember.tensor(x, device=device)), ember.tensor(y, device=device))
            optimizer.step(loss.backward())
            losses.append(loss.item())
        results.append((losses, [p.numpy() for p in model.parameters()]))
    assert results[0][0] == results[1][0]
    for here, there in zip(results[0][1], results[1][1]):
        np.testing.assert_array_equal(here, there)


def test_a_move_between_two_devices_of_one_server_stays_on_it(pair, rng):
    a, _ = pair
    ticket = a.ticket
    again = ember.Device.remote(ticket[:5] + ticket[5:].upper())  # tickets are case-insensitive: a second session
    assert again is not a and again.backend.node == a.backend.node
    array = rng.standard_normal((301, 7)).astype(np.float32)
    on_a = ember.tensor(array, device=a) * 3
    before = transfers(a)
    start = client_bytes(a, again)
    moved = on_a.to(again.autodiff())
    assert client_bytes(a, again) - start < CONTROL
    after = transfers(a)
    assert after["local"] == before["local"] + 1 and after["served"] == before["served"]  # no network
    assert after["pulled"] == before["pulled"]
    np.testing.assert_array_equal(moved.numpy(), array * np.float32(3))
    np.testing.assert_array_equal((moved * 2).numpy(), array * np.float32(3) * 2)


def test_reused_expired_forged_and_misbound_tokens_are_refused_and_both_servers_serve_on(pair, rng):
    a, b = pair
    array = rng.standard_normal((17, 3)).astype(np.float32)
    handle = (ember.tensor(array, device=a) + 0)._handle
    aval = ember.tensor(array)._aval
    source, dest = a.backend, b.backend
    token = source.export(handle, dest.node)
    np.testing.assert_array_equal(ember.Tensor._make(b, dest.claim(source.endpoint, token, aval), aval).numpy(), array)
    with pytest.raises(RemoteError, match="already used"):
        dest.claim(source.endpoint, token, aval)
    short = source.export(handle, dest.node, ttl=0.05)
    time.sleep(0.3)
    with pytest.raises(RemoteError, match="expired"):
        dest.claim(source.endpoint, short, aval)
    with pytest.raises(RemoteError, match="no such token"):
        dest.claim(source.endpoint, bytes(rng.integers(0, 256, 32, dtype=np.uint8)), aval)
    misbound = source.export(handle, source.node)  # a token for A itself, presented by B
    with pytest.raises(RemoteError, match="minted for node"):
        dest.claim(source.endpoint, misbound, aval)
    wrong_shape = source.export(handle, dest.node)
    with pytest.raises(RemoteError, match="was due"):
        dest.claim(source.endpoint, wrong_shape, Aval((3, 17), ember.f32))
    with pytest.raises(RemoteError, match="not an iroh endpoint"):
        dest.claim("endpoint-nonsense", source.export(handle, dest.node), aval)
    big = ember.tensor(np.ones(6 << 20, np.float32), device=a)  # 24 MiB, over B's quota of 20 MiB
    with pytest.raises(MemoryError, match="quota"):
        big.to(b)
    for device in (a, b):  # no session was closed, no server went down
        assert (ember.ones(3, device=device) * 2).numpy().tolist() == [2, 2, 2]
    np.testing.assert_array_equal(ember.Tensor._make(a, handle, aval).to(b).numpy(), array)


def test_tokens_are_single_use_expire_are_bounded_and_die_with_their_session():
    now = [0.0]
    tokens = TransferTokens(clock=lambda: now[0])
    owner, other = object(), object()
    first = tokens.mint(owner, "h", "aval", 4, to="node-b", ttl=1.0, limit=2)
    second = tokens.mint(owner, "h2", "aval", 4, to="node-b", ttl=1e9, limit=2)
    assert len({first, second}) == 2 and len(first) == 32
    assert tokens.mint(owner, "h3", "aval", 4, to="node-b", ttl=1.0, limit=2) is None  # the limit
    assert tokens.mint(other, "h3", "aval", 4, to="node-b", ttl=1.0, limit=2) is not None
    assert tokens.redeem(first, "node-b").handle == "h"
    with pytest.raises(TokenRefused, match="already used"):
        tokens.redeem(first, "node-b")
    now[0] = TTL + 1  # the second asked for more than TTL and got TTL
    with pytest.raises(TokenRefused, match="expired"):
        tokens.redeem(second, "node-b")
    third = tokens.mint(owner, "h4", "aval", 4, to="node-b", ttl=5.0, limit=2)
    kept = tokens.mint(other, "h5", "aval", 4, to="node-b", ttl=5.0, limit=2)
    tokens.drop(owner)
    with pytest.raises(TokenRefused, match="session on the source server ended"):
        tokens.redeem(third, "node-b")
    assert len(tokens) == 1 and tokens.redeem(kept, "node-b").handle == "h5"  # `other`'s lives on


def test_moves_to_and_from_a_server_on_the_iroh_transport(pair, rng):
    from ember.remote import Server
    a, b = pair
    quic = ember.Device.remote(Server(ember.Device.cpu(), transport="iroh").start())  # in this process
    array = rng.standard_normal((137, 29)).astype(np.float32)
    start = client_bytes(a, quic, b)
    there = ember.tensor(array, device=a).to(quic)  # pulled over a tcp stream by the iroh server
    back = there.to(b)  # served over QUIC to B
    assert client_bytes(a, quic, b) - start < array.nbytes + 2 * CONTROL  # the upload to A, and control
    assert transfers(quic) == {"served": 1, "pulled": 1, "local": 0}
    np.testing.assert_array_equal(back.numpy(), array)


def test_a_pull_after_the_source_closed_the_kept_connection_connects_anew(monkeypatch, rng):
    import ember.remote.server as server_module
    from ember.remote import Server
    monkeypatch.setattr(server_module, "PEER_IDLE", 0.2)  # the source closes a fetching peer's idle connection
    source, destination = Server(ember.Device.cpu()), Server(ember.Device.cpu())  # in this process
    a, b = ember.Device.remote(source.start()), ember.Device.remote(destination.start())
    array = rng.standard_normal((5, 3)).astype(np.float32)
    t = ember.tensor(array, device=a)
    t.to(b)
    kept = destination._peers[a.backend.endpoint]
    deadline = time.monotonic() + 10
    while kept.close_reason() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "closed by peer" in kept.close_reason()
    np.testing.assert_array_equal(t.to(b).numpy(), array)  # the stale connection dropped, a new one made
    assert destination._peers[a.backend.endpoint] is not kept and transfers(a)["served"] == 2
