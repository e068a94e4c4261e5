"""Tensor-parallel family: TP 2 on CPU (gloo) names each planted fault and passes the clean port.

The fast tests measure the hypotheses on plain tensors; the ``slow`` ones start two
ranks (each a fresh interpreter importing torch and transformers: ~15 s on a quiet
2-core machine, up to a minute when it is loaded).
"""

from __future__ import annotations

import json
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from porting_kit.cli import main  # noqa: E402
from porting_kit.embedded import tp_layers  # noqa: E402
from porting_kit.errors import InputError  # noqa: E402
from porting_kit.probes import tp as tp_probe  # noqa: E402
from porting_kit.runner import run_check  # noqa: E402


def _t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- hypotheses (fast)


def test_shard_permutation_finds_swapped_vocab_shards_and_not_the_identity():
    ref = _t(1, 8, 12)
    swapped = torch.cat(ref.chunk(2, -1)[::-1], dim=-1)
    assert tp_probe.shard_permutation(ref, swapped, 2, -1, 1e-4) == [1, 0]
    rolled = torch.cat([ref.chunk(4, -1)[i] for i in (2, 0, 3, 1)], dim=-1)
    assert tp_probe.shard_permutation(ref, rolled, 4, -1, 1e-4) == [2, 0, 3, 1]
    assert tp_probe.shard_permutation(ref, ref.clone(), 2, -1, 1e-4) is None
    assert tp_probe.shard_permutation(ref, ref + 0.1, 2, -1, 1e-4) is None


def test_regather_axes_undoes_a_gather_along_the_sequence_axis():
    ref = _t(1, 6, 10)
    wrong = torch.cat(ref.chunk(2, -1), dim=1)  # (1, 12, 5): shards stacked on the sequence axis
    assert tp_probe.regather_axes(ref, wrong, 2, 1e-4) == (-2, -1)
    assert tp_probe.regather_axes(ref, torch.randn(1, 12, 5), 2, 1e-4) is None
    assert tp_probe.regather_axes(ref, ref, 2, 1e-4) is None


def test_reduce_hypothesis_names_extra_biases_factor_and_missing_reduce():
    ref, bias = _t(2, 5, 8), _t(8, seed=1)
    assert tp_probe.reduce_hypothesis(ref, ref + 1 * bias, [], bias, 2, 1e-4)[0] == "extra_biases"
    assert tp_probe.reduce_hypothesis(ref, ref + 3 * bias, [], bias, 4, 1e-4)[0] == "extra_biases"
    assert tp_probe.reduce_hypothesis(ref, 2 * ref, [], None, 2, 1e-4)[0] == "factor_n"
    part = _t(2, 5, 8, seed=2)
    fit = tp_probe.reduce_hypothesis(ref, part, [part, ref - part], None, 2, 1e-4)
    assert fit[0] == "missing_reduce" and fit[1] < 1e-6
    assert tp_probe.reduce_hypothesis(ref, ref + 0.5, [], bias, 2, 1e-4) is None


def test_gather_follows_the_declared_layout_then_the_reference_shapes():
    a, b = _t(1, 4, 3), _t(1, 4, 3, seed=1)
    assert tp_probe.gather([a, a.clone()], None, set())[0] == "replicated"
    layout, t = tp_probe.gather([a, b], "cat:-1", set())
    assert layout == "cat:-1" and torch.equal(t, torch.cat([a, b], -1))
    layout, t = tp_probe.gather([a, b], None, {(1, 8, 3)})  # heads split: the reference has (1, 8, 3)
    assert layout == "cat:-2" and t.shape == (1, 8, 3)
    assert tp_probe.gather([a, b], "replicated", {(1, 4, 3)})[0] == "diverged"
    layout, t = tp_probe.gather([a, b], "sum", set())
    assert layout == "sum" and torch.allclose(t, a + b)
    assert tp_probe.gather([None, None], None, set()) == ("none", None)


def test_parallel_layers_declare_their_output_layout():
    assert tp_probe.declared_layout(tp_layers.ColumnParallelLinear(4, 8)) == "cat:-1"
    assert tp_probe.declared_layout(tp_layers.ColumnParallelLinear(4, 8, gather_output=True)) == "replicated"
    assert tp_probe.declared_layout(tp_layers.RowParallelLinear(8, 4)) == "replicated"
    assert tp_probe.declared_layout(tp_layers.RowParallelLinear(8, 4, reduce_results=False)) == "sum"
    assert tp_probe.declared_layout(tp_layers.ParallelLMHead(16, 4)) == "cat:-1"
    assert tp_probe.declared_layout(torch.nn.Linear(4, 4)) is None


def test_skips_at_tp_1_and_without_candidate_tp():
    r = run_check(example="tts", only="tp")
    assert [(f.code, f.status) for f in r.findings] == [("tp.skipped", "skip")]
    assert "--tp" in r.findings[0].message and r.exit_code == 0
    r = run_check(example="generator", only="tp", tp=2)
    assert [f.code for f in r.findings] == ["tp.skipped"]
    assert "candidate_tp" in r.findings[0].message


def test_tp_below_one_is_bad_input():
    with pytest.raises(InputError, match="--tp 0"):
        run_check(example="tts", only="tp", tp=0)


@pytest.mark.slow
def test_tp_variants_are_clean_in_one_process():
    # the planted faults live in the sharded port only; the biased reference loads into the TP 1 port
    r = run_check(example="tts:tp_row_bias", only="parity")
    assert r.codes() == ["parity.ok"], [f.message for f in r.findings]


# --------------------------------------------------------------------------- two ranks (slow)


