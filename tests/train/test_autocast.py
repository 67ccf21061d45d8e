"""Mixed precision: `ember.autocast` against `torch.autocast` (CPU), `GradScaler` against
`torch.amp.GradScaler`, f32 master weights against the f32 trajectory, and `Learner(precision=)`.

bf16 on every device but wgpu, whose kernels hold f16 and not bf16 (there the torch oracle runs its
f16 autocast). Tolerances are stated per test in units of the dtype's epsilon.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import ember
import ember.nn.functional as F
from ember import amp, nn
from ember.optim import SGD, AdamW

VOCAB, WIDTH, HEADS, BATCH, LENGTH = 11, 12, 2, 3, 7  # odd sizes on purpose


def low_dtype(device: ember.Device) -> ember.DType:
    return ember.f16 if device.kind == "wgpu" else ember.bf16


def torch_dtype(dtype: ember.DType) -> torch.dtype:
    return torch.float16 if dtype is ember.f16 else torch.bfloat16


class Block(nn.Module):
    """A one-block transformer: embedding, pre-norm causal attention, a conv token mixer, an MLP, a head."""

    def __init__(self) -> None:
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.conv = nn.Conv1d(WIDTH, WIDTH, 3, padding=1)
        self.fc1, self.fc2 = nn.Linear(WIDTH, 2 * WIDTH), nn.Linear(2 * WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        x = self.emb(tokens)
        b, t, _ = x.shape
        q, k, v = (h.reshape(b, t, HEADS, -1).transpose(1, 2) for h in self.qkv(self.ln1(x)).chunk(3, dim=-1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, WIDTH))
        x = x + self.conv(x.transpose(1, 2)).transpose(1, 2)
        return self.head(x + self.fc2(F.gelu(self.fc1(self.ln2(x)))))


def torch_block(p: dict, tokens):
    """`Block.forward` in torch, on the parameters `p` (torch tensors named as ember's)."""
    x = TF.embedding(tokens, p["emb.weight"])
    b, t, _ = x.shape
    h = TF.linear(TF.layer_norm(x, (WIDTH,), p["ln1.weight"], p["ln1.bias"]), p["qkv.weight"], p["qkv.bias"])
    q, k, v = (u.reshape(b, t, HEADS, -1).transpose(1, 2) for u in h.chunk(3, dim=-1))
    a = TF.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + TF.linear(a.transpose(1, 2).reshape(b, t, WIDTH), p["proj.weight"], p["proj.bias"])
    x = x + TF.conv1d(x.transpose(1, 2), p["conv.weight"], p["conv.bias"], padding=1).transpose(1, 2)
    m = TF.linear(TF.gelu(TF.linear(TF.layer_norm(x, (WIDTH,), p["ln2.weight"], p["ln2.bias"]),
                                    p["fc1.weight"], p["fc1.bias"])), p["fc2.weight"], p["fc2.bias"])
    return TF.linear(x + m, p["head.weight"], p["head.bias"])


def problem(device: ember.Device, rng: np.random.Generator):
    ember.seed(int(rng.integers(1 << 30)))
    model = Block().to(device.autodiff())
    tokens = rng.integers(0, VOCAB, (BATCH, LENGTH))
    targets = rng.integers(0, VOCAB, (BATCH * LENGTH,))
    return model, tokens, targets


def ember_loss(model, tokens, targets, device):
    logits = model(ember.tensor(tokens, device=device.autodiff()))
    return logits, F.cross_entropy(logits.reshape(-1, VOCAB), ember.tensor(targets, device=device.autodiff()))


def test_forward_and_gradients_match_torch_autocast(device, rng):
    """Logits, loss and every parameter's gradient under autocast match torch.autocast("cpu") on the same
    weights within the low dtype's tolerance; the logits are in the low dtype, the loss and the
    gradients of the f32 parameters in f32; and autocast changed the result (it is not the f32 run)."""
    dtype = low_dtype(device)
    model, tokens, targets = problem(device, rng)
    with ember.autocast(device, dtype=dtype):
        logits, loss = ember_loss(model, tokens, targets, device)
    grads = loss.backward()
    assert logits.dtype is dtype and loss.dtype is ember.f32
    params = {n: torch.tensor(np.array(p.numpy()), requires_grad=True) for n, p in model.named_parameters()}
    with torch.autocast("cpu", dtype=torch_dtype(dtype)):
        t_logits = torch_block(params, torch.tensor(tokens))
        t_loss = TF.cross_entropy(t_logits.reshape(-1, VOCAB), torch.tensor(targets))
    t_loss.backward()
    tol = 8 * float(torch.finfo(torch_dtype(dtype)).eps)
    want = t_logits.detach().float().numpy()
    got = logits.cast(ember.f32).numpy()
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale)
    np.testing.assert_allclose(loss.item(), t_loss.item(), rtol=tol)
    with torch.no_grad():
        f32_logits = torch_block(params, torch.tensor(tokens)).numpy()
    assert np.abs(got - f32_logits).max() > 1e-4 * scale  # the casts happened
    for name, p in model.named_parameters():
        g = p.grad(grads)
        assert g.dtype is ember.f32, name
        t_grad = params[name].grad.numpy()
        np.testing.assert_allclose(g.numpy(), t_grad, rtol=0, atol=tol * (np.abs(t_grad).max() + 1e-3),
                                   err_msg=name)


