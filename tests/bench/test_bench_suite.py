"""Smoke test of the benchmark suite: every benchmark runs at tiny sizes with one timed call and gives a
row for ember and for each peer, measured or skipped with a reason. Speed is not checked here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS, main
from bench.frameworks import PEERS, Frameworks
from bench.harness import Row, Settings, framework_of, markdown

TINY = Settings(repeats=1, warmup=False, tiny=True)


@pytest.fixture(scope="module")
def frameworks() -> Frameworks:
    return Frameworks("numpy", PEERS)


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_benchmark_runs_and_reports_every_framework(frameworks: Frameworks, name: str) -> None:
    rows = BENCHMARKS[name](frameworks, TINY)
    assert rows and all(isinstance(r, Row) and r.bench == name for r in rows)
    assert all(r.median_us is None or r.median_us > 0 for r in rows)
    assert all(r.note.startswith("skipped: ") for r in rows if r.median_us is None)
    assert any(r.impl.startswith("ember") and r.median_us is not None for r in rows)
    if name != "checkpointing":  # ember against itself, by design
        for case in {r.case for r in rows}:
            impls = {framework_of(r.impl) for r in rows if r.case == case}
            assert set(PEERS) <= impls, f"{name} / {case}: no row for {set(PEERS) - impls}"


def test_markdown_shows_ember_against_every_measured_peer() -> None:
    rows = [Row("b", "c", "numpy", 2.0), Row("b", "c", "ember", 4.0), Row("b", "c", "torch", 1.0),
            Row("b", "c", "tinygrad", None, "skipped: absent")]
    ember_line = next(line for line in markdown(rows).splitlines() if "| ember |" in line)
    assert "ember/numpy 2x" in ember_line and "ember/torch 4x" in ember_line and "tinygrad" not in ember_line


def test_cli_writes_json(tmp_path, capsys) -> None:
    path = tmp_path / "results.json"
    assert main(["overhead", "--peers", "numpy", "--repeats", "1", "--json", str(path)]) == 0
    payload = json.loads(path.read_text())
    assert {framework_of(r["impl"]) for r in payload["rows"]} == {"numpy", "ember"}
    assert payload["run"]["device"] == 'Device("numpy")' and "cores" in payload["machine"]
    assert payload["run"]["command"] == f"python -m bench overhead --peers numpy --repeats 1 --json {path}"
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent)
    assert payload["run"]["commit"] == (head.stdout.strip() if head.returncode == 0 else "unknown")
    assert "| overhead | add | ember |" in capsys.readouterr().out


class SdpaCalls:
    """`F.scaled_dot_product_attention` that records how each call asked for its mask."""

    def __init__(self, sdpa) -> None:
        self.sdpa, self.calls = sdpa, []

    def __call__(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        self.calls.append((attn_mask is None, is_causal, dropout_p))
        return self.sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kwargs)


@pytest.fixture
def sdpa_calls(monkeypatch) -> SdpaCalls:
    from bench import torch_models
    calls = SdpaCalls(torch_models.F.scaled_dot_product_attention)
    monkeypatch.setattr(torch_models.F, "scaled_dot_product_attention", calls)
    return calls


def test_gpt_peer_is_embers_gpt_through_causal_sdpa(sdpa_calls: SdpaCalls) -> None:
    """The GPT bench's torch peer has ember's parameters (count and shapes) and, given ember's weights,
    the same logits, loss and loss after one AdamW step; each layer's attention is one causal SDPA call
    without a mask, which torch's fused kernels take."""
    import numpy as np
    import torch

    import ember
    from bench import gpt, models, torch_models
    from ember.nn.loss import cross_entropy
    from ember.optim import AdamW
    vocab, seq, d_model, heads, layers, batch = 67, 7, 12, 3, 2, 3  # odd sizes; head width 4
    device = ember.Device.numpy().autodiff()
    model = models.ember_gpt(vocab, seq, d_model, heads, layers, device)
    peer = torch_models.GPT(vocab, seq, d_model, heads, layers)
    assert model.num_params() == sum(p.numel() for p in peer.parameters())
    torch_models.load_ember(peer, model)  # strict: every name and shape must match
    rng = np.random.default_rng(0)
    idx, target = rng.integers(0, vocab, (batch, seq)), rng.integers(0, vocab, (batch * seq,))
    ember_idx, ember_target = ember.tensor(idx, device=device), ember.tensor(target, device=device)
    torch_idx, torch_target = torch.from_numpy(idx), torch.from_numpy(target)
    optimizer = AdamW(model, lr=gpt.LR, weight_decay=gpt.WEIGHT_DECAY)
    peer_optimizer = models.torch_adamw(torch, peer.parameters(), lr=gpt.LR, weight_decay=gpt.WEIGHT_DECAY)
    for step in range(2):
        logits = model(ember_idx)
        peer_logits = peer(torch_idx)
        np.testing.assert_allclose(logits.numpy(), peer_logits.detach().numpy(), rtol=1e-4, atol=1e-5)
        loss = cross_entropy(logits.reshape(-1, vocab), ember_target)
        peer_loss = torch.nn.functional.cross_entropy(peer_logits.reshape(-1, vocab), torch_target)
        assert abs(loss.item() - peer_loss.item()) < 1e-5, f"step {step}"
        optimizer.step(loss.backward())
        peer_optimizer.zero_grad(set_to_none=True)
        peer_loss.backward()
        peer_optimizer.step()
    assert sdpa_calls.calls == [(True, True, 0.0)] * (2 * layers)
    torch_models.check_fused_attention(peer, torch_idx)


