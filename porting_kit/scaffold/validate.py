"""Validation of a scaffold or a deploy YAML, tier by tier (``porting-kit validate PATH [--tier ...]``).

Every tier code is built here; each tier is a finding family with its ``.ok``
on pass and one ``.skipped`` finding (with the reason) when it cannot run:

===============  =====================  ==================================================
tier             family                 what it checks
===============  =====================  ==================================================
``static``       ``scaffold.*``         each file against the framework's schema (below)
``consistency``  ``consistency.*``      the files agree with each other and the config
``run``          ``run.*``              the pipeline driven end to end (:func:`run_tier`)
``gpu``          ``gpu.*``              serving dtype, load, speed on CUDA (:func:`gpu_tier`)
===============  =====================  ==================================================

:func:`validate` is the one library call (CLI, JSON, notebooks). PATH may be a
single deploy YAML: static + consistency, paired with the ``pipeline.py`` of the
same vLLM-Omni tree that names it (``pipeline:`` key or
``default_deploy_config_name``), with its ``base_config`` chain followed; a side
config kept in ``deploy/`` (no ``stages:``, no deploy key) is skipped as lint skips it.

Consistency codes (facts read by :mod:`porting_kit.scaffold.crossfile`; each
finding names both files and lines):

==================================  =====================================================
code                                meaning
==================================  =====================================================
``consistency.handoff_shape``       codes per frame: stage 0 emits != the stage-input
                                    processor accepts != stage 1 un-flattens
``consistency.stop_ids``            pipeline stop ids miss the config.json (or
                                    generation_config.json) EOS, or disagree with the
                                    model file's ``STOP_TOKEN_IDS`` / the deploy's
``consistency.field_dropped``       a request field the adapter reads (ref_text, ref_audio,
                                    voice/speaker, language) is not forwarded, or no
                                    file of the entry stage reads its key; or the config
                                    declares speaker conditioning and ref_audio is never
                                    forwarded (warn for prompt codes only)
``consistency.key_mismatch``        a payload key (``meta.left_context_size``), connector
                                    name, stage edge (``to_stage_N``), connector ``extra``
                                    chunk key or SGLang factory name written under one
                                    name and read under another
``consistency.head_width``          a per-codebook head of the stage-0 model is not as wide
                                    as the codec vocabulary (``codebook_size``)
``consistency.ok``                  none of these
==================================  =====================================================

The static tier has two layers, both reported as ``scaffold.*`` findings:

1. **Strict checks of porting-kit's own**, with the allowed keys taken from the
   framework's real dataclasses / pydantic models (or their stored field lists
   when the framework is not importable). vLLM-Omni's own ``load_deploy_config``
   is lenient — unknown stage keys land in ``engine_extras`` and topology keys
   pass silently — so these checks are what catches them:

   ==================================  =====================================================
   code                                meaning
   ==================================  =====================================================
   ``scaffold.unknown_deploy_key``     a deploy/override key no schema field matches
   ``scaffold.topology_key_in_deploy`` a topology key (execution_type, model_stage, next,
                                       wait_for ...) in the deploy / override YAML
   ``scaffold.stage_id_mismatch``      deploy stage ids != pipeline stage ids
   ``scaffold.adapter_missing_stage_keys``  adapter without ``stage_keys`` covering the
                                       pipeline's entry ``model_stage``
   ``scaffold.adapter_name_mismatch``  adapter ``name`` != model type
   ``scaffold.adapter_unforwarded_value``  ``build()`` reads a value it never uses
   ``scaffold.max_num_seqs_unexplained``   ``max_num_seqs`` < 4 without a comment (warn)
   ``scaffold.async_chunk_mismatch``   ``async_chunk: true`` on a single-stage pipeline (warn)
   ``scaffold.pipeline_key_in_deploy`` another pipeline-only stage field or legacy stage
                                       metadata (scheduler_cls, final_output ...) (warn)
   ``scaffold.processor_missing``      a stage-input processor path that names no function
   ``scaffold.registration_missing``   (``--into`` trees) a registration line is absent
   ``scaffold.test_marker_missing``    a generated test without CI tier + hardware marker
   ``scaffold.unknown_stage_override`` (SGLang-Omni) override for a stage config.py lacks
   ``scaffold.unparsable``             a generated file that does not parse
   ==================================  =====================================================

2. **The real framework** when importable: the adapters run it and return
   facts (:func:`porting_kit.adapters.vllm_omni.real_loader.real_load`,
   :func:`porting_kit.adapters.sglang_omni.real_load`); the codes
   (``scaffold.pipeline_invalid``, ``deploy_invalid``, ``merge_failed``,
   ``import_failed``, ``adapter_not_detected``, ``adapter_build_failed``,
   ``adapter_drops_value``, ``sglang_invalid``, ``sglang_override_rejected``,
   ``process_plan_failed``) are built here.

A ``scaffold.tier`` finding says which tier ran: ``pass`` for the real
framework, ``skip`` (with the reason) when only the stored schema was used.

The GPU tier (:func:`gpu_tier`, at the end of this module): the port served on CUDA
through porting-kit's engine-contract driver (not a vLLM engine):

================================  =====================================================
code                              meaning
================================  =====================================================
``gpu.ok``                        serving-dtype parity (bf16), engine contract and CUDA
                                  graph ran clean; speed figures in the evidence
``gpu.skipped``                   no CUDA device (or no torch): the reason
``gpu.serving_dtype_failed``      a fail/warn of config/parity/rope/norm/dtype in bf16
``gpu.engine_contract_failed``    a fail/warn of rng/lifecycle with the model on CUDA
``gpu.cudagraph_failed``          a fail/warn of the cudagraph family
================================  =====================================================
"""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path
from typing import Any

from porting_kit.adapters.vllm_omni.deploy_keys import MIN_MAX_NUM_SEQS
from porting_kit.devices import cuda_missing
from porting_kit.errors import InputError
from porting_kit.fsutil import MAX_DEPLOY_YAML_BYTES, read_input_text
from porting_kit.report.findings import Finding, Report, Where

TIER_MARKERS = ("core_model", "advanced_model", "full_model")
HARDWARE_MARKERS = ("cpu", "hardware_test", "hardware_marks", "gpu", "cuda")
#: What every scaffold.tier finding says about the tier --static never runs.
GPU_TIER_NOTE = "the GPU tier (serving the model on CUDA) is not part of --static"


def _f(code: str, status: str, message: str, file: str | None = None, hint: str = "", **evidence) -> Finding:
    return Finding("scaffold", code, status, message,
                   {k: v for k, v in evidence.items() if v is not None}, Where(candidate=file), hint)


# -- reading ---------------------------------------------------------------------------------
def load_manifests(root: Path) -> list[dict[str, Any]]:
    """The ``.porting-kit/scaffold-*.json`` manifests under ``root``."""
    from porting_kit.scaffold.generate import MANIFEST_DIR

    if not root.is_dir():
        raise InputError(f"{root} is not a directory (pass the folder given to scaffold --out/--into)")
    paths = sorted((root / MANIFEST_DIR).glob("scaffold-*.json"))
    if not paths:
        raise InputError(f"{root} has no {MANIFEST_DIR}/scaffold-*.json: not a porting-kit scaffold "
                         "(generate one with porting-kit scaffold, or validate a port the kit did not write "
                         "with --framework vllm-omni)")
    out = []
    for p in paths:
        try:
            out.append(json.loads(read_input_text(p)))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"cannot read manifest {p}: {exc}") from None
    return out


def _yaml_with_lines(path: Path):
    """Round-trip load (keeps line numbers and comments) or raise ValueError."""
    from porting_kit.scaffold.crossfile import load_yaml_rt

    try:
        return load_yaml_rt(path)
    except (FileNotFoundError, InputError):
        raise
    except Exception as exc:  # noqa: BLE001 - ruamel raises many types
        raise ValueError(str(exc).splitlines()[0]) from None


def _line(mapping, key) -> int | None:
    try:
        return mapping.lc.key(key)[0] + 1
    except Exception:  # noqa: BLE001
        return None


def _kw_const(call: ast.Call, name: str):
    """The literal value of keyword ``name``; ``...`` when present but not a literal
    (an f-string path, a name); ``None`` when absent."""
    for kw in call.keywords:
        if kw.arg == name:
            try:
                return ast.literal_eval(kw.value)
            except ValueError:
                return ...
    return None


def _calls(tree: ast.AST, func_name: str) -> list[ast.Call]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name == func_name:
                out.append(node)
    return out


def _parse_py(root: Path, rel: str, findings: list[Finding]) -> ast.Module | None:
    try:
        return ast.parse(read_input_text(root / rel), filename=rel)
    except FileNotFoundError:
        findings.append(_f("scaffold.unparsable", "fail", f"{rel} is missing", rel))
    except SyntaxError as exc:
        findings.append(_f("scaffold.unparsable", "fail", f"{rel}:{exc.lineno}: does not parse ({exc.msg})", rel,
                           line=exc.lineno))
    return None


# -- vLLM-Omni strict checks -----------------------------------------------------------------
def pipeline_stages(tree: ast.Module) -> list[dict[str, Any]]:
    """``[{stage_id, model_stage, input_sources, ...}]`` read from ``StagePipelineConfig(...)`` calls."""
    out = []
    for call in _calls(tree, "StagePipelineConfig"):
        out.append({kw.arg: _kw_const(call, kw.arg) for kw in call.keywords if kw.arg})
    return out


#: KeyProblem kind (adapters/vllm_omni/deploy_keys.py) -> (code, status, hint); lint's PKY1xx agree.
_KEY_CODES = {
    "topology": ("scaffold.topology_key_in_deploy", "fail", "Move it to the PipelineConfig / StagePipelineConfig "
                 "in pipeline.py and remove it here."),
    "pipeline_only": ("scaffold.pipeline_key_in_deploy", "warn", "Remove it; the StagePipelineConfig in "
                      "pipeline.py decides it."),
    "unknown": ("scaffold.unknown_deploy_key", "fail", "Fix the spelling against vllm_omni/config/stage_config.py "
                "(DeployConfig / StageDeployConfig), or put a genuine pass-through engine arg under engine_extras:."),
    "serial_without_reason": ("scaffold.max_num_seqs_unexplained", "warn",
                              "Say why in a comment (e.g. upstream process-wide state) or use >= 4."),
    "shape": ("scaffold.unparsable", "fail", "Write stages: as a list of mappings, each with a stage_id."),
}


def _key_message(p, rel: str, version: str) -> str:
    at = f"{rel}:{p.line}" if p.line else rel
    stage = f"stage {p.stage_id} " if p.stage_id is not None else ""
    if p.kind == "topology":
        return f"{at}: {stage}sets '{p.key}' ({p.where}), pipeline topology; it belongs in pipeline.py, and the " \
               "loader would silently ignore it here"
    if p.kind == "pipeline_only":
        return f"{at}: {stage}sets '{p.key}' ({p.where}), a pipeline-only field or legacy stage metadata; " \
               f"vLLM-Omni {version} takes it from pipeline.py"
    if p.kind == "unknown":
        return f"{at}: '{p.key}' is not a {p.where} key of the vLLM-Omni {version} deploy schema (the loader " \
               "would drop it or bury it in engine_extras)"
    if p.kind == "serial_without_reason":
        return f"{at}: max_num_seqs {p.value} < {MIN_MAX_NUM_SEQS} without a comment giving the reason"
    return f"{at}: every {p.where} needs a stage_id, and stages must be a list"


