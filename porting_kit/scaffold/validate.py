"""Static validation of a scaffold (``porting-kit validate --static DIR``).

Two layers, both reported as ``scaffold.*`` findings in one :class:`Report`
(command ``validate``):

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

3. **The GPU tier** (:func:`gpu_tier`, at the end of this module): the port served on CUDA
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
from porting_kit.errors import InputError
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
                         "(generate one with porting-kit scaffold)")
    out = []
    for p in paths:
        try:
            out.append(json.loads(p.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"cannot read manifest {p}: {exc}") from None
    return out


def _yaml_with_lines(path: Path):
    """Round-trip load (keeps line numbers and comments) or raise ValueError."""
    from ruamel.yaml import YAML

    try:
        return YAML(typ="rt").load(path.read_text(encoding="utf-8"))
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
        return ast.parse((root / rel).read_text(encoding="utf-8"), filename=rel)
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
        text = (root / rel).read_text(encoding="utf-8")
        doc = _yaml_with_lines(root / rel)
    except FileNotFoundError:
        return [_f("scaffold.unparsable", "fail", f"{rel} is missing", rel)]
    except ValueError as exc:
        return [_f("scaffold.unparsable", "fail", f"{rel} is not valid YAML: {exc}", rel)]
    if not isinstance(doc, dict):
        return [_f("scaffold.unparsable", "fail", f"{rel} must be a mapping with a stages: list", rel)]
    out = deploy_key_findings(deploy_key_problems(doc, schema, text.splitlines()), rel, schema.version)
    stages = doc.get("stages") or []
    deploy_ids = [st["stage_id"] for st in stages if isinstance(st, dict) and "stage_id" in st] \
        if isinstance(stages, list) else []
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
    cls = classes[0]
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
    m = manifest["model_type"]
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
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
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
    out += check_deploy_yaml(root, files["deploy"], schema, ids, single_stage=len(stages) <= 1)
    out += check_adapter(root, files["adapter"], manifest["model_type"], entry)
    if tree is not None:
        out += check_processors(root, manifest, tree)
    for rel in tests:
        out += check_test_markers(root, rel)
    for rel in [v for k, v in manifest["files"].items() if v.endswith(".py")]:
        if rel not in (files["pipeline"], files["adapter"]) and rel not in tests:
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
def _sglang_graph_checks(tree: ast.Module, rel: str) -> list[Finding]:
    """Stored-tier version of SGLang-Omni's validate_general (from config.py's AST)."""
    stages = []
    for fn in ("StageConfig", "EngineStageConfig"):
        for call in _calls(tree, fn):
            stages.append({kw.arg: _kw_const(call, kw.arg) for kw in call.keywords if kw.arg})
    names = [s.get("name") for s in stages]
    out = []

    def bad(msg):
        out.append(_f("scaffold.sglang_invalid", "fail", f"{rel}: {msg}", rel))

    if len(set(names)) != len(names):
        bad("stage names must be unique")
    for s in stages:
        n = s.get("name")
        if (s.get("next") is not None) == bool(s.get("terminal")):
            bad(f"stage {n!r} must set exactly one of next / terminal")
        if s.get("wait_for") and not s.get("merge_fn"):
            bad(f"stage {n!r} has wait_for but no merge_fn")
        refs = []
        for key in ("next", "wait_for", "stream_to"):
            value = s.get(key)
            refs += [value] if isinstance(value, str) else list(value) if isinstance(value, list) else []
        for t in refs:
            if t not in names:
                bad(f"stage {n!r} references unknown stage {t!r}")
        if not s.get("process") and int(s.get("tp_size") or 1) == 1:
            bad(f"stage {n!r} (not TP) must declare process")
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
    allowed_stage = set(schema["stage_fields"]) - set(schema["topology_fields"])
    nested = {"engine": set(schema["engine_fields"]), "factory": set(schema["factory_fields"])}
    for key in overrides:
        if key not in set(schema["pipeline_fields"]) | {"config_cls", "stages", "shared"}:
            out.append(_f("scaffold.unknown_deploy_key", "fail", f"{yaml_rel}:{_line(overrides, key)}: '{key}' is "
                          f"not a PipelineConfig field of SGLang-Omni {schema['version']}", yaml_rel, key=key))
    for stage, body in (overrides.get("stages") or {}).items():
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
    strict_failed = any(f.status == "fail" for f in out)
    if real:
        out.insert(0, _f("scaffold.tier", "pass", f"tier: real SGLang-Omni {why} (PipelineConfig validation, "
                         "stages: overrides through its resolver, compile_logical_processes) + strict field checks; "
                         f"{GPU_TIER_NOTE}", tier="real", version=why, skipped="gpu"))
        if not strict_failed:
            plain = yaml.safe_load((root / yaml_rel).read_text(encoding="utf-8"))
            out += sglang_real_findings(so.real_load(root, manifest, plain))
    else:
        out.insert(0, _f("scaffold.tier", "skip", f"tier: stored schema sglang-omni {schema.get('version')} "
                         f"({so.SCHEMA_FILE.name}); the real framework did not run: {why}; {GPU_TIER_NOTE}",
                         tier="stored", version=schema.get("version"), reason=why, skipped="real,gpu"))
        if tree is not None:
            out += _sglang_graph_checks(tree, files["config"])
    return out


# -- entry points ----------------------------------------------------------------------------
def validate_static(root: str | Path, *, prefer_real: bool = True, model_type: str | None = None) -> Report:
    """Validate every scaffold recorded under ``root``.

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
    manifests = load_manifests(root)
    if model_type is not None:
        manifests = [m for m in manifests if m.get("model_type") == model_type]
        if not manifests:
            raise InputError(f"{root} has no scaffold for model type {model_type!r}")
    findings: list[Finding] = []
    for manifest in manifests:
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
        findings += part
    return Report("validate", findings, timing={"validate_s": time.perf_counter() - start})


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


def _cuda_missing() -> str | None:
    """Why the GPU tier cannot run here, or ``None`` when CUDA is available."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (pip install 'porting-kit[torch]')"
    if not torch.cuda.is_available():
        return f"no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False)"
    return None


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
    why = _cuda_missing()
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