def test_training_under_autocast_follows_f32(device, rng):
    """Eight AdamW steps under autocast stay within 3% of the f32 run's losses (and 4 low-dtype epsilons
    times the weights' scale of its weights), while the losses fall."""
    dtype = low_dtype(device)
    runs = []
    state = rng.bit_generator.state
    for enabled in (False, True):
        rng.bit_generator.state = state  # the same model and data
        model, tokens, targets = problem(device, rng)
        opt = AdamW(model, lr=3e-3, weight_decay=0.0)
        losses = []
        for _ in range(8):
            with ember.autocast(device, dtype=dtype, enabled=enabled):
                _, loss = ember_loss(model, tokens, targets, device)
            opt.step(loss.backward())
            losses.append(loss.item())
        runs.append((np.array(losses), {n: p.numpy() for n, p in model.named_parameters()}))
    (f32_losses, f32_weights), (ac_losses, ac_weights) = runs
    assert ac_losses[-1] < ac_losses[0] - 0.05
    np.testing.assert_allclose(ac_losses, f32_losses, rtol=0.03)
    eps = float(torch.finfo(torch_dtype(dtype)).eps)
    for name, w in f32_weights.items():
        np.testing.assert_allclose(ac_weights[name], w, rtol=0, atol=4 * eps * np.abs(w).max() + 8 * 3e-3,
                                   err_msg=name)


def test_op_policy_nesting_and_scope(device, rng):
    """Lower-precision ops give the autocast dtype, f32-list ops give f32 from low-precision inputs;
    `enabled=False` switches it off inside; f64 and other device kinds are left alone; the previous
    policy returns after each block."""
    dtype = low_dtype(device)
    a = ember.tensor(rng.standard_normal((5, 3)).astype(np.float32), device=device)
    b = ember.tensor(rng.standard_normal((3, 4)).astype(np.float32), device=device)
    other = "numpy" if device.kind != "numpy" else "cpu"
    with ember.autocast(device, dtype=dtype):
        assert amp.is_autocast_enabled()
        mm = a @ b
        assert mm.dtype is dtype and ember.einsum("ij,jk->ik", a, b).dtype is dtype
        np.testing.assert_allclose(mm.cast(ember.f32).numpy(), a.numpy() @ b.numpy(), rtol=0.02, atol=0.02)
        assert mm.softmax(-1).dtype is ember.f32 and mm.sum().dtype is ember.f32 and mm.exp().dtype is ember.f32
        assert (mm * 2).dtype is dtype  # not on either list: runs in its input's dtype
        with ember.autocast(device, enabled=False):
            assert not amp.is_autocast_enabled() and (a @ b).dtype is ember.f32
        assert (a @ b).dtype is dtype
        with ember.autocast(other, dtype=dtype):
            assert (a @ b).dtype is ember.f32  # this block casts only `other`'s tensors
    assert not amp.is_autocast_enabled() and (a @ b).dtype is ember.f32
    if device.kind != "wgpu":  # f64 is not held on wgpu
        with ember.autocast(device):
            assert (a.cast(ember.f64) @ b.cast(ember.f64)).dtype is ember.f64


