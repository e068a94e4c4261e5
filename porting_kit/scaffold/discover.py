"""Ports the kit did not generate: the facts a scaffold manifest records, read from the files themselves.

``porting-kit validate DIR --framework vllm-omni`` on a hand-written port or an in-tree model
has no ``.porting-kit/scaffold-*.json``. :func:`discover_vllm_omni` finds what the manifest would
say in a vLLM-Omni tree (the folder holding ``vllm_omni/``, the ``vllm_omni`` package, or one
model folder ``vllm_omni/model_executor/models/<name>``):

* the model folder and its ``pipeline.py`` (``PipelineConfig(model_type=..., stages=...)``);
* its deploy YAML (``default_deploy_config_name``, else ``deploy/<model_type>.yaml``);
* its request adapter (the ``@register_tts_adapter`` class in ``entrypoints/openai/tts_adapters``
  whose ``stage_keys`` name the entry stage);
* its stage input processors (the module the pipeline's ``*_func`` strings name).

A model folder is a TTS model here when an adapter serves its entry stage. Facts only: the
validate tiers judge. Manifests made here carry ``"mode": "found"`` and no config facts (there
is no config.json; stop ids are compared between the files).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from porting_kit.errors import InputError

MODELS = "vllm_omni/model_executor/models"
ADAPTERS = "vllm_omni/entrypoints/openai/tts_adapters"
PROCESSORS = "vllm_omni.model_executor.stage_input_processors"


def tree_root(path: Path) -> tuple[Path, str | None]:
    """``(the folder holding vllm_omni/, the model folder's name or None)`` for ``path``.

    Raises
    ------
    InputError
        ``path`` is in no vLLM-Omni tree.
    """
    path = path.resolve()
    if (path / MODELS).is_dir():
        return path, None
    if path.name == "vllm_omni" and (path / "model_executor" / "models").is_dir():
        return path.parent, None
    if path.parent.name == "models" and (path / "pipeline.py").is_file():
        root = path.parents[3] if len(path.parents) > 3 else None
        if root is not None and (root / MODELS / path.name).resolve() == path:
            return root, path.name
    raise InputError(f"{path} is not a vLLM-Omni tree: give the folder holding vllm_omni/, the vllm_omni "
                     "package, or a model folder vllm_omni/model_executor/models/<name> with a pipeline.py")


def _const(node: ast.AST | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None


def _name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _strings(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` assignments (``_PROC = "vllm_omni...."``)."""
    out = {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = n.value.value
    return out


def _pipelines(tree: ast.Module) -> list[dict[str, Any]]:
    """Every ``NAME = PipelineConfig(...)`` of a pipeline.py (a file may hold variants): const name,
    model_type, deploy name, arch and its stages' literal keywords (``stages=`` through names)."""
    assigns = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
               for t in n.targets if isinstance(t, ast.Name)}

    def resolve(node: ast.AST) -> ast.AST:
        return assigns.get(node.id, node) if isinstance(node, ast.Name) else node

    out = []
    for n in tree.body:
        if not (isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and _name(n.value) == "PipelineConfig"):
            continue
        kws = {k.arg: k.value for k in n.value.keywords if k.arg}
        stages = []
        seq = resolve(kws["stages"]) if "stages" in kws else None
        for elt in getattr(seq, "elts", []):
            call = resolve(elt)
            if isinstance(call, ast.Call) and _name(call) == "StagePipelineConfig":
                stages.append({k.arg: _const(k.value) for k in call.keywords if k.arg})
        target = n.targets[0]
        out.append({"const_name": target.id if isinstance(target, ast.Name) else None,
                    "model_type": _const(kws.get("model_type")),
                    "deploy_name": _const(kws.get("default_deploy_config_name")),
                    "arch": _const(kws.get("model_arch")), "stages": stages})
    return out


def adapters_by_stage(root: Path) -> dict[str, str]:
    """Stage key (or ``arch:<model_arch>``) -> the adapter file (relative to ``root``) whose registered
    class serves it (``stage_keys``, ``model_archs``: vLLM-Omni's ``detect_tts_model_type`` matches
    either)."""
    out: dict[str, str] = {}
    for path in sorted((root / ADAPTERS).glob("*.py")):
        tree = _parse(path)
        if tree is None:
            continue
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            if not any("register_tts_adapter" in ast.unparse(d) for d in cls.decorator_list):
                continue
            for node in cls.body:
                attr = next((t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)), None)
                if isinstance(node, ast.Assign) and attr in ("stage_keys", "model_archs"):
                    prefix = "" if attr == "stage_keys" else "arch:"
                    for c in ast.walk(node.value):
                        if isinstance(c, ast.Constant) and isinstance(c.value, str):
                            out.setdefault(prefix + c.value, path.relative_to(root).as_posix())
    return out


