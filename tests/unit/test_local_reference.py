"""A spec's ``reference = "model_dir"``: loaded with local_files_only, never with remote code
unless ``--trust-remote-code`` was given."""

import json
from pathlib import Path

import pytest

from porting_kit.cli import main
from porting_kit.runner import run_check

SPEC = '''
import torch
from transformers import LlamaConfig, LlamaForCausalLM

reference = "model_dir"

def candidate():
    torch.manual_seed(1)
    return LlamaForCausalLM(LlamaConfig.from_pretrained({model_dir!r}))

def inputs():
    return {{"input_ids": torch.arange(12).reshape(1, 12) % 97}}
'''


@pytest.fixture()
def model_spec(tmp_path):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model_dir = tmp_path / "model_dir"
    LlamaForCausalLM(cfg).save_pretrained(model_dir)
    spec = tmp_path / "spec.py"
    spec.write_text(SPEC.format(model_dir=str(model_dir)))
    return spec, model_dir


@pytest.mark.slow
def test_local_directory_reference_passes_clean(model_spec):
    spec, _ = model_spec
    rep = run_check(str(spec), only="parity")
    assert rep.status == "pass", [f.message for f in rep.findings]
    assert [f.code for f in rep.findings] == ["parity.ok"]


@pytest.mark.slow
def test_remote_code_config_is_refused_naming_the_option(model_spec, capsys, monkeypatch):
    spec, model_dir = model_spec
    cfg = json.loads((model_dir / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (model_dir / "config.json").write_text(json.dumps(cfg))
    import transformers

    calls = []
    real = transformers.AutoConfig.from_pretrained
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained",
                        lambda *a, **k: calls.append(k) or real(*a, **k))
    assert main(["check", str(spec), "--only", "parity"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--trust-remote-code" in err[0] and "auto_map" in err[0]
    assert calls == []  # refused before transformers saw the directory


@pytest.mark.slow
def test_trust_remote_code_is_false_unless_asked(model_spec, monkeypatch):
    spec, _ = model_spec
    import transformers

    seen: list[object] = []
    real_cfg = transformers.AutoConfig.from_pretrained
    real_model = transformers.LlamaForCausalLM.from_pretrained

    def cfg(*a, **k):
        seen.append(("config", k.get("trust_remote_code", "absent"), k.get("local_files_only")))
        return real_cfg(*a, **k)

    def model(*a, **k):
        seen.append(("model", k.get("trust_remote_code", "absent"), k.get("local_files_only")))
        return real_model(*a, **k)

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", cfg)
    monkeypatch.setattr(transformers.LlamaForCausalLM, "from_pretrained", model)
    run_check(str(spec), only="parity")
    assert seen == [("config", False, True), ("model", False, True)]
    seen.clear()
    run_check(str(spec), only="parity", trust_remote_code=True)
    assert seen == [("config", True, True), ("model", True, True)]


def test_reference_path_that_is_not_a_model_dir(tmp_path, capsys):
    spec = tmp_path / "spec.py"
    spec.write_text(SPEC.format(model_dir=str(tmp_path)).replace('"model_dir"', '"missing_dir"'))
    assert main(["check", str(spec), "--only", "parity"]) == 2
    assert "not a model directory" in capsys.readouterr().err
    assert not (Path(tmp_path) / "missing_dir").exists()
