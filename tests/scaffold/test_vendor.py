"""Import the upstream package when its pins allow, else vendor its codec / config files (issue 31 point 9).

The distributions are written here with the metadata layout pip downloads (``*.dist-info/METADATA``
with ``Requires-Dist``), as a folder and as a wheel: ``qwen-tts`` 0.1.1 pins ``transformers==4.57.3``,
``voxcpm`` 2.0.3 asks for ``transformers>=4.36.2``.
"""

from __future__ import annotations

import ast
import json
import zipfile
from pathlib import Path

import pytest

from porting_kit.errors import InputError
from porting_kit.scaffold.generate import ScaffoldOptions, scaffold
from porting_kit.scaffold.validate import validate_static
from porting_kit.scaffold.vendor import plan_vendoring, vendored_texts

CONFIG_PY = '''"""Config of the fake codec."""
from transformers.configuration_utils import PretrainedConfig, NoSuchConfigHelper
from fake_tts.core.utils import round_up


class FakeCodecConfig(PretrainedConfig):
    model_type = "fake_codec"
'''


def _dist(tmp_path: Path, requires: list[str], name: str = "fake-tts", version: str = "0.1.1") -> Path:
    root = tmp_path / "dist"
    meta = root / f"{name.replace('-', '_')}-{version}.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\n" f"Name: {name}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires) + "\nlong description\n")
    pkg = root / "fake_tts"
    (pkg / "core" / "tokenizer_12hz").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "cli.py").write_text("import gradio\n")
    (pkg / "core" / "utils.py").write_text("def round_up(x):\n    return x\n")
    (pkg / "core" / "tokenizer_12hz" / "configuration_fake_codec.py").write_text(CONFIG_PY)
    (pkg / "core" / "tokenizer_12hz" / "modeling_fake_codec.py").write_text(
        "from .configuration_fake_codec import FakeCodecConfig\n")
    return root


def _wheel(root: Path, dest: Path) -> Path:
    with zipfile.ZipFile(dest, "w") as zf:
        for p in sorted(root.rglob("*")):
            if p.is_file():
                zf.write(p, p.relative_to(root).as_posix())
    return dest


QWEN_TTS_PINS = ["transformers==4.57.3", "accelerate==1.12.0", "gradio", "pytest>=6.0; extra == \"dev\""]


def test_a_pin_the_environment_breaks_means_vendor(tmp_path):
    dist = _dist(tmp_path, QWEN_TTS_PINS)
    plan = plan_vendoring(dist, installed={"transformers": "5.24.0", "accelerate": "1.12.0", "gradio": None,
                                           "pytest": "9.0.0"})
    assert plan.decision == "vendor" and [p.requirement for p in plan.conflicts] == ["transformers==4.57.3"]
    assert "transformers==4.57.3 (installed 5.24.0)" in plan.reason()
    # an uninstalled package (pip would add it) and an extra's requirement are no conflict
    assert {p.package for p in plan.checked} == {"transformers", "accelerate"}


def test_pins_that_hold_mean_import(tmp_path):
    plan = plan_vendoring(_dist(tmp_path, ["transformers>=4.36.2", "torch>=2.5.0"], "voxcpm", "2.0.3"),
                          installed={"transformers": "5.24.0", "torch": "2.13.0"})
    assert plan.decision == "import" and not plan.conflicts and "import it" in plan.reason()
    plan = plan_vendoring(_dist(tmp_path / "b", QWEN_TTS_PINS), installed={"transformers": "4.57.3"})
    assert plan.decision == "import"


@pytest.mark.parametrize("as_wheel", [False, True])
def test_vendored_files_are_marked_patched_and_recorded(tmp_path, as_wheel):
    dist = _dist(tmp_path, QWEN_TTS_PINS)
    if as_wheel:
        dist = _wheel(dist, tmp_path / "fake_tts-0.1.1-py3-none-any.whl")
    plan = plan_vendoring(dist, installed={"transformers": "5.24.0"})
    files, record = vendored_texts(dist, plan)
    cfg = "fake_tts/core/tokenizer_12hz/configuration_fake_codec.py"
    assert set(record["files"]) == {cfg, "fake_tts/core/tokenizer_12hz/modeling_fake_codec.py"}
    assert "fake_tts/cli.py" not in files  # only codec / config files
    text = files[cfg]
    assert text.startswith("# Vendored from fake-tts 0.1.1 (fake_tts/core/tokenizer_12hz/configuration_fake_codec.py)")
    assert "transformers==4.57.3" in text.splitlines()[1]
    assert "from ...core.utils import round_up" in text and "from fake_tts." not in text
    for rel, body in files.items():
        if rel.endswith(".py"):
            ast.parse(body)
    assert {"fake_tts/__init__.py", "fake_tts/core/__init__.py", "fake_tts/core/tokenizer_12hz/__init__.py"} <= set(files)
    patches = {(p["before"], p["after"] is None) for p in record["patches"]}
    assert ("from fake_tts.core.utils import round_up", False) in patches
    needed = [p for p in record["patches"] if p["after"] is None]
    assert len(needed) == 1 and "transformers.configuration_utils.NoSuchConfigHelper" in needed[0]["why"]
    assert json.loads(files["VENDORED.json"]) == record


def test_scaffold_vendors_into_the_model_folder(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"vocab_size": 4096, "hidden_size": 64, "num_hidden_layers": 2,
                               "codec_config": {"sampling_rate": 24000, "hop_length": 1920, "num_quantizers": 4}}))
    dist = _dist(tmp_path, ["transformers==4.57.3"])
    out = tmp_path / "o"
    result = scaffold(ScaffoldOptions("vllm-omni", "two-stage", "fake", cfg, out=out, upstream_package=dist))
    base = out / "vllm_omni/model_executor/models/fake/_vendored"
    assert (base / "fake_tts/core/tokenizer_12hz/configuration_fake_codec.py").is_file()
    assert json.loads((base / "VENDORED.json").read_text())["decision"] == "vendor"
    man = json.loads((out / ".porting-kit/scaffold-fake.json").read_text())
    assert man["upstream_package"]["decision"] == "vendor" and man["upstream_package"]["patches_needed"] == 1
    assert any("vendored into vllm_omni/model_executor/models/fake/_vendored" in n for n in result.notes)
    report = validate_static(out, prefer_real=False)
    assert report.status == "pass", [(f.code, f.message) for f in report.findings]


def test_not_a_distribution_is_an_input_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="METADATA"):
        plan_vendoring(tmp_path / "empty")
    with pytest.raises(InputError, match="not a wheel"):
        plan_vendoring(tmp_path / "missing.whl")
