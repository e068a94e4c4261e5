"""What a user still writes by hand after ``porting-kit scaffold``, for three real vLLM-Omni 0.30.0 TTS models.

For MOSS-TTS-Nano (single-stage-ar), Qwen3-TTS (two-stage) and VoxCPM2 (native-ar) this counts the
code lines of the in-tree files (the model folder with its codec/tokenizer code, the stage-input
processor, the main deploy YAML) and of the scaffold porting-kit generates for the same shape and model
type (tests excluded), and prints the difference: a lower bound on the lines written by hand (every
scaffold line is counted as if it survived into the real model, which it need not: the skeleton's
tiny stand-in model is replaced by the real architecture).

A code line is a non-blank line that is not a comment (``#`` in Python and YAML); Python docstrings
are not removed (the in-tree files and the scaffold both keep theirs).

    pip download --no-deps vllm-omni==0.30.0 -d /tmp/vo && (cd /tmp/vo && unzip -q -o *.whl)
    python benchmarks/handwritten_lines.py /tmp/vo/vllm_omni
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

#: model folder in vLLM-Omni 0.30.0 -> (scaffold shape, its stage-input processor module or None).
#: MOSS-TTS-Nano and VoxCPM2 are single-stage: no processor (``moss_tts.py`` serves MOSS-TTS).
MODELS = {
    "moss_tts_nano": ("single-stage-ar", None),
    "qwen3_tts": ("two-stage", "qwen3_tts"),
    "voxcpm2": ("native-ar", None),
}
#: A small TTS config.json for the scaffold (sizes do not change the line count materially).
CONFIG = {"vocab_size": 4096, "hidden_size": 512, "num_hidden_layers": 8, "intermediate_size": 1536,
          "max_position_embeddings": 4096, "rope_theta": 1000000.0, "eos_token_id": 2,
          "codec_config": {"sampling_rate": 24000, "upsampling_ratios": [8, 5, 4, 3], "num_quantizers": 8}}


def code_lines(path: Path) -> int:
    """Non-blank, non-``#`` lines of one text file."""
    return sum(1 for ln in path.read_text(encoding="utf-8", errors="replace").splitlines()
               if ln.strip() and not ln.strip().startswith("#"))


def in_tree_files(root: Path, model: str, processor: str | None) -> list[Path]:
    """The model's folder (codec and tokenizer included), its stage-input processor and its main
    deploy YAML (``deploy/<model>.yaml``; the tuned variants beside it are not counted)."""
    files = sorted((root / "model_executor/models" / model).rglob("*.py"))
    if processor:
        files.append(root / "model_executor/stage_input_processors" / f"{processor}.py")
    return files + [root / "deploy" / f"{model}.yaml"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("vllm_omni", type=Path, help="the unpacked vllm_omni package folder")
    args = p.parse_args(argv)
    print("| model | shape | in-tree files | in-tree code lines | scaffold files | scaffold code lines | "
          "written by hand (at least) |\n|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for model, (shape, processor) in MODELS.items():
            real = in_tree_files(args.vllm_omni, model, processor)
            cfg = Path(tmp) / f"{model}.json"
            cfg.write_text(json.dumps({**CONFIG, "model_type": model}))
            out = Path(tmp) / model
            subprocess.run([sys.executable, "-m", "porting_kit", "scaffold", "--framework", "vllm-omni", "--shape",
                            shape, "--model-type", model, "--config", str(cfg), "--out", str(out)], check=True,
                           capture_output=True)
            gen = sorted(f for f in out.rglob("*") if f.is_file() and f.suffix in (".py", ".yaml")
                         and "tests" not in f.relative_to(out).parts)
            n_real = sum(map(code_lines, real))
            n_gen = sum(map(code_lines, gen))
            print(f"| {model} | {shape} | {len(real)} | {n_real:,} | {len(gen)} | {n_gen:,} | "
                  f"{max(n_real - n_gen, 0):,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
