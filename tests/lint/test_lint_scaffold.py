"""The scaffolds ``porting-kit scaffold`` generates pass the hooks (issue 7, "Done when")."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from porting_kit.cli import main as cli
from porting_kit.cli import lint_main as main

CONFIG = {"model_type": "toy_tts", "architectures": ["ToyTTSForCausalLM"], "hidden_size": 256,
          "vocab_size": 1024, "sample_rate": 24000, "hop_length": 1920, "num_codebooks": 8,
          "rope_theta": 10000, "codec_eos_token_id": 1000}


@pytest.mark.parametrize("framework,shape", [("vllm-omni", "two-stage"), ("vllm-omni", "single-stage-ar"),
                                             ("vllm-omni", "native-ar"), ("sglang-omni", "two-stage")])
def test_generated_scaffold_passes_the_hooks(tmp_path, framework, shape):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    out = tmp_path / "out"
    with contextlib.redirect_stdout(io.StringIO()):
        rc = cli(["scaffold", "--framework", framework, "--shape", shape, "--model-type",
                  "toy_" + shape.replace("-", "_"), "--config", str(config), "--out", str(out)])
    assert rc == 0
    files = [p for p in out.rglob("*") if p.suffix in (".py", ".yaml")]
    assert files, "the scaffold wrote no Python / YAML"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([str(out)])
    assert (rc, buf.getvalue()) == (0, "")