def deploy_key_findings(problems, rel: str, version: str) -> list[Finding]:
    """``scaffold.*`` findings from the deploy-key facts of
    :func:`porting_kit.adapters.vllm_omni.deploy_keys.deploy_key_problems` (one per fact;
    same severity as lint's PKY1xx: fail for topology / unknown / shape, warn otherwise)."""
    out = []
    for p in problems:
        code, status, hint = _KEY_CODES[p.kind]
        out.append(_f(code, status, _key_message(p, rel, version), rel, hint, key=p.key, where=p.where,
                      stage_id=p.stage_id, line=p.line))
    return out


def check_deploy_yaml(root: Path, rel: str, schema, pipeline_ids: list[int] | None,
                      single_stage: bool) -> list[Finding]:
    """Strict checks of a vLLM-Omni deploy YAML (``schema``: a
    :class:`~porting_kit.adapters.vllm_omni.schema.DeploySchema`).

    The key checks are lint's (PKY1xx) facts with the same severities; with
    ``pipeline_ids`` the deploy stage ids must match pipeline.py's, and a
    ``single_stage`` pipeline must not leave ``async_chunk`` on.
    """
    from porting_kit.adapters.vllm_omni.deploy_keys import deploy_key_problems

    try:
        text = read_input_text(root / rel, max_bytes=MAX_DEPLOY_YAML_BYTES, what="deploy YAML")
        doc = _yaml_with_lines(root / rel)
    except FileNotFoundError:
        return [_f("scaffold.unparsable", "fail", f"{rel} is missing", rel)]
    except ValueError as exc:
        return [_f("scaffold.unparsable", "fail", f"{rel} is not valid YAML: {exc}", rel)]
    if not isinstance(doc, dict):
        return [_f("scaffold.unparsable", "fail", f"{rel} must be a mapping with a stages: list", rel)]
    out = deploy_key_findings(deploy_key_problems(doc, schema, text.splitlines()), rel, schema.version)
    from porting_kit.scaffold import crossfile as xf

    try:  # the stage ids with the base_config chain followed: the single-YAML path's reader
        deploy_ids = xf.resolve_deploy(root / rel).stage_ids
    except ValueError as exc:
        return out + [_f("scaffold.unparsable", "fail", f"{rel}: {exc}", rel,
                         "Fix the YAML (and its base_config chain).")]
    if single_stage and doc.get("async_chunk", True) is True:
        out.append(_f("scaffold.async_chunk_mismatch", "warn",
                      f"{rel}: async_chunk is on (explicitly or by default) for a single-stage pipeline; "
                      "merge_pipeline_deploy turns it off", rel, "Write async_chunk: false."))
    if pipeline_ids is not None and sorted(deploy_ids) != sorted(pipeline_ids):
        out.append(_f("scaffold.stage_id_mismatch", "fail",
                      f"{rel}: deploy stage ids {sorted(deploy_ids)} != pipeline stage ids {sorted(pipeline_ids)}",
                      rel, "Give each pipeline stage exactly one deploy entry with the same stage_id.",
                      deploy_ids=",".join(map(str, sorted(deploy_ids))),
                      pipeline_ids=",".join(map(str, sorted(pipeline_ids)))))
    return out


#: vLLM-Omni's abstract adapter bases: a subclass of only these must define build() itself.
_ABSTRACT_ADAPTERS = frozenset({"TTSModelAdapter", "ARTTSAdapter", "DiffusionTTSAdapter"})


def check_adapter(root: Path, rel: str, model_type: str, entry_stage: str | None) -> list[Finding]:
    """Adapter contract: registered class with ``name``, ``stage_keys`` (covering the
    entry stage), ``validate`` and async ``build`` that forwards what it reads."""
    out: list[Finding] = []
    tree = _parse_py(root, rel, out)
    if tree is None:
        return out
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)
               and any("register_tts_adapter" in ast.unparse(d) for d in n.decorator_list)]
    if not classes:
        return [_f("scaffold.adapter_missing_stage_keys", "fail", f"{rel}: no @register_tts_adapter class", rel)]
    def keys_of(c: ast.ClassDef) -> set[str]:
        return {k.value for n in c.body if isinstance(n, ast.Assign)
                and any(getattr(t, "id", "") == "stage_keys" for t in n.targets)
                for k in ast.walk(n.value) if isinstance(k, ast.Constant) and isinstance(k.value, str)}

    cls = next((c for c in classes if entry_stage in keys_of(c)), classes[0])  # a file may register several
    attrs: dict[str, Any] = {}
    for node in cls.body:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    attrs[t.id] = node.value
    keys_node = attrs.get("stage_keys")
    stage_keys: set[str] = set()
    if keys_node is not None:
        stage_keys = {c.value for c in ast.walk(keys_node) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    if not stage_keys or (entry_stage and entry_stage not in stage_keys):
        what = "declares no stage_keys" if not stage_keys else f"stage_keys {sorted(stage_keys)} lack {entry_stage!r}"
        out.append(_f("scaffold.adapter_missing_stage_keys", "fail",
                      f"{rel}:{cls.lineno}: {cls.name} {what}: /v1/audio/speech cannot find the model's stage",
                      rel, f"Add stage_keys = frozenset({{{entry_stage!r}}}).", line=cls.lineno))
    name_node = attrs.get("name")
    name = name_node.value if isinstance(name_node, ast.Constant) else None
    if name != model_type:
        out.append(_f("scaffold.adapter_name_mismatch", "fail",
                      f"{rel}:{cls.lineno}: adapter name {name!r} != model type {model_type!r}", rel, line=cls.lineno))
    build = next((n for n in cls.body if isinstance(n, ast.AsyncFunctionDef) and n.name == "build"), None)
    inherited = [ast.unparse(b) for b in cls.bases if ast.unparse(b).rsplit(".", 1)[-1] not in _ABSTRACT_ADAPTERS]
    if build is None and inherited:
        return out  # build() comes from a concrete adapter it subclasses (judged there)
    if build is None:
        out.append(_f("scaffold.adapter_build_failed", "fail", f"{rel}: {cls.name} has no async build()", rel))
        return out
    assigned = {t.id: t.lineno for n in ast.walk(build) if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name)}
    used = {n.id for n in ast.walk(build) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for var, line in assigned.items():
        if var not in used:
            out.append(_f("scaffold.adapter_unforwarded_value", "fail",
                          f"{rel}:{line}: build() extracts '{var}' and never forwards it", rel,
                          "Forward it into additional_information or drop the extraction.", line=line))
    return out


def check_processors(root: Path, manifest: dict[str, Any], tree: ast.Module) -> list[Finding]:
    """Every ``vllm_omni.model_executor.stage_input_processors.<m>.<func>`` named in pipeline.py exists."""
    procs = [v for k, v in manifest["files"].items() if k.startswith("processor:")]
    m = Path(procs[0]).stem if procs else manifest["model_type"]  # a port the kit did not write names its own
    prefix = f"vllm_omni.model_executor.stage_input_processors.{m}"
    rel = f"vllm_omni/model_executor/stage_input_processors/{m}.py"
    text = ast.unparse(tree)
    import re

    names = set(re.findall(rf"{re.escape(prefix)}\.(\w+)", text))
    names |= set(re.findall(r"\{_PROC\}\.(\w+)", text))
    if not names:
        return []
    out: list[Finding] = []
    proc_tree = _parse_py(root, rel, out)
    if proc_tree is None:
        return out
    defined = {n.name for n in proc_tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for name in sorted(names - defined):
        out.append(_f("scaffold.processor_missing", "fail",
                      f"pipeline.py names {prefix}.{name}, which {rel} does not define", rel, key=name))
    return out


def check_registrations(root: Path, manifest: dict[str, Any]) -> list[Finding]:
    """(``--into`` trees) the pipeline registry, model registry and adapter import block name the model."""
    m, const, arch = manifest["model_type"], manifest["const_name"], manifest["arch"]
    checks = [
        ("vllm_omni/config/pipeline_registry.py", [f'"{m}": {const}', f"models.{m}.pipeline import {const}"]),
        ("vllm_omni/model_executor/models/registry.py", [f'"{arch}": (']),
        ("vllm_omni/entrypoints/openai/tts_adapters/__init__.py", [f"    {m},"]),
    ]
    out = []
    for rel, needles in checks:
        path = root / rel
        text = read_input_text(path) if path.exists() else ""
        for needle in needles:
            if needle not in text:
                out.append(_f("scaffold.registration_missing", "fail", f"{rel} lacks `{needle.strip()}`", rel,
                              "Rerun porting-kit scaffold --into to insert it.", needle=needle.strip()))
    return out


def check_test_markers(root: Path, rel: str) -> list[Finding]:
    """Each test function (or the module's ``pytestmark``) has a CI tier and a hardware marker."""
    out: list[Finding] = []
    tree = _parse_py(root, rel, out)
    if tree is None:
        return out
    module_marks = " ".join(ast.unparse(n) for n in tree.body
                            if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets))
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_"):
            marks = module_marks + " ".join(ast.unparse(d) for d in fn.decorator_list)
            tier = any(t in marks for t in TIER_MARKERS)
            hw = any(h in marks for h in HARDWARE_MARKERS)
            if not (tier and hw):
                missing = " and ".join(x for x, ok in (("CI tier", tier), ("hardware", hw)) if not ok)
                out.append(_f("scaffold.test_marker_missing", "fail",
                              f"{rel}:{fn.lineno}: {fn.name} has no {missing} marker", rel, line=fn.lineno))
    return out


#: LoaderProblem step (adapters/vllm_omni/real_loader.py) -> (code, message prefix, hint).
_REAL_STEP_CODES = {
    "pipeline": ("scaffold.pipeline_invalid", "the real PipelineConfig rejects it", "Fix the topology in pipeline.py."),
    "deploy": ("scaffold.deploy_invalid", "load_deploy_config fails", "Fix the deploy YAML."),
    "merge": ("scaffold.merge_failed", "merge_pipeline_deploy fails", "Make the deploy stages match pipeline.py."),
    "import": ("scaffold.import_failed", "does not import against vLLM-Omni", "Fix the import."),
    "resolve": ("scaffold.pipeline_invalid", "the pipeline registry does not resolve it",
                "Register the pipeline under its model_type."),
    "adapter_import": ("scaffold.adapter_build_failed", "does not import", "Fix the adapter's import."),
    "detect": ("scaffold.adapter_not_detected", "/v1/audio/speech would not route to this adapter",
               "Put the entry stage's model_stage in the adapter's stage_keys."),
    "validate": ("scaffold.adapter_build_failed", "adapter.validate() rejects a plain request",
                 "Accept a request with text, seed, max_new_tokens and language."),
    "validate_empty": ("scaffold.adapter_build_failed", "adapter.validate() accepts an empty input",
                       "Reject an input that is only whitespace."),
    "build": ("scaffold.adapter_build_failed", "adapter.build() raises", "Fix build()."),
    "build_type": ("scaffold.adapter_build_failed", "adapter.build() does not return a PreparedRequest",
                   "Return a PreparedRequest."),
    "forward": ("scaffold.adapter_drops_value", "adapter.build() does not forward",
                "Forward every value build() reads."),
}


def vllm_real_findings(load) -> list[Finding]:
    """``scaffold.*`` fail findings from the real vLLM-Omni loader's facts
    (:class:`~porting_kit.adapters.vllm_omni.real_loader.RealLoad`); none when it loaded everything."""
    out = []
    for p in load.problems:
        code, what, hint = _REAL_STEP_CODES[p.step]
        out.append(_f(code, "fail", f"{p.file}: {what}: {p.said}", p.file, hint, step=p.step,
                      version=load.version, **p.details))
    return out


#: SglangLoad failed_step -> (code, message prefix).
_SGLANG_STEP_CODES = {
    "config": ("scaffold.sglang_invalid", "SGLang-Omni rejects the config"),
    "config_cls": ("scaffold.sglang_override_rejected", "the overrides name another config class"),
    "overrides": ("scaffold.sglang_override_rejected", "SGLang-Omni rejects the overrides"),
    "process_plan": ("scaffold.process_plan_failed", "compile_logical_processes fails"),
}


def sglang_real_findings(load) -> list[Finding]:
    """``scaffold.*`` fail findings from the real SGLang-Omni's facts
    (:class:`~porting_kit.adapters.sglang_omni.SglangLoad`); none when everything ran."""
    if load.ok:
        return []
    code, what = _SGLANG_STEP_CODES[load.failed_step]
    return [_f(code, "fail", f"{load.file}: {what}: {load.said}", load.file, step=load.failed_step,
               version=load.version)]


def validate_vllm_omni(root: Path, manifest: dict[str, Any], prefer_real: bool = True) -> list[Finding]:
    """Strict checks + (when importable) the real vLLM-Omni loading path."""
    from porting_kit.adapters.vllm_omni import schema as vo

    files = {k.split(":", 1)[0]: v for k, v in manifest["files"].items() if k.split(":", 1)[0] != "test"}
    tests = [v for k, v in manifest["files"].items() if k.startswith("test:")]
    real, why = vo.real_available() if prefer_real else (False, "real tier not requested")
    schema = vo.schema_from_package() if real else vo.load_schema()
    out: list[Finding] = []
    tree = _parse_py(root, files["pipeline"], out)
    stages = pipeline_stages(tree) if tree is not None else []
    ids = [s.get("stage_id") for s in stages] if stages else None
    entry = next((s.get("model_stage") for s in stages if not s.get("input_sources")), manifest.get("entry_stage"))
    if manifest.get("mode") == "found":  # a pipeline.py may hold several pipelines: this one's stages
        ids, entry = manifest["stage_ids"], manifest["entry_stage"]
        stages = ids
    out += check_deploy_yaml(root, files["deploy"], schema, ids, single_stage=len(stages) <= 1)
    if "adapter" in files:
        out += check_adapter(root, files["adapter"], manifest["model_type"], entry)
    if tree is not None:
        out += check_processors(root, manifest, tree)
    for rel in tests:
        out += check_test_markers(root, rel)
    for rel in [v for k, v in manifest["files"].items() if v.endswith(".py")]:
        if rel not in (files["pipeline"], files.get("adapter")) and rel not in tests:
            _parse_py(root, rel, out)
    if manifest.get("mode") == "into":
        out += check_registrations(root, manifest)
    strict_failed = any(f.status == "fail" for f in out)
    if real:
        out.insert(0, _f("scaffold.tier", "pass", f"tier: real vLLM-Omni {why} (PipelineConfig, load_deploy_config, "
                         "merge_pipeline_deploy, registries, adapter validate/build) + strict field checks from "
                         f"dataclasses.fields; {GPU_TIER_NOTE}", tier="real", version=why, skipped="gpu"))
        if not strict_failed:
            from porting_kit.adapters.vllm_omni.real_loader import real_load

            out += vllm_real_findings(real_load(root, manifest))
    else:
        out.insert(0, _f("scaffold.tier", "skip", f"tier: stored schema vllm-omni {schema.version} "
                         f"({vo.SCHEMA_FILE.name}); the real framework did not run: {why}; {GPU_TIER_NOTE}",
                         tier="stored", version=schema.version, reason=why, skipped="real,gpu"))
    return out


# -- SGLang-Omni -----------------------------------------------------------------------------
def _is_stage_call(node: ast.AST) -> bool:
    name = None
    if isinstance(node, ast.Call):
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return bool(name) and name.endswith("StageConfig")


def _stage_groups(tree: ast.Module) -> list[tuple[list[dict[str, Any]], bool]]:
    """Each literal list / tuple of ``*StageConfig(...)`` calls (one pipeline's stages) as
    ``(stages, complete)``; ``complete`` is False when the list also holds other
    expressions (a helper call, a starred list), so the names seen are not all the names."""
    groups = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)) and any(_is_stage_call(e) for e in node.elts):
            stages = [{kw.arg: _kw_const(e, kw.arg) for kw in e.keywords if kw.arg}
                      | ({"**": True} if any(kw.arg is None for kw in e.keywords) else {})
                      for e in node.elts if _is_stage_call(e)]
            groups.append((stages, all(_is_stage_call(e) for e in node.elts)))
    return groups


