"""Fusion decisions on small graphs: which kernels, how many, bytes saved, what is written."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.debug


def kinds(report) -> list[str]:
    return [k["kind"] for k in report.kernels]


def test_chain_is_one_kernel_and_saves_its_intermediates(cpu, rng):
    n = 1000
    x = ember.tensor(rng.standard_normal(n).astype(np.float32), device=cpu)
    report = ember.debug.explain(lambda t: (t * 2.0).exp().sin(), x)
    assert kinds(report) == ["fused elementwise"]
    assert len(report.kernels[0]["ops"]) == 3
    # Unfused: mul reads x and the scalar, writes n; exp and sin read n and write n (4 bytes each).
    unfused = (4 * n + 4 + 4 * n) + 2 * (8 * n)
    fused = 4 * n + 4 + 4 * n  # x and the scalar read once, one output written
    assert report.kernels[0]["bytes_saved"] == unfused - fused
    assert "ember_kernel" in report.kernels[0]["sources"][0]


def test_values_still_referenced_are_written_by_the_same_kernel(cpu, rng):
    x = ember.tensor(rng.standard_normal((3, 4)).astype(np.float32), device=cpu)
    a = x.exp()
    b = a * 3.0
    c = (b + a).tanh()
    backend = ember.debug.fusion_backend(cpu)
    before = backend.stats()
    cpu.sync()
    after = backend.stats()
    assert after["kernels"] - before["kernels"] == 1
    assert after["inner_ops"] == before["inner_ops"]
    ref = np.exp(x.numpy())
    np.testing.assert_allclose(a.numpy(), ref, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), ref * 3, rtol=1e-6)
    np.testing.assert_allclose(c.numpy(), np.tanh(ref * 4), rtol=1e-5)


def test_dropped_values_are_never_written(cpu, rng):
    x = ember.tensor(rng.standard_normal(64).astype(np.float32), device=cpu)
    report = ember.debug.explain(lambda t: (t.exp() + 1.0).log(), x)
    program = report.kernels[0]["program"]
    assert program.splitlines()[-1] == "write %4"  # only the log, not the exp or the add
    assert sum("[kept]" in op for op in report.ops) == 1


def test_reduction_reads_the_fused_program(cpu, rng):
    x = ember.tensor(rng.standard_normal((8, 32)).astype(np.float32), device=cpu)
    report = ember.debug.explain(lambda t: ((t - 0.5) ** 2).sum(dim=1), x)
    assert kinds(report) == ["fused reduction"]
    assert report.kernels[0]["bytes_saved"] > 0


def test_softmax_keeps_no_full_size_intermediate(cpu, rng):
    x = ember.tensor(rng.standard_normal((16, 64)).astype(np.float32), device=cpu)
    report = ember.debug.explain(lambda t: t.softmax(-1), x)
    # amax runs alone; sum(exp(x - m)) and exp(x - m) / s each recompute exp(x - m) as they read x.
    assert sorted(kinds(report)) == ["fused elementwise", "fused reduction"]
    full = [op for op in report.ops if "[16, 64]" in op and "[kept]" in op]
    assert len(full) == 1  # only the result is written


def test_matmul_epilogue_reads_the_matmul_output_once(cpu, rng):
    x = ember.tensor(rng.standard_normal((4, 8)).astype(np.float32), device=cpu)
    w = ember.tensor(rng.standard_normal((8, 16)).astype(np.float32), device=cpu)
    bias = ember.tensor(rng.standard_normal(16).astype(np.float32), device=cpu)
    report = ember.debug.explain(lambda a: ((a @ w + bias).relu() * 0.5 + a.sum()), x)
    epilogue = [k for k in report.kernels if any("add" in op for op in k["ops"])]
    assert len(epilogue) == 1 and len(epilogue[0]["ops"]) >= 3
    assert sorted(op.split()[1] for op in report.inner) == ["matmul", "sum"]  # recorded, run on the inner backend


@pytest.mark.parametrize("lone_broadcasts", [False, True])
def test_a_lone_broadcasting_op_is_its_own_kernel_where_the_backend_asks(cpu, rng, monkeypatch, lone_broadcasts):
    # The bias add between a matmul and a reshape: alone in its group. The library runs it (copying the
    # broadcast bias first) unless the backend asks for lone broadcasts as kernels (CUDA does).
    backend = ember.debug.fusion_backend(cpu)
    monkeypatch.setattr(backend.target, "lone_broadcasts", lone_broadcasts)
    monkeypatch.setattr(backend, "plans", type(backend.plans)())  # plans made with the other setting stay out
    x = ember.tensor(rng.standard_normal((6, 5)).astype(np.float32), device=cpu)
    w = ember.tensor(rng.standard_normal((5, 8)).astype(np.float32), device=cpu)
    bias = ember.tensor(rng.standard_normal(8).astype(np.float32), device=cpu)
    scalar = ember.tensor(np.float32(1.5), device=cpu)
    out = {}

    def fn(a):
        out["y"] = (a @ w + bias).reshape(3, 16)
        out["z"] = (a @ w) * scalar  # a one-element operand: the library reads it in place, no copy
        return out["y"]
    report = ember.debug.explain(fn, x)
    assert kinds(report) == (["fused elementwise"] if lone_broadcasts else [])
    assert sorted(op.split()[1] for op in report.inner) == (
        ["matmul", "matmul", "mul", "reshape"] if lone_broadcasts else ["add", "matmul", "matmul", "mul", "reshape"])
    product = x.numpy() @ w.numpy()
    np.testing.assert_allclose(out["y"].numpy(), (product + bias.numpy()).reshape(3, 16), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["z"].numpy(), product * 1.5, rtol=1e-5, atol=1e-6)


def test_max_ops_cuts_the_stream(cpu, rng):
    backend = ember.debug.fusion_backend(cpu)
    x = ember.tensor(rng.standard_normal(10).astype(np.float32), device=cpu)
    y = x
    for _ in range(backend.max_ops + 3):
        y = y + 0.001
    assert backend.stats()["pending"] == 3
    np.testing.assert_allclose(y.numpy(), x.numpy() + 0.001 * (backend.max_ops + 3), rtol=1e-4)


def test_a_block_that_raises_raises_again_where_its_values_are_read(cpu, rng, monkeypatch):
    backend = ember.debug.fusion_backend(cpu)
    x = ember.tensor(rng.standard_normal(8).astype(np.float32), device=cpu)
    y = (x * 2.0).exp()
    z = x + 1.0

    def broken(*args, **kwargs):
        raise ValueError("inner backend failed")

    monkeypatch.setattr(backend.inner, "execute", broken)
    monkeypatch.setattr("ember.backend.cube.fused.target.run_elementwise", broken)
    with pytest.raises(ValueError, match="inner backend failed"):
        y.numpy()
    monkeypatch.undo()
    with pytest.raises(RuntimeError, match="not computed"):
        z.numpy()
    np.testing.assert_allclose((x + 1.0).numpy(), x.numpy() + 1, rtol=1e-6)
