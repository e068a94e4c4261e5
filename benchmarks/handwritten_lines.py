"""What a user still writes by hand after ``porting-kit scaffold``, for three real vLLM-Omni 0.30.0 TTS models.

For MOSS-TTS-Nano (single-stage-ar), Qwen3-TTS (two-stage) and VoxCPM2 (native-ar) this counts, by
class of code (backbone, codec, serving glue, performance, other):

* **in tree, reachable**: the files of the model's folder that the serving path imports, starting from
  the model classes ``registry.py`` registers for the folder, its ``pipeline.py`` and the stage-input
  processor, following relative and ``vllm_omni.model_executor.models.<model>`` imports and dotted module
  strings (``scheduler_cls="..."``); plus the main deploy YAML and the model's serving adapter. Files
  nothing reaches (Qwen3-TTS's 25 Hz tokenizer and the ``qwen3_tts_tokenizer.py`` that alone imports it)
  are listed and left out.
* **scaffold, surviving**: the lines of the scaffold (generated from the model's real-shaped config:
  the in-tree config keys) that a correct port keeps: no ``_vllm_seam.py`` (stand-ins for the framework),
  no examples, no tests, no registration notes, and in the model files no stand-in definitions (the
  generic decoder, the stand-in codec / speaker encoder, the byte tokenizer: every top-level definition
  whose name or docstring says it is a stand-in or a placeholder).

Classes: each in-tree file has a class (:data:`MODELS`); a definition (top-level, or a method of a
top-level class) whose name or code is about CUDA graphs, ``torch.compile``, fused kernels or profiling
is **performance** wherever it is. Scaffold lines take the class of the in-tree code they stand for
(the stage-0 model: backbone; the codec stage: codec; pipeline / deploy / processor / adapter: serving
glue). By hand = in tree - scaffold, per class, never below 0.

A code line is a non-blank line that is not a comment (``#``); docstrings count on both sides.

    pip download --no-deps vllm-omni==0.30.0 -d /tmp/vo && (cd /tmp/vo && unzip -q -o *.whl)
    python benchmarks/handwritten_lines.py /tmp/vo/vllm_omni [--no-adapters] [--json] \
        [--upstream qwen3_tts=/tmp/x/qwen_tts --upstream voxcpm2=/tmp/x/voxcpm]

``--upstream MODEL=DIR`` credits in-tree lines copied from the model's upstream package (the unpacked
wheel: ``pip download --no-deps qwen-tts voxcpm``) as **vendored**: matched in order against the
upstream file of the same name, they are copied, not written by hand.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

CLASSES = ("backbone", "codec", "serving glue", "performance", "other")
#: Names / code that make a definition performance code.
PERF_NAME = re.compile(r"graph|compile|fused|nvtx|perf_?timer|timing|capture|replay|triton|bucket", re.I)
PERF_CODE = re.compile(r"torch\.cuda\.graph|CUDAGraph|torch\.compile|cudagraph", re.I)
#: A scaffold definition is a stand-in when its name or docstring says so.
STAND_IN = re.compile(r"stand-in|stand in|placeholder|replace (it |this )?with the upstream", re.I)


@dataclass
class Model:
    """One in-tree model: scaffold shape, its processor / adapter modules, the class of each file
    (path relative to the model folder, or a folder prefix ending in ``/``; default ``other``),
    and a real-shaped config (the in-tree config's keys, small values) with its codec config."""

    shape: str
    processor: str | None
    adapter: str
    classes: dict[str, str]
    config: dict
    codec_config: dict | None = None
    scaffold_args: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)


