"""The embedded ``tts`` example: clean pair agrees, every planted fault changes the port's output."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from porting_kit.embedded import tts  # noqa: E402
from porting_kit.spec import load_spec  # noqa: E402

EXPECTED_VARIANTS = [
    "qkv_shard_order", "unmapped_weight", "nan_layer", "rope_inv_freq_uninitialized",
    "rope_theta_default", "rope_interleaved", "rope_partial", "rope_position_offset",
    "rope_scaling_ignored", "rope_low_precision",
    "rope_padded_half", "rope_table_half_rot_interleaved", "rope_table_interleaved_rot_half",
    "batch_left_pad", "norm_eps", "norm_functional_eps", "norm_layernorm",
    "norm_weight_offset", "norm_no_fp32_upcast", "norm_post", "norm_no_qk_norm",
    "fp16_overflow",
]

_REFERENCES: dict[bool, tuple] = {}


def _reference(spec):
    """The reference depends on the variant only through rope scaling: build it twice at most."""
    key = spec.variant == "rope_scaling_ignored"
    if key not in _REFERENCES:
        model = spec.call("reference")
        _REFERENCES[key] = (model, {k: v.clone() for k, v in model.state_dict().items()})
    return _REFERENCES[key]


def _pair(variant=None):
    spec = load_spec(example="tts" if variant is None else f"tts:{variant}")
    ref, ref_sd = _reference(spec)
    cand = spec.call("candidate")
    loaded = cand.load_weights(ref_sd.items())
    return spec, ref, cand, loaded


def _logits(variant=None, dtype=None):
    spec, ref, cand, _ = _pair(variant)
    inputs = spec.call("inputs")
    ref_run, cand_run = ref, cand
    if dtype is not None:
        import copy

        ref_run, cand_run = copy.deepcopy(ref).to(dtype), cand.to(dtype)
    with torch.no_grad():
        return (spec.call("run_reference", ref_run, inputs).float(),
                spec.call("run_candidate", cand_run, inputs).float())


def test_variant_names_are_the_documented_ones():
    # the LM-side variants, in order (the audio, TP, sampling and decode issues add ``audio_*``,
    # ``tp_*``, ``sampling_*``, ``decode_*`` and ``features_*`` ones)
    assert [v for v in tts.VARIANTS
            if not v.startswith(("audio_", "tp_", "sampling_", "decode_", "features_"))] == EXPECTED_VARIANTS
    assert set(tts.PORT_OPTIONS) == set(EXPECTED_VARIANTS)
    assert tts.__doc__.strip().splitlines()[0].startswith("Tiny TTS")


def test_clean_pair_matches_in_fp32_and_every_weight_is_loaded():
    spec, ref, cand, loaded = _pair()
    assert loaded == set(cand.state_dict().keys())
    inputs = spec.call("inputs")
    assert inputs["input_ids"].shape == (1, 64)
    with torch.no_grad():
        a = spec.call("run_reference", ref, inputs)
        b = spec.call("run_candidate", cand, inputs)
    assert a.shape == (1, 64, 1028)
    torch.testing.assert_close(b, a)


@pytest.mark.parametrize("variant", [v for v in EXPECTED_VARIANTS
                                     if v not in ("norm_no_fp32_upcast", "fp16_overflow", "batch_left_pad")])
def test_every_variant_changes_the_logits(variant):
    a, b = _logits(variant)
    diff = (a - b).abs()
    assert bool(diff.isnan().any()) or float(diff.max()) > 1e-3, float(diff.max())


@pytest.mark.parametrize("variant", ["decode_position", "decode_kv_stale"])
def test_decode_variants_leave_the_whole_sequence_forward_clean(variant):
    a, b = _logits(variant)
    torch.testing.assert_close(b, a)


def test_no_fp32_upcast_shows_only_in_bf16():
    a, b = _logits("norm_no_fp32_upcast")
    torch.testing.assert_close(b, a)  # identical maths in float32
    a_clean, b_clean = _logits(None, torch.bfloat16)
    a_var, b_var = _logits("norm_no_fp32_upcast", torch.bfloat16)
    torch.testing.assert_close(a_var, a_clean)  # same reference
    clean = float((a_clean - b_clean).abs().max())
    fault = float((a_var - b_var).abs().max())
    assert fault > 1e-3 and fault > 4 * clean, (fault, clean)


def _rotaries(model):
    return [m for n, m in model.named_modules() if n.endswith("rotary_emb") and hasattr(m, "inv_freq")]


def test_inv_freq_is_garbage_after_meta_init_and_right_otherwise():
    expected = 1.0 / (1e6 ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16))
    _, ref, clean, _ = _pair()
    hf = ref.lm.model.rotary_emb.inv_freq
    torch.testing.assert_close(hf, expected)
    rotaries = _rotaries(clean)
    assert len(rotaries) == 2
    for rot in rotaries:
        torch.testing.assert_close(rot.inv_freq, expected)
    _, _, broken, loaded = _pair("rope_inv_freq_uninitialized")
    assert loaded == set(broken.state_dict().keys())  # the weights themselves all load
    for rot in _rotaries(broken):
        assert rot.inv_freq.device.type == "cpu"
        assert not torch.allclose(rot.inv_freq, expected, equal_nan=False)
        rot.inv_freq.copy_(rot.compute_inv_freq())  # the fix: recompute after load
        torch.testing.assert_close(rot.inv_freq, expected)


def test_unmapped_weight_is_skipped_silently():
    _, _, cand, loaded = _pair("unmapped_weight")
    assert set(cand.state_dict().keys()) - loaded == {"talker.layers.1.mlp.down_proj.weight"}


def test_nan_appears_first_in_layer_1_mlp():
    spec, _, cand, _ = _pair("nan_layer")
    seen = {}
    hooks = [cand.get_submodule(n).register_forward_hook(
        lambda m, i, o, n=n: seen.__setitem__(n, bool(o.isnan().any())))
        for n in ("talker.layers.0.mlp", "talker.layers.1.attn", "talker.layers.1.mlp")]
    with torch.no_grad():
        spec.call("run_candidate", cand, spec.call("inputs"))
    for h in hooks:
        h.remove()
    assert seen == {"talker.layers.0.mlp": False, "talker.layers.1.attn": False,
                    "talker.layers.1.mlp": True}


def test_static_configs_report_what_each_side_uses():
    clean = load_spec(example="tts")
    assert clean.call("reference_config") == clean.call("candidate_config")
    assert clean.call("reference_config")["rope_theta"] == 1e6
    theta = load_spec(example="tts:rope_theta_default")
    assert theta.call("candidate_config")["rope_theta"] == 10000.0
    assert theta.call("reference_config")["rope_theta"] == 1e6
    scaling = load_spec(example="tts:rope_scaling_ignored")
    assert scaling.call("reference_config")["rope_scaling"] == {"rope_type": "linear", "factor": 4.0}
    assert scaling.call("candidate_config")["rope_scaling"] is None
    eps = load_spec(example="tts:norm_eps")
    assert (eps.call("reference_config")["rms_norm_eps"],
            eps.call("candidate_config")["rms_norm_eps"]) == (1e-6, 1e-5)
    partial = load_spec(example="tts:rope_partial")
    assert partial.call("candidate_config")["partial_rotary_factor"] == 0.5
    assert partial.call("candidate_config")["rotary_dim"] == 8


def test_load_weights_names_both_shapes_on_mismatch():
    _, _, cand, _ = _pair()
    with pytest.raises(ValueError, match=r"talker.norm.weight.*\(32,\).*\(64,\)"):
        cand.load_weights([("lm.model.norm.weight", torch.ones(32))])


def test_builders_leave_the_global_rng_alone():
    spec = load_spec(example="tts")
    before = torch.get_rng_state()
    spec.call("reference")
    spec.call("candidate")
    assert torch.equal(before, torch.get_rng_state())


def test_codecs_decode_the_same_waveform():
    _, ref, cand, _ = _pair()
    gen = torch.Generator().manual_seed(3)
    codes = torch.randint(0, 1024, (1, 4, 10), generator=gen)
    a = ref.decode(codes)
    b = cand.codec.decode(codes)
    assert a.shape == (1, 10 * 320) and cand.codec.hop_length == 320
    assert float(a.abs().max()) > 0
    torch.testing.assert_close(b, a)
