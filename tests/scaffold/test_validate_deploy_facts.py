"""Deploy YAML and adapter from the model's facts (issue 12, point 4), and they still validate.

Sampling defaults come from generation_config.json (else config.json), each
non-default with a comment naming its source; ``max_num_seqs`` is reasoned from
the KV cache of one request; the codec vocabulary is stated; ``trust_remote_code``
is written only with ``--trust-remote-code`` and offered (never set) when the
config has ``auto_map``. The adapter applies max_new_tokens, salts the prefix
cache, handles reference audio/text, and accumulates non-streaming output where
stage 0 emits audio per step.
"""

from __future__ import annotations

import ast
import json

import pytest
import yaml
from scaffold_helpers import CONFIG

from porting_kit.cli import main as cli
from porting_kit.errors import InputError
from porting_kit.scaffold.generate import ScaffoldOptions, scaffold
from porting_kit.scaffold.validate import validate

DEPLOY = "vllm_omni/deploy/my_tts.yaml"
ADAPTER = "vllm_omni/entrypoints/openai/tts_adapters/my_tts.py"
GEN = {"eos_token_id": 2, "temperature": 0.9, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.05,
       "min_new_tokens": 3}
LM = {"num_attention_heads": 8, "num_key_value_heads": 2}


def _make(tmp_path, shape="two-stage", config=None, gen=None, **kw):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps({**CONFIG, **LM, **(config or {})}), encoding="utf-8")
    if gen is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps(gen), encoding="utf-8")
    out = tmp_path / f"out-{shape}"
    result = scaffold(ScaffoldOptions("vllm-omni", shape, "my_tts", tmp_path / "config.json", out=out, **kw))
    return out, result


def _stage0(out):
    text = (out / DEPLOY).read_text()
    return text, yaml.safe_load(text)["stages"][0]


def test_sampling_defaults_from_generation_config_each_explained(tmp_path):
    out, _ = _make(tmp_path, gen=GEN)
    text, stage = _stage0(out)
    params = stage["default_sampling_params"]
    # top_p 1.0 is vLLM's default: not written
    assert {k: params[k] for k in ("temperature", "top_k", "repetition_penalty", "min_tokens")} == {
        "temperature": 0.9, "top_k": 50, "repetition_penalty": 1.05, "min_tokens": 3}
    assert "top_p" not in params
    assert "# temperature: generation_config.json temperature (vLLM's default is 1.0)." in text
    assert "# min_tokens: generation_config.json min_new_tokens (vLLM's default is 0)." in text
    report = validate(out, "static,consistency", prefer_real=False)
    assert "scaffold.ok" in report.codes()


def test_no_generation_config_writes_no_sampling_defaults(tmp_path):
    out, _ = _make(tmp_path)
    _, stage = _stage0(out)
    assert set(stage["default_sampling_params"]) == {"max_tokens", "seed"}


def test_bad_generation_config_value_is_exit_2(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG), encoding="utf-8")
    (tmp_path / "generation_config.json").write_text(json.dumps({"top_p": 3.0}), encoding="utf-8")
    with pytest.raises(InputError, match="top_p"):
        scaffold(ScaffoldOptions("vllm-omni", "two-stage", "my_tts", tmp_path / "config.json", out=tmp_path / "o"))


def test_generation_config_eos_used_when_config_has_none(tmp_path):
    out, _ = _make(tmp_path, shape="single-stage-ar", config={"eos_token_id": None}, gen={"eos_token_id": [11, 12]})
    pipe = (out / "vllm_omni/model_executor/models/my_tts/pipeline.py").read_text()
    assert '"stop_token_ids": [11, 12]' in pipe and "generation_config.json eos_token_id" in pipe
    assert validate(out, "consistency").codes() == ["consistency.ok"]


def test_max_num_seqs_is_reasoned_from_the_kv_cache(tmp_path):
    out, _ = _make(tmp_path)
    text, stage = _stage0(out)
    # 8 layers x 2 KV heads x 64 x K,V x bf16 = 4 KiB/token; 4096 tokens = 16 MiB/request; cap 16
    assert stage["max_num_seqs"] == 16
    assert "one 4096-token request holds 16 MiB of KV (8 layers x 2 KV heads x 64 x K,V x bf16)" in text
    big, _ = _make(tmp_path / "big", config={"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                                             "num_key_value_heads": 32, "intermediate_size": 11008,
                                             "max_position_embeddings": 32768})
    text, stage = _stage0(big)
    assert stage["max_num_seqs"] == 4 and "0 fit in the" in text  # one 32k request is 16 GiB: floor of 4


def test_codec_vocabulary_and_batched_tokens(tmp_path):
    out, _ = _make(tmp_path, config={"codec_config": {**CONFIG["codec_config"], "codebook_size": 2048},
                                     "max_position_embeddings": 8192})
    text = (out / DEPLOY).read_text()
    assert "codec vocabulary: codes 0..2047 per codebook (codec_config.codebook_size)" in text
    stage1 = yaml.safe_load(text)["stages"][1]
    assert stage1["max_num_batched_tokens"] == 65536  # 8 codebooks x 8192 frames = 65536 > 32768


def test_trust_remote_code_is_offered_never_set(tmp_path, capsys):
    cfg_dir = tmp_path / "c"
    cfg_dir.mkdir()
    (cfg_dir / "config.json").write_text(json.dumps({**CONFIG, "auto_map": {"AutoModel": "modeling_x.X"}}))
    argv = ["scaffold", "--framework", "vllm-omni", "--shape", "two-stage", "--model-type", "my_tts",
            "--config", str(cfg_dir / "config.json")]
    assert cli([*argv, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "auto_map" in out and "--trust-remote-code" in out
    assert "trust_remote_code" not in yaml.safe_load((tmp_path / "a" / DEPLOY).read_text())
    assert cli([*argv, "--out", str(tmp_path / "b"), "--trust-remote-code"]) == 0
    assert yaml.safe_load((tmp_path / "b" / DEPLOY).read_text())["trust_remote_code"] is True
    assert validate(tmp_path / "b", "static", prefer_real=False).status == "pass"


@pytest.mark.parametrize(("shape", "accumulate", "reference"), [
    ("single-stage-ar", True, True), ("two-stage", False, False), ("native-ar", False, False)])
def test_adapter_contract(tmp_path, shape, accumulate, reference):
    out, _ = _make(tmp_path, shape=shape)
    src = (out / ADAPTER).read_text()
    tree = ast.parse(src)
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert {"apply_max_new_tokens", "conditioning_cache_salt", "OutputPolicy"} <= calls
    assert f"OutputPolicy(accumulate_nonstreaming={accumulate})" in src
    assert ('info["ref_text"]' in src) is reference and ('info["ref_audio"]' in src) is reference
    if not reference:
        assert "ref_audio / ref_text are not supported by this model yet" in src
    assert '"cache_salt": conditioning_cache_salt(request, salt_params)' in src
