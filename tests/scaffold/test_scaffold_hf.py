"""``porting-kit scaffold --hf DIR``: a real architecture in (CSM, built small), a port out, proven by
``porting-kit check OUT/port_spec.py`` (issue 31)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from porting_kit.cli import main
from porting_kit.errors import InputError

pytest.importorskip("transformers")

from hf_models import build_csm, build_dia  # noqa: E402

from porting_kit.scaffold.hf_folder import propose_shape, read_hf_folder  # noqa: E402


@pytest.fixture(scope="module")
def csm_folder(tmp_path_factory) -> Path:
    return build_csm(tmp_path_factory.mktemp("csm") / "csm-small")


def _port_file(out: Path, model: str = "csm") -> Path:
    return out / f"vllm_omni/model_executor/models/{model}/{model}_port.py"


@pytest.fixture(scope="module")
def dia_folder(tmp_path_factory) -> Path:
    return build_dia(tmp_path_factory.mktemp("dia") / "dia-small")


@pytest.fixture(scope="module")
def csm_scaffold(csm_folder, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("csm-out") / "out"
    assert main(["scaffold", "--hf", str(csm_folder), "--out", str(out)]) == 0
    return out


def test_csm_folder_weight_map_covers_every_key(csm_folder):
    """Every checkpoint key and state name is mapped (none skipped), q/k/v and gate/up go to
    their fused parameters' shards, the tied audio embedding is filled from the depth decoder's."""
    from porting_kit.scaffold.hf_port import RULES
    from porting_kit.scaffold.weight_map import build_weight_map

    hf = read_hf_folder(csm_folder)
    assert propose_shape(hf)[0] == "two-stage"
    # the transformers model has the tied table; transformers 5.24's save_pretrained leaves it out of
    # the checkpoint, 5.17's writes it
    tied = "backbone_model.embed_tokens.embed_audio_tokens.weight"
    assert tied in hf.state_names
    assert hf.tied == {tied: "depth_decoder.model.embed_tokens.weight"}
    wm = build_weight_map(hf.checkpoint_keys, hf.state_names, hf.renamed, hf.tied, RULES["csm"])
    assert wm.skipped == {}
    assert set(hf.checkpoint_keys) <= set(wm.entries) and set(hf.state_names) <= set(wm.entries)
    assert wm.entries["backbone_model.layers.1.self_attn.k_proj.weight"] == (
        "backbone.decoder.layers.1.self_attn.qkv_proj.weight", "k")
    assert wm.entries["depth_decoder.model.layers.0.mlp.up_proj.weight"] == (
        "depth_decoder.decoder.layers.0.mlp.gate_up_proj.weight", 1)
    assert wm.entries["depth_decoder.codebooks_head.weight"] == ("depth_decoder.codebooks_head", None)
    assert wm.entries[tied] == ("backbone.embed_audio_tokens.weight", None)
    if tied in hf.checkpoint_keys:  # loaded from the checkpoint like any tensor
        assert wm.tied == {}
    else:  # filled from the depth decoder's table
        assert wm.tied == {"backbone.embed_audio_tokens.weight": "depth_decoder.embed_tokens.weight"}
    # a legacy checkpoint name transformers renames on load maps where its new name does (5.24 saves
    # the Mimi codec in its legacy layout and renames it on load; 5.17 has one layout: none renamed)
    assert set(hf.renamed) == set(hf.checkpoint_keys) - set(hf.state_names)
    for legacy, new in hf.renamed.items():
        assert wm.entries[legacy] == wm.entries[new]


def test_hf_defaults_fill_the_options_and_keep_the_users(csm_folder, tmp_path):
    from porting_kit.scaffold.generate import hf_defaults

    values = {"hf": csm_folder, "config": None, "model_type": None, "shape": None, "framework": None}
    lines = hf_defaults(values)
    assert (values["model_type"], values["shape"], values["framework"]) == ("csm", "two-stage", "vllm-omni")
    assert values["config"] == csm_folder.resolve() / "config.json"
    assert len(lines) == 1 and lines[0].startswith("shape two-stage (proposed") and "depth decoder" in lines[0]
    values = {"hf": csm_folder, "config": None, "model_type": "my_csm", "shape": "native-ar",
              "framework": "sglang-omni"}
    assert hf_defaults(values) == []
    assert (values["model_type"], values["shape"], values["framework"]) == ("my_csm", "native-ar", "sglang-omni")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(InputError, match="disagree"):
        hf_defaults({"hf": csm_folder, "config": tmp_path / "config.json", "model_type": None, "shape": None,
                     "framework": None})


def test_hf_folder_input_errors(tmp_path):
    with pytest.raises(InputError, match="no config.json"):
        read_hf_folder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["CsmForConditionalGeneration"]}))
    with pytest.raises(InputError, match="no \\*.safetensors"):
        read_hf_folder(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(InputError, match="not a safetensors file"):
        read_hf_folder(tmp_path, build_model=False)
    (tmp_path / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "m.M"}}))
    with pytest.raises(InputError, match="--trust-remote-code"):
        read_hf_folder(tmp_path)


def test_cli_hf_not_a_folder_is_exit_2(tmp_path, capsys):
    assert main(["scaffold", "--hf", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a directory" in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_csm_scaffold_files_parse_and_check_passes_clean(csm_scaffold, csm_folder):
    from porting_kit import run_check

    port = _port_file(csm_scaffold)
    for path in (port, csm_scaffold / "port_spec.py"):
        ast.parse(path.read_text(encoding="utf-8"))
    readme = (port.parent / "README.md").read_text(encoding="utf-8")
    assert "| `backbone_model.layers.0.self_attn.q_proj.weight` | " \
           "`backbone.decoder.layers.0.self_attn.qkv_proj.weight [shard q]` |" in readme
    # Mimi's hop is its frame_size (the downsample stride 2 included), not prod(upsampling_ratios) = 32:
    # the framework's codec stage and the port agree on it
    for path in (port, port.parent / "csm_code2wav.py"):
        assert re.search(r"^HOP_LENGTH = 64$", path.read_text(encoding="utf-8"), re.M), path
    report = run_check(str(csm_scaffold / "port_spec.py"))
    codes = {f.code: f.status for f in report.findings}
    assert report.status == "pass", [(f.code, f.message) for f in report.findings if f.status == "fail"]
    for code in ("parity.ok", "config.ok", "rope.ok", "norm.ok", "hop.ok", "dtype.ok", "channel.ok", "sampling.ok"):
        assert codes.get(code) == "pass", (code, codes)
    assert not [c for c, s in codes.items() if s == "warn"], codes


def _planted(csm_scaffold: Path, tmp_path: Path, old: str, new: str, count: int = 1, model: str = "csm") -> Path:
    """A copy of the scaffold's port spec + port with ``old`` replaced by ``new`` in the port."""
    import shutil

    out = tmp_path / "planted"
    shutil.copytree(csm_scaffold, out)
    port = _port_file(out, model)
    text = port.read_text(encoding="utf-8")
    assert text.count(old) == count, (old, text.count(old))
    port.write_text(text.replace(old, new), encoding="utf-8")
    return out / "port_spec.py"