def _sglang_graph_checks(tree: ast.Module, rel: str) -> list[Finding]:
    """Stored-tier version of SGLang-Omni's validate_general (from config.py's AST).

    Judged per literal stage list (a file may define several pipelines); a value
    that is not a literal (a name, an f-string, ``**kwargs``) is not judged, and
    references are checked only when the list holds nothing but stage configs.
    """
    out = []

    def bad(msg):
        out.append(_f("scaffold.sglang_invalid", "fail", f"{rel}: {msg}", rel))

    for stages, complete in _stage_groups(tree):
        names = [s.get("name") for s in stages]
        literal = all(isinstance(n, str) for n in names)
        if literal and len(set(names)) != len(names):
            bad("stage names must be unique")
        for s in stages:
            n = s.get("name")
            if s.get("**") or ... in (s.get("next"), s.get("terminal")):
                continue
            if (s.get("next") is not None) == bool(s.get("terminal")):
                bad(f"stage {n!r} must set exactly one of next / terminal")
            if s.get("wait_for") and s.get("merge_fn") is None:
                bad(f"stage {n!r} has wait_for but no merge_fn")
            refs = []
            for key in ("next", "wait_for", "stream_to"):
                value = s.get(key)
                refs += [value] if isinstance(value, str) else list(value) if isinstance(value, list) else []
            for ref in refs if (literal and complete) else []:
                if ref not in names:
                    bad(f"stage {n!r} references unknown stage {ref!r}")
            if s.get("process") is None and s.get("tp_size") in (None, 1):
                bad(f"stage {n!r} (not TP) must declare process")
    return out


def check_sglang_overrides(overrides: dict, yaml_rel: str, schema: dict[str, Any],
                           stage_names: list) -> list[Finding]:
    """The strict key checks of an SGLang-Omni overrides YAML against its schema.

    Parameters
    ----------
    overrides : dict
        The YAML document (as ``_yaml_with_lines`` reads it: line numbers kept).
    yaml_rel : str
        Its name in messages.
    schema : dict
        SGLang-Omni's field lists (:func:`porting_kit.adapters.sglang_omni.stored_schema`).
    stage_names : list
        The stages its config.py defines (empty: unknown, not checked).

    Returns
    -------
    list of Finding
        ``scaffold.unknown_deploy_key``, ``scaffold.unknown_stage_override``,
        ``scaffold.topology_key_in_deploy`` (all ``fail``).
    """
    out: list[Finding] = []
    allowed_stage = set(schema["stage_fields"]) - set(schema["topology_fields"])
    nested = {"engine": set(schema["engine_fields"]), "factory": set(schema["factory_fields"])}
    for key in overrides:
        if key not in set(schema["pipeline_fields"]) | {"config_cls", "stages", "shared"}:
            out.append(_f("scaffold.unknown_deploy_key", "fail", f"{yaml_rel}:{_line(overrides, key)}: '{key}' is "
                          f"not a PipelineConfig field of SGLang-Omni {schema['version']}", yaml_rel, key=key))
    stages = overrides.get("stages") or {}
    if not isinstance(stages, dict):
        return out + [_f("scaffold.unparsable", "fail", f"{yaml_rel}:{_line(overrides, 'stages')}: stages: must be "
                         "a mapping keyed by stage name", yaml_rel, "Key each override by its stage name.")]
    for stage, body in stages.items():
        line = _line(overrides["stages"], stage)
        if stage_names and stage not in stage_names:
            out.append(_f("scaffold.unknown_stage_override", "fail",
                          f"{yaml_rel}:{line}: stage '{stage}' is not defined in config.py (stages: "
                          f"{', '.join(map(str, stage_names))}); the YAML may only override existing stages",
                          yaml_rel, key=stage, line=line))
        for key, value in (body or {}).items():
            kline = _line(body, key)
            if key in schema["topology_fields"]:
                out.append(_f("scaffold.topology_key_in_deploy", "fail",
                              f"{yaml_rel}:{kline}: stage '{stage}' overrides '{key}', which is topology owned by "
                              "config.py", yaml_rel, "Wire stages in config.py; the YAML only sets placement.",
                              key=key, line=kline))
            elif key not in allowed_stage:
                out.append(_f("scaffold.unknown_deploy_key", "fail",
                              f"{yaml_rel}:{kline}: stage '{stage}' key '{key}' is not a StageConfig field of "
                              f"SGLang-Omni {schema['version']}", yaml_rel, key=key, line=kline))
            elif key in nested and isinstance(value, dict):
                extra_ok = key == "engine"  # engine.* passes other ServerArgs keys through
                for sub in value:
                    if sub not in nested[key] and not extra_ok:
                        out.append(_f("scaffold.unknown_deploy_key", "fail",
                                      f"{yaml_rel}:{_line(value, sub)}: '{key}.{sub}' is not a "
                                      f"{key.capitalize()}Args field", yaml_rel, key=f"{key}.{sub}"))
    return out


def validate_sglang_omni(root: Path, manifest: dict[str, Any], prefer_real: bool = True) -> list[Finding]:
    """Strict override checks + (when importable) SGLang-Omni's own validation and process plan."""
    import yaml

    from porting_kit.adapters import sglang_omni as so

    files = {k.split(":", 1)[0]: v for k, v in manifest["files"].items()}
    real, why = so.real_available() if prefer_real else (False, "real tier not requested")
    schema = so.schema_from_package() if real else so.stored_schema()
    out: list[Finding] = []
    tree = _parse_py(root, files["config"], out)
    _parse_py(root, files["stages"], out)
    stage_names = []
    if tree is not None:
        stage_names = [_kw_const(c, "name") for fn in ("StageConfig", "EngineStageConfig") for c in _calls(tree, fn)]
    yaml_rel = files["overrides"]
    try:
        overrides = _yaml_with_lines(root / yaml_rel)
    except (FileNotFoundError, ValueError) as exc:
        return out + [_f("scaffold.unparsable", "fail", f"{yaml_rel}: {exc}", yaml_rel)]
    if not isinstance(overrides, dict):
        return out + [_f("scaffold.unparsable", "fail", f"{yaml_rel} must be a mapping", yaml_rel)]
    out += check_sglang_overrides(overrides, yaml_rel, schema, stage_names)
    strict_failed = any(f.status == "fail" for f in out)
    if real:
        out.insert(0, _f("scaffold.tier", "pass", f"tier: real SGLang-Omni {why} (PipelineConfig validation, "
                         "stages: overrides through its resolver, compile_logical_processes) + strict field checks; "
                         f"{GPU_TIER_NOTE}", tier="real", version=why, skipped="gpu"))
        if not strict_failed:
            plain = yaml.safe_load(read_input_text(root / yaml_rel, max_bytes=MAX_DEPLOY_YAML_BYTES,
                                                   what="deploy YAML"))
            out += sglang_real_findings(so.real_load(root, manifest, plain))
    else:
        out.insert(0, _f("scaffold.tier", "skip", f"tier: stored schema sglang-omni {schema.get('version')} "
                         f"({so.SCHEMA_FILE.name}); the real framework did not run: {why}; {GPU_TIER_NOTE}",
                         tier="stored", version=schema.get("version"), reason=why, skipped="real,gpu"))
        if tree is not None:
            out += _sglang_graph_checks(tree, files["config"])
    return out


# -- consistency tier (cross-file) -------------------------------------------------------------
def _c(code: str, status: str, message: str, a, b=None, hint: str = "", **evidence) -> Finding:
    """A ``consistency.*`` finding naming both ends (:class:`~porting_kit.scaffold.crossfile.Site`)."""
    ev = {"file": a.file, "line": a.line, **({"other_file": b.file, "other_line": b.line} if b else {}), **evidence}
    return Finding("consistency", code, status, message, {k: v for k, v in ev.items() if v is not None},
                   Where(candidate=str(a), reference=str(b) if b else None), hint)


