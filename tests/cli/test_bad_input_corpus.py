"""The bad-input corpus: every command, input the tool cannot use or a fault it must name.

Each case runs ``porting-kit ARGS`` in-process in a fresh folder holding a fixed set of
files (``_world``), under a time limit, and asserts:

* the exit code (2: one clear line on stderr, no traceback; 1: a finding; 0: pass);
* a fragment of that line (or of the report) naming what was wrong;
* nothing in the folder changed except the outputs the case declares (hashes of every
  file, the kind of every path — so a symlink's target, a FIFO or a user's source
  file are never replaced).

The counts by outcome are printed by ``test_corpus_size_and_outcomes`` (run with ``-s``).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from porting_kit.cli import main

SPECS = Path(__file__).resolve().parents[1] / "specs"
PKG = Path(__import__("porting_kit").__file__).resolve().parent
TIME_LIMIT_S = 120


@dataclass
class Case:
    """One corpus entry: ``argv`` run in the world folder."""

    id: str
    argv: list[str]
    rc: int
    needle: str = ""               # in the stderr line (rc 2) or stdout (rc 0/1)
    outputs: tuple[str, ...] = ()  # files the command may create or change
    setup: str = ""                # extra files: a key of _EXTRA


# ------------------------------------------------------------------ the world

GOOD_SPEC = (SPECS / "hf_llama_pair.py").read_text(encoding="utf-8")

_SPEC_BODIES = {
    # name -> (body, expected needle)
    "syntax": ("def reference(:\n", "SyntaxError"),
    "raises": ("raise RuntimeError('boom at import')\n", "boom at import"),
    "exit0": ("import sys\nsys.exit(0)\n", "SystemExit(0)"),
    "exit_msg": ("import sys\nsys.exit('bye')\n", "SystemExit('bye')"),
    "empty": ("", "none of"),
    "only_inputs": ("def inputs():\n    return {}\n", "lacks required"),
    "no_candidate": ("import torch\ndef reference():\n    return torch.nn.Linear(2, 2)\n"
                     "def inputs():\n    return {'input': torch.ones(1, 2)}\n", "candidate"),
    "reference_not_module": ("import torch\ndef reference():\n    return 3\n"
                             "def candidate():\n    return torch.nn.Linear(2, 2)\n"
                             "def inputs():\n    return {'input': torch.ones(1, 2)}\n", "nn.Module"),
    "inputs_not_dict": ("import torch\ndef reference():\n    return torch.nn.Linear(2, 2)\n"
                        "def candidate():\n    return torch.nn.Linear(2, 2)\n"
                        "def inputs():\n    return [1, 2]\n", "must return a dict"),
    "inputs_empty_dict": ("import torch\ndef reference():\n    return torch.nn.Linear(2, 2)\n"
                          "def candidate():\n    return torch.nn.Linear(2, 2)\n"
                          "def inputs():\n    return {}\n", "empty dict"),
    "inputs_empty_tensor": ("import torch\ndef reference():\n    return torch.nn.Linear(2, 2)\n"
                            "def candidate():\n    return torch.nn.Linear(2, 2)\n"
                            "def inputs():\n    return {'input': torch.ones(0, 2)}\n", "is empty"),
    "inputs_nan": ("import torch\ndef reference():\n    return torch.nn.Linear(2, 2)\n"
                   "def candidate():\n    return torch.nn.Linear(2, 2)\n"
                   "def inputs():\n    return {'input': torch.tensor([[float('nan'), 1.0]])}\n", "NaN/Inf"),
    "inputs_inf": ("import torch\ndef reference():\n    return torch.nn.Linear(2, 2)\n"
                   "def candidate():\n    return torch.nn.Linear(2, 2)\n"
                   "def inputs():\n    return {'input': torch.tensor([[float('inf'), 1.0]])}\n", "NaN/Inf"),
    "reference_raises": ("import torch\ndef reference():\n    raise ValueError('no weights here')\n"
                         "def candidate():\n    return torch.nn.Linear(2, 2)\n"
                         "def inputs():\n    return {'input': torch.ones(1, 2)}\n", "no weights here"),
    "shape_mismatch": ("import torch\ndef reference():\n    return torch.nn.Linear(2, 3)\n"
                       "def candidate():\n    return torch.nn.Linear(2, 2)\n"
                       "def inputs():\n    return {'input': torch.ones(1, 2)}\n", "shape"),
    "convert_not_dict": ("import torch\ndef reference():\n    return torch.nn.Linear(2, 2)\n"
                         "def candidate():\n    return torch.nn.Linear(2, 2)\n"
                         "def convert_weights(sd):\n    return None\n"
                         "def inputs():\n    return {'input': torch.ones(1, 2)}\n", "convert_weights"),
    "convert_non_tensor": ("import torch\ndef reference():\n    return torch.nn.Linear(2, 2)\n"
                           "def candidate():\n    return torch.nn.Linear(2, 2)\n"
                           "def convert_weights(sd):\n    return {**sd, 'weight': 'x'}\n"
                           "def inputs():\n    return {'input': torch.ones(1, 2)}\n", "not a tensor"),
    "forward_raises": ("import torch\nclass C(torch.nn.Linear):\n    def forward(self, input):\n"
                       "        raise RuntimeError('port not finished')\n"
                       "def reference():\n    return torch.nn.Linear(2, 2)\n"
                       "def candidate():\n    return C(2, 2)\n"
                       "def inputs():\n    return {'input': torch.ones(1, 2)}\n", "port not finished"),
    "bad_tolerances": ("import torch\ndef reference():\n    return torch.nn.Linear(2, 2)\n"
                       "def candidate():\n    return torch.nn.Linear(2, 2)\n"
                       "tolerances = {'float32': {'atol': float('nan')}}\n"
                       "def inputs():\n    return {'input': torch.ones(1, 2)}\n", "tolerances"),
    "negative_tolerances": ("import torch\ndef reference():\n    return torch.nn.Linear(2, 2)\n"
                            "def candidate():\n    return torch.nn.Linear(2, 2)\n"
                            "tolerances = {'float32': {'rtol': -1}}\n"
                            "def inputs():\n    return {'input': torch.ones(1, 2)}\n", "tolerances"),
}

# specs that run and must give a finding (exit 1), not an input error
_FAULT_SPECS = {
    "extra_converted_key": ("import torch\ntorch.manual_seed(0)\n"
                            "def reference():\n    return torch.nn.Linear(2, 2)\n"
                            "def candidate():\n    return torch.nn.Linear(2, 2)\n"
                            "def convert_weights(sd):\n    return {**sd, 'extra.weight': sd['weight'].clone()}\n"
                            "def inputs():\n    return {'input': torch.ones(1, 2)}\n", "extra.weight"),
    "dropped_weight": ("import torch\ntorch.manual_seed(0)\n"
                       "def reference():\n    return torch.nn.Linear(2, 2)\n"
                       "def candidate():\n    return torch.nn.Linear(2, 2)\n"
                       "def convert_weights(sd):\n    return {'weight': sd['weight']}\n"
                       "def inputs():\n    return {'input': torch.ones(1, 2)}\n", "parity.unmapped_weights"),
    "nan_model": ("import torch\ntorch.manual_seed(0)\nclass C(torch.nn.Linear):\n"
                  "    def forward(self, input):\n        return super().forward(input) * float('nan')\n"
                  "def reference():\n    return torch.nn.Linear(2, 2)\n"
                  "def candidate():\n    return C(2, 2)\n"
                  "def inputs():\n    return {'input': torch.ones(1, 2)}\n", "parity.nan_origin"),
}


#: Audio-only specs (issue 29, point 5): name -> body. ``V`` picks the bad input.
_AUDIO_SPEC = """import numpy as np
import torch
V = {v!r}
hop_length = 0 if V == "hop_zero" else 64
def codes():
    if V == "empty_codes":
        return torch.zeros(4, 0, dtype=torch.long)
    c = torch.randint(0, 8, (4, 10), generator=torch.Generator().manual_seed(0))
    if V == "nan_codes":
        c = c.float()
        c[0, 3] = float("nan")
    return c
