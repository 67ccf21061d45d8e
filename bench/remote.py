"""`python -m bench.remote [--items 512] [--batch 32]`: remote compute against local, on loopback.

Starts `ember serve --device cpu` (tcp transport) and `--transport iroh` in subprocesses and measures,
in the same run: the round trips per MNIST training step after warm-up; the client's host time per
recorded op (a chain of adds, no read) against the local cpu device's; a small MNIST epoch (ConvNet
width 8, AdamW) on `remote(cpu)` against local cpu; tensor upload and download MB/s over both
transports against a raw loopback TCP socket moving the same bytes; a tensor moved from one server to
another (`t.to(other_remote)`, server to server) against the same move through the client (download,
upload). `mnist_steps` is also what tests/remote/test_remote.py trains to check remote equals local bit
for bit.

Example:
    python -m bench.remote --items 512 --batch 32
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

import ember
from ember.examples.mnist import ConvNet, MnistConfig, loaders
from ember.nn.loss import cross_entropy
from ember.optim import AdamW

ROOT = Path(__file__).resolve().parents[1]


def mnist_steps(device, items: int, batch: int, width: int = 4) -> tuple[list, list[float], list[int]]:
    """Train ConvNet(width) with AdamW on the first `items` MNIST sample images in batches of `batch`
    on `device` (autodiff on top): (the final parameters as arrays, each step's loss, each step's round
    trips to the server (0 on a local device))."""
    ember.seed(0)
    trainer = device.autodiff()
    model = ConvNet(width).to(trainer)
    optimizer = AdamW(model, lr=3e-3)
    batches, _ = loaders(MnistConfig(batch_size=batch, train_items=items, shift=0))
    backend = device.backend
    losses, trips = [], []
    for x, y in batches:
        before = getattr(backend, "round_trips", 0)
        loss = cross_entropy(model(ember.tensor(x, device=trainer)), ember.tensor(y, device=trainer))
        optimizer.step(loss.backward())
        losses.append(loss.item())
        trips.append(getattr(backend, "round_trips", 0) - before)
    return [p.numpy() for p in model.parameters()], losses, trips


def start_server(*args: str) -> tuple[subprocess.Popen, str]:
    """`ember serve --device cpu ARGS` in a subprocess and its ticket."""
    process = subprocess.Popen([sys.executable, "-m", "ember.cli", "serve", "--device", "cpu", "--log", "warning",
                                *args], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    return process, process.stdout.readline().strip()


def host_us_per_op(device, ops: int = 2000) -> tuple[float, float]:
    """Microseconds per add of a chain of `ops` adds: (the caller's time to record them, with the read
    of the result at the end)."""
    x = ember.ones(64, device=device)
    for _ in range(2):  # warm: the chain's plan (local) or graph (remote) made once
        start = time.perf_counter()
        y = x
        for _ in range(ops):
            y = y + 1.0
        recorded = time.perf_counter() - start
        y.numpy()
        total = time.perf_counter() - start
    return recorded / ops * 1e6, total / ops * 1e6


def transfer_mb_s(device, nbytes: int) -> tuple[float, float]:
    """(upload, download) MB/s of one f32 tensor of `nbytes` to `device` and back."""
    array = np.random.default_rng(0).standard_normal(nbytes // 4).astype(np.float32)
    ember.tensor(array[:16], device=device).numpy()  # connected, warm
    start = time.perf_counter()
    t = ember.tensor(array, device=device)
    device.sync()
    up = time.perf_counter() - start
    start = time.perf_counter()
    t.numpy()
    down = time.perf_counter() - start
    return nbytes / up / 1e6, nbytes / down / 1e6


def move_seconds(source, destination, nbytes: int, repeats: int = 3) -> tuple[float, float]:
    """(server to server, through the client) seconds to move one f32 tensor of `nbytes` from `source` to
    `destination`, best of `repeats`, the two interleaved."""
    t = ember.tensor(np.random.default_rng(1).standard_normal(nbytes // 4).astype(np.float32), device=source)
    t.to(destination).numpy()[:1]  # warm: both connected, the pull path used once
    best = {"direct": float("inf"), "client": float("inf")}
    for _ in range(repeats):
        for how in best:
            start = time.perf_counter()
            moved = t.to(destination) if how == "direct" else ember.tensor(t.numpy(), device=destination)
            destination.sync()
            best[how] = min(best[how], time.perf_counter() - start)
            del moved
    return best["direct"], best["client"]


def raw_tcp_mb_s(nbytes: int) -> float:
    """MB/s of `nbytes` through a loopback TCP socket from one thread to another, in 4 MiB writes."""
    server = socket.create_server(("127.0.0.1", 0))
    payload = bytes(4 << 20)

    def sink() -> None:
        conn, _ = server.accept()
        buffer, got = bytearray(4 << 20), 0
        while got < nbytes:
            got += conn.recv_into(buffer)
        conn.sendall(b"k")
        conn.close()
    thread = threading.Thread(target=sink)
    thread.start()
    client = socket.create_connection(server.getsockname())
    start = time.perf_counter()
    for sent in range(0, nbytes, len(payload)):
        client.sendall(payload[:min(len(payload), nbytes - sent)])
    client.recv(1)
    elapsed = time.perf_counter() - start
    thread.join()
    client.close()
    server.close()
    return nbytes / elapsed / 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=512, help="MNIST images of the timed epoch")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--mib", type=int, default=64, help="MiB moved by the tcp transfer figures")
    parser.add_argument("--move-mb", type=int, default=64, help="MB moved server to server")
    args = parser.parse_args(argv)
    tcp, tcp_ticket = start_server()
    quic, quic_ticket = start_server("--transport", "iroh")
    other, other_ticket = start_server()
    try:
        remote, local = ember.Device.remote(tcp_ticket), ember.Device.cpu()
        mnist_steps(remote, 2 * args.batch, args.batch, width=8)   # warm both: kernels compiled, graphs sent
        mnist_steps(local, 2 * args.batch, args.batch, width=8)
        times, trips = {}, {}
        for name, device in (("local cpu", local), ("remote(cpu)", remote), ("local cpu again", local)):
            start = time.perf_counter()
            _, _, trips[name] = mnist_steps(device, args.items, args.batch, width=8)
            times[name] = time.perf_counter() - start
        trips = trips["remote(cpu)"]
        local_s = min(times["local cpu"], times["local cpu again"])
        print(f"MNIST epoch, {args.items} images in batches of {args.batch}: local cpu {local_s:.2f} s, "
              f"remote(cpu) {times['remote(cpu)']:.2f} s: {times['remote(cpu)'] / local_s:.2f}x")
        print(f"round trips per training step after warm-up: {trips[1:]} (max {max(trips[1:])})")
        (remote_rec, remote_all), (local_rec, local_all) = host_us_per_op(remote), host_us_per_op(local)
        print(f"host time per recorded op (chain of adds): remote {remote_rec:.1f} us, local cpu {local_rec:.1f} us; "
              f"with the read at the end: remote {remote_all:.1f} us, local {local_all:.1f} us")
        nbytes = args.mib << 20
        up, down = transfer_mb_s(remote, nbytes)
        raw = raw_tcp_mb_s(nbytes)
        print(f"tcp transport, {args.mib} MiB: upload {up:.0f} MB/s, download {down:.0f} MB/s; raw loopback TCP "
              f"{raw:.0f} MB/s")
        other_remote, moved = ember.Device.remote(other_ticket), args.move_mb * 10 ** 6
        direct, through = move_seconds(remote, other_remote, moved)
        print(f"a {args.move_mb} MB tensor moved server A -> server B (tcp): server to server {moved / direct / 1e6:.0f} "
              f"MB/s, through the client {moved / through / 1e6:.0f} MB/s: {through / direct:.2f}x")
        direct, through = move_seconds(remote, other_remote, 64, repeats=20)
        print(f"a 64-byte tensor moved A -> B: server to server {direct * 1e3:.2f} ms, through the client "
              f"{through * 1e3:.2f} ms")
        quic_bytes = 8 << 20
        up, down = transfer_mb_s(ember.Device.remote(quic_ticket), quic_bytes)
        print(f"iroh transport, 8 MiB: upload {up:.1f} MB/s, download {down:.1f} MB/s; raw loopback TCP "
              f"{raw_tcp_mb_s(quic_bytes):.0f} MB/s")
    finally:
        for process in (tcp, quic, other):
            process.terminate()


if __name__ == "__main__":
    main()
