"""What runs in one process: launcher variables, DistributedSampler, the one-rank group, the NCCL
bootstrap (its rendezvous, its missing-library message) and the in-process multi-device strategy."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ember
from ember.data import DataLoader, DistributedSampler
from ember.distributed import SingleProcess, detect
from ember.distributed.rendezvous import share
from ember.distributed.world import _start
from ember.dtype import dtype_of
from ember.errors import DistributedError
from ember.nn.loss import cross_entropy
from ember.optim import SGD
from ember.train import Learner
from tests.train.problem import MLP, dataset


@pytest.mark.parametrize("environ, expect", [
    ({}, (0, 1, 0, "none")),
    ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "h",
      "MASTER_PORT": "7"}, (3, 4, 1, "torchrun")),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "RANK": "9"},
     (1, 2, 1, "mpirun")),
    ({"PMI_RANK": "2", "PMI_SIZE": "3"}, (2, 3, 0, "mpirun")),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "4(x2)",
      "SLURM_LAUNCH_NODE_IPADDR": "10.1.2.3"}, (5, 8, 1, "srun")),
])
def test_launcher_variables(environ, expect):
    env = detect(environ)
    assert (env.rank, env.world_size, env.local_rank, env.launcher) == expect
    if env.launcher == "srun":
        assert env.master_addr == "10.1.2.3" and env.local_world_size == 4
    if env.launcher == "torchrun":
        assert (env.master_addr, env.master_port, env.local_world_size) == ("h", 7, 2)


@pytest.mark.parametrize("environ", [{"RANK": "2", "WORLD_SIZE": "2"}, {"RANK": "x"}, {"PMI_RANK": "0"}])
def test_bad_launcher_variables_raise(environ):
    with pytest.raises(DistributedError):
        detect(environ)


def test_mpi_backend_refuses_ranks_mpi_did_not_start():
    with pytest.raises(DistributedError, match="ember launch"):
        _start("mpi", detect({"RANK": "0", "WORLD_SIZE": "2"}), None)


def test_nccl_without_libnccl_names_the_extra():
    from ember.distributed import nccl
    nccl.load_nccl.cache_clear()
    try:
        nccl.load_nccl()
    except DistributedError as e:
        assert "ember[nccl]" in str(e)
    else:  # a machine with libnccl: the id it makes has NCCL's size
        assert len(nccl.new_unique_id()) == nccl.UNIQUE_ID_BYTES


def test_rendezvous_hands_rank0s_bytes_to_every_rank():
    port, got = 29000 + np.random.default_rng().integers(0, 900), {}
    threads = [threading.Thread(target=lambda r=r: got.__setitem__(r, share(b"id-%d" % 7 if r == 0 else None, r, 4,
                                                                              "127.0.0.1", int(port), timeout=30)))
               for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {r: b"id-7" for r in range(4)}
    with pytest.raises(DistributedError, match="could not reach rank 0"):
        share(None, 1, 2, "127.0.0.1", int(port) + 1, timeout=0.3)


@pytest.mark.parametrize("n, replicas, drop_last", [(10, 3, False), (10, 3, True), (2, 4, False), (12, 4, False)])
def test_distributed_sampler_shards(n, replicas, drop_last):
    rng_of = lambda epoch: np.random.default_rng([5, epoch])
    for shuffle in (False, True):
        shards = [DistributedSampler(range(n), replicas, r, shuffle=shuffle, drop_last=drop_last).indices(rng_of(0))
                  for r in range(replicas)]
        size = n // replicas if drop_last else -(-n // replicas)
        assert all(len(s) == size for s in shards)
        joined = np.concatenate(shards)
        if drop_last:
            assert len(set(joined.tolist())) == len(joined)  # disjoint
        else:
            assert set(joined.tolist()) == set(range(n))  # covers, repeating only to even out
            assert len(joined) - n < replicas
        again = DistributedSampler(range(n), replicas, 0, shuffle=shuffle, drop_last=drop_last)
        assert np.array_equal(again.indices(rng_of(0)), shards[0])  # deterministic
    if n >= 10:
        s = DistributedSampler(range(n), replicas, 0)
        assert not np.array_equal(s.indices(rng_of(0)), s.indices(rng_of(1)))  # reshuffled per epoch
    with pytest.raises(ValueError, match="rank"):
        DistributedSampler(range(n), replicas, replicas)


def test_sampler_shards_through_the_loader_cover_the_global_batches():
    data = list(range(16))
    whole = DataLoader(data, 8, shuffle=True, seed=2).batch_indices(1)
    parts = [DataLoader(data, 4, sampler=DistributedSampler(data, 2, r), seed=2).batch_indices(1) for r in range(2)]
    for k, batch in enumerate(whole):
        assert sorted(np.concatenate([p[k] for p in parts]).tolist()) == sorted(batch.tolist())


@pytest.mark.parametrize("dtype", ["f32", "bf16", "i32", "bool"])
def test_single_process_group_returns_its_input(dtype):
    g = SingleProcess()
    x = ember.from_numpy((np.arange(6).reshape(3, 2) % 2).astype(dtype_of(dtype).np))
    for op in (["max", "min"] if dtype == "bool" else ["sum", "max", "min"]) + (["mean"] if x.dtype.is_float else []):
        assert np.array_equal(g.all_reduce(x, op=op).numpy(), x.numpy())
        assert np.array_equal(g.reduce_scatter(x, op=op).numpy(), x.numpy())
    assert np.array_equal(g.all_gather(x).numpy(), x.numpy()) and np.array_equal(g.broadcast(x).numpy(), x.numpy())
    with pytest.raises(DistributedError):
        g.all_reduce(x, op="prod")
    if dtype == "bool":
        with pytest.raises(DistributedError, match="bool"):
            g.all_reduce(x, op="sum")


def _learner(**kwargs):
    ember.seed(0)
    model = MLP(hidden=8)
    return Learner(model, SGD(model, lr=0.1), loss=cross_entropy, display="none", plots=False, **kwargs)


def test_multi_device_equals_one_device_with_the_combined_batch():
    loader = DataLoader(dataset(40, 0), 10, shuffle=True, seed=1)
    one = _learner(device=ember.Device.cpu())
    two = _learner(strategy="multi_device", devices=[ember.Device.cpu(), ember.Device.cpu()])
    a, b = one.fit(loader, epochs=2), two.fit(loader, epochs=2)
    for (k, v), (_, w) in zip(one.model.state_dict().items(), two.model.state_dict().items()):
        np.testing.assert_allclose(w.numpy(), v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    assert b.final["train/loss"] == pytest.approx(a.final["train/loss"], rel=1e-5)
