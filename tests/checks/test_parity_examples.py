"""Layer parity on the embedded TTS example and the real Meta-vs-HF Llama pair."""

import importlib.util
from pathlib import Path

import pytest

from porting_kit.cli import main
from porting_kit.runner import run_check

LLAMA = str(Path(__file__).resolve().parents[2] / "examples" / "llama_meta.py")


def test_embedded_clean_passes():
    r = run_check(example="tts", only="parity")
    assert r.codes() == ["parity.ok"]  # the clean port's fused qkv is in the reference's order: no finding
    ev = r.findings[0].evidence
    # embed, 2 decoder layers, final norm, the LM body, lm_head: the coarse pass is enough
    assert ev["compared_modules"] == 6
    assert ev["output_max_abs"] <= 1e-5


def test_embedded_fused_qkv_shard_order_is_located_in_layer0_attention():
    r = run_check(example="tts:qkv_shard_order", only="parity")
    (fd,) = r.by_code("parity.first_divergence")
    assert (fd.where.reference, fd.where.candidate) == ("lm.model.layers.0.self_attn", "talker.layers.0.attn")
    assert fd.evidence["input_already_differs"] is True
    assert r.first_divergence["candidate_module"] == "talker.layers.0.attn"
    # named as a weight-conversion fault, not as the attention's own code
    (fused,) = r.by_code("parity.fused_shard_order")
    assert fused.status == "fail"
    assert fused.evidence["candidate_tensor"] == "talker.layers.0.attn.qkv_proj.weight"
    assert fused.evidence["permutation"] == "1 0 2"
    assert fused.evidence["shards_in_candidate_order"] == ("lm.model.layers.0.self_attn.k_proj.weight, "
                                                          "lm.model.layers.0.self_attn.q_proj.weight, "
                                                          "lm.model.layers.0.self_attn.v_proj.weight")
    assert "own code" not in fd.message and "parity.fused_shard_order" in fd.message
    # --only parity: the hint does not point at rope/norm diagnoses that did not run
    assert "diagnoses below" not in fd.hint


def test_embedded_unmapped_weight_is_reported_on_both_sides():
    r = run_check(example="tts:unmapped_weight", only="parity")
    (f,) = r.by_code("parity.unmapped_weights")
    assert f.evidence["unmapped_reference_names"] == "lm.model.layers.1.mlp.down_proj.weight"
    assert f.evidence["unset_candidate_names"] == "talker.layers.1.mlp.down_proj.weight"
    assert f.evidence["method"] == "load_weights"
    (fd,) = r.by_code("parity.first_divergence")
    assert fd.where.candidate == "talker.layers.1.mlp.down_proj"


def test_embedded_nan_origin():
    r = run_check(example="tts:nan_layer", only="parity")
    (f,) = r.by_code("parity.nan_origin")
    assert f.where.candidate == "talker.layers.1.mlp" and f.where.reference is None
    assert r.by_code("parity.first_divergence")[0].where.reference == "lm.model.layers.1.mlp"


@pytest.mark.slow
def test_embedded_alignment_coarse_then_fine_inside_the_differing_block():
    clean = run_check(example="tts", only="parity")
    rows = {row["candidate"]: row for row in clean.extras["alignment"]}
    assert rows["talker.layers.0"]["reference"] == "lm.model.layers.0"  # weights lifted to the block
    assert rows["talker.layers.0"]["source"] == "weights"
    assert "talker.layers.0.attn.o_proj" not in rows  # no fine pass when nothing differs
    r = run_check(example="tts:qkv_shard_order", only="parity")
    rows = {row["candidate"]: row for row in r.extras["alignment"]}
    assert rows["talker.layers.0.attn.o_proj"]["reference"] == "lm.model.layers.0.self_attn.o_proj"
    assert rows["talker.layers.0.attn.o_proj"]["source"] == "weights"
    assert rows["talker.layers.0.attn"]["reference"] == "lm.model.layers.0.self_attn"
    assert "talker.layers.1.attn.o_proj" not in rows  # only the first differing block is refined
    unaligned = r.by_code("parity.first_divergence")[0].evidence["unaligned_candidate_modules"]
    assert "talker.layers.0.attn.qkv_proj" in unaligned


@pytest.mark.slow
def test_llama_pair_clean_passes_with_the_qk_permutation_respected():
    r = run_check(LLAMA, only="parity")
    assert r.codes() == ["parity.ok"], [f.message for f in r.findings]
    res = r.extras["parity"]
    # q/k rows are permuted by the conversion: the comparison maps them back
    assert set(res.pair.weights.output_permutation) == {
        f"layers.{i}.attention.{w}" for i in range(2) for w in ("wq", "wk")}
    assert r.findings[0].evidence["output_max_abs"] < 1e-5


@pytest.mark.slow
def test_llama_pair_without_permutation_diverges_in_layer0_attention(capsys):
    assert main(["check", LLAMA, "--variant", "no_permutation", "--only", "parity"]) == 1
    r = run_check(LLAMA, variant="no_permutation", only="parity")
    (fd,) = r.by_code("parity.first_divergence")
    assert (fd.where.reference, fd.where.candidate) == ("model.layers.0.self_attn", "layers.0.attention")
    assert fd.evidence["first_differing_output_candidate"] == "layers.0.attention.wo"


@pytest.mark.skipif(importlib.util.find_spec("encodec") is None,
                    reason="needs the package encodec (pip install 'porting-kit[examples]')")
def test_encodec_pair_aligns_without_a_module_map():
    # Meta's SConv1d > NormConv1d > Conv1d wrappers and its residual block's Sequential body vs
    # transformers' EncodecConv1d / EncodecResnetBlock: aligned from the weight map, parents and
    # the sketches, with no spec help.
    from porting_kit.spec import load_spec

    spec = load_spec(str(Path(__file__).resolve().parents[2] / "examples" / "encodec_pair.py"))
    del spec.module.module_map
    r = run_check(spec, only="parity")
    assert r.codes() == ["parity.ok"]
    rows = {row["reference"]: row["candidate"] for row in r.extras["alignment"]}
    assert rows["decoder.layers.4"] == "decoder.model.4"  # the residual block, not its body
    assert r.findings[0].evidence["compared_modules"] >= 15