def _decode(c):
    n = torch.as_tensor(c).shape[1] * 64
    return (0.3 * torch.sin(torch.arange(n) * 0.1)).numpy().astype("float32")
def decode_reference(c):
    return (np.zeros(0, dtype="float32") if V == "empty_reference" else _decode(c)), 16000
def decode_candidate(c):
    return (np.zeros(0, dtype="float32") if V == "empty_candidate" else _decode(c)), 16000
"""
_AUDIO_BAD = {"empty_codes": (2, "empty tensor"), "empty_reference": (2, "empty clip"),
              "hop_zero": (2, "hop length of 0"), "nan_codes": (2, "NaN/Inf"),
              "empty_candidate": (1, "hop.length_mismatch"), "clean": (0, "hop.ok")}


def _big_deploy_yaml(path: Path, size: int = 2_300_000) -> None:
    """A syntactically valid deploy YAML of ``size`` bytes (thousands of stages)."""
    stage = "  - stage_id: {i}\n    max_num_seqs: 8\n    engine_args:\n      max_model_len: 4096\n"
    parts, n, i = ["stages:\n"], 8, 0
    while n < size:
        parts.append(stage.format(i=i))
        n += len(parts[-1])
        i += 1
    path.write_text("".join(parts))


def _scaffold_with_deploy(root: Path, kind: str) -> None:
    """A scaffold folder ``sc`` whose deploy YAML is replaced by a FIFO or a 2.3 MB file."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["scaffold", "--framework", "vllm-omni", "--shape", "single-stage-ar", "--model-type",
                     "tiny_tts", "--config", str(root / "config.json"), "--out", str(root / "sc")]) == 0
    deploy = root / "sc" / "vllm_omni" / "deploy" / "tiny_tts.yaml"
    deploy.unlink()
    if kind == "fifo":
        os.mkfifo(deploy)
    else:
        _big_deploy_yaml(deploy)


