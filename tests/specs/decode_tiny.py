"""Test spec: a tiny transformers Llama vs itself, the candidate stepped through ``candidate_step``
with planted decode-only faults (tests/checks/test_decode.py)."""

import inspect

import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

VARIANTS = {
    "position": "one-token steps get RoPE position 0",
    "kv_short": "one-token steps drop the last cached token before attending",
    "mlp_decode": "layer 1's MLP output scaled by 1.01 in one-token steps only",
    "mlp_scale": "layer 1's MLP output scaled by 1.01 (prefill and decode)",
}
VARIANT = None
decode_steps = 6


#: Per-module overrides (tests set them on the loaded module).
module_tolerances = None
allow_divergence = None


def _cfg():
    return LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=128, max_position_embeddings=128,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def reference():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return LlamaForCausalLM(_cfg()).eval()


def candidate():
    m = LlamaForCausalLM(_cfg()).eval()
    if VARIANT in ("mlp_decode", "mlp_scale"):
        mlp = m.model.layers[1].mlp
        orig = mlp.forward
        mlp.forward = lambda x: orig(x) * (1.01 if x.shape[1] == 1 or VARIANT == "mlp_scale" else 1.0)
    return m


def inputs():
    return {"input_ids": (torch.arange(12).reshape(1, 12) * 5) % 128}


def run_reference(model, inputs):
    return model(input_ids=inputs["input_ids"], use_cache=False).logits


run_candidate = run_reference


def candidate_step(model, tokens, start_pos):
    n = tokens.shape[1]
    if start_pos == 0:
        model.test_cache = DynamicCache()
    pos = torch.arange(start_pos, start_pos + n).unsqueeze(0)
    if n == 1 and VARIANT == "position":
        pos = torch.zeros_like(pos)
    if n == 1 and VARIANT == "kv_short":
        model.test_cache.crop(-1)
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    return model(input_ids=tokens, position_ids=pos, use_cache=True, **{key: model.test_cache}).logits