MODELS = {
    "moss_tts_nano": Model(
        "single-stage-ar", None, "moss_tts",
        {"modeling_moss_tts_nano.py": "backbone", "pipeline.py": "serving glue"},
        {"architectures": ["MossTTSNanoForCausalLM"], "model_type": "moss_tts_nano",
         "auto_map": {"AutoModelForCausalLM": "modeling_moss_tts_nano.MossTTSNanoForCausalLM"},
         "audio_tokenizer_pretrained_name_or_path": "OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano",
         "audio_tokenizer_sample_rate": 48000, "n_vq": 16, "vocab_size": 16384, "hidden_size": 768,
         "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
         "max_position_embeddings": 4096, "rope_theta": 10000.0, "eos_token_id": 2},
        scaffold_args=("--trust-remote-code",),
        notes=["the in-tree adapter moss_tts.py serves MOSS-TTS as well as MOSS-TTS-Nano"]),
    "qwen3_tts": Model(
        "two-stage", "qwen3_tts", "qwen3_tts",
        {"qwen3_tts_talker.py": "backbone", "qwen3_tts_code_predictor_vllm.py": "backbone",
         "qwen3_tts_code2wav.py": "codec", "tokenizer_12hz/": "codec", "tokenizer_25hz/": "codec",
         "qwen3_tts_tokenizer.py": "codec", "cuda_graph_decoder_wrapper.py": "performance",
         "segmented_graph_wrapper.py": "performance", "pipeline.py": "serving glue",
         "prompt_embeds_builder.py": "other", "configuration_qwen3_tts.py": "other"},
        {"architectures": ["Qwen3TTSForConditionalGeneration"], "model_type": "qwen3_tts",
         "tts_bos_token_id": 151672, "tts_eos_token_id": 151673, "tts_pad_token_id": 151671,
         "speaker_encoder_config": {"enc_dim": 1024, "sample_rate": 24000},
         "talker_config": {"vocab_size": 3072, "hidden_size": 1024, "intermediate_size": 3072,
                           "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
                           "max_position_embeddings": 32768, "rope_theta": 1000000, "num_code_groups": 16,
                           "codec_eos_token_id": 2150}},
        {"output_sample_rate": 24000, "decode_upsample_rate": 1920,
         "decoder_config": {"codebook_size": 2048, "sliding_window": 72, "num_quantizers": 16}}),
    "voxcpm2": Model(
        "native-ar", None, "voxcpm2",
        {"voxcpm2_talker.py": "backbone", "minicpm4_paged.py": "backbone", "minicpm4_hf_compat.py": "backbone",
         "pipeline.py": "serving glue", "scheduler.py": "serving glue", "runtime_config.py": "performance"},
        {"architecture": "voxcpm2",
         "lm_config": {"bos_token_id": 1, "eos_token_id": 2, "hidden_size": 2048, "intermediate_size": 6144,
                       "max_position_embeddings": 32768, "num_attention_heads": 16, "num_hidden_layers": 28,
                       "num_key_value_heads": 2, "rope_theta": 10000, "vocab_size": 73448},
         "patch_size": 4, "feat_dim": 64,
         "audio_vae_config": {"encoder_rates": [2, 5, 8, 8], "latent_dim": 64, "sample_rate": 16000,
                              "out_sample_rate": 48000}}),
}


# -- counting ---------------------------------------------------------------------------------
def code_line_numbers(text: str) -> set[int]:
    """1-based numbers of the non-blank, non-``#`` lines."""
    return {i for i, ln in enumerate(text.splitlines(), 1) if ln.strip() and not ln.strip().startswith("#")}


def code_lines(path: Path) -> int:
    """Non-blank, non-``#`` lines of one text file."""
    return len(code_line_numbers(path.read_text(encoding="utf-8", errors="replace")))


