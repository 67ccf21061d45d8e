"""ember's `Linear` has PyTorch's layout, weight (out, in): a torch `nn.Linear` state dict, a `torch.save`
file, a safetensors file written by the `safetensors` package and a LoRA file laid out as PEFT's load
with no adapter and give torch's outputs on every device, files ember writes load back into torch,
and the weight's gradient comes out in that layout (the oracle is torch on the CPU).

Square weights are the case that matters: a transposed (3, 3) weight has the right shape and would
load without a word, so only the outputs can tell the layouts apart.
"""

from __future__ import annotations

import numpy as np
import pytest
import safetensors.torch
import torch

import ember
from ember import nn
from ember.store import load_module, save_module
from tolerances import forward, grad

# (in_features, out_features, bias): square and not, odd sizes, with and without bias
CASES = [(3, 3, True), (3, 3, False), (7, 5, True), (5, 7, False), (1, 6, True)]
LEADS = [(4,), (2, 3), (0,), ()]  # the input's leading dims: a batch, two of them, an empty batch, none


def torch_linear(in_features: int, out_features: int, bias: bool) -> torch.nn.Linear:
    torch.manual_seed(in_features * 10 + out_features + bias)
    return torch.nn.Linear(in_features, out_features, bias=bias)


def assert_outputs_match(model: nn.Linear, twin: torch.nn.Linear, device, rng) -> None:
    """`model` and `twin` agree on random inputs of every shape in LEADS."""
    for lead in LEADS:
        x = rng.standard_normal(lead + (twin.in_features,)).astype(np.float32)
        got = model(ember.tensor(x, device=device)).numpy()
        want = twin(torch.from_numpy(x)).detach().numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, *forward("f32"), err_msg=f"{twin} on {x.shape}")


def test_torch_state_dict_loads_as_it_is(device, rng):
    for in_features, out_features, bias in CASES:
        twin = torch_linear(in_features, out_features, bias)
        model = nn.Linear(in_features, out_features, bias=bias, device=device)
        assert model.weight.shape == (out_features, in_features)
        assert model.load_state_dict({k: v.numpy() for k, v in twin.state_dict().items()}).ok
        assert_outputs_match(model, twin, device, rng)


@pytest.mark.parametrize("name", ["model.pt", "model.safetensors"])
def test_files_torch_and_safetensors_write_load_with_no_adapter(name, device, rng, tmp_path):
    for in_features, out_features, bias in CASES:
        twin = torch_linear(in_features, out_features, bias)
        path = tmp_path / f"{in_features}x{out_features}{bias}{name}"
        if name.endswith(".pt"):
            torch.save(twin.state_dict(), path)
        else:
            safetensors.torch.save_file(twin.state_dict(), path)
        model = nn.Linear(in_features, out_features, bias=bias, device=device)
        assert load_module(model, path).ok
        assert_outputs_match(model, twin, device, rng)


def test_files_ember_writes_load_into_torch(tmp_path, rng):
    for in_features, out_features, bias in CASES:
        model = nn.Linear(in_features, out_features, bias=bias, device=ember.Device.numpy())
        twin = torch.nn.Linear(in_features, out_features, bias=bias)
        save_module(model, tmp_path / "m.pt")
        twin.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True))
        save_module(model, tmp_path / "m.safetensors")
        assert torch.equal(safetensors.torch.load_file(tmp_path / "m.safetensors")["weight"], twin.weight.detach())
        assert_outputs_match(model, twin, ember.Device.numpy(), rng)


class LoRA(nn.Module):
    """A LoRA delta under PEFT's names: `lora_B(lora_A(x))`."""

    def __init__(self, d_in: int, rank: int, d_out: int, device) -> None:
        self.lora_A = nn.Linear(d_in, rank, bias=False, device=device)
        self.lora_B = nn.Linear(rank, d_out, bias=False, device=device)

    def forward(self, x):
        return self.lora_B(self.lora_A(x))


def test_peft_style_lora_file_loads_with_no_adapter(device, rng, tmp_path):
    """PEFT saves a LoRA adapter as `adapter_model.safetensors` holding the weights of its torch.nn.Linear
    layers, `<module>.lora_A.weight` (r, in) and `<module>.lora_B.weight` (out, r), under
    `base_model.model.`; such a file (written here without PEFT) loads by prefix as it is."""
    torch.manual_seed(5)
    d_in, rank, d_out = 7, 3, 5
    lora_a, lora_b = torch.nn.Linear(d_in, rank, bias=False), torch.nn.Linear(rank, d_out, bias=False)
    prefix = "base_model.model.encoder.layer.0.attention.self.query."
    path = tmp_path / "adapter_model.safetensors"
    safetensors.torch.save_file({prefix + "lora_A.weight": lora_a.weight.detach(),
                                 prefix + "lora_B.weight": lora_b.weight.detach()}, path)
    model = LoRA(d_in, rank, d_out, device)
    assert load_module(model, path, prefix=prefix).ok
    x = rng.standard_normal((4, d_in)).astype(np.float32)
    got = model(ember.tensor(x, device=device)).numpy()
    np.testing.assert_allclose(got, lora_b(lora_a(torch.from_numpy(x))).detach().numpy(), *forward("f32"))


def test_weight_gradient_matches_torch_in_its_layout(device, rng):
    tracked = device.autodiff()
    for in_features, out_features, bias in CASES:
        twin = torch_linear(in_features, out_features, bias)
        model = nn.Linear(in_features, out_features, bias=bias, device=tracked)
        assert model.load_state_dict({k: v.numpy() for k, v in twin.state_dict().items()}).ok
        for lead in LEADS:
            x = rng.standard_normal(lead + (in_features,)).astype(np.float32)
            cot = rng.standard_normal(lead + (out_features,)).astype(np.float32)
            ex = ember.tensor(x, device=tracked).require_grad()
            grads = (model(ex) * ember.tensor(cot, device=tracked)).sum().backward()
            tx = torch.from_numpy(x).requires_grad_()
            twin.zero_grad()
            (twin(tx) * torch.from_numpy(cot)).sum().backward()
            pairs = [("weight", model.weight.grad(grads), twin.weight.grad), ("input", ex.grad(grads), tx.grad)]
            if bias:
                pairs.append(("bias", model.bias.grad(grads), twin.bias.grad))
            for what, ours, theirs in pairs:
                assert ours.shape == tuple(theirs.shape), f"{what}: {ours.shape} != {tuple(theirs.shape)}"
                np.testing.assert_allclose(ours.numpy(), theirs.numpy(), *grad("f32"),
                                           err_msg=f"gradient of {what}, {twin} on {x.shape}")