def _manifest_file(manifest: dict[str, Any], suffix: str) -> str | None:
    return next((v for v in manifest["files"].values() if v.endswith(suffix)), None)


def _tree(root: Path, rel: str | None):
    from porting_kit.scaffold.crossfile import parse

    return parse(root / rel) if rel else None


def check_handoff_shape(root: Path, producer: str, processor: str, consumer: str) -> list[Finding]:
    """``consistency.handoff_shape``: codes per frame emitted by stage 0 vs accepted by the
    stage-input processor vs un-flattened by stage 1 (each read where the code states it)."""
    from porting_kit.scaffold import crossfile as xf

    trees = [_tree(root, rel) for rel in (producer, processor, consumer)]
    if None in trees:
        return []  # unparsable files are the static tier's finding
    emitted = xf.emitted_width(trees[0], producer)
    accepted = xf.accepted_width(trees[1], processor)
    decoded = xf.consumer_width(trees[2], consumer)
    out = []
    if emitted and accepted and emitted.value != accepted.value:
        out.append(_c("consistency.handoff_shape", "fail",
                      f"{emitted.site}: stage 0 emits codec frames of {emitted.value} codes ({emitted.how}) but "
                      f"{accepted.site}: the stage-input processor accepts only (frames, {accepted.value}) "
                      f"({accepted.how}); every chunk would be rejected or mis-split",
                      emitted.site, accepted.site,
                      "Emit every codebook of the frame (e.g. prepend the LM-sampled codebook 0) or make the "
                      "processor expect what stage 0 emits.", emitted=emitted.value, accepted=accepted.value))
    if accepted and decoded and accepted.value != decoded.value:
        out.append(_c("consistency.handoff_shape", "fail",
                      f"{accepted.site}: the stage-input processor passes frames of {accepted.value} codes but "
                      f"{decoded.site}: stage 1 un-flattens {decoded.value} codebooks per frame",
                      accepted.site, decoded.site, "Use one codebook count in both files (config.json's).",
                      accepted=accepted.value, decoded=decoded.value))
    return out


def _key_mismatches(written, reads, what: str) -> list[Finding]:
    """Reads of a key that is written under another name (same last segment, other qualifier)."""
    full = {w.key for w in written}
    prefixes = {k.split(".", 1)[0] for k in full if "." in k}
    read_names = {r.key for r in reads}
    out, seen = [], set()
    for r in reads:
        if r.key in full or r.key in prefixes or r.key in seen:
            continue
        tail = r.key.rsplit(".", 1)[-1]
        for w in written:
            if w.key == r.key or w.key.rsplit(".", 1)[-1] != tail:
                continue
            qualifier = w.key.split(".", 1)[0] if "." in w.key else None
            if "." not in r.key and qualifier in read_names:
                continue  # read nested: info.get("meta").get("left_context_size")
            seen.add(r.key)
            out.append(_c("consistency.key_mismatch", "fail",
                          f"{w.site}: {what} written as '{w.key}' but {r.site}: read as '{r.key}'; the reader "
                          "never sees the value and falls back to its default", w.site, r.site,
                          f"Read '{w.key}' (the flattened payload key) or write '{r.key}'.",
                          written=w.key, read=r.key))
            break
    return out


def check_payload_keys(root: Path, producer: str, processor: str, consumer: str) -> list[Finding]:
    """``consistency.key_mismatch`` along the handoff: producer -> processor, processor -> consumer."""
    from porting_kit.scaffold import crossfile as xf

    trees = [_tree(root, rel) for rel in (producer, processor, consumer)]
    if None in trees:
        return []
    out = _key_mismatches(xf.written_payload_keys(trees[0], producer), xf.read_keys(trees[1], processor),
                          "the stage-0 output")
    out += _key_mismatches(xf.written_payload_keys(trees[1], processor), xf.read_keys(trees[2], consumer),
                           "the stage-1 payload")
    return out


def check_connectors(deploy, deploy_rel: str, pipeline_ids: list[int] | None,
                     processor_reads=()) -> list[Finding]:
    """``consistency.key_mismatch`` for connectors: a stage names an undefined connector, an edge
    to/from a stage that does not exist, an output/input pair naming different connectors, or a
    processor reading a connector ``extra`` key the deploy writes under another name."""
    import difflib

    from porting_kit.scaffold import crossfile as xf

    out: list[Finding] = []
    defined = deploy.connectors
    conn_site = xf.Site(deploy_rel, xf.yaml_line(deploy.doc, "connectors"))
    refs = xf.deploy_stage_connectors(deploy.doc)
    known_ids = set(pipeline_ids) if pipeline_ids is not None else set(deploy.stage_ids)
    by_edge = {(r.stage_id, r.direction, r.edge): r for r in refs}
    for r in refs:
        site = xf.Site(deploy_rel, r.line)
        if defined and r.connector not in defined:
            out.append(_c("consistency.key_mismatch", "fail",
                          f"{site}: stage {r.stage_id} {r.direction}_connectors names connector '{r.connector}' but "
                          f"{conn_site}: connectors defines only {sorted(map(str, defined))}", site, conn_site,
                          "Use the name under connectors:.", key=r.connector))
        prefix = "to_stage_" if r.direction == "output" else "from_stage_"
        other = r.edge[len(prefix):] if r.edge.startswith(prefix) else None
        if other is None or not other.isdigit():
            continue
        if known_ids and int(other) not in known_ids:
            out.append(_c("consistency.key_mismatch", "fail",
                          f"{site}: stage {r.stage_id} has {r.edge} but there is no stage {other} "
                          f"(stages: {sorted(known_ids)})", site, conn_site, "Name an existing stage id.",
                          key=r.edge))
        if r.direction == "output":
            peer = by_edge.get((int(other), "input", f"from_stage_{r.stage_id}"))
            if peer is not None and peer.connector != r.connector:
                peer_site = xf.Site(deploy_rel, peer.line)
                out.append(_c("consistency.key_mismatch", "fail",
                              f"{site}: stage {r.stage_id} sends to stage {other} over '{r.connector}' but "
                              f"{peer_site}: stage {other} receives from stage {r.stage_id} over '{peer.connector}'",
                              site, peer_site, "Name one connector on both ends.", key=r.connector))
    extra_keys: dict[str, Any] = {}
    for name, body in defined.items():
        extra = body.get("extra") if isinstance(body, dict) else None
        if isinstance(extra, dict):
            for k in extra:
                extra_keys.setdefault(str(k), xf.Site(deploy_rel, xf.yaml_line(extra, k)))
    read_keys = {r.key for r in processor_reads}
    for read in processor_reads:
        if read.key in extra_keys or not extra_keys:
            continue
        close = difflib.get_close_matches(read.key, list(extra_keys), n=1, cutoff=0.75)
        if close and close[0] in read_keys:
            continue  # the deploy's key is read too: the other one is a setting of its own, not a misspelling
        if close:
            w = extra_keys[close[0]]
            out.append(_c("consistency.key_mismatch", "fail",
                          f"{w}: the connector's extra sets '{close[0]}' but {read.site}: the processor reads "
                          f"'{read.key}' and falls back to its default", w, read.site,
                          "Use one key name in the deploy YAML and the processor.", written=close[0], read=read.key))
    return out


def check_stop_ids(root: Path, manifest: dict[str, Any], pipeline_rel: str, model_rel: str | None,
                   deploy_rel: str) -> list[Finding]:
    """``consistency.stop_ids``: the pipeline's stop token ids vs the model config / generation
    config EOS, the model file's ``STOP_TOKEN_IDS`` and the deploy's default sampling params."""
    from porting_kit.scaffold import crossfile as xf

    tree = _tree(root, pipeline_rel)
    found = xf.pipeline_stop_ids(tree, pipeline_rel) if tree is not None else None
    if found is None:
        return []
    ids, site = found
    out = []
    facts = manifest.get("facts") or {}
    sources = manifest.get("fact_sources") or {}
    for name, label in (("stop_token_ids", "config.json"), ("generation_eos_token_ids", "generation_config.json")):
        cfg = facts.get(name)
        if name == "generation_eos_token_ids" and facts.get("stop_token_ids") is not None:
            break  # config.json's (codec) EOS wins; generation_config's may be the text EOS
        if cfg and not set(cfg) & set(ids):
            src = xf.Site(sources.get(name, label))
            out.append(_c("consistency.stop_ids", "fail",
                          f"{site}: stage 0 stops on {ids} but {src}: the model's EOS is {cfg}; generation "
                          "would run to max_tokens", site, src, f"Stop on {cfg}.", pipeline=str(ids), config=str(cfg)))
    model_tree = _tree(root, model_rel)
    assigns = [n for n in model_tree.body if isinstance(n, ast.Assign)
               and any(getattr(t, "id", "") == "STOP_TOKEN_IDS" for t in n.targets)] if model_tree is not None else []
    for node in assigns[-1:]:  # the value the module ends with
        try:
            model_ids = ast.literal_eval(node.value)
        except ValueError:
            model_ids = None
        if isinstance(model_ids, (list, tuple)) and set(model_ids) != set(ids):
            msite = xf.Site(model_rel, node.lineno)
            out.append(_c("consistency.stop_ids", "fail",
                          f"{site}: the pipeline stops on {ids} but {msite}: the model ends on {list(model_ids)}",
                          site, msite, "Use one list of stop ids.", pipeline=str(ids), model=str(list(model_ids))))
    try:
        deploy = xf.resolve_deploy(root / deploy_rel)
    except ValueError:
        return out
    stages = deploy.doc.get("stages")
    for st in stages if isinstance(stages, list) else []:
        params = st.get("default_sampling_params") if isinstance(st, dict) else None
        dids = params.get("stop_token_ids") if isinstance(params, dict) else None
        if isinstance(dids, list) and dids and st.get("stage_id") == 0 and not set(dids) & set(ids):
            dsite = xf.Site(deploy_rel, xf.yaml_line(params, "stop_token_ids"))
            out.append(_c("consistency.stop_ids", "fail",
                          f"{dsite}: the deploy stops stage 0 on {list(dids)} but {site}: the pipeline on {ids}",
                          dsite, site, "Stop ids belong in pipeline.py; remove them here or make them agree.",
                          deploy=str(list(dids)), pipeline=str(ids)))
    return out


def check_head_widths(root: Path, manifest: dict[str, Any], model_rel: str | None) -> list[Finding]:
    """``consistency.head_width``: a per-codebook head of the stage-0 model is not as wide as the codec
    vocabulary (``codebook_size`` of the config / the codec's own config): wider heads sample ids the
    codec cannot look up (a text vocabulary taken for the codec's), narrower ones never emit some codes."""
    from porting_kit.scaffold import crossfile as xf

    size = (manifest.get("facts") or {}).get("codebook_size")
    tree = _tree(root, model_rel)
    if not isinstance(size, int) or tree is None:
        return []
    src = xf.Site((manifest.get("fact_sources") or {}).get("codebook_size", "config.json codebook_size"))
    wrong = [w for w in xf.per_codebook_heads(tree, model_rel) if w.value != size]
    if not wrong:
        return []
    w = wrong[0]
    return [_c("consistency.head_width", "fail",
               f"{w.site}: the per-codebook heads are {w.value} wide but {src}: the codec has {size} codes per "
               f"codebook (valid ids 0..{size - 1}); "
               + ("ids above it cannot be decoded" if w.value > size else "some codes can never be sampled"),
               w.site, src, f"Size the per-codebook heads to the codec vocabulary ({size}).",
               head_width=w.value, codebook_size=size, heads=len(wrong))]


