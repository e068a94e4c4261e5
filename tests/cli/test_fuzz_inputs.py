"""Fuzzing the inputs a user hands the tool: spec files, audio files, YAML and lint sources.

For any input, the outcome is a result or an :class:`InputError` (exit 2, one line) —
never another exception, never a hang (each example runs under a deadline), and never a
file written beside the input (the folder is hashed before and after).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from porting_kit.errors import InputError

FUZZ = settings(max_examples=40, deadline=20_000, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _hash_tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


_FRAGMENTS = st.sampled_from([
    "import torch\n", "def reference():\n    return torch.nn.Linear(2, 2)\n",
    "def candidate():\n    return torch.nn.Linear(2, 2)\n", "def inputs():\n    return {'input': torch.ones(1, 2)}\n",
    "def inputs():\n    return {}\n", "reference = 3\n", "candidate = None\n", "VARIANTS = {'a': 'b'}\n",
    "raise ValueError('x')\n", "import sys\nsys.exit(3)\n", "def (:\n", "\x00", "x = '''\n", "\ufeff",
    "def engine_model():\n    return None\n", "tolerances = {'float32': {'atol': -1}}\n", "reference = 'nowhere'\n",
    "module_map = 5\n", "# -*- coding: latin-1 -*-\n", "def synthesize_candidate(text, seed):\n    return 1\n",
])


@pytest.mark.slow
@FUZZ
@given(parts=st.lists(_FRAGMENTS, max_size=6), junk=st.text(max_size=40))
def test_spec_loader_fuzz(tmp_path_factory, parts, junk):
    from porting_kit.spec import load_spec

    root = tmp_path_factory.mktemp("spec")
    path = root / "spec.py"
    path.write_text("".join(parts) + junk, encoding="utf-8", errors="surrogatepass")
    before = _hash_tree(root)
    try:
        spec = load_spec(str(path))
    except InputError as exc:
        assert "\n" not in str(exc).strip() or str(exc).count("\n") < 3
    else:
        assert spec.name == str(path)
    assert _hash_tree(root) == before


@pytest.mark.slow
@FUZZ
@given(data=st.binary(max_size=2048), prefix=st.sampled_from([b"", b"RIFF", b"RIFF\x24\x00\x00\x00WAVEfmt ",
                                                               b"fLaC", b"OggS"]))
def test_audio_reader_fuzz(tmp_path_factory, data, prefix):
    from porting_kit.probes.waveform import read_audio

    root = tmp_path_factory.mktemp("audio")
    path = root / "clip.wav"
    path.write_bytes(prefix + data)
    before = _hash_tree(root)
    try:
        y, sr = read_audio(path)
    except InputError:
        pass
    else:
        assert y.ndim == 2 and y.size > 0 and sr > 0
    assert _hash_tree(root) == before


_YAML_PIECES = st.sampled_from([
    "stages:\n", "  - stage_id: 0\n", "    max_num_seqs: 1\n", "    engine_args:\n", "      max_model_len: 8\n",
    "    execution_type: llm_ar\n", "base_config: other.yaml\n", "  - stage_id: 'x'\n", "- [\n", "{", "}: :\n",
    "    runtime:\n      devices: '0'\n", "&a [*a]\n", "!!python/object:os.system ['echo hi']\n", "\t", "stages: 3\n",
    "    default_sampling_params:\n      temperature: .nan\n", "pipelines:\n  a:\n    stages: []\n",
])


@pytest.mark.slow
@FUZZ
@given(parts=st.lists(_YAML_PIECES, max_size=10), junk=st.text(max_size=30))
def test_deploy_yaml_lint_fuzz(tmp_path_factory, parts, junk):
    from porting_kit.lint.main import run

    root = tmp_path_factory.mktemp("yaml") / "deploy"
    root.mkdir()
    path = root / "model.yaml"
    path.write_text("".join(parts) + junk, encoding="utf-8", errors="surrogatepass")
    before = _hash_tree(root)
    with open(os.devnull, "w") as sink:
        assert run([str(path)], out=sink) in (0, 1)
    assert _hash_tree(root) == before


@pytest.mark.slow
@FUZZ
@given(source=st.text(max_size=400), raw=st.binary(max_size=200))
def test_python_lint_fuzz(tmp_path_factory, source, raw):
    from porting_kit.lint.main import run

    root = tmp_path_factory.mktemp("py")
    a = root / "a.py"
    a.write_text(source, encoding="utf-8", errors="surrogatepass")
    b = root / "b.py"
    b.write_bytes(raw)
    before = _hash_tree(root)
    with open(os.devnull, "w") as sink:
        assert run([str(a), str(b)], out=sink) in (0, 1)
    assert _hash_tree(root) == before