_EXTRA = {
    "scaffold_deploy_fifo": lambda root: _scaffold_with_deploy(root, "fifo"),
    "scaffold_deploy_big": lambda root: _scaffold_with_deploy(root, "big"),
    "big_yaml": lambda root: _big_deploy_yaml(root / "big_deploy.yaml"),
    "project_tree": lambda root: (root / "pyproject.toml").write_text("[project]\nname = 'mine'\n"),
}


def _write_wav(path: Path, y, sr: int) -> None:
    import soundfile as sf

    sf.write(str(path), y, sr, subtype="FLOAT")


def _world(root: Path) -> None:
    """The files every case starts from (written before the case's hash is taken)."""
    import numpy as np

    (root / "spec_good.py").write_text(GOOD_SPEC, encoding="utf-8")
    for name, (body, _) in {**_SPEC_BODIES, **_FAULT_SPECS}.items():
        (root / f"spec_{name}.py").write_text(body, encoding="utf-8")
    (root / "notes.txt").write_text("not a spec\n")
    (root / "user_source.py").write_text("x = 1\n")
    (root / "adir").mkdir()
    (root / "adir" / "keep.txt").write_text("keep\n")
    os.symlink("notes.txt", root / "link.json")
    os.mkfifo(root / "fifo.json")
    os.mkfifo(root / "fifo.py")
    t = np.arange(4800) / 24000
    tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype("float32")
    _write_wav(root / "ref.wav", tone, 24000)
    _write_wav(root / "same.wav", tone, 24000)
    _write_wav(root / "other_rate.wav", tone, 16000)
    _write_wav(root / "silent.wav", np.zeros_like(tone), 24000)
    nan = tone.copy()
    nan[100:200] = np.nan
    _write_wav(root / "nan.wav", nan, 24000)
    (root / "empty.wav").write_bytes(b"")
    (root / "garbage.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    (root / "config.json").write_text(json.dumps({
        "architectures": ["TinyTTSForConditionalGeneration"], "model_type": "tiny_tts", "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256, "sampling_rate": 24000}))
    (root / "config_bad.json").write_text("{not json")
    (root / "config_list.json").write_text("[1, 2]")
    (root / "deploy.yaml").write_text("stages:\n  - stage_id: 0\n    max_num_seqs: 8\n")
    (root / "bad.yaml").write_text("stages: [unclosed\n")
    (root / "latin1.py").write_bytes("# -*- coding: latin-1 -*-\nname = 'caf\xe9'\n".encode("latin-1"))
    (root / "bogus_cookie.py").write_bytes(b"# -*- coding: no-such-codec -*-\nx = 1\n")
    (root / "broken.py").write_text("def f(:\n")
    (root / "baseline_other.json").write_text('{"something": "else"}\n')
    for v in _AUDIO_BAD:
        (root / f"spec_audio_{v}.py").write_text(_AUDIO_SPEC.format(v=v), encoding="utf-8")


# ------------------------------------------------------------------ the cases

def _cases() -> list[Case]:
    c: list[Case] = []
    # check: spec files that cannot be used (each also with --json, which must stay unwritten)
    for name, (_, needle) in _SPEC_BODIES.items():
        c.append(Case(f"check-spec-{name}", ["check", f"spec_{name}.py"], 2, needle))
        c.append(Case(f"check-spec-{name}-json", ["check", f"spec_{name}.py", "--json", "r.json"], 2, needle,
                      outputs=("r.json",)))
    for name, (_, needle) in _FAULT_SPECS.items():
        c.append(Case(f"check-fault-{name}", ["check", f"spec_{name}.py", "--only", "parity"], 1, needle))
    c += [
        Case("check-missing-spec", ["check", "nope.py"], 2, "not found"),
        Case("check-spec-dir", ["check", "adir"], 2, "is a directory"),
        Case("check-spec-not-py", ["check", "notes.txt"], 2, "ending in .py"),
        Case("check-spec-fifo", ["check", "fifo.py"], 2, "fifo.py"),
        Case("check-example-empty", ["check", "--example", ""], 2, "give an example name"),
        Case("check-example-blank", ["check", "--example", "  "], 2, "give an example name"),
        Case("check-example-colon", ["check", "--example", "tts:"], 2, "give an example name"),
        Case("check-example-unknown", ["check", "--example", "nope"], 2, "unknown example"),
        Case("check-variant-unknown", ["check", "--example", "tts:nope"], 2, "nope"),
        Case("check-variant-disagree", ["check", "--example", "tts:nan_layer", "--variant", "theta"], 2,
             "disagree"),
        Case("check-spec-and-example", ["check", "spec_good.py", "--example", "tts"], 2, "not both"),
        Case("check-only-unknown", ["check", "--only", "bogus"], 2, "unknown check family"),
        Case("check-only-empty", ["check", "--only", ""], 2, "no check family"),
        Case("check-only-commas", ["check", "--only", ",,"], 2, "no check family"),
        Case("check-dtype-unknown", ["check", "--dtype", "float8"], 2, "float8"),
        Case("check-device-bogus", ["check", "--only", "parity", "--device", "quantum"], 2, "quantum"),
        Case("check-device-cuda-absent", ["check", "--only", "parity", "--device", "cuda:7"], 2, "cuda"),
        Case("check-unknown-option", ["check", "--frobnicate"], 2, "frobnicate"),
        Case("check-variant-on-good-spec", ["check", "spec_good.py", "--variant", "nope"], 2, "nope"),
        Case("check-json-dir", ["check", "--only", "config", "--json", "adir"], 2, "is a directory"),
        Case("check-json-symlink", ["check", "--only", "config", "--json", "link.json"], 2, "symbolic link"),
        Case("check-json-fifo", ["check", "--only", "config", "--json", "fifo.json"], 2, "FIFO"),
        Case("check-json-devnull", ["check", "--only", "config", "--json", "/dev/null"], 2, "device"),
        Case("check-json-is-spec", ["check", "spec_good.py", "--only", "config", "--json", "spec_good.py"], 2,
             "inputs"),
        Case("check-json-under-file", ["check", "--only", "config", "--json", "notes.txt/r.json"], 2,
             "not a directory"),
        Case("check-json-stdout", ["check", "--only", "config", "--json", "-"], 0, '"schema"'),
        Case("check-json-ok", ["check", "--only", "config", "--json", "out/r.json"], 0, "",
             outputs=("out/",)),
        Case("check-clean-good-spec", ["check", "spec_good.py", "--only", "parity"], 0, "parity.ok"),
    ]
    # check on audio-only specs: unusable codes / reference / hop are exit 2; an empty candidate is a finding
    for v, (rc, needle) in _AUDIO_BAD.items():
        c.append(Case(f"check-audio-{v}", ["check", f"spec_audio_{v}.py", "--only", "hop,channel"], rc, needle))
    # examples
    c += [Case("examples-extra-arg", ["examples", "extra"], 2, "extra"),
          Case("examples-ok", ["examples"], 0, "tts")]
    # audio
    for a, b, rc, needle in [
        ("nope.wav", "ref.wav", 2, "nope.wav"), ("ref.wav", "nope.wav", 2, "nope.wav"),
        ("empty.wav", "ref.wav", 2, "empty.wav"), ("ref.wav", "empty.wav", 2, "empty.wav"),
        ("garbage.wav", "ref.wav", 2, "garbage.wav"), ("ref.wav", "garbage.wav", 2, "garbage.wav"),
        ("adir", "ref.wav", 2, "adir"), ("ref.wav", "adir", 2, "adir"),
        ("notes.txt", "ref.wav", 2, "notes.txt"), ("fifo.json", "ref.wav", 2, "fifo.json"),
        ("ref.wav", "nan.wav", 1, "channel.shape_contract"), ("ref.wav", "silent.wav", 1, "hop.unexplained"),
        ("ref.wav", "other_rate.wav", 1, "hop.sample_rate_mismatch"), ("ref.wav", "same.wav", 0, "hop.ok"),
    ]:
        c.append(Case(f"audio-{a}-{b}", ["audio", a, b], rc, needle))
    c += [
        Case("audio-hop-zero", ["audio", "ref.wav", "same.wav", "--hop-length", "0"], 2, "hop-length"),
        Case("audio-hop-negative", ["audio", "ref.wav", "same.wav", "--hop-length", "-5"], 2, "hop-length"),
        Case("audio-hop-text", ["audio", "ref.wav", "same.wav", "--hop-length", "big"], 2, "hop-length"),
        Case("audio-rate-zero", ["audio", "ref.wav", "same.wav", "--sample-rate", "0"], 2, "sample-rate"),
        Case("audio-json-is-input", ["audio", "ref.wav", "same.wav", "--json", "ref.wav"], 2, "inputs"),
        Case("audio-json-symlink", ["audio", "ref.wav", "same.wav", "--json", "link.json"], 2, "symbolic link"),
        Case("audio-json-fifo", ["audio", "ref.wav", "same.wav", "--json", "fifo.json"], 2, "FIFO"),
        Case("audio-plot-symlink", ["audio", "ref.wav", "same.wav", "--plot", "link.json"], 2, "symbolic link"),
        Case("audio-plot-dir", ["audio", "ref.wav", "same.wav", "--plot", "adir"], 2, "is a directory"),
        Case("audio-plot-is-input", ["audio", "ref.wav", "same.wav", "--plot", "same.wav"], 2, "inputs"),
        Case("audio-plot-stdout", ["audio", "ref.wav", "same.wav", "--plot", "-"], 2, "standard output"),
        Case("audio-missing-arg", ["audio", "ref.wav"], 2, "CAND"),
        Case("audio-no-args", ["audio"], 2, "REF"),
    ]
    # baseline
    c += [
        Case("baseline-record-out-file", ["baseline", "record", "--out", "notes.txt"], 2, "notes.txt"),
        Case("baseline-record-out-symlink", ["baseline", "record", "--out", "link.json"], 2, "symbolic link"),
        Case("baseline-record-out-fifo", ["baseline", "record", "--out", "fifo.json"], 2, "FIFO"),
        Case("baseline-record-bad-spec", ["baseline", "record", "spec_syntax.py", "--out", "b"], 2, "SyntaxError"),
        Case("baseline-record-no-out", ["baseline", "record"], 2, "--out", setup="project_tree"),
        Case("baseline-record-no-out-spec", ["baseline", "record", "spec_good.py"], 2, "--out"),
        Case("baseline-record-no-audio-names", ["baseline", "record", "spec_good.py", "--out", "b"], 2,
             "cannot record"),
        Case("baseline-record-example-unknown", ["baseline", "record", "--example", "nope", "--out", "b"], 2,
             "unknown example"),
        Case("baseline-compare-none-recorded", ["baseline", "compare", "--out", "adir"], 2,
             "no baseline recorded"),
        Case("baseline-compare-missing-dir", ["baseline", "compare", "--out", "nope"], 2, "no baseline"),
        Case("baseline-compare-json-fifo", ["baseline", "compare", "--out", "adir", "--json", "fifo.json"], 2,
             "FIFO"),
        Case("baseline-compare-bad-spec", ["baseline", "compare", "spec_raises.py"], 2, "boom"),
        Case("baseline-compare-variant-unknown", ["baseline", "compare", "--example", "tts", "--variant",
                                                  "nope"], 2, "nope"),
        Case("baseline-no-subcommand-option", ["baseline", "--frob"], 2, "frob"),
    ]
    # notebooks
    c += [
        Case("notebooks-dest-file", ["notebooks", "notes.txt"], 2, "not a directory"),
        Case("notebooks-dest-symlink", ["notebooks", "link.json"], 2, "not a directory"),
        Case("notebooks-dest-fifo", ["notebooks", "fifo.json"], 2, "not a directory"),
        Case("notebooks-no-dest", ["notebooks"], 2, "DEST"),
        Case("notebooks-under-file", ["notebooks", "notes.txt/walk"], 2, "notes.txt"),
    ]
    # lint
    c += [
        Case("lint-missing-path", ["lint", "nope.py"], 2, "no such file"),
        Case("lint-unknown-code", ["lint", "user_source.py", "--select", "ZZ9"], 2, "ZZ9"),
        Case("lint-unknown-ignore", ["lint", "user_source.py", "--ignore", "ZZ9"], 2, "ZZ9"),
        Case("lint-write-baseline-no-file", ["lint", "user_source.py", "--write-baseline"], 2, "--baseline"),
        Case("lint-write-baseline-onto-source", ["lint", "broken.py", "--baseline", "user_source.py",
                                                 "--write-baseline"], 2, "not a baseline"),
        Case("lint-write-baseline-onto-yaml", ["lint", "broken.py", "--baseline", "deploy.yaml",
                                               "--write-baseline"], 2, "not a baseline"),
        Case("lint-write-baseline-onto-other-json", ["lint", "broken.py", "--baseline", "baseline_other.json",
                                                     "--write-baseline"], 2, "not a porting-kit lint baseline"),
        Case("lint-write-baseline-onto-dir", ["lint", "broken.py", "--baseline", "adir", "--write-baseline"], 2,
             "is a directory"),
        Case("lint-write-baseline-onto-symlink", ["lint", "broken.py", "--baseline", "link.json",
                                                  "--write-baseline"], 2, "symbolic link"),
        Case("lint-write-baseline-onto-fifo", ["lint", "broken.py", "--baseline", "fifo.json",
                                               "--write-baseline"], 2, "FIFO"),
        Case("lint-write-baseline-devnull", ["lint", "broken.py", "--baseline", "/dev/null", "--write-baseline"],
             2, "device"),
        Case("lint-write-baseline-ok", ["lint", "broken.py", "--baseline", "lb.json", "--write-baseline"], 0,
             "wrote 1", outputs=("lb.json",)),
        Case("lint-baseline-missing", ["lint", "broken.py", "--baseline", "nope.json"], 2, "not found"),
        Case("lint-baseline-not-baseline", ["lint", "broken.py", "--baseline", "baseline_other.json"], 2,
             "not a porting-kit lint baseline"),
        Case("lint-baseline-is-source", ["lint", "broken.py", "--baseline", "user_source.py"], 2, "not JSON"),
        Case("lint-broken-source", ["lint", "broken.py"], 1, "PK000"),
        Case("lint-latin1-cookie", ["lint", "latin1.py"], 0, ""),
        Case("lint-bogus-cookie", ["lint", "bogus_cookie.py"], 1, "PK000"),
        Case("lint-fifo", ["lint", "fifo.py"], 0, "skipped fifo.py"),
        Case("lint-devzero", ["lint", "/dev/zero"], 0, "skipped /dev/zero"),
        Case("lint-bad-yaml", ["lint", "bad.yaml"], 1, "PKY000"),
        Case("lint-big-yaml", ["lint", "big_deploy.yaml"], 0, "skipped big_deploy.yaml", setup="big_yaml"),
        Case("lint-clean", ["lint", "user_source.py"], 0, ""),
        Case("lint-list-rules", ["lint", "--list-rules"], 0, "PK101"),
    ]
    # scaffold
    base = ["scaffold", "--framework", "vllm-omni", "--shape", "single-stage-ar", "--model-type", "tiny_tts"]
    c += [
        Case("scaffold-missing-config", base + ["--config", "nope.json", "--out", "s"], 2, "nope.json"),
        Case("scaffold-config-not-json", base + ["--config", "config_bad.json", "--out", "s"], 2,
             "config_bad.json"),
        Case("scaffold-config-list", base + ["--config", "config_list.json", "--out", "s"], 2,
             "config_list.json"),
        Case("scaffold-config-dir", base + ["--config", "adir", "--out", "s"], 2, "adir"),
        Case("scaffold-config-fifo", base + ["--config", "fifo.json", "--out", "s"], 2, "fifo.json"),
        Case("scaffold-out-file", base + ["--config", "config.json", "--out", "notes.txt"], 2, "notes.txt"),
        Case("scaffold-out-existing-dir", base + ["--config", "config.json", "--out", "adir"], 0, "",
             outputs=("adir/",)),
        Case("scaffold-out-symlink", base + ["--config", "config.json", "--out", "link.json"], 2,
             "not a directory"),
        Case("scaffold-framework-unknown", ["scaffold", "--framework", "tgi", "--shape", "two-stage",
                                            "--model-type", "x", "--config", "config.json", "--out", "s"], 2,
             "tgi"),
        Case("scaffold-shape-unknown", ["scaffold", "--framework", "vllm-omni", "--shape", "three-stage",
                                        "--model-type", "x", "--config", "config.json", "--out", "s"], 2,
             "three-stage"),
        Case("scaffold-model-type-dunder", base[:-1] + ["__init__", "--config", "config.json", "--out", "s"], 2,
             "__init__"),
        Case("scaffold-model-type-keyword", base[:-1] + ["class", "--config", "config.json", "--out", "s"], 2,
             "class"),
        Case("scaffold-model-type-quote", base[:-1] + ["a'b", "--config", "config.json", "--out", "s"], 2,
             "a'b"),
        Case("scaffold-model-type-empty", base[:-1] + ["", "--config", "config.json", "--out", "s"], 2,
             "model"),
        Case("scaffold-no-out", base + ["--config", "config.json"], 2, "--out"),
        Case("scaffold-into-missing", base + ["--config", "config.json", "--into", "nope"], 2, "nope"),
        Case("scaffold-into-file", base + ["--config", "config.json", "--into", "notes.txt"], 2, "notes.txt"),
        Case("scaffold-ok", base + ["--config", "config.json", "--out", "s"], 0, "", outputs=("s/",)),
    ]
    # validate
    c += [
        Case("validate-missing", ["validate", "--static", "nope"], 2, "nope"),
        Case("validate-file", ["validate", "--static", "notes.txt"], 2, "notes.txt"),
        Case("validate-not-scaffold", ["validate", "--static", "adir"], 2, "adir"),
        Case("validate-fifo", ["validate", "--static", "fifo.json"], 2, "fifo.json"),
        Case("validate-no-args", ["validate"], 2, "validate"),
        Case("validate-deploy-fifo", ["validate", "--static", "sc"], 2, "FIFO", setup="scaffold_deploy_fifo"),
        Case("validate-deploy-fifo-all-tiers", ["validate", "sc"], 2, "FIFO", setup="scaffold_deploy_fifo"),
        Case("validate-deploy-big", ["validate", "--static", "sc"], 2, "limit", setup="scaffold_deploy_big"),
        Case("validate-big-yaml", ["validate", "big_deploy.yaml"], 2, "limit", setup="big_yaml"),
        Case("validate-unknown-option", ["validate", "--static", "adir", "--frob"], 2, "frob"),
    ]
    # nothing is ever written inside the installed package
    c += [
        Case("pkg-json", ["check", "--only", "config", "--json", str(PKG / "r.json")], 2, "installed"),
        Case("pkg-notebooks", ["notebooks", str(PKG / "_walk")], 2, "installed"),
        Case("pkg-baseline", ["baseline", "record", "--out", str(PKG / "_shipped" / "reference_audio")], 2,
             "installed"),
        Case("pkg-lint-baseline", ["lint", "broken.py", "--baseline", str(PKG / "lb.json"), "--write-baseline"],
             2, "installed"),
    ]
    # the root
    c += [
        Case("root-unknown-command", ["frobnicate"], 2, "frobnicate"),
        Case("root-version", ["--version"], 0, "porting-kit"),
        Case("root-help", [], 0, "check"),
        Case("root-debug-unknown", ["--debug", "check", "--only", "bogus"], 2, "bogus"),
    ]
    return c


CASES = _cases()


# ------------------------------------------------------------------ the harness

def _snapshot(root: Path) -> dict[str, str]:
    """Kind and content hash of every path under ``root`` (a link by its target, never followed)."""
    out: dict[str, str] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            st = os.lstat(p)
            rel = p.relative_to(root).as_posix()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "link:" + os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                out[rel] = "file:" + hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = f"mode:{stat.S_IFMT(st.st_mode)}"
    return out


def _changes(before: dict[str, str], after: dict[str, str], outputs: tuple[str, ...]) -> list[str]:
    """Paths changed, removed, or created outside the declared outputs. A file that existed
    before may change only when it is named exactly; new paths only under an output."""
    bad = [k for k, v in before.items() if after.get(k) != v and k not in outputs]
    new = [k for k in after if k not in before]
    bad += [k for k in new if not any(k == o.rstrip("/") or k.startswith(o) for o in outputs)]
    return sorted(bad)


class _TimeLimit(Exception):
    pass


def _alarm(signum, frame):
    raise _TimeLimit()


def _run(case: Case, root: Path, capsys) -> tuple[int, str, str]:
    old = os.getcwd()
    os.chdir(root)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIME_LIMIT_S)
    try:
        rc = main(list(case.argv))
    except _TimeLimit:
        pytest.fail(f"{case.id}: no answer within {TIME_LIMIT_S} s (a hang)")
    finally:
        signal.alarm(0)
        os.chdir(old)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, tmp_path, capsys):
    root = tmp_path / "w"
    root.mkdir()
    _world(root)
    if case.setup:
        _EXTRA[case.setup](root)
    before = _snapshot(root)
    rc, out, err = _run(case, root, capsys)
    if "--debug" not in case.argv:  # --debug asks for the traceback
        assert "Traceback" not in err and "Traceback" not in out, err
    assert rc == case.rc, f"{case.id}: exit {rc}, expected {case.rc}\nstdout: {out[-800:]}\nstderr: {err}"
    if rc == 2 and "--debug" not in case.argv:
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        assert len(lines) == 1, f"{case.id}: stderr should be one line: {lines}"
        assert case.needle.lower() in lines[0].lower(), f"{case.id}: {lines[0]!r} lacks {case.needle!r}"
    elif case.needle and rc != 2:
        assert case.needle in out + err, f"{case.id}: output lacks {case.needle!r}: {out[-800:]}"
    assert _changes(before, _snapshot(root), case.outputs) == [], f"{case.id}: changed outside its outputs"