def test_autocast_arguments():
    assert ember.autocast("cpu", dtype="f16").dtype is ember.f16
    assert ember.autocast(ember.Device.cpu().autodiff()).dtype is ember.bf16
    with pytest.raises(ValueError, match="bf16 or f16"):
        ember.autocast("cpu", dtype=ember.f32)

    @ember.autocast("numpy", dtype="f16")
    def product(a, b):
        return a @ b

    x = ember.ones(2, 3, device=ember.Device.numpy())
    assert product(x, x.T).dtype is ember.f16 and (x @ x.T).dtype is ember.f32


def test_docs_list_the_autocast_ops():
    """docs/training.md names every op of each list, and only those."""
    import pathlib
    import re
    text = (pathlib.Path(__file__).parents[2] / "docs" / "training.md").read_text()
    section = text[text.index("## Mixed precision"):]
    for policy, ops in amp.OPS.items():
        line = re.search(rf"^- {policy}: (.*)$", section, re.M)
        assert line, policy
        assert sorted(re.findall(r"`(\w+)`", line.group(1))) == sorted(ops), policy


def test_grad_scaler_matches_torch(device, rng):
    """Scale, skipped steps and parameters over ten steps, two of them with an inf or NaN gradient,
    growth_interval=3, equal torch.amp.GradScaler with torch.optim.SGD on the same gradients."""
    coeffs = rng.uniform(-1, 1, (10, 5)).astype(np.float32)
    coeffs[2, 1], coeffs[6, 3] = np.inf, np.nan
    start = rng.standard_normal(5).astype(np.float32)
    options = dict(init_scale=2.0 ** 4, growth_factor=2.0, backoff_factor=0.25, growth_interval=3)

    class One(nn.Module):
        def __init__(self):
            self.w = nn.Param(ember.tensor(start))

    model = One().to(device.autodiff())
    opt, scaler = SGD(model, lr=0.1), ember.GradScaler(**options)
    tw = torch.tensor(start, requires_grad=True)
    topt, tscaler = torch.optim.SGD([tw], lr=0.1), torch.amp.GradScaler("cpu", **options)
    for c in coeffs:
        loss = (model.w * ember.tensor(c, device=device.autodiff())).sum()
        took = scaler.step(opt, scaler.scale(loss).backward())
        scaler.update()
        topt.zero_grad()
        tscaler.scale((tw * torch.tensor(c)).sum()).backward()
        tscaler.step(topt)
        tscaler.update()
        assert took == bool(np.isfinite(c).all())
        assert scaler.get_scale() == tscaler.get_scale()
        np.testing.assert_allclose(model.w.numpy(), tw.detach().numpy(), rtol=1e-6, atol=1e-7)
    state = scaler.state_dict()
    assert state == {k: v for k, v in tscaler.state_dict().items()}
    restored = ember.GradScaler()
    restored.load_state_dict(state)
    assert restored.state_dict() == state


def test_grad_scaler_unscale_then_step():
    """`unscale` gives the true gradients (clip those); `step` on them does not unscale twice."""
    device = ember.Device.numpy().autodiff()
    w = ember.tensor([1.0, -2.0], device=device).require_grad()
    scaler = ember.GradScaler(init_scale=8.0)
    grads = scaler.unscale(scaler.scale((w * w).sum()).backward())
    np.testing.assert_array_equal(w.grad(grads).numpy(), [2.0, -4.0])
    with pytest.raises(RuntimeError, match="already called"):
        scaler.unscale(grads)
    with pytest.raises(ValueError, match="growth_interval"):
        ember.GradScaler(growth_interval=0)


