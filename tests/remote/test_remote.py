"""Device.remote against a real `ember serve --device cpu` subprocess on loopback: results against NumPy
and the local device, MNIST bit for bit, round trips per step, errors, authentication, a killed client."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ember
from ember.backend.remote.protocol import PROTOCOL, decode, encode, parse_ticket
from ember.backend.remote.transport import client_key, node_id
from ember.errors import RemoteError

from .conftest import ROOT, ServerProcess


def test_ops_match_numpy_across_dtypes_and_odd_shapes(remote, rng):
    for dtype, np_dtype in ((ember.f32, np.float32), (ember.f64, np.float64), (ember.i32, np.int32)):
        a = (rng.standard_normal((3, 7)) * 10).astype(np_dtype)
        b = (rng.standard_normal((7,)) * 10).astype(np_dtype)
        x, y = ember.tensor(a, device=remote), ember.tensor(b, device=remote)
        np.testing.assert_allclose(((x * y) + x).sum(dim=1).numpy(), ((a * b) + a).sum(axis=1), rtol=1e-6)
        np.testing.assert_array_equal((x.reshape(7, 3).permute(1, 0)[1:, ::2]).numpy(), a.reshape(7, 3).T[1:, ::2])
    empty = ember.tensor(np.zeros((0, 5), np.float32), device=remote)
    assert (empty + 1).numpy().shape == (0, 5)
    big = rng.standard_normal(1_300_001).astype(np.float32)  # more than one chunk each way
    np.testing.assert_array_equal(ember.tensor(big, device=remote).numpy(), big)


def test_autodiff_on_the_client_matches_local(remote, rng):
    a, w = rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    grads = []
    for device in (remote.autodiff(), ember.Device.cpu().autodiff()):
        x, p = ember.tensor(a, device=device), ember.tensor(w, device=device).require_grad()
        loss = (x @ p).tanh().sum()
        grads.append((loss.item(), loss.backward().get(p).numpy()))
    assert grads[0][0] == grads[1][0]
    np.testing.assert_array_equal(grads[0][1], grads[1][1])


def test_mnist_steps_equal_local_bitwise_and_one_round_trip_per_step(remote):
    from bench.remote import mnist_steps
    here = mnist_steps(ember.Device.cpu(), 96, 16)
    graphs = remote.backend.counts["graphs"]
    there = mnist_steps(remote, 96, 16)
    assert here[1] == there[1]  # every step's loss
    for a, b in zip(here[0], there[0]):
        np.testing.assert_array_equal(a, b)
    # after warm-up (the first step, and Adam's first-step graph) a step is one round trip: loss.item()
    assert there[2][1:] == [1] * 5
    assert remote.backend.counts["graphs"] - graphs <= 3  # the blocks were registered once, then replayed


def test_server_errors_are_raised_with_the_op_and_message(remote):
    x = ember.tensor(np.arange(6, dtype=np.float32), device=remote)
    index = ember.tensor(np.array([0, 9], np.int64), device=remote)
    moved = index + 0  # computed on the server: the client does not know its bounds
    with pytest.raises(IndexError) as caught:
        x.gather(0, moved).numpy()
    assert isinstance(caught.value, RemoteError) and "gather" in str(caught.value)
    assert (x + 1).numpy()[0] == 1  # the session goes on


def test_memory_quota_refuses_an_upload_past_it(server, remote):
    too_big = np.zeros((1 << 24) + 1, np.float32)  # 64 MiB + 4 bytes, over the server's quota of 64 MiB
    t = ember.tensor(too_big, device=remote)
    with pytest.raises(MemoryError, match="quota"):
        t.numpy()
    del t
    assert (ember.ones(2, device=remote) * 3).numpy().tolist() == [3, 3]


def _handshake(ticket: str, init: dict) -> dict:
    """Send `init` on a raw iroh connection to the server of `ticket`; the server's first reply."""
    from ember.backend.remote.transport import _HEADER, ALPN, bind, loop, read_frame
    import iroh

    async def run():
        endpoint = await bind(None, [], "127.0.0.1:0", relays=False)
        address = iroh.EndpointTicket.from_string(parse_ticket(ticket)["endpoint"]).endpoint_addr()
        connection = await endpoint.connect(address, ALPN)
        stream = await connection.open_bi()
        frame = encode(init)
        await stream.send().write_all(_HEADER.pack(len(frame)) + frame)
        return decode(await read_frame(stream.recv()))
    return loop().run(run(), 20)


def test_wrong_credential_and_protocol_are_refused_before_any_op(server):
    opened = server.log().count(" opened ")
    wrong = _handshake(server.ticket, {"t": "init", "v": PROTOCOL, "cred": b"x" * 32})
    assert wrong["t"] == "error" and "credential" in wrong["msg"]
    none = _handshake(server.ticket, {"t": "init", "v": PROTOCOL})
    assert none["t"] == "error" and "credential" in none["msg"]
    skewed = _handshake(server.ticket, {"t": "init", "v": PROTOCOL + 1, "cred": parse_ticket(server.ticket)["cred"]})
    assert skewed["t"] == "error" and f"protocol {PROTOCOL + 1}" in skewed["msg"]
    log = server.wait_for_log(f"protocol {PROTOCOL + 1}")
    assert log.count("refused") >= 3 and log.count(" opened ") == opened  # no session, so no op, for them


def test_allow_list_admits_its_node_and_refuses_others():
    process = ServerProcess("--device", "cpu", "--allow", node_id(client_key()))
    try:
        assert parse_ticket(process.ticket)["cred"] is None  # the allow list only
        device = ember.Device.remote(process.ticket)
        assert (ember.ones(3, device=device) + 1).numpy().tolist() == [2, 2, 2]
        stranger = _handshake(process.ticket, {"t": "init", "v": PROTOCOL})
        assert stranger["t"] == "error" and "allow list" in stranger["msg"]
    finally:
        process.stop()
    assert "not on this server's allow list" in process.log() and "put" not in process.log()


@pytest.mark.slow
def test_a_client_killed_mid_step_leaves_the_server_serving_with_its_memory_freed(server, remote):
    baseline = remote.backend.stats()
    script = textwrap.dedent(f"""
        import os, numpy as np, ember
        d = ember.Device.remote({server.ticket!r})
        x = ember.tensor(np.ones((512, 1024), np.float32), device=d)
        y = (x * 2).sum()
        y.numpy()
        z = x @ x.T
        d.backend.channel.send(b"\\x82")  # half a message: the step is cut mid-way
        print("held", flush=True)
        os.kill(os.getpid(), 9)
    """)
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "held" in child.stdout and child.returncode == -9
    server.wait_for_log("closed after")
    after = remote.backend.stats()
    assert after["sessions"] == baseline["sessions"] and after["in_use"] <= baseline["in_use"]
    assert (ember.ones(4, device=remote) * 2).numpy().tolist() == [2, 2, 2, 2]


def test_environment_names_a_remote_device(server):
    script = "import ember; d = ember.Device.default(); print(d.kind, (ember.ones(2, device=d) + 1).numpy().sum())"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "EMBER_DEVICE": f"remote:{server.ticket}"})
    assert out.stdout.split() == ["remote", "4.0"], out.stderr


def test_a_bad_ticket_is_refused_with_a_clear_error():
    with pytest.raises(RemoteError, match="not an ember ticket"):
        ember.Device.remote("nonsense").backend
    with pytest.raises(RemoteError, match="damaged"):
        ember.Device.remote("ember0123").backend
