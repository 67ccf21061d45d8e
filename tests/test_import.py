"""`import ember` is cheap and reaches everything: submodules load on first attribute access (the kernel
language loads with the primitives, whose elementwise table is written in it), ml_dtypes
and the backends only when needed; PyTorch's dtype names and tensor conversion methods mean what they
mean in torch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

import ember
from ember.dtype import TORCH_NAMES
from ember.tensor import CASTS
from conformance.oracle import EMBER_NAME, TORCH_DTYPE


def _fresh(code: str) -> str:
    """Run `code` in a new interpreter (so nothing is imported yet) and return what it prints."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_loads_no_submodule_nor_ml_dtypes_until_used():
    out = _fresh(
        "import sys, ember\n"
        "heavy = ('ml_dtypes', 'ember.nn', 'ember.optim', 'ember.store', 'ember.data', 'ember.train', 'ember.kernels',"
        " 'ember.cube.targets', 'ember.backend')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "print(ember.nn.Linear.__name__, ember.optim.AdamW.__name__, ember.store.load.__name__,"
        " ember.train.__name__)\n"
        "print('ember.nn' in sys.modules, 'ml_dtypes' in sys.modules)\n"
        "ember.nn.Linear(3, 2)(ember.ones(4, 3)).sum().item()\n"  # the cpu backend and its compiler run
        "print('ml_dtypes' in sys.modules, ember.data.__name__)\n")
    assert out.splitlines() == ["[]", "Linear AdamW load ember.train", "True False", "False ember.data"]


def test_submodules_are_listed_and_unknown_names_raise():
    names = dir(ember)
    for sub in ("nn", "optim", "store", "data", "train", "models", "cube"):
        assert sub in names
    assert "float32" in names and "Tensor" in names
    with pytest.raises(AttributeError, match="has no attribute 'no_such_thing'"):
        ember.no_such_thing
    assert not hasattr(ember, "_private")


def test_bf16_binds_ml_dtypes_on_first_use_either_way():
    # ember first: bf16's NumPy dtype imports ml_dtypes, and bf16 math follows torch (f32 inside)
    x = torch.tensor([1.5, 2.25, 3.0, -7.0]).bfloat16()
    for device in ("numpy", "cpu"):
        out = _fresh("import sys, ember\n"
                     f"x = ember.tensor([1.5, 2.25, 3.0, -7.0], device=ember.Device.{device}()).to('bf16')\n"
                     "y = x.exp()\n"
                     "print(y.dtype, y.tolist(), y.numpy().dtype.name, 'ml_dtypes' in sys.modules)\n")
        assert out == f"bf16 {x.exp().float().tolist()} bfloat16 True", device
    # an ml_dtypes array made before ember knew bf16
    out = _fresh("import ml_dtypes, numpy as np, ember\n"
                 "x = ember.from_numpy(np.array([1, 2], ml_dtypes.bfloat16))\n"
                 "print(x.dtype, x.sum().item())\n")
    assert out == "bf16 3.0"


def test_torch_dtype_names_are_ember_dtypes():
    for name, dtype in TORCH_NAMES.items():
        assert getattr(ember, name) is dtype, name
        assert EMBER_NAME[getattr(torch, name)] == dtype.name, name
        assert ember.dtype.dtype_of(name) is dtype and ember.dtype.dtype_of(getattr(torch, name)) is dtype


@pytest.mark.parametrize("method", sorted(CASTS))
def test_tensor_cast_methods_match_torch(device, method):
    rng = np.random.default_rng(0)
    for source, shape in (("f32", (7, 3)), ("f64", (0, 2)), ("i64", (5,)), ("bool", ()), ("u8", (3, 1))):
        data = np.asarray(rng.standard_normal(shape) * 50, np.float32)
        t = torch.from_numpy(data).to(TORCH_DTYPE[source])
        x = ember.tensor(data, device=device).to(source)
        got = getattr(x, method)()
        want = getattr(t, method)()
        assert got.dtype.name == EMBER_NAME[want.dtype] and got.shape == tuple(want.shape)
        np.testing.assert_array_equal(got.to("f64").numpy(), want.double().numpy(), err_msg=f"{source}.{method}()")