def test_master_weights_track_f32_where_plain_low_precision_stalls(device, rng):
    """SGD with an lr whose updates are below half a low-precision ulp of the weights: a low-precision model
    without master weights never moves; with them its f32 masters follow the f32 model within 2% of the
    distance travelled (the gradients are computed in the low dtype), the parameters are the masters
    rounded, and state_dict / load_state_dict carry the masters in f32."""
    dtype = low_dtype(device)
    eps = float(torch.finfo(torch_dtype(dtype)).eps)
    magnitude = rng.uniform(0.5, 1.0, (4, 6)) * rng.choice([-1, 1], (4, 6))
    w0 = torch.tensor(magnitude).to(torch_dtype(dtype)).float().numpy()  # exact in the low dtype
    x = torch.tensor(rng.uniform(-1, 1, (9, 6))).to(torch_dtype(dtype)).float().numpy()
    lr = eps / 4 / (10 * np.abs(x).sum(0).max())  # |lr * grad| < a tenth of half an ulp at 0.5

    def train(param_dtype, master, steps=40):
        layer = nn.Linear(6, 4, bias=False).to(device.autodiff())
        layer.weight.set(ember.tensor(w0, device=device).cast(param_dtype))
        opt = SGD(layer, lr=lr, master_weights=master)
        xs = ember.tensor(x, device=device.autodiff()).cast(param_dtype)
        for _ in range(steps):
            opt.step(layer(xs).cast(ember.f32).sum().backward())
        return layer, opt

    f32_layer, _ = train(ember.f32, False)
    plain, _ = train(dtype, False)
    mastered, opt = train(dtype, True)
    travelled = f32_layer.weight.numpy() - w0
    assert np.abs(travelled).min() > 0
    np.testing.assert_array_equal(plain.weight.cast(ember.f32).numpy(), w0)  # stalled
    master = opt.state["weight"]["master"]
    assert master.dtype is ember.f32 and mastered.weight.dtype is dtype
    np.testing.assert_allclose(master.numpy() - w0, travelled, rtol=0.02, atol=1e-3 * np.abs(travelled).max())
    np.testing.assert_array_equal(mastered.weight.numpy(), master.cast(dtype).numpy())
    saved = opt.state_dict()
    assert saved["params"]["weight"]["master"].dtype == np.float32
    other = SGD(mastered, lr=lr, master_weights=True)
    other.load_state_dict(saved)
    assert other.state["weight"]["master"].dtype is ember.f32
    np.testing.assert_array_equal(other.state["weight"]["master"].numpy(), master.numpy())


@pytest.mark.parametrize("precision", ["bf16", "f16"])
def test_learner_precision_runs_the_manual_autocast_loop(precision):
    """`Learner(precision=)` gives the weights of the same loop written by hand with `ember.autocast`
    (and, for f16, a GradScaler), on NumPy (deterministic), and not those of the f32 Learner."""
    from ember.train import Learner
    from ember.train.step import move_to
    from tests.train.problem import MLP, loaders

    device = ember.Device.numpy()
    results = []
    for by_hand in (False, True, None):  # None: the Learner in f32, which must differ
        ember.seed(7)
        model = MLP().to(device.autodiff())
        opt = AdamW(model, lr=1e-2)
        train, _ = loaders()
        if not by_hand:
            Learner(model, opt, loss=F.cross_entropy, precision="f32" if by_hand is None else precision,
                    display="none", plots=False).fit(train)
        else:
            scaler = ember.GradScaler() if precision == "f16" else None
            model.train()
            for batch in train:
                xb, yb = move_to(batch, device.autodiff())
                with ember.autocast(device, dtype=precision):
                    loss = F.cross_entropy(model(xb), yb)
                if scaler is None:
                    opt.step(loss.backward())
                else:
                    scaler.step(opt, scaler.scale(loss).backward())
                    scaler.update()
        results.append({n: p.numpy() for n, p in model.named_parameters()})
    for name in results[0]:
        np.testing.assert_array_equal(results[0][name], results[1][name], err_msg=name)
    assert any(not np.array_equal(results[0][n], results[2][n]) for n in results[0])
    with pytest.raises(ValueError, match="precision"):
        Learner(MLP(), AdamW(MLP(), lr=1e-2), loss=F.cross_entropy, precision="fp8")
