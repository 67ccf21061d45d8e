"""What each rank runs under mpirun (tests/distributed/test_mpi.py): `python ranks.py CASE [ARG]`.
Each case checks its results against NumPy or a single-process run and exits non-zero on a mismatch."""

from __future__ import annotations

import os
import signal
import sys

import numpy as np

import ember
import ember.distributed as dist
from ember.dtype import dtype_of
from tests.distributed.problem import fit

DTYPES = ["f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool"]


def inputs(rank: int, shape: tuple, dtype: str) -> np.ndarray:
    rng = np.random.default_rng([rank, len(shape), DTYPES.index(dtype)])
    if dtype == "bool":
        return np.asarray(rng.integers(0, 2, shape)).astype(bool)
    if dtype in ("i32", "i64", "u8"):
        return np.asarray(rng.integers(0, 50, shape)).astype(dtype_of(dtype).np)
    return np.asarray(rng.normal(size=shape)).astype(dtype_of(dtype).np)


def collectives(group) -> None:
    size, rank = group.size, group.rank
    for device, dtypes in ((ember.Device.numpy(), DTYPES), (ember.Device.cpu(), ["f32", "bf16", "i64"])):
        for dtype in dtypes:
            for shape in ((), (0,), (size * 3, 5), (size, 7)):
                every = [inputs(r, shape, dtype) for r in range(size)]
                x = ember.from_numpy(every[rank], device=device)
                wide = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in every]
                ops = ["max", "min"] + ([] if dtype == "bool" else ["sum"]) + (["mean"] if x.dtype.is_float else [])
                for op in ops:
                    ref = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[op](np.stack(wide), axis=0)
                    tol = {"f16": 2e-3, "bf16": 1e-2}.get(dtype, 1e-6)
                    got = group.all_reduce(x, op=op).numpy()
                    assert (got.shape, got.dtype) == (every[0].shape, every[0].dtype), (op, dtype, shape, got.shape, got.dtype)
                    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=tol, atol=tol)
                    if shape and shape[0] % size == 0:
                        block = shape[0] // size
                        got = group.reduce_scatter(x, op=op).numpy()
                        np.testing.assert_allclose(got.astype(np.float64),
                                                   ref[rank * block:(rank + 1) * block].astype(np.float64),
                                                   rtol=tol, atol=tol)
                gathered = group.all_gather(x).numpy()
                expect = np.stack(every) if not shape else np.concatenate(every)
                assert gathered.dtype == expect.dtype and np.array_equal(gathered.reshape(-1).view(np.uint8), expect.reshape(-1).view(np.uint8))
                for src in range(size):
                    got = group.broadcast(x, src=src).numpy()
                    assert np.array_equal(got.reshape(-1).view(np.uint8), every[src].reshape(-1).view(np.uint8)), (dtype, shape, src)
    work = group.all_reduce(ember.ones(3) * (rank + 1), op="sum", async_op=True)
    assert work.wait().tolist() == [size * (size + 1) / 2] * 3
    assert group.all_gather_object({"rank": rank}) == [{"rank": r} for r in range(size)]
    assert group.broadcast_object("from 1" if rank == 1 else None, src=1) == "from 1"
    group.barrier()


def ddp(group) -> None:
    """DDP over the ranks equals one process with the whole batch; with accumulation too; and bitwise the
    mean of the ranks' gradients of their shards (two ranks sum in a fixed order)."""
    oracle = fit(None)
    for accumulation in (1, 2) if group.size == 2 else (1,):
        got = fit(group=group, accumulation=accumulation)
        for k in oracle:
            np.testing.assert_allclose(got[k], oracle[k], rtol=2e-5, atol=2e-6, err_msg=f"{k} acc={accumulation}")
    from ember.nn import Linear
    from ember.train import DataParallel
    ad = ember.Device.cpu().autodiff()
    ember.seed(1)
    model = Linear(5, 3, device=ad)
    ddp_model = DataParallel(model, group, bucket_mb=1e-5)  # a bucket per parameter
    xs = [np.random.default_rng(r).normal(size=(4, 5)).astype(np.float32) for r in range(group.size)]
    local = []
    for x in xs:
        grads = (model(ember.from_numpy(x, device=ad)) ** 2).mean().backward()
        local.append({n: p.grad(grads).numpy() for n, p in model.named_parameters()})
    grads = ddp_model.backward((ddp_model(ember.from_numpy(xs[group.rank], device=ad)) ** 2).mean())
    for n, p in model.named_parameters():
        expect = local[0][n]
        for other in local[1:]:
            expect = expect + other[n]
        expect = expect / np.float32(group.size)
        assert group.size > 2 or np.array_equal(p.grad(grads).numpy(), expect), n
        np.testing.assert_allclose(p.grad(grads).numpy(), expect, rtol=1e-6, atol=1e-7)


def zero(group) -> None:
    """ZeRO-1 (optimizer state sharded) equals plain DDP, and its state gathers to the plain format."""
    plain = fit(group=group, optimizer="adamw")
    sharded = fit(group=group, optimizer="adamw", zero=True)
    for k in plain:
        np.testing.assert_allclose(sharded[k], plain[k], rtol=1e-6, atol=1e-7, err_msg=k)


def checkpoint(group, folder: str) -> None:
    """One epoch on these ranks, written by rank 0 to `folder` (resumed by the test on another count)."""
    fit(group=group, epochs=1, run_dir=folder, optimizer="adamw", zero=True)


def fail(group, how: str) -> None:
    """Rank 1 raises or is killed while the others wait in a collective: the job must end, not hang."""
    if group.rank == 1:
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise ValueError("rank 1 fails on purpose")
    group.all_reduce(ember.ones(2))
    group.barrier()


if __name__ == "__main__":
    case, args = sys.argv[1], sys.argv[2:]
    group = dist.init()
    {"collectives": collectives, "ddp": ddp, "zero": zero, "checkpoint": checkpoint, "fail": fail}[case](group, *args)
    print(f"rank {group.rank} of {group.size}: {case} ok", flush=True)