def check_conditioning_forwarded(root: Path, manifest: dict[str, Any], adapter_rel: str) -> list[Finding]:
    """``consistency.field_dropped`` for voice cloning: the config declares speaker / reference-audio
    conditioning (manifest ``conditioning``) but the adapter's ``build()`` never forwards ``ref_audio``
    (it refuses it, or drops it). Fail for a declared speaker encoder (the model needs the clip), warn
    for prompt codes (a codec encoder: cloning is possible, not required)."""
    from porting_kit.scaffold import crossfile as xf

    cond = manifest.get("conditioning")
    tree = _tree(root, adapter_rel)
    if not isinstance(cond, dict) or tree is None:
        return []
    forwarded = {f.field for f in xf.adapter_forwarded_fields(tree, adapter_rel) if f.info_key}
    if "ref_audio" in forwarded:
        return []
    build = next((n.lineno for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef) and n.name == "build"),
                 None)
    site, src = xf.Site(adapter_rel, build), xf.Site(f"config.json {cond.get('source')}")
    status = "fail" if cond.get("kind") == "speaker encoder" else "warn"
    return [_c("consistency.field_dropped", status,
               f"{src}: the config declares {cond.get('kind')} conditioning but {site}: build() never forwards "
               "request.ref_audio, so a voice-cloning request cannot reach the model", src, site,
               "Forward ref_audio (and ref_text) into additional_information and read them in the stage model.",
               field="ref_audio", conditioning=cond.get("kind"))]