def test_corpus_size_and_outcomes():
    """At least 150 cases over every command; the outcome counts are stated, not guessed."""
    known = ("check", "examples", "audio", "baseline", "notebooks", "lint", "scaffold", "validate")
    commands = Counter(c.argv[0] if c.argv and c.argv[0] in known else "(root)" for c in CASES)
    for cmd in known:
        assert commands[cmd] > 0, cmd
    outcomes = Counter({2: "clean exit 2", 1: "finding", 0: "pass"}[c.rc] for c in CASES)
    print(f"\ncorpus: {len(CASES)} cases; by command {dict(commands)}; by outcome {dict(outcomes)}")
    assert len(CASES) >= 150
    assert len({c.id for c in CASES}) == len(CASES)


def test_audio_longer_than_the_cap_is_exit_2_before_reading(tmp_path, capsys):
    """Bounded work: a file over MAX_AUDIO_SECONDS is refused from its header, not read."""
    import numpy as np

    from porting_kit.probes.waveform import MAX_AUDIO_SECONDS

    sr = 1000
    _write_wav(tmp_path / "long.wav", np.zeros(int(sr * (MAX_AUDIO_SECONDS + 1)), dtype="float32"), sr)
    _write_wav(tmp_path / "short.wav", np.zeros(sr, dtype="float32"), sr)
    assert main(["audio", str(tmp_path / "long.wav"), str(tmp_path / "short.wav")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "long.wav" in err[0] and f"{MAX_AUDIO_SECONDS:.0f} s cap" in err[0]


@pytest.mark.parametrize("argv", [["lint", "big_deploy.yaml"], ["validate", "big_deploy.yaml"],
                                  ["validate", "--static", "sc"]], ids=["lint", "validate-yaml", "validate-scaffold"])
def test_big_deploy_yaml_is_refused_fast(tmp_path, capsys, argv):
    """Bounded work: a 2.3 MB deploy YAML (over a minute of CPU to parse) is refused from its size
    in well under a second of work, with one line saying so; lint notes the skip."""
    import time

    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["TinyTTSForConditionalGeneration"], "model_type": "tiny_tts", "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256, "sampling_rate": 24000}))
    _EXTRA["scaffold_deploy_big" if argv[-1] == "sc" else "big_yaml"](tmp_path)
    capsys.readouterr()
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        t0 = time.process_time()
        rc = main(argv)
        cpu = time.process_time() - t0
    finally:
        os.chdir(old)
    err = capsys.readouterr().err.strip().splitlines()
    assert cpu < 5.0, cpu
    # lint also says what it checked (nothing: the one file was skipped)
    tail = ["no findings in 0 file(s) checked"] if argv[0] == "lint" else []
    assert "MiB" in err[0] and err[1:] == tail, err
    assert rc == (0 if argv[0] == "lint" else 2)