def _defs(tree: ast.Module):
    """Top-level definitions and the methods of top-level classes (the class body outside its methods
    stays with the class)."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node
            if isinstance(node, ast.ClassDef):
                yield from (n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def _span(node: ast.AST) -> set[int]:
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return set(range(start, node.end_lineno + 1))


def classify_python(text: str, default: str) -> dict[str, int]:
    """Code lines of one in-tree Python file by class: performance definitions, the rest ``default``."""
    lines = code_line_numbers(text)
    src = text.splitlines()
    perf: set[int] = set()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {default: len(lines)}
    for node in _defs(tree):
        body = "\n".join(src[node.lineno - 1:node.end_lineno])
        # a class by its name only (its methods are judged one by one)
        if PERF_NAME.search(node.name) or (not isinstance(node, ast.ClassDef) and PERF_CODE.search(body)):
            perf |= _span(node)
    out = {default: len(lines - perf)}
    out["performance"] = out.get("performance", 0) + len(lines & perf)
    return out


def surviving_lines(text: str) -> int:
    """Code lines of a generated Python file without its stand-in definitions."""
    lines = code_line_numbers(text)
    tree = ast.parse(text)
    drop: set[int] = set()
    for node in _defs(tree):
        doc = ast.get_docstring(node) or ""
        if STAND_IN.search(node.name) or STAND_IN.search(doc):
            drop |= _span(node)
    return len(lines - drop)


# -- reachability -----------------------------------------------------------------------------
def _registered_modules(root: Path, model: str) -> set[str]:
    """Module names ``registry.py`` registers for the folder (``("qwen3_tts", "qwen3_tts_talker", ...)``)."""
    text = (root / "model_executor/models/registry.py").read_text(encoding="utf-8")
    return set(re.findall(rf'\(\s*"{re.escape(model)}",\s*"(\w+)",', text))


def _imports(path: Path, folder: Path, model: str) -> set[Path]:
    """Files of ``folder`` that ``path`` imports (relative or absolute) or names as a dotted string."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    pkg = path.parent
    names: list[Path] = []
    absolute = f"vllm_omni.model_executor.models.{model}"
    for node in ast.walk(tree):
        mods: list[tuple[int, str, list[str]]] = []
        if isinstance(node, ast.ImportFrom):
            mods.append((node.level, node.module or "", [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            mods += [(0, a.name, []) for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(absolute):
            mods.append((0, node.value, []))
        for level, mod, attrs in mods:
            if level:
                base = pkg
                for _ in range(level - 1):
                    base = base.parent
            elif mod.startswith(absolute):
                base, mod = folder, mod[len(absolute):].lstrip(".")
            else:
                continue
            parts = [p for p in mod.split(".") if p]
            for cut in range(len(parts), 0, -1):  # a dotted string may end in a class name
                target = base.joinpath(*parts[:cut])
                if target.with_suffix(".py").is_file() or (target / "__init__.py").is_file():
                    names.append(target)
                    break
            else:
                names.append(base)
            names += [base.joinpath(*parts, a) for a in attrs]  # from . import module
    out = set()
    for n in names:
        for cand in (n.with_suffix(".py"), n / "__init__.py"):
            if cand.is_file() and folder in cand.parents:
                out.add(cand)
    return out


def reachable_files(root: Path, model: str) -> tuple[list[Path], list[Path]]:
    """(reachable, unreachable) Python files of the model folder, from its registered modules and pipeline."""
    folder = root / "model_executor/models" / model
    todo = [folder / f"{m}.py" for m in _registered_modules(root, model)] + [folder / "pipeline.py"]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        for parent in path.parents:  # importing a.b.c runs a/__init__.py and a/b/__init__.py
            if parent == folder.parent:
                break
            if (parent / "__init__.py").is_file():
                todo.append(parent / "__init__.py")
        todo += _imports(path, folder, model)
    every = sorted(folder.rglob("*.py"))
    return [p for p in every if p in seen], [p for p in every if p not in seen]


def vendored_lines(text: str, upstream: Path | None, name: str) -> set[int]:
    """Line numbers of ``text`` copied from the upstream package's file of the same name (matched
    line blocks of stripped code lines, in order): code the port vendors rather than writes."""
    if upstream is None:
        return set()
    cands = sorted(upstream.rglob(name))
    if not cands:
        return set()
    import difflib

    own = text.splitlines()
    keep = sorted(code_line_numbers(text))
    theirs = [ln.strip() for ln in cands[0].read_text(encoding="utf-8", errors="replace").splitlines()
              if ln.strip() and not ln.strip().startswith("#")]
    mine = [own[i - 1].strip() for i in keep]
    matcher = difflib.SequenceMatcher(None, mine, theirs, autojunk=False)
    return {keep[b.a + k] for b in matcher.get_matching_blocks() for k in range(b.size)}


def file_class(model: Model, rel: str) -> str:
    for key, cls in model.classes.items():
        if rel == key or (key.endswith("/") and rel.startswith(key)):
            return cls
    return "other"


def in_tree(root: Path, name: str, model: Model, adapters: bool,
            upstream: Path | None = None) -> tuple[dict[str, int], list[str], int, dict[str, int]]:
    """In-tree code lines by class, the unreachable files, their code lines, and the lines by class
    copied from the upstream package (``upstream``: its unpacked source; vendored, not hand-written)."""
    reach, unreach = reachable_files(root, name)
    folder = root / "model_executor/models" / name
    counts = dict.fromkeys(CLASSES, 0)
    vendored = dict.fromkeys(CLASSES, 0)
    for path in reach:
        text = path.read_text(encoding="utf-8")
        cls = file_class(model, str(path.relative_to(folder)))
        for c, n in classify_python(text, cls).items():
            counts[c] += n
        vendored[cls] += len(vendored_lines(text, upstream, path.name))
    glue = [root / "deploy" / f"{name}.yaml"]
    if model.processor:
        glue.append(root / "model_executor/stage_input_processors" / f"{model.processor}.py")
    if adapters:
        glue.append(root / "entrypoints/openai/tts_adapters" / f"{model.adapter}.py")
    for path in glue:
        if path.suffix == ".py":
            for cls, n in classify_python(path.read_text(encoding="utf-8"), "serving glue").items():
                counts[cls] += n
        else:
            counts["serving glue"] += code_lines(path)
    return counts, [str(p.relative_to(folder)) for p in unreach], sum(map(code_lines, unreach)), vendored


def scaffold_lines(name: str, model: Model, tmp: Path, adapters: bool) -> dict[str, int]:
    """Surviving scaffold lines by class (the class of the in-tree code each file stands for)."""
    import contextlib

    from porting_kit.cli import main as cli

    folder = tmp / f"{name}-hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(model.config), encoding="utf-8")
    if model.codec_config is not None:
        (folder / "speech_tokenizer").mkdir()
        (folder / "speech_tokenizer/config.json").write_text(json.dumps(model.codec_config), encoding="utf-8")
    out = tmp / name
    with contextlib.redirect_stdout(sys.stderr):  # the scaffold's own report, not this table
        rc = cli(["scaffold", "--framework", "vllm-omni", "--shape", model.shape, "--model-type", name,
                  "--config", str(folder / "config.json"), "--out", str(out), *model.scaffold_args])
    if rc != 0:
        raise SystemExit(f"scaffold of {name} failed (exit {rc})")
    counts = dict.fromkeys(CLASSES, 0)
    base = out / "vllm_omni"
    mdir = base / "model_executor/models" / name
    for path in sorted(mdir.glob("*.py")):
        if path.name == "_vllm_seam.py":
            continue  # stand-ins for vLLM / vLLM-Omni classes
        cls = ("codec" if path.name.endswith("_code2wav.py") else "backbone" if path.name.startswith("modeling_")
               else "serving glue" if path.name == "pipeline.py" else "other")
        counts[cls] += surviving_lines(path.read_text(encoding="utf-8"))
    glue = [base / "deploy" / f"{name}.yaml", *base.glob(f"model_executor/stage_input_processors/{name}.py")]
    if adapters:
        glue.append(base / "entrypoints/openai/tts_adapters" / f"{name}.py")
    for path in glue:
        counts["serving glue"] += surviving_lines(path.read_text()) if path.suffix == ".py" else code_lines(path)
    return counts


def measure(root: Path, adapters: bool = True, upstreams: dict[str, Path] | None = None) -> list[dict]:
    """One row per model: in-tree / scaffold / vendored / by-hand lines per class, totals and shares.

    ``upstreams`` maps a model to its upstream package source (e.g. ``qwen3_tts`` -> the unpacked
    ``qwen_tts`` wheel): in-tree lines copied from it count as vendored, not written by hand."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in MODELS.items():
            real, unreach, n_unreach, vendored = in_tree(root, name, model, adapters, (upstreams or {}).get(name))
            gen = scaffold_lines(name, model, Path(tmp), adapters)
            hand = {c: max(real[c] - gen[c] - vendored[c], 0) for c in CLASSES}
            total, hand_total = sum(real.values()), sum(hand.values())
            no_perf = total - real["performance"]
            rows.append({
                "model": name, "shape": model.shape, "in_tree": real, "scaffold": gen, "vendored": vendored,
                "by_hand": hand,
                "unreachable_files": unreach, "unreachable_lines": n_unreach,
                "share": hand_total / total if total else 0.0,
                "share_excluding_performance": (hand_total - hand["performance"]) / no_perf if no_perf else 0.0,
                "largest_class": max((c for c in CLASSES if c != "performance"), key=lambda c: hand[c]),
                "notes": model.notes,
            })
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("vllm_omni", type=Path, help="the unpacked vllm_omni package folder")
    p.add_argument("--no-adapters", action="store_true", help="count the serving adapters on neither side")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--upstream", action="append", default=[], metavar="MODEL=DIR",
                   help="the model's upstream package source (qwen3_tts=/tmp/x/qwen_tts): copied lines are vendored")
    args = p.parse_args(argv)
    upstreams = {k: Path(v) for k, _, v in (u.partition("=") for u in args.upstream)}
    rows = measure(args.vllm_omni, adapters=not args.no_adapters, upstreams=upstreams)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    head = " | ".join(f"{c} (tree / scaffold / vendored / hand)" for c in CLASSES)
    print(f"| model | {head} | by hand | excl. performance | unreachable (left out) |")
    print("|---" * (len(CLASSES) + 4) + "|")
    for r in rows:
        cells = " | ".join(f"{r['in_tree'][c]:,} / {r['scaffold'][c]:,} / {r['vendored'][c]:,} / {r['by_hand'][c]:,}"
                           for c in CLASSES)
        print(f"| {r['model']} | {cells} | {sum(r['by_hand'].values()):,} of {sum(r['in_tree'].values()):,} "
              f"({r['share']:.0%}) | {r['share_excluding_performance']:.0%} (largest: {r['largest_class']}) | "
              f"{r['unreachable_lines']:,} lines in {len(r['unreachable_files'])} files |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