@pytest.mark.slow
def test_clean_sharded_port_passes_at_tp_2_on_the_command_line(tmp_path, capsys):
    out = tmp_path / "r.json"
    code = main(["check", "--example", "tts", "--only", "tp", "--tp", "2", "--json", str(out)])
    assert code == 0, capsys.readouterr()
    report = json.loads(out.read_text())
    (f,) = report["findings"]
    assert f["code"] == "tp.ok" and f["status"] == "pass"
    ev = f["evidence"]
    assert ev["world_size"] == 2 and ev["backend"] == "gloo"
    assert ev["compared_modules"] >= 20  # embedding, every layer's norms/attention/MLP, LM head
    assert ev["output_max_abs"] < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("variant,code,evidence", [
    ("tp_shard_order", "tp.shard_order",
     {"permutation": "1,0", "axis": -1, "candidate_module": "lm_head", "reference_module": "lm.lm_head"}),
    ("tp_row_bias", "tp.reduce",
     {"hypothesis": "extra_biases", "candidate_module": "talker.layers.0.attn.o_proj",
      "reference_module": "lm.model.layers.0.self_attn.o_proj"}),
    ("tp_vocab_offset", "tp.shard_order",
     {"permutation": "1,0", "shards_of": "weight", "candidate_module": "talker.embed_tokens",
      "reference_module": "lm.model.embed_tokens"}),
    ("tp_qkv_plain_chunk", "tp.shard_order",
     {"candidate_module": "talker.layers.0.attn.qkv_proj", "shards_of": "fused_weight",
      "rank_sources": "rank 0: q_proj[0:64]; rank 1: k_proj[0:32], v_proj[0:32]",
      "expected_sources": "rank 0: q_proj[0:32], k_proj[0:16], v_proj[0:16]; "
                          "rank 1: q_proj[32:64], k_proj[16:32], v_proj[16:32]"}),
    ("tp_gather_axis", "tp.gather_axis",
     {"gathered_axis": -2, "expected_axis": -1, "candidate_shape": "(1, 128, 514)",
      "reference_shape": "(1, 64, 1028)"}),
])
def test_each_planted_tp_fault_is_named_at_tp_2(variant, code, evidence):
    r = run_check(example=f"tts:{variant}", only="tp", tp=2)
    assert r.codes() == [code], [f.message for f in r.findings]
    f = r.findings[0]
    assert f.status == "fail" and r.exit_code == 1
    for k, v in evidence.items():
        assert f.evidence[k] == v, (k, f.evidence)


_FAILING_SPEC = """
from porting_kit.embedded import tts
from porting_kit.embedded.tts import reference, candidate, inputs, run_reference, run_candidate

tp_timeout = {timeout}


def candidate_tp(rank, world_size):
    if rank == 1:
        {body}
    return tts.candidate_tp(rank, world_size)
"""


@pytest.mark.slow
def test_a_rank_that_raises_is_exit_2_naming_rank_and_line(tmp_path, capsys):
    spec = tmp_path / "spec_rank_fails.py"
    spec.write_text(textwrap.dedent(_FAILING_SPEC).format(
        timeout=300, body='raise ValueError("rank 1 cannot shard this")'))
    code = main(["check", str(spec), "--only", "tp", "--tp", "2"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert "rank 1 failed" in err and "rank 1 cannot shard this" in err
    assert "spec_rank_fails.py:10" in err  # file:line of the raise


@pytest.mark.slow
def test_a_rank_that_hangs_is_stopped_after_tp_timeout(tmp_path):
    spec = tmp_path / "spec_rank_hangs.py"
    spec.write_text(textwrap.dedent(_FAILING_SPEC).format(
        timeout=45, body="import time; time.sleep(3600)"))
    with pytest.raises(InputError, match="did not finish within 45 s"):
        run_check(str(spec), only="tp", tp=2)


# --------------------------------------------------------------------------- findings (fast)


@pytest.mark.parametrize("h,code,key,value", [
    (tp_probe.Hypotheses(2, permutation=[1, 0], axis=-1), "tp.shard_order", "permutation", "1,0"),
    (tp_probe.Hypotheses(2, reduce="extra_biases", fit_rel_err=1e-8), "tp.reduce", "hypothesis", "extra_biases"),
    (tp_probe.Hypotheses(4, reduce="factor_n", fit_rel_err=0.0), "tp.reduce", "hypothesis", "factor_n"),
    (tp_probe.Hypotheses(2, regather=(-2, -1)), "tp.gather_axis", "gathered_axis", -2),
    (tp_probe.Hypotheses(2), "tp.unexplained", "candidate_module", "b.o_proj"),
])
def test_each_hypothesis_becomes_its_code(h, code, key, value):
    from porting_kit.checks.tp import _diagnosis

    f = _diagnosis(h, "a.o_proj", "b.o_proj", {"world_size": h.world_size}, {"max_abs": 0.5})
    assert (f.code, f.status) == (code, "fail")
    assert f.evidence[key] == value and f.evidence["max_abs"] == 0.5
    assert f.where.reference == "a.o_proj" and f.where.candidate == "b.o_proj"
    assert f.hint and f.message.endswith(".")


def test_vocab_shard_permutation_reproduces_an_embedding_with_the_wrong_offset():
    weight, ids = _t(12, 3), torch.tensor([[0, 5, 6, 11, 2]])
    k = 6  # two shards of six rows: rank r masks its own ids but holds shard 1 - r
    wrong = weight[torch.tensor([1, 0])[ids // k] * k + ids % k]
    assert tp_probe.vocab_shard_permutation(weight, ids, wrong, 2, 1e-4) == [1, 0]
    assert tp_probe.vocab_shard_permutation(weight, ids, weight[ids], 2, 1e-4) is None
    assert tp_probe.vocab_shard_permutation(weight, ids, wrong + 1.0, 2, 1e-4) is None