@pytest.mark.slow
def test_planted_wrong_weight_map_entry_is_unmapped_weights(csm_scaffold, tmp_path):
    from porting_kit import run_check

    spec = _planted(csm_scaffold, tmp_path,
                    '"backbone_model.layers.1.mlp.down_proj.weight": ("backbone.decoder.layers.1.mlp.down_proj.weight"',
                    '"backbone_model.layers.1.mlp.down_proj.weight": ("backbone.decoder.layers.0.mlp.down_proj.weight"')
    report = run_check(str(spec), only="parity")
    codes = {f.code for f in report.findings if f.status == "fail"}
    assert "parity.unmapped_weights" in codes, codes


@pytest.mark.slow
def test_planted_wrong_rope_theta_is_theta_mismatch(csm_scaffold, tmp_path):
    from porting_kit import run_check

    text = _port_file(csm_scaffold).read_text(encoding="utf-8")
    backbone = re.search(r"^BACKBONE = .*$", text, re.M).group(0)
    assert '"rope_theta": 500000.0' in backbone
    spec = _planted(csm_scaffold, tmp_path, backbone, backbone.replace('"rope_theta": 500000.0',
                                                                       '"rope_theta": 10000.0'))
    report = run_check(str(spec), only="config,rope")
    codes = {f.code for f in report.findings if f.status == "fail"}
    assert {"config.mismatch", "rope.theta_mismatch"} <= codes, codes