def check_fields_reach_stage(root: Path, adapter_rel: str, model_rels: list[str]) -> list[Finding]:
    """``consistency.field_dropped``: a request field (ref_text, ref_audio, voice/speaker, language,
    instructions) the adapter's ``build()`` reads either is not forwarded, or is forwarded under
    a key no file of the entry stage reads."""
    from porting_kit.scaffold import crossfile as xf

    tree = _tree(root, adapter_rel)
    models = [(rel, _tree(root, rel)) for rel in model_rels]
    if tree is None or any(m is None for _, m in models) or not models:
        return []
    known = set().union(*(xf.string_constants(m) for _, m in models))
    rel0, tree0 = models[0]
    fwd = next((n.lineno for n in ast.walk(tree0) if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    stage_site = xf.Site(rel0, fwd)
    out = []
    for f in xf.adapter_forwarded_fields(tree, adapter_rel):
        if f.info_key is None:
            out.append(_c("consistency.field_dropped", "fail",
                          f"{f.site}: build() reads request.{f.field} but never stores it in additional_information, "
                          f"so {stage_site}: the stage cannot see it", f.site, stage_site,
                          f"Forward it into additional_information under '{f.field}'.", field=f.field))
        elif f.info_key not in known:
            out.append(_c("consistency.field_dropped", "fail",
                          f"{f.site}: the adapter forwards request.{f.field} as '{f.info_key}' but {stage_site}: "
                          f"the stage never reads '{f.info_key}' ({', '.join(model_rels)}); the request's "
                          f"{f.field} is silently ignored", f.site, stage_site,
                          f"Read '{f.info_key}' from runtime_additional_information in the stage model (or stop "
                          "accepting the field).",
                          field=f.field, key=f.info_key))
    return out


def _sglang_consistency(root: Path, manifest: dict[str, Any]) -> list[Finding]:
    """config.py's dotted factory / merge_fn names vs the functions stages.py defines."""
    from porting_kit.scaffold import crossfile as xf

    files = {k.split(":", 1)[0]: v for k, v in manifest["files"].items()}
    config, stages = _tree(root, files.get("config")), _tree(root, files.get("stages"))
    if config is None or stages is None:
        return []
    defined = {n.name for n in stages.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    out = []
    for node in ast.walk(config):
        if isinstance(node, ast.keyword) and node.arg in ("factory_path", "merge_fn") \
                and isinstance(node.value, ast.JoinedStr):
            tail = "".join(v.value for v in node.value.values if isinstance(v, ast.Constant))
            if tail.startswith(".stages."):
                name = tail[len(".stages."):]
                if name not in defined:
                    site, other = xf.Site(files["config"], node.value.lineno), xf.Site(files["stages"])
                    out.append(_c("consistency.key_mismatch", "fail",
                                  f"{site}: {node.arg} names stages.{name} but {other} defines no {name}()",
                                  site, other, f"Define {name}() in stages.py or fix the name.", key=name))
    return out


def consistency_tier(root: Path, manifest: dict[str, Any]) -> list[Finding]:
    """The consistency tier of one scaffold: the generated files agree with each other and the config.

    ==============================  ==========================================================
    code                            meaning
    ==============================  ==========================================================
    ``consistency.handoff_shape``   codes per frame: stage 0 emits != the processor accepts
                                    != stage 1 un-flattens
    ``consistency.stop_ids``        pipeline stop ids miss the config / generation_config EOS,
                                    or disagree with the model file or the deploy
    ``consistency.field_dropped``   a request field the adapter reads never reaches the stage
    ``consistency.key_mismatch``    payload / connector / stage / chunk keys written under one
                                    name and read under another
    ``consistency.head_width``      a per-codebook head is not as wide as the codec vocabulary
    ``consistency.ok``              none of these
    ==============================  ==========================================================

    Parameters
    ----------
    root : Path
        The scaffold folder.
    manifest : dict
        Its manifest.

    Returns
    -------
    list of Finding
        Each names both files and lines (message and evidence ``file``/``line``,
        ``other_file``/``other_line``).
    """
    from porting_kit.scaffold import crossfile as xf

    if manifest.get("framework") == "sglang-omni":
        out = _sglang_consistency(root, manifest)
        checked = "config.py factory names vs stages.py"
    else:
        m = manifest["model_type"]
        files = {k.split(":", 1)[0]: v for k, v in manifest["files"].items() if not k.startswith("model:")}
        model = _manifest_file(manifest, f"/modeling_{m}.py")
        out = []
        checked = "stop ids, request fields, connectors"
        processor_reads = []
        pipeline_tree = _tree(root, files.get("pipeline"))
        ids = [s.get("stage_id") for s in pipeline_stages(pipeline_tree)] if pipeline_tree is not None else None
        if manifest.get("shape") == "two-stage":
            code2wav = _manifest_file(manifest, f"/{m}_code2wav.py")
            proc = files.get("processor")
            if model and code2wav and proc:
                out += check_handoff_shape(root, model, proc, code2wav)
                out += check_head_widths(root, manifest, model)
                out += check_payload_keys(root, model, proc, code2wav)
                proc_tree = _tree(root, proc)
                processor_reads = xf.connector_extra_reads(proc_tree, proc) if proc_tree is not None else []
                checked = "handoff shape, payload keys, " + checked
        try:
            deploy = xf.resolve_deploy(root / files["deploy"])
        except ValueError:
            deploy = None  # the static tier reports an unreadable deploy YAML
        if deploy is not None:
            out += check_connectors(deploy, files["deploy"], ids, processor_reads)
        out += check_stop_ids(root, manifest, files["pipeline"], model, files["deploy"])
        if model:
            out += check_fields_reach_stage(root, files["adapter"], [model])
        out += check_conditioning_forwarded(root, manifest, files["adapter"])
    if not any(f.status == "fail" for f in out):
        out.append(Finding("consistency", "consistency.ok", "pass",
                           f"{manifest['model_type']}: the generated files agree ({checked})",
                           {"checked": checked, "model_type": manifest["model_type"]}))
    return out


# -- single deploy YAML --------------------------------------------------------------------------
def _deploy_pair(path: Path):
    """``(DeployFacts, PipelineFacts or None)`` or a ``scaffold.unparsable`` finding."""
    from porting_kit.scaffold import crossfile as xf

    try:
        deploy = xf.resolve_deploy(path)
    except ValueError as exc:
        return None, _f("scaffold.unparsable", "fail", f"{path.name}: {exc}", path.name,
                        "Fix the YAML (and its base_config chain).")
    return deploy, xf.pipeline_for_deploy(deploy)


def _side_config(path: Path) -> str | None:
    """Why ``path`` is not a deploy file (a side config kept in deploy/, as lint decides), or None."""
    from porting_kit.adapters.vllm_omni import schema as vo
    from porting_kit.adapters.vllm_omni.deploy_keys import is_deploy_doc

    try:
        doc = _yaml_with_lines(path)
    except (FileNotFoundError, ValueError):
        return None  # the static tier reports it
    if isinstance(doc, dict) and not is_deploy_doc(doc, vo.load_schema().top_level):
        return f"{path.name} has no stages: list and no deploy key: a side config, not a deploy YAML"
    return None


def yaml_framework(path: Path) -> str | None:
    """The framework a single YAML belongs to, from its keys: ``"sglang-omni"`` (``config_cls``, or
    ``stages:`` keyed by stage name), ``"vllm-omni"`` (``stages:`` a list, or vLLM-Omni deploy keys),
    None when it says neither (unreadable, or no key of either)."""
    from porting_kit.adapters.vllm_omni import schema as vo
    from porting_kit.adapters.vllm_omni.deploy_keys import is_deploy_doc

    try:
        doc = _yaml_with_lines(path)
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    if "config_cls" in doc or isinstance(doc.get("stages"), dict):
        return "sglang-omni"
    if isinstance(doc.get("stages"), list) or is_deploy_doc(doc, vo.load_schema().top_level):
        return "vllm-omni"
    return None


def _sglang_tree(path: Path) -> Path | None:
    """The nearest folder above ``path`` holding ``sglang_omni/models/`` (the YAML's own tree), or None."""
    for base in path.resolve().parents:
        if (base / "sglang_omni" / "models").is_dir():
            return base
    return None


def _sglang_config_py(path: Path, config_cls: str) -> Path | None:
    """The ``config.py`` under ``sglang_omni/models/`` of the YAML's own SGLang-Omni tree that defines
    ``class <config_cls>``, or None (no such tree above the YAML: never another project's file)."""
    import re

    root = _sglang_tree(path)
    if root is None:
        return None
    pattern = re.compile(rf"^class\s+{re.escape(config_cls)}\b", re.M)
    for seen, cand in enumerate(sorted((root / "sglang_omni" / "models").glob("**/config.py"))):
        if seen >= 200:
            return None
        try:
            if pattern.search(cand.read_text(encoding="utf-8", errors="replace")):
                return cand
        except OSError:
            continue
    return None


def sglang_file_static(path: Path) -> list[Finding]:
    """The static tier of one SGLang-Omni overrides YAML, judged by SGLang-Omni's schema.

    Its ``config_cls`` names the pipeline config; when a ``config.py`` of the same tree defines
    that class, the stage names are read from it and every override must name one of them.

    Parameters
    ----------
    path : Path
        An SGLang-Omni overrides YAML (``config_cls``, ``stages:`` keyed by stage name).

    Returns
    -------
    list of Finding
        ``scaffold.tier`` (the stored schema: a single file is never loaded by the real
        framework), ``scaffold.*`` key findings, ``scaffold.ok`` when none failed.
    """
    from porting_kit.adapters import sglang_omni as so

    rel = path.name
    schema = so.stored_schema()
    try:
        doc = _yaml_with_lines(path)
    except (FileNotFoundError, ValueError) as exc:
        return [_f("scaffold.unparsable", "fail", f"{rel}: {exc}", rel)]
    if not isinstance(doc, dict):
        return [_f("scaffold.unparsable", "fail", f"{rel} must be a mapping", rel)]
    if isinstance(doc.get("stages"), list):
        raise InputError(f"{path}: its `stages:` is a list, the form of a vLLM-Omni deploy; SGLang-Omni's "
                         "overrides key stages by name (use --framework vllm-omni)")
    out = [_f("scaffold.tier", "skip", f"tier: stored schema sglang-omni {schema.get('version')} "
              f"({so.SCHEMA_FILE.name}) for the single file {rel}; the real framework loads a scaffold "
              "folder (porting-kit validate DIR)", rel, tier="stored", version=schema.get("version"),
              skipped="real")]
    stage_names: list = []
    config_py = _sglang_config_py(path, str(doc["config_cls"])) if isinstance(doc.get("config_cls"), str) else None
    if config_py is not None:
        tree = _parse_py(config_py.parent, config_py.name, out)
        if tree is not None:
            stage_names = [_kw_const(c, "name") for fn in ("StageConfig", "EngineStageConfig")
                           for c in _calls(tree, fn)]
    out += check_sglang_overrides(doc, rel, schema, [n for n in stage_names if n])
    if not any(f.status == "fail" for f in out):
        note = (f"stage names read from {config_py}" if config_py is not None
                else "no config.py of its tree defines its config_cls: keys only" if _sglang_tree(path)
                else "not inside an SGLang-Omni tree (no sglang_omni/models/ above it): keys only")
        out.append(_f("scaffold.ok", "pass", f"{rel}: SGLang-Omni overrides YAML passed static validation "
                      f"({note})", rel, framework="sglang-omni", config_py=str(config_py or "")))
    return out


def deploy_file_static(path: Path) -> list[Finding]:
    """The static tier of one deploy YAML: lint's key facts (one verdict), and, when a pipeline.py
    of the same vLLM-Omni tree names it, stage ids the pipeline lacks (``base_config`` followed).

    Parameters
    ----------
    path : Path
        A vLLM-Omni deploy YAML.

    Returns
    -------
    list of Finding
        ``scaffold.*``; ``scaffold.ok`` when none failed.
    """
    from porting_kit.adapters.vllm_omni import schema as vo

    rel = path.name
    out = check_deploy_yaml(path.parent, rel, vo.load_schema(), None, single_stage=False)
    if any(f.code == "scaffold.unparsable" for f in out):
        return out
    deploy, pipe = _deploy_pair(path)
    if deploy is None:
        return [*out, pipe]
    paired = None
    if pipe is not None and pipe.stage_ids is not None:
        paired = f"{pipe.file}:{pipe.line}"
        extra = [i for i in deploy.stage_ids if i not in pipe.stage_ids]
        if extra:
            out.append(_f("scaffold.stage_id_mismatch", "fail",
                          f"{rel}: deploy stage ids {extra} are not stages of the pipeline at {paired} "
                          f"(stages {list(pipe.stage_ids)}); merge_pipeline_deploy ignores them", rel,
                          "Give each deploy entry the stage_id of a pipeline stage.",
                          deploy_ids=",".join(map(str, deploy.stage_ids)),
                          pipeline_ids=",".join(map(str, pipe.stage_ids)), pipeline=paired))
    if not any(f.status == "fail" for f in out):
        note = f"paired with {paired}" if paired else "no pipeline.py in its tree names it: keys only"
        out.append(_f("scaffold.ok", "pass", f"{rel}: deploy YAML passed static validation ({note})", rel,
                      pipeline=paired or "", base_config=" <- ".join(deploy.chain)))
    return out


def deploy_file_consistency(path: Path) -> list[Finding]:
    """The consistency tier of one deploy YAML: connector names and stage edges agree
    (``consistency.key_mismatch``), against the paired pipeline's stages when there is one."""
    deploy, pipe = _deploy_pair(path)
    if deploy is None:
        return [Finding("consistency", "consistency.skipped", "skip", f"{path.name} is not readable YAML")]
    ids = list(pipe.stage_ids) if pipe is not None and pipe.stage_ids is not None else None
    out = check_connectors(deploy, path.name, ids)
    if not any(f.status == "fail" for f in out):
        out.append(Finding("consistency", "consistency.ok", "pass",
                           f"{path.name}: connectors and stage edges agree", {"file": path.name}))
    return out


# -- entry points ----------------------------------------------------------------------------
#: The tiers of ``porting-kit validate``, in run order; each is a finding family.
TIERS = ("static", "consistency", "run", "gpu")
#: Tier -> the family prefix of its findings.
TIER_FAMILY = {"static": "scaffold", "consistency": "consistency", "run": "run", "gpu": "gpu"}
#: The tiers a single deploy YAML can take (no model files to run).
YAML_TIERS = ("static", "consistency")


def parse_tiers(text: str | None) -> tuple[str, ...] | None:
    """``"static,run"`` -> ``("static", "run")`` in :data:`TIERS` order; None stays None.

    Parameters
    ----------
    text : str or None
        Comma-separated tier names.

    Returns
    -------
    tuple of str or None
        The named tiers, deduplicated, in run order.

    Raises
    ------
    InputError
        A name not in :data:`TIERS`, or nothing named.
    """
    if text is None:
        return None
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in names if t not in TIERS]
    if bad or not names:
        raise InputError(f"--tier takes a comma-separated list of {', '.join(TIERS)}; got {text!r}")
    return tuple(t for t in TIERS if t in names)


def _static_one(root: Path, manifest: dict[str, Any], prefer_real: bool) -> list[Finding]:
    """The static tier of one scaffold: ``scaffold.*`` findings, ``scaffold.ok`` when none failed."""
    framework = manifest.get("framework")
    if framework == "vllm-omni":
        part = validate_vllm_omni(root, manifest, prefer_real)
    elif framework == "sglang-omni":
        part = validate_sglang_omni(root, manifest, prefer_real)
    else:
        raise InputError(f"manifest for {manifest.get('model_type')!r} names unknown framework {framework!r}")
    if not any(f.status == "fail" for f in part):
        tier = next((f.evidence.get("tier") for f in part if f.code == "scaffold.tier"), "?")
        part.append(_f("scaffold.ok", "pass", f"{framework} scaffold of {manifest['model_type']} "
                       f"({manifest['shape']}) passed static validation (tier: {tier})",
                       tier=tier, model_type=manifest["model_type"]))
    return part


def _select_manifests(root: Path, model_type: str | None) -> list[dict[str, Any]]:
    manifests = load_manifests(root)
    if model_type is not None:
        manifests = [m for m in manifests if m.get("model_type") == model_type]
        if not manifests:
            raise InputError(f"{root} has no scaffold for model type {model_type!r}")
    return manifests


def validate_static(root: str | Path, *, prefer_real: bool = True, model_type: str | None = None) -> Report:
    """Validate every scaffold recorded under ``root`` (the static tier only).

    Parameters
    ----------
    root : str or Path
        The folder given to ``scaffold --out`` / ``--into``.
    prefer_real : bool
        Use the real framework when it imports (``False``: stored schema only).
    model_type : str or None
        Only the scaffold of this model type.

    Returns
    -------
    Report
        Command ``validate``; ``scaffold.*`` findings; one ``scaffold.tier``
        finding per scaffold, and ``scaffold.ok`` when nothing failed.

    Raises
    ------
    InputError
        ``root`` is not a scaffold (no manifest) or the model type is not in it.
    """
    start = time.perf_counter()
    root = Path(root).expanduser().resolve()
    findings: list[Finding] = []
    for manifest in _select_manifests(root, model_type):
        findings += _static_one(root, manifest, prefer_real)
    return Report("validate", findings, timing={"validate_s": time.perf_counter() - start})


def _tier_skip(tier: str, reason: str) -> Finding:
    family = TIER_FAMILY[tier]
    return Finding(family, f"{family}.skipped", "skip", reason, {"tier": tier})


def _without_gpu_note(findings: list[Finding]) -> list[Finding]:
    """The static tier's ``scaffold.tier`` finding without the "not part of --static" note: this run
    includes the GPU tier (it was not limited to ``--static``)."""
    for f in findings:
        if f.code == "scaffold.tier":
            f.message = f.message.replace(f"; {GPU_TIER_NOTE}", "")
            skipped = [t for t in str(f.evidence.get("skipped", "")).split(",") if t and t != "gpu"]
            f.evidence["skipped"] = ",".join(skipped)
    return findings


def _scaffold_tiers(root: Path, manifest: dict[str, Any], tiers: tuple[str, ...], *, prefer_real: bool,
                    spec: str | None, device: str | None) -> list[Finding]:
    out: list[Finding] = []
    sglang = manifest.get("framework") == "sglang-omni"
    for tier in tiers:
        if tier == "static":
            out += _without_gpu_note(_static_one(root, manifest, prefer_real)) if "gpu" in tiers else \
                _static_one(root, manifest, prefer_real)
        elif tier == "consistency":
            out += consistency_tier(root, manifest)
        elif tier == "run" and sglang:
            out.append(_tier_skip("run", f"{manifest['model_type']} is an SGLang-Omni scaffold: there is no "
                                         "SGLang-Omni engine-contract driver (static and consistency tiers apply)"))
        elif tier == "run":
            out += run_tier(root, manifest, device=device or "cpu")
        elif tier == "gpu":
            out += gpu_tier(root, manifest, spec=spec)
    return out


def _yaml_tiers(path: Path, tiers: tuple[str, ...], *, spec: str | None,
                framework: str | None = None) -> list[Finding]:
    out: list[Finding] = []
    framework = framework or yaml_framework(path) or "vllm-omni"
    side = _side_config(path) if framework == "vllm-omni" else None
    for tier in tiers:
        if tier in ("static", "consistency") and side:
            out.append(_tier_skip(tier, side))
        elif tier == "static" and framework == "sglang-omni":
            out += sglang_file_static(path)
        elif tier == "static":
            out += deploy_file_static(path)
        elif tier == "consistency" and framework == "sglang-omni":
            out.append(_tier_skip("consistency", f"{path.name} is an SGLang-Omni overrides YAML: what it "
                                                 "overrides is checked by the static tier; the cross-file tier "
                                                 "needs the scaffold folder"))
        elif tier == "consistency":
            out += deploy_file_consistency(path)
        elif tier == "run":
            out.append(_tier_skip("run", f"{path.name} is a single deploy YAML: the run tier needs a scaffold "
                                         "folder (model files, pipeline.py, processors)"))
        elif tier == "gpu":
            out += gpu_tier(None, None, spec=spec)
    return out


def _found_static(root: Path, manifest: dict[str, Any]) -> list[Finding]:
    """The static tier of a model folder the kit did not generate (``"mode": "found"``).

    The same checks as a scaffold's (deploy keys against the schema, pipeline vs deploy stage
    ids, adapter contract, processors named exist, every file parses) against the stored schema,
    less the kit's own conventions: an adapter's ``name`` need not be the model type (routing is
    by ``stage_keys``). The real loader runs on scaffolds only.
    """
    from porting_kit.adapters.vllm_omni import schema as vo

    by_arch = manifest.get("adapter_matched_by") == "model_archs"  # routed by model_archs, not stage_keys
    part = [f for f in validate_vllm_omni(root, manifest, prefer_real=False)
            if f.code != "scaffold.adapter_name_mismatch"
            and not (by_arch and f.code == "scaffold.adapter_missing_stage_keys")]
    for f in part:
        if f.code == "scaffold.tier":
            f.message = (f"tier: stored schema vllm-omni {vo.load_schema().version} ({vo.SCHEMA_FILE.name}) on "
                         f"{manifest['folder']}, a model folder porting-kit did not generate (facts read from its "
                         f"files); {GPU_TIER_NOTE}")
            f.evidence["reason"] = "a port the kit did not generate: the real loader runs on scaffolds"
    if not any(f.status == "fail" for f in part):
        part.append(_f("scaffold.ok", "pass", f"vllm-omni model folder {manifest['folder']} "
                       f"({manifest['model_type']}, {len(manifest['stage_ids'])} stage(s)) passed static validation",
                       tier="stored", model_type=manifest["model_type"]))
    return part


def _found_consistency(root: Path, manifest: dict[str, Any]) -> list[Finding]:
    """The consistency tier of a model folder the kit did not generate: connectors and stage edges
    (with what its processors read), stage-0 stop ids of pipeline.py vs the deploy YAML, and every
    request field the adapter forwards read by some file of the model folder or its processors."""
    from porting_kit.scaffold import crossfile as xf

    files = {k.split(":", 1)[0]: v for k, v in manifest["files"].items() if not k.startswith(("model:", "processor:"))}
    models = [v for k, v in manifest["files"].items() if k.startswith("model:")]
    procs = [v for k, v in manifest["files"].items() if k.startswith("processor:")]
    out: list[Finding] = []
    checked = ["stop ids"]
    ids = manifest["stage_ids"]
    reads = []
    for proc in procs:
        tree = _tree(root, proc)
        reads += xf.connector_extra_reads(tree, proc) if tree is not None else []
    if "deploy" in files:
        try:
            deploy = xf.resolve_deploy(root / files["deploy"])
        except ValueError:
            deploy = None  # the static tier reports an unreadable deploy YAML
        if deploy is not None:
            out += check_connectors(deploy, files["deploy"], ids, reads)
            checked.append("connectors")
        out += check_stop_ids(root, manifest, files["pipeline"], None, files["deploy"])
    if "adapter" in files and models:
        # only what it can prove in hand-written code: a field forwarded under a key no file reads
        # (an adapter may turn a field into prompt embeddings or a speaker choice instead of forwarding it)
        out += [f for f in check_fields_reach_stage(root, files["adapter"], models + procs) if "key" in f.evidence]
        checked.append("request fields")
    if not any(f.status == "fail" for f in out):
        out.append(Finding("consistency", "consistency.ok", "pass",
                           f"{manifest['folder']}: its files agree ({', '.join(checked)})",
                           {"checked": ", ".join(checked), "model_type": manifest["model_type"]}))
    return out


def _found_tiers(root: Path, manifest: dict[str, Any], tiers: tuple[str, ...], *, spec: str | None) -> list[Finding]:
    out: list[Finding] = []
    for tier in tiers:
        if tier == "static":
            out += _found_static(root, manifest)
        elif tier == "consistency":
            out += _found_consistency(root, manifest)
        elif tier == "run":
            out.append(_tier_skip("run", f"{manifest['folder']} was not generated by porting-kit: the run tier drives "
                                         "generated stage models through their seam; run the model's own tests "
                                         "in a vLLM-Omni checkout"))
        elif tier == "gpu":
            out += gpu_tier(None, None, spec=spec)
    return out


def _has_manifest(p: Path) -> bool:
    from porting_kit.scaffold.generate import MANIFEST_DIR

    return any((p / MANIFEST_DIR).glob("scaffold-*.json"))


def validate(path: str | Path, tiers: str | list[str] | tuple[str, ...] | None = None, spec: str | None = None,
             device: str | None = None, *, prefer_real: bool = True, model_type: str | None = None,
             framework: str | None = None) -> Report:
    """Validate a scaffold folder or a single deploy YAML, tier by tier.

    The one library call behind ``porting-kit validate``, its ``--json`` and the
    notebooks. Each tier is a finding family with its ``.ok`` on pass and a
    ``.skipped`` finding (with the reason) when it cannot run:

    ===============  ===============  ====================================================
    tier             family           what it checks
    ===============  ===============  ====================================================
    ``static``       ``scaffold.*``   each file against the framework's real schema
    ``consistency``  ``consistency.*`` the files agree with each other and the config
    ``run``          ``run.*``        the generated pipeline driven end to end (CPU/CUDA)
    ``gpu``          ``gpu.*``        serving dtype, contract under load, speed (CUDA)
    ===============  ===============  ====================================================

    Parameters
    ----------
    path : str or Path
        A scaffold folder (as given to ``scaffold --out`` / ``--into``) or one
        vLLM-Omni deploy YAML (static and consistency tiers only; a pipeline.py
        in the same vLLM-Omni tree that names it is paired with it).
    tiers : str or sequence of str or None
        Tiers to run (``"static,consistency"`` or a list); None runs every tier
        that applies to ``path``.
    spec : str or None
        Port spec for the gpu tier (its parity checks in the serving dtype).
    device : str or None
        Device of the run tier (default ``"cpu"``).
    prefer_real : bool
        Static tier: use the real framework when it imports.
    model_type : str or None
        Only the scaffold of this model type (scaffold folders).
    framework : str or None
        ``"vllm-omni"`` or ``"sglang-omni"``. A single YAML is judged by the framework it
        belongs to: this one when given, else the one its keys say (:func:`yaml_framework`).

    Returns
    -------
    Report
        Command ``validate``; findings of each tier in :data:`TIERS` order.

    Raises
    ------
    InputError
        ``path`` is neither a scaffold folder nor a YAML file, an unknown tier,
        or a model type not in the scaffold.
    """
    start = time.perf_counter()
    if isinstance(tiers, str) or tiers is None:
        chosen = parse_tiers(tiers)
    else:
        chosen = parse_tiers(",".join(tiers))
    p = Path(path).expanduser().resolve()
    if p.is_file() and p.suffix in (".yaml", ".yml"):
        if framework is not None and framework not in ("vllm-omni", "sglang-omni"):
            raise InputError(f"--framework takes vllm-omni or sglang-omni; got {framework!r}")
        findings = _yaml_tiers(p, chosen or YAML_TIERS, spec=spec, framework=framework)
    elif p.is_file():
        raise InputError(f"{p} is neither a scaffold folder nor a deploy YAML (.yaml/.yml)")
    elif not p.exists():
        raise InputError(f"{p} not found (pass a scaffold folder or a deploy YAML)")
    elif not _has_manifest(p) and framework == "vllm-omni":
        from porting_kit.scaffold.discover import discover_vllm_omni

        findings = []
        root, manifests = discover_vllm_omni(p, model_type)
        for manifest in manifests:
            findings += _found_tiers(root, manifest, chosen or TIERS, spec=spec)
    elif not _has_manifest(p) and framework == "sglang-omni":
        raise InputError(f"{p}: a SGLang-Omni port porting-kit did not generate: validate its overrides YAML "
                         "(porting-kit validate FILE.yaml --framework sglang-omni); folder discovery covers "
                         "vLLM-Omni trees")
    else:
        findings = []
        manifests = _select_manifests(p, model_type)
        for manifest in manifests:
            findings += _scaffold_tiers(p, manifest, chosen or TIERS, prefer_real=prefer_real, spec=spec,
                                        device=device)
        note = _upstream_left_out(p, manifests) if framework == "vllm-omni" and model_type is None else None
        if note:
            report = Report("validate", findings, timing={"validate_s": time.perf_counter() - start})
            report.extras["notes"] = [note]
            return report
    return Report("validate", findings, timing={"validate_s": time.perf_counter() - start})


def _upstream_left_out(root: Path, manifests: list[dict[str, Any]]) -> str | None:
    """A note when a scaffolded tree (``scaffold --into``) also holds model folders the kit did not
    generate: the manifest decides what is validated, so those are not (say how to reach them)."""
    ours = {m.get("model_type") for m in manifests}
    others = sorted(f.parent.name for f in (root / "vllm_omni" / "model_executor" / "models").glob("*/pipeline.py")
                    if f.parent.name not in ours)
    if not others:
        return None
    shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    return (f"note: validated the kit's scaffold ({', '.join(sorted(map(str, ours)))}) from {root.name}/.porting-kit; "
            f"the tree's other model folders ({shown}) were not: validate one by its folder "
            "(porting-kit validate <tree>/vllm_omni/model_executor/models/NAME --framework vllm-omni)")


# -- run tier ---------------------------------------------------------------------------------
#: Codes of the run tier (built here; the facts come from porting_kit/scaffold/run.py):
#:
#: ========================  ===============================================================
#: ``run.ok``                the generated pipeline ran end to end (evidence: seam real|stand-ins)
#: ``run.stage_exception``   a stage model / processor raised (stage, file and line named)
#: ``run.handoff_shape``     a stage output or a processor payload breaks the next stage's
#:                           contract (per-row outputs, codebook-major codes, left context,
#:                           samples = frames x hop length)
#: ``run.no_audio``          a request finished without a single audio sample
#: ``run.upstream_mismatch`` the real single-stage upstream lacks an attribute the model reads, or its
#:                           ``inference_stream`` has no parameter for a request field / requires one
#:                           the model never passes
#: ``rng.crosstalk``         a batched request's audio differs from its solo run
#: ``rng.generator_leak``    per-request state (generators, KV cache) left after finish / abort
#: ``skip``                  SGLang-Omni scaffolds: no SGLang-Omni driver
#: ========================  ===============================================================
RUN_HINTS = {
    "run.stage_exception": "Fix the generated file at the line named; the run tier calls it the way "
                           "vLLM-Omni's runners do (flattened input_ids, one additional_information dict per row).",
    "run.handoff_shape": "Make producer, processor and consumer agree: stage 0 emits one row per request "
                         "(codes.audio (rows, NUM_CODEBOOKS)), the processor sends 1-D codebook-major codes "
                         "with meta.left_context_size, stage 1 returns one model_outputs entry per request.",
    "run.upstream_mismatch": "Make the generated model fit the real upstream: map each request field onto an "
                             "inference_stream parameter in STREAM_ARGS (or stop accepting the field in the "
                             "adapter), pass every required parameter, read only attributes upstream has.",
    "run.no_audio": "Every request must end with audio: check the stop ids, the processor's final chunk "
                    "(is_finished) and the codec's model_outputs.",
}


def _run_finding(code: str, status: str, message: str, at: tuple[str | None, int | None] = (None, None),
                 hint: str = "", **evidence) -> Finding:
    check = code.split(".", 1)[0]
    where = f"{at[0]}:{at[1]}" if at[0] and at[1] else at[0]
    return Finding(check, code, status, message, {k: v for k, v in evidence.items() if v is not None},
                   Where(candidate=where), hint or RUN_HINTS.get(code, ""))


def run_findings(facts) -> list[Finding]:
    """Turn :class:`porting_kit.scaffold.run.RunFacts` into findings (see the code table above).

    Parameters
    ----------
    facts : porting_kit.scaffold.run.RunFacts

    Returns
    -------
    list of Finding
        The faults found, or one ``run.ok`` with the evidence (seam, attention, requests).
    """
    seam = facts.seam or "?"
    common = {"seam": seam, "shape": facts.shape, "device": facts.device}
    out: list[Finding] = []
    f = facts.fault
    if f is not None:
        code = {"exception": "run.stage_exception", "handoff_shape": "run.handoff_shape",
                "upstream_mismatch": "run.upstream_mismatch"}.get(f.kind, "run.no_audio")
        at = f" ({f.file}:{f.line})" if f.file else ""
        out.append(_run_finding(code, "fail", f"Stage {f.stage}, {f.where}{at}: {f.message}", (f.file, f.line),
                                stage=f.stage, call=f.where, file=f.file, line=f.line, **common))
        return out
    silent = [rid for rid, n in facts.samples.items() if n == 0]
    if silent:
        out.append(_run_finding("run.no_audio", "fail", f"{len(silent)} of {facts.requests} requests finished "
                                f"with no audio ({', '.join(silent)}).", requests=", ".join(silent), **common))
    if facts.shape == "two-stage" and facts.hop_length and not silent:
        wrong = [(rid, n, facts.frames.get(rid, 0)) for rid, n in facts.samples.items()
                 if n != facts.frames.get(rid, 0) * facts.hop_length]
        if wrong:
            rid, n, frames = wrong[0]
            out.append(_run_finding(
                "run.handoff_shape", "fail",
                f"{rid} received {n} samples for {frames} codec frames x hop {facts.hop_length} = "
                f"{frames * facts.hop_length}: stage 1 did not decode exactly the new frames of each chunk (left "
                "context not dropped or dropped twice, or a stale payload decoded again).", request=rid, samples=n, frames=frames,
                hop_length=facts.hop_length, requests_affected=len(wrong), **common))
    if facts.crosstalk:
        rid, sample, diff = facts.crosstalk[0]
        out.append(_run_finding(
            "rng.crosstalk", "fail",
            f"With {facts.requests} requests interleaved (one more aborted), {rid}'s audio differs from its "
            f"solo run from sample {sample} (max |diff| {diff:.3g}): requests disturb each other.",
            hint="Key every per-request state (torch.Generator, caches, streams) by global_request_id; "
                 "nothing a row computes may depend on the other rows.",
            request=rid, first_sample=sample, max_abs_diff=diff, requests_affected=len(facts.crosstalk), **common))
    if facts.left_state:
        out.append(_run_finding(
            "rng.generator_leak", "fail",
            f"After every request finished or was aborted ({facts.aborted}), per-request state is still held: "
            + "; ".join(facts.left_state[:4]) + ".",
            hint="Free per-request state in on_requests_finished(finished_req_ids) under the same key "
                 "forward() uses (global_request_id unwrapped).",
            held=len(facts.left_state), aborted=facts.aborted, **common))
    if not out:
        total = sum(facts.samples.values())
        seam_note = "real vLLM-Omni classes" if seam == "real" else "named torch stand-ins (vLLM not importable)"
        out.append(_run_finding(
            "run.ok", "pass",
            f"{facts.shape} pipeline ran end to end on {facts.device}: {facts.requests} interleaved requests "
            f"+ 1 aborted, {facts.steps} steps, {total} samples; seam: {seam_note}.",
            requests=facts.requests, steps=facts.steps, chunks=facts.chunks, samples=total,
            async_chunk=facts.async_chunk, attention=facts.attention, seam_detail=facts.seam_detail,
            upstream=facts.upstream or None, **common))
    return out


def run_tier(root: Path, manifest: dict, *, device: str = "cpu", upstream: Any = None) -> list[Finding]:
    """The run tier of one scaffold: drive its generated pipeline end to end.

    Parameters
    ----------
    root : Path
        The scaffold root.
    manifest : dict
        Its manifest (``framework``, ``shape``, ``model_type``).
    device : str, default "cpu"
        ``"cuda"`` runs the stage models on the GPU.
    upstream : object, optional
        The single-stage shape's real upstream model; its attributes and ``inference_stream``
        signature are checked first (``run.upstream_mismatch``). Default: a stand-in.

    Returns
    -------
    list of Finding
        ``run.ok`` with the evidence ``seam: real|stand-ins``, or the faults
        (``run.stage_exception``, ``run.handoff_shape``, ``run.no_audio``,
        ``rng.crosstalk``, ``rng.generator_leak``); a ``skip`` for SGLang-Omni.
    """
    if manifest.get("framework") != "vllm-omni":
        return [Finding("run", "run.skipped", "skip", "run tier: SGLang-Omni scaffolds have no engine driver in "
                        "porting-kit (static and consistency tiers only).", {"framework": manifest.get("framework")},
                        Where(), "")]
    try:
        import torch  # noqa: F401
    except ImportError:
        return [Finding("run", "run.skipped", "skip", "run tier: torch is not installed.", {}, Where(), "")]
    from porting_kit.scaffold.run import run_pipeline

    out = run_findings(run_pipeline(Path(root), manifest, device=device, upstream=upstream))
    port = next((v for k, v in manifest.get("files", {}).items() if k.startswith("port:")), None)
    if port is not None and device == "cpu":
        from porting_kit.scaffold.generate import camel_case
        from porting_kit.scaffold.run import run_port

        out += port_findings(run_port(Path(root), port, camel_case(str(manifest.get("model_type", "")))))
    return out


def port_findings(facts) -> list[Finding]:
    """Findings of the generated port's run (:func:`porting_kit.scaffold.run.run_port`): its
    exception (``run.stage_exception``), audio that is not ``frames x HOP_LENGTH`` samples
    (``run.handoff_shape``), a request with no audio (``run.no_audio``), else ``run.ok``."""
    f = facts.fault
    common = {"port": facts.file, "hop_length": facts.hop_length}
    if f is None and facts.no_synthesize:
        return [_run_finding("run.skipped", "skip", "The generated port has no codec stage (no synthesize): "
                             "porting-kit check port_spec.py proves its LM; the audio side is the user's.",
                             (facts.file, None), port=facts.file)]
    if f is not None:
        at = f" ({f.file}:{f.line})" if f.file else ""
        return [_run_finding("run.stage_exception", "fail", f"The generated port, {f.where}{at}: {f.message}",
                             (f.file, f.line), call=f.where, file=f.file, line=f.line, **common)]
    out = []
    silent = [rid for rid, n in facts.samples.items() if n == 0]
    if silent:
        out.append(_run_finding("run.no_audio", "fail", f"The generated port synthesized no audio for "
                                f"{', '.join(silent)}.", (facts.file, None), requests=", ".join(silent), **common))
    wrong = [(rid, n) for rid, n in facts.samples.items() if n and n != facts.frames[rid] * facts.hop_length]
    if wrong:
        rid, n = wrong[0]
        out.append(_run_finding(
            "run.handoff_shape", "fail", f"The generated port's codec stage gave {rid} {n} samples for "
            f"{facts.frames[rid]} frames x HOP_LENGTH {facts.hop_length} = {facts.frames[rid] * facts.hop_length}.",
            (facts.file, None), request=rid, samples=n, frames=facts.frames[rid], **common))
    if not out:
        out.append(_run_finding(
            "run.ok", "pass", f"The generated port ran on cpu: {len(facts.samples)} requests through its own "
            f"synthesize (talker frame by frame, codec stage streaming), {sum(facts.frames.values())} frames, "
            f"{sum(facts.samples.values())} samples.", (facts.file, None),
            frames=sum(facts.frames.values()), samples=sum(facts.samples.values()),
            repeat_max_abs_diff=max(facts.repeat_diff.values(), default=0.0), **common))
    return out


# -- the GPU tier ----------------------------------------------------------------------------
#: dtype of the serving-dtype parity step of the GPU tier.
GPU_SERVING_DTYPE = "bfloat16"
#: The families each GPU step runs: (step, families, gpu.* code when a finding fails or warns).
GPU_STEPS = (
    ("serving_dtype", "config,parity,rope,norm,dtype", "gpu.serving_dtype_failed"),
    ("engine_contract", "rng,lifecycle", "gpu.engine_contract_failed"),
    ("cudagraph", "cudagraph", "gpu.cudagraph_failed"),
)


def _gpu_f(code: str, status: str, message: str, hint: str = "", **evidence) -> Finding:
    return Finding("gpu", code, status, message,
                   {k: v for k, v in evidence.items() if v is not None}, Where(), hint)


def _gpu_speed_evidence(spec) -> dict[str, Any]:
    """RTF / TTFA / syncs per step at concurrency 1 and 4, and eager vs CUDA-graph decode step."""
    from porting_kit.probes.speed import graph_speed, request_speed

    ev: dict[str, Any] = {}
    if spec.has("engine_model"):
        def factory():
            return spec.call("engine_model")

        request_speed(factory, 1, 1, "cuda")  # warm-up: CUDA context and kernels
        for conc in (1, 4):
            s = request_speed(factory, conc, 8, "cuda")
            ev.update({f"rtf_c{conc}": round(s.rtf, 4), f"ttfa_ms_c{conc}": round(s.ttfa_ms, 2),
                       f"syncs_per_step_c{conc}": round(s.syncs_per_step, 2)})
    if spec.has("decode_step"):
        g = graph_speed(spec.call("decode_step"), "cuda")
        ev.update({"decode_eager_us": round(g.eager_us, 1), "decode_graph_us": round(g.graph_us, 1),
                   "decode_graph_syncs_per_step": g.graph_syncs_per_step})
    return ev


def gpu_tier(root: Path | None, manifest: dict | None, *, spec: str | None = None) -> list[Finding]:
    """The GPU tier of ``validate``: the port served on CUDA, as it will be in production.

    Steps, each through :func:`porting_kit.runner.run_check` on ``cuda``: serving-dtype
    parity in bfloat16 (``config,parity,rope,norm,dtype``: the candidate cast as
    ``from_pretrained(dtype=...)`` casts, float32 RoPE tables kept), the engine contract
    (``rng,lifecycle``: seeded requests interleaved, joining, aborted, with the model on the
    GPU) and the CUDA graph of the AR decode step (``cudagraph``); then speed figures
    (:mod:`porting_kit.probes.speed`) as evidence. A step whose families all skip (the spec
    defines no parity trio / ``engine_model()`` / ``decode_step()``) is listed as skipped.
    The models are driven by porting-kit's engine-contract driver, not a vLLM engine.

    Parameters
    ----------
    root : Path or None
        The scaffold folder (unused by these steps; the generated scaffold's own serving
        run belongs to the run tier).
    manifest : dict or None
        The scaffold manifest; its ``"spec"`` entry (a port spec path) is used when
        ``spec`` is not given.
    spec : str, optional
        Port spec path. Default: the manifest's, else the embedded examples (``tts`` for
        the serving dtype, ``generator`` for the engine contract and the CUDA graph).

    Returns
    -------
    list of Finding
        ``gpu.skipped`` (skip, the reason) without CUDA; otherwise one
        ``gpu.serving_dtype_failed`` / ``gpu.engine_contract_failed`` /
        ``gpu.cudagraph_failed`` (fail, naming the fail/warn codes of that step) per step
        that found something, or one ``gpu.ok`` (pass) with the steps run and skipped and
        the speed figures.

    Raises
    ------
    InputError
        The spec cannot be loaded or a model cannot run (exit 2).
    """
    why = cuda_missing()  # the same answer as check --device cuda
    if why is not None:
        return [_gpu_f("gpu.skipped", "skip", f"GPU tier skipped: {why}.",
                       hint="run validate on a machine with CUDA to serve the port on the GPU")]
    from porting_kit.runner import run_check
    from porting_kit.spec import load_spec

    spec = spec or (manifest or {}).get("spec")
    findings: list[Finding] = []
    ran, skipped = [], []
    for step, families, code in GPU_STEPS:
        example = "tts" if step == "serving_dtype" else "generator"
        src = load_spec(spec) if spec else load_spec(example=example)
        dtype = GPU_SERVING_DTYPE if step == "serving_dtype" else None
        rep = run_check(src, only=families, device="cuda", dtype=dtype)
        if all(f.status == "skip" for f in rep.findings):
            skipped.append(step)
            continue
        ran.append(step)
        bad = [f for f in rep.findings if f.status in ("fail", "warn")]
        if bad:
            codes = sorted({f.code for f in bad})
            findings.append(_gpu_f(code, "fail", f"On CUDA ({step.replace('_', ' ')}"
                                   f"{', ' + dtype if dtype else ''}): {', '.join(codes)}: "
                                   f"{bad[0].message}", hint=bad[0].hint, codes=", ".join(codes),
                                   spec=src.name, dtype=dtype))
    if findings:
        return findings
    speed_spec = load_spec(spec) if spec else load_spec(example="generator")
    ev = {"spec": spec or "embedded tts + generator", "steps_run": ", ".join(ran),
          "steps_skipped": ", ".join(skipped) or None, "dtype": GPU_SERVING_DTYPE,
          **_gpu_speed_evidence(speed_spec)}
    return [_gpu_f("gpu.ok", "pass", f"Served on CUDA: {', '.join(ran) or 'nothing'} ran clean"
                   + (f" ({', '.join(skipped)} skipped: the spec does not define it)" if skipped else "")
                   + ".", **ev)]
