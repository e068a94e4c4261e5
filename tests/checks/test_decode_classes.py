"""Property test (issue 29, B4): a static KV cache's wrong write slot is ``decode.kv_cache``.

A tiny transformers Llama (drawn: layers, KV heads, prompt length, seed) against itself; the
candidate is stepped through a static cache (slots preallocated, zero-filled) whose write slot
is drawn from the class: never advancing (the first decode slot or the last prompt token's),
lagging the position by one or two; its reads either take every slot through ``start_pos``
(unwritten ones as zeros) or only the written ones. Each must give ``decode.kv_cache`` with
the scheme in the evidence; the clean twin (the slot is the position) passes.
"""

from __future__ import annotations

import inspect
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from porting_kit import run_check  # noqa: E402
from porting_kit.probes.decode import WRITE_SCHEMES  # noqa: E402
from porting_kit.spec import Spec  # noqa: E402

PROPERTY = settings(max_examples=50, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
SCHEMES = {"right": lambda start, T: start, **WRITE_SCHEMES}


def static_cache_spec(layers: int, kv_heads: int, prompt_len: int, seed: int, scheme: str,
                      zero_filled: bool) -> Spec:
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=kv_heads, vocab_size=64,
                      max_position_embeddings=64)

    def model():
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            return LlamaForCausalLM(cfg).eval()

    write = SCHEMES[scheme]

    def candidate_step(m, tokens, start_pos):
        key = "cache" if "cache" in inspect.signature(m.forward).parameters else "past_key_values"
        pos = torch.arange(start_pos, start_pos + tokens.shape[1]).unsqueeze(0)
        if start_pos == 0:  # the prefill fills slots 0..T-1 of a zero-filled static cache
            m.kv = DynamicCache()
            out = m(input_ids=tokens, position_ids=pos, use_cache=True, **{key: m.kv}).logits
            m.slots = [(torch.zeros_like(torch.cat([la.keys] * 4, dim=-2)),
                        torch.zeros_like(torch.cat([la.values] * 4, dim=-2))) for la in m.kv.layers]
            for (k, v), la in zip(m.slots, m.kv.layers):
                k[..., :prompt_len, :], v[..., :prompt_len, :] = la.keys, la.values
            m.written = set(range(prompt_len))
            return out
        w = write(start_pos, prompt_len)
        read = [i for i in range(start_pos + 1) if i != w and (zero_filled or i in m.written)]
        for (k, v), la in zip(m.slots, m.kv.layers):
            la.keys, la.values = k[..., read, :], v[..., read, :]
        out = m(input_ids=tokens, position_ids=pos, use_cache=True, **{key: m.kv}).logits
        for (k, v), la in zip(m.slots, m.kv.layers):  # the new token's K/V went last: its slot is w
            k[..., w, :], v[..., w, :] = la.keys[..., -1, :], la.values[..., -1, :]
        m.written.add(w)
        return out

    def run(m, inputs):
        return m(input_ids=inputs["input_ids"], use_cache=False).logits

    ids = (torch.arange(prompt_len).reshape(1, prompt_len) * (seed % 7 + 3)) % 64
    mod = types.SimpleNamespace(reference=model, candidate=model, inputs=lambda: {"input_ids": ids},
                                run_reference=run, run_candidate=run, candidate_step=candidate_step,
                                decode_steps=4)
    return Spec(module=mod, name=f"static_cache:{scheme}")


@st.composite
def static_caches(draw, schemes):
    return dict(layers=draw(st.integers(1, 2)), kv_heads=draw(st.sampled_from([1, 2, 4])),
                prompt_len=draw(st.integers(3, 9)), seed=draw(st.integers(0, 2 ** 16)),
                scheme=draw(st.sampled_from(schemes)), zero_filled=draw(st.booleans()))


@pytest.mark.slow
@PROPERTY
@given(static_caches(sorted(WRITE_SCHEMES)))
def test_wrong_write_slot_is_kv_cache(case):
    by = {f.code: f for f in run_check(static_cache_spec(**case), only="decode").findings}
    assert "decode.kv_cache" in by, (case, list(by))
    ev = by["decode.kv_cache"].evidence
    assert ev["hypothesis_rel_err"] < 1e-4
    if "write_scheme" in ev:  # else the same cache as one token short at this step
        assert ev["write_scheme"] == case["scheme"] or ev["cache_tokens_seen"] < ev["cache_tokens_expected"]


@pytest.mark.slow
@PROPERTY
@given(static_caches(["right"]))
def test_static_cache_written_at_its_position_passes(case):
    assert run_check(static_cache_spec(**case), only="decode").codes() == ["decode.ok"]


@pytest.mark.slow
def test_write_slot_that_never_advances_names_the_zero_slots():
    """The field case: every step writes the first decode slot and reads zero-filled slots."""
    spec = static_cache_spec(2, 2, 6, 1, "slot_fixed_first_decode", True)
    by = {f.code: f for f in run_check(spec, only="decode").findings}
    ev = by["decode.kv_cache"].evidence
    assert (ev["step"], ev["write_scheme"], ev["zero_slots_read"]) == (2, "slot_fixed_first_decode", 1)
    assert (ev["cache_tokens_seen"], ev["cache_tokens_expected"], ev["positions_missing"]) == (7, 8, "6")