@pytest.mark.slow
def test_planted_wrong_codec_hop_is_named_by_hop(csm_scaffold, tmp_path):
    from porting_kit import run_check

    text = _port_file(csm_scaffold).read_text(encoding="utf-8")
    hop = int(re.search(r"^HOP_LENGTH = (\d+)$", text, re.M).group(1))
    spec = _planted(csm_scaffold, tmp_path, f"HOP_LENGTH = {hop}\n", f"HOP_LENGTH = {hop // 2}\n")
    report = run_check(str(spec), only="hop")
    codes = {f.code for f in report.findings if f.status == "fail"}
    assert "hop.length_mismatch" in codes, codes


@pytest.mark.slow
def test_planted_repetition_penalty_sign_is_named(csm_scaffold, tmp_path):
    from porting_kit import run_check

    spec = _planted(csm_scaffold, tmp_path, "torch.where(seen < 0, seen * penalty, seen / penalty)",
                    "seen / penalty")
    codes = {f.code for f in run_check(str(spec), only="sampling").findings if f.status == "fail"}
    assert "sampling.repetition_penalty" in codes, codes


@pytest.mark.slow
def test_run_tier_drives_the_generated_port(csm_scaffold, tmp_path):
    """validate's run tier synthesizes through the port itself (frames x hop samples); a port whose
    synthesize raises is named with its file and line."""
    from porting_kit.scaffold.validate import load_manifests, run_tier

    findings = run_tier(csm_scaffold, load_manifests(csm_scaffold)[0])
    port_ok = [f for f in findings if f.code == "run.ok" and f.evidence.get("port")]
    assert len(port_ok) == 1 and port_ok[0].evidence["samples"] == port_ok[0].evidence["frames"] * \
        port_ok[0].evidence["hop_length"] > 0, [(f.code, f.message) for f in findings]
    assert all(f.status != "fail" for f in findings)

    spec = _planted(csm_scaffold, tmp_path, "codes = torch.stack(frames, dim=1)",
                    "codes = torch.stack(frames, dim=2)")
    root = spec.parent
    bad = [f for f in run_tier(root, load_manifests(root)[0]) if f.status == "fail"]
    assert [f.code for f in bad] == ["run.stage_exception"]
    assert bad[0].where.candidate.startswith("vllm_omni/model_executor/models/csm/csm_port.py:")


def test_dia_folder_weight_map_and_codec_subfolder(dia_folder):
    """Dia: every key mapped, self-attention q/k/v fused (cross-attention kept apart: other input
    width), the MLP's already fused gate_up_proj loaded whole; the DAC sub-folder is found."""
    from porting_kit.scaffold.hf_port import RULES, codec_facts, stream_context
    from porting_kit.scaffold.weight_map import build_weight_map

    hf = read_hf_folder(dia_folder)
    assert hf.family == "dia" and propose_shape(hf)[0] == "two-stage"
    assert hf.codec_dir.name == "audio_tokenizer" and hf.codec_config["model_type"] == "dac"
    assert codec_facts(hf.codec_config)[1:3] == (16, 16000)
    # receptive field of the small DAC (upsampling 4, 4): 3 + 42/4 + 42/16 + 1 -> 18 frames each side
    assert stream_context(hf.codec_config)[:2] == (18, 18)
    wm = build_weight_map(hf.checkpoint_keys, hf.state_names, hf.renamed, hf.tied, RULES["dia"])
    assert wm.skipped == {} and set(hf.checkpoint_keys) <= set(wm.entries)
    assert wm.entries["model.decoder.layers.1.self_attention.v_proj.weight"] == (
        "decoder.layers.1.self_attention.qkv_proj.weight", "v")
    assert wm.entries["model.decoder.layers.1.cross_attention.k_proj.weight"] == (
        "decoder.layers.1.cross_attention.k_proj.weight", None)
    assert wm.entries["model.encoder.layers.0.mlp.gate_up_proj.weight"] == (
        "encoder.layers.0.mlp.gate_up_proj.weight", None)
    assert wm.entries["model.decoder.embeddings.embed.weight"] == ("decoder.embed_audio.weight", None)


def test_dia_without_codec_subfolder_is_input_error(dia_folder, tmp_path):
    import shutil

    bare = tmp_path / "dia-no-codec"
    shutil.copytree(dia_folder, bare, ignore=shutil.ignore_patterns("audio_tokenizer"))
    from porting_kit.scaffold.generate import _env
    from porting_kit.scaffold.hf_port import plan_port

    with pytest.raises(InputError, match="no sub-folder holds a codec"):
        plan_port(read_hf_folder(bare), model_type="dia", camel="Dia", kit_version="x", models_dir="m", env=_env())