def test_encoder_peer_is_embers_encoder_through_sdpa(sdpa_calls: SdpaCalls) -> None:
    """The encoder bench's torch peer computes ember's `TransformerEncoder` (post-norm, ReLU) given its
    weights, through one unmasked, non-causal SDPA call per layer."""
    import numpy as np
    import torch

    import ember
    from bench import models, torch_models
    d_model, heads, d_ff, layers = 10, 2, 18, 2
    device = ember.Device.numpy()
    encoder = models.ember_encoder(d_model, heads, d_ff, layers, device)
    peer = torch_models.Encoder(d_model, heads, d_ff, layers)
    assert encoder.num_params() == sum(p.numel() for p in peer.parameters())
    torch_models.load_ember(peer, encoder)
    x = np.random.default_rng(1).standard_normal((3, 5, d_model)).astype(np.float32)
    with torch.no_grad():
        want = peer(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(encoder(ember.tensor(x, device=device)).numpy(), want, rtol=1e-4, atol=1e-5)
    assert sdpa_calls.calls == [(True, False, 0.0)] * layers


def test_bert_peer_is_embers_bert_through_sdpa(sdpa_calls: SdpaCalls) -> None:
    """The BERT forward's torch peer computes ember's BERT (embeddings, their LayerNorm, post-norm GELU
    layers) given its weights, through one unmasked, non-causal SDPA call per layer."""
    import numpy as np
    import torch

    import ember
    from bench import models, torch_models
    vocab, seq, d_model, heads, layers = 29, 7, 12, 3, 2
    device = ember.Device.numpy()
    model = models.ember_bert(vocab, seq, d_model, heads, layers, device)
    peer = torch_models.BERT(vocab, seq, d_model, heads, layers)
    assert model.num_params() == sum(p.numel() for p in peer.parameters())
    torch_models.load_ember(peer, model)
    idx = np.random.default_rng(2).integers(0, vocab, (3, seq))
    with torch.no_grad():
        want = peer(torch.from_numpy(idx)).numpy()
    np.testing.assert_allclose(model(ember.tensor(idx, device=device)).numpy(), want, rtol=1e-4, atol=1e-5)
    assert sdpa_calls.calls == [(True, False, 0.0)] * layers


def test_gpt_workloads_run_one_step_each() -> None:
    """`python -m bench.gpt` for ember and the torch peer at tiny sizes on the CPU: a row each, with the
    GPT's first loss near ln(vocab) on both sides (the same initial distributions)."""
    from bench import gpt
    for impl in ("ember", "torch"):
        args = gpt.parse(["gpt", impl, "--device", "cpu", "--layers", "1", "--d-model", "16", "--heads", "2",
                          "--seq", "8", "--batch", "2", "--vocab", "64", "--steps", "1"])
        row = gpt.measure(args)
        assert row["impl"] == impl and row["steps"] == 1 and row["step_ms"] > 0
        assert abs(row["first_loss"] - row["ln_vocab"]) < 0.5, row
        encoder = gpt.measure(gpt.parse(["encoder", impl, "--device", "cpu", "--layers", "1", "--d-model", "8",
                                         "--heads", "2", "--d-ff", "12", "--seq", "4", "--batch", "2",
                                         "--steps", "1"]))
        assert encoder["impl"] == impl and encoder["step_ms"] > 0


def test_gpu_training_rows_note_ember_over_each_torch_row() -> None:
    from bench.gpu import note_ratios
    rows = [dict(case="c", impl="torch", ms=4.0), dict(case="c", impl="ember", ms=6.0),
            dict(case="c", impl="torch.compile", ms=3.0), dict(case="c", impl="ember EMBER_CUDA_GRAPHS=0", ms=None),
            dict(case="other", impl="torch", ms=1.0)]
    note_ratios(rows, "c")
    assert rows[1] == dict(case="c", impl="ember", ms=6.0, vs_torch=1.5, **{"vs_torch.compile": 2.0})
    assert "vs_torch" not in rows[3] and rows[0] == dict(case="c", impl="torch", ms=4.0)


@pytest.mark.parametrize("inside_checkout", [False, True])
def test_commit_is_unknown_outside_a_checkout_of_its_own(tmp_path, inside_checkout: bool) -> None:
    """A copy of the bench (as `git archive` makes one), alone or inside another git checkout, does not
    report that checkout's commit."""
    import shutil
    import sys
    if inside_checkout:
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                        "--allow-empty", "-m", "outer"], check=True)
    copy = tmp_path / "copy"
    (copy / "bench").mkdir(parents=True)
    for name in ("__init__.py", "harness.py"):
        shutil.copy(Path(__file__).parents[2] / "bench" / name, copy / "bench" / name)
    done = subprocess.run([sys.executable, "-c", "from bench.harness import source_commit; print(source_commit())"],
                          capture_output=True, text=True, cwd=copy, check=True)
    assert done.stdout.strip() == "unknown"
