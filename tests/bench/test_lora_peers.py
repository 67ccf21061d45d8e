"""The QLoRA peer of `llama_finetune_step` is QLoRA as a bitsandbytes user runs it, on the layers ember's
`apply_qlora` quantizes: the same Linear layers as NF4 with double quantization in blocks of 64, lm_head
left as it is, and the same number of trainable parameters."""

from __future__ import annotations


def test_qlora_peer_quantizes_the_layers_embers_qlora_does() -> None:
    import bitsandbytes
    import peft
    import torch

    from bench import lora
    from ember.lora import LoraConfig, apply_qlora, trainable_parameters
    from ember.models import LlamaConfig, LlamaForCausalLM
    from ember.quant.modules import QuantLinear
    size = dict(lora.LLAMA_SIZES["tiny"])
    seq, _ = size.pop("seq"), size.pop("batch")
    peer = peft.get_peft_model(lora.torch_llama("cpu", torch.float32, True, size, seq),
                               peft.LoraConfig(r=lora.LLAMA_RANK, lora_alpha=2 * lora.LLAMA_RANK,
                                               target_modules=lora.LINEAR))
    quantized = {name.removeprefix("base_model.model.").removesuffix(".base_layer"): layer
                 for name, layer in peer.named_modules() if isinstance(layer, bitsandbytes.nn.Linear4bit)}
    for layer in quantized.values():
        state = layer.weight.quant_state
        assert (state.quant_type, state.blocksize, state.nested, layer.compute_dtype) == ("nf4", 64, True,
                                                                                          torch.float32)
    assert type(peer.base_model.model.lm_head) is torch.nn.Linear

    model = apply_qlora(LlamaForCausalLM(LlamaConfig(**size, max_position_embeddings=seq)),
                        LoraConfig(rank=lora.LLAMA_RANK, alpha=2 * lora.LLAMA_RANK, targets=lora.LINEAR),
                        compute_dtype="f32")
    ours = {name for name, layer in model.named_modules() if isinstance(layer, QuantLinear)}
    assert set(quantized) == ours and len(ours) == size["num_hidden_layers"] * len(lora.LINEAR)
    assert trainable_parameters(model).trainable == sum(p.numel() for p in peer.parameters() if p.requires_grad)