@pytest.fixture(scope="module")
def dia_scaffold(dia_folder, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dia-out") / "out"
    assert main(["scaffold", "--hf", str(dia_folder), "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_dia_scaffold_check_passes_clean_and_validate_runs_the_port(dia_scaffold):
    from porting_kit import run_check
    from porting_kit.scaffold.validate import load_manifests, run_tier

    report = run_check(str(dia_scaffold / "port_spec.py"))
    codes = {f.code: f.status for f in report.findings}
    assert report.status == "pass", [(f.code, f.message) for f in report.findings if f.status == "fail"]
    for code in ("parity.ok", "config.ok", "rope.ok", "norm.ok", "hop.ok", "dtype.ok", "channel.ok", "sampling.ok"):
        assert codes.get(code) == "pass", (code, codes)
    assert not [c for c, s in codes.items() if s == "warn"], codes
    hop = next(f for f in report.findings if f.code == "hop.ok")
    assert hop.evidence["streaming_checked"] is True and hop.evidence["hop_length"] == 16
    findings = run_tier(dia_scaffold, load_manifests(dia_scaffold)[0])
    assert all(f.status != "fail" for f in findings), [(f.code, f.message) for f in findings]
    assert any(f.code == "run.ok" and f.evidence.get("port") for f in findings)


@pytest.mark.slow
def test_dia_planted_faults_are_named(dia_scaffold, tmp_path):
    """A cross-attention k_proj sent to v_proj (wrong weight-map entry) and no stream lookahead on a
    non-causal codec (DAC)."""
    from porting_kit import run_check

    spec = _planted(dia_scaffold, tmp_path,
                    '"model.decoder.layers.0.cross_attention.k_proj.weight": '
                    '("decoder.layers.0.cross_attention.k_proj.weight"',
                    '"model.decoder.layers.0.cross_attention.k_proj.weight": '
                    '("decoder.layers.0.cross_attention.v_proj.weight"', model="dia")
    codes = {f.code for f in run_check(str(spec), only="parity").findings if f.status == "fail"}
    assert "parity.unmapped_weights" in codes, codes
    spec = _planted(dia_scaffold, tmp_path / "b", "STREAM_LOOKAHEAD_FRAMES = 18\n",
                    "STREAM_LOOKAHEAD_FRAMES = 0\n", model="dia")
    codes = {f.code for f in run_check(str(spec), only="hop").findings if f.status == "fail"}
    assert codes & {"hop.stream_boundary", "hop.stream_lookahead"}, codes


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "Qwen2ForCausalLM"])
def test_causal_lm_scaffold_check_passes_clean(tmp_path, arch):
    """A Llama-layout causal LM: tied lm_head (Llama) and q/k/v-only biases (Qwen2) come from the
    checkpoint's own key names; the port passes clean; its run tier says skip (no codec)."""
    from hf_models import build_causal_lm

    from porting_kit import run_check
    from porting_kit.scaffold.validate import load_manifests, run_tier

    folder = build_causal_lm(tmp_path / "lm", arch)
    out = tmp_path / "out"
    assert main(["scaffold", "--hf", str(folder), "--model-type", "lm", "--out", str(out)]) == 0
    port = _port_file(out, "lm").read_text(encoding="utf-8")
    if arch == "LlamaForCausalLM":
        assert '"lm_head.weight": "embed_tokens.weight"' in port  # tied, filled from the embeddings
    else:
        assert '"qkv_bias": true' in port.lower() and '"o_bias": false' in port.lower()
    report = run_check(str(out / "port_spec.py"))
    codes = {f.code: f.status for f in report.findings}
    assert report.status == "pass", [(f.code, f.message) for f in report.findings if f.status == "fail"]
    for code in ("parity.ok", "config.ok", "rope.ok", "norm.ok", "sampling.ok", "decode.ok"):
        assert codes.get(code) == "pass", (code, codes)
    assert not [c for c, s in codes.items() if s == "warn"], codes
    # a decode step whose new token cannot attend to itself is named by the decode family
    spec = _planted(out, tmp_path, ".tril(diagonal=past)", ".tril(diagonal=past - 1)", model="lm")
    bad = {f.code for f in run_check(str(spec), only="decode").findings if f.status == "fail"}
    assert bad and all(c.startswith("decode.") for c in bad), bad
    port_run = [f for f in run_tier(out, load_manifests(out)[0]) if f.evidence.get("port")]
    assert [(f.code, f.status) for f in port_run] == [("run.skipped", "skip")]
