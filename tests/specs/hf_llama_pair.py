"""Test spec: transformers Llama vs itself, with planted faults (used by tests/checks/test_parity.py)."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

VARIANTS = {
    "nan": "candidate layer 1 MLP returns NaN",
    "unset": "conversion drops layer 1 down_proj",
    "shape": "candidate has a wider MLP: weights cannot load",
    "theta": "candidate rope_theta 10000 vs reference 500000",
}
VARIANT = None


def _cfg(**over):
    kw = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=256, max_position_embeddings=128,
              rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    kw.update(over)
    return LlamaConfig(**kw)


def reference():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        m = LlamaForCausalLM(_cfg())
        with torch.no_grad():
            for n, p in m.named_parameters():
                if "norm" in n:
                    p.copy_(1 + 0.1 * torch.randn_like(p))
    return m


def candidate():
    over = {}
    if VARIANT == "shape":
        over["intermediate_size"] = 192
    if VARIANT == "theta":
        over["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    m = LlamaForCausalLM(_cfg(**over))
    if VARIANT == "nan":
        orig = m.model.layers[1].mlp.forward
        m.model.layers[1].mlp.forward = lambda x: orig(x) * float("nan")
    return m


def convert_weights(sd):
    if VARIANT == "unset":
        sd = {k: v for k, v in sd.items() if "layers.1.mlp.down_proj" not in k}
    return sd


def inputs():
    return {"input_ids": (torch.arange(32).reshape(1, 32) * 7) % 256}