def _processor_modules(pipeline_text: str, strings: dict[str, str]) -> set[str]:
    """The stage-input-processor modules a pipeline.py names (literally or through a ``_PROC`` string)."""
    mods = set(re.findall(rf"{re.escape(PROCESSORS)}\.(\w+)\.\w+", pipeline_text))
    mods |= {v.rsplit(".", 1)[-1] for v in strings.values() if v.startswith(PROCESSORS + ".")}
    return mods


def _manifest(root: Path, folder: Path, tree: ast.Module, facts: dict[str, Any], adapters: dict[str, str],
              model_type: str | None, explicit: bool) -> dict[str, Any] | None:
    """The manifest of one pipeline of ``folder``, or None (no stages, another model type, or not TTS)."""
    if not facts["stages"] or not all(isinstance(s.get("stage_id"), int) for s in facts["stages"]):
        return None
    pipe_path = folder / "pipeline.py"
    m = facts["model_type"] or folder.name
    if model_type is not None and model_type not in (m, folder.name):
        return None
    first = next((s for s in facts["stages"] if not s.get("input_sources")), facts["stages"][0])
    entry = first.get("model_stage")
    arch = first.get("model_arch") or facts["arch"]
    by_stage = adapters.get(entry) if isinstance(entry, str) else None
    adapter = by_stage or (adapters.get(f"arch:{arch}") if isinstance(arch, str) else None)
    if adapter is None and not explicit:
        return None  # not served by /v1/audio/speech: not a TTS model folder

    def rel(p: Path) -> str:
        return p.relative_to(root).as_posix()

    files: dict[str, str] = {f"pipeline:{rel(pipe_path)}": rel(pipe_path)}
    for py in sorted(folder.rglob("*.py")):
        if py != pipe_path:
            kind = "init" if py.name == "__init__.py" and py.parent == folder else "model"
            files[f"{kind}:{rel(py)}"] = rel(py)
    deploy = root / "vllm_omni" / "deploy" / (facts["deploy_name"] or f"{m}.yaml")
    files[f"deploy:{rel(deploy)}"] = rel(deploy)  # a missing one is the static tier's finding
    if adapter is not None:
        files[f"adapter:{adapter}"] = adapter
    text = pipe_path.read_text(encoding="utf-8", errors="replace")
    for mod in sorted(_processor_modules(text, _strings(tree))):
        proc = root / "vllm_omni" / "model_executor" / "stage_input_processors" / f"{mod}.py"
        if proc.is_file():
            files[f"processor:{rel(proc)}"] = rel(proc)
    return {"schema": "porting-kit/scaffold/1", "framework": "vllm-omni", "mode": "found",
            "shape": "two-stage" if len(facts["stages"]) > 1 else "single-stage-ar",
            "model_type": m, "folder": folder.name, "arch": facts["arch"],
            "stage_ids": [s["stage_id"] for s in facts["stages"]], "entry_stage": entry,
            "const_name": facts["const_name"], "files": files, "facts": {}, "fact_sources": {},
            "adapter_matched_by": "stage_keys" if by_stage else "model_archs" if adapter else None}


def discover_vllm_omni(path: str | Path, model_type: str | None = None) -> tuple[Path, list[dict[str, Any]]]:
    """``(tree root, manifests)`` of the TTS model folders of a vLLM-Omni tree (or of one folder).

    Parameters
    ----------
    path : str or Path
        The folder holding ``vllm_omni/``, the ``vllm_omni`` package, or one model folder.
    model_type : str, optional
        Only the model folder of this name (or whose pipeline has this ``model_type``).

    Returns
    -------
    root : Path
        The folder holding ``vllm_omni/`` (manifest paths are relative to it).
    manifests : list of dict
        One per TTS model folder, shaped like a scaffold manifest (``framework``, ``shape``,
        ``model_type``, ``stage_ids``, ``entry_stage``, ``const_name``, ``arch``, ``files``
        keyed ``kind:path``), ``"mode": "found"``.

    Raises
    ------
    InputError
        Not a vLLM-Omni tree, or no TTS model folder (with ``model_type``: none of that name).
    """
    root, only = tree_root(Path(path).expanduser())
    adapters = adapters_by_stage(root)
    folders = [root / MODELS / only] if only else sorted(p.parent for p in (root / MODELS).glob("*/pipeline.py"))
    manifests = []
    for folder in folders:
        pipe_path = folder / "pipeline.py"
        tree = _parse(pipe_path)
        for facts in _pipelines(tree) if tree is not None else []:
            manifest = _manifest(root, folder, tree, facts, adapters, model_type, explicit=bool(only or model_type))
            if manifest is not None:
                manifests.append(manifest)
    if not manifests:
        what = f"no model folder {model_type!r}" if model_type else "no TTS model folder (a pipeline.py whose " \
            "entry stage a @register_tts_adapter class serves)"
        raise InputError(f"{path}: {what} in the vLLM-Omni tree at {root}")
    return root, manifests
