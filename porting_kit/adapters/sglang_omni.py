"""SGLang-Omni 0.1.9: its declarative config schema and the real validation path.

Real tier (``sglang_omni.config`` imports; it needs only pydantic, pyyaml,
msgpack, msgspec, pybase64 next to ``pip install --no-deps sglang-omni``):
:func:`real_validate` imports the generated ``config.py``, builds the
``PipelineConfig`` subclass (its ``model_post_init`` runs ``validate_general``
and ``validate_processes``: next/terminal exclusivity, ``wait_for`` needs a
``merge_fn``, referenced stages exist, non-TP stages declare ``process``),
applies the YAML's ``stages:`` overrides through SGLang-Omni's own patch
resolver (``patches_from_stages_mapping`` + ``ConfigResolver``, the path
``ConfigManager.from_file`` takes), then runs ``compile_logical_processes``.

Stored tier: field lists in ``porting_kit/data/sglang_omni_schema.json``,
generated from the real package (``python -m porting_kit.adapters.sglang_omni
--write-schema``) and stamped with its version.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from porting_kit.report.findings import Finding, Where
from porting_kit.resources import data_file

SCHEMA_FILE = data_file("sglang_omni_schema.json")
TARGET_VERSION = "0.1.9"
#: StageConfig fields that wire the graph: owned by config.py, never by overrides.
TOPOLOGY_FIELDS = ("name", "factory_path", "next", "terminal", "route_fn", "wait_for", "wait_for_fn",
                   "merge_fn", "stream_to", "stream_done_to_fn", "project_payload", "process")


def real_available() -> tuple[bool, str]:
    """``(True, version)`` when ``sglang_omni.config`` imports, else ``(False, reason)``."""
    try:
        found = importlib.util.find_spec("sglang_omni") is not None
    except ValueError:  # a stub module without __spec__ in sys.modules
        found = False
    if not found:
        return False, "sglang_omni is not installed"
    try:
        import sglang_omni.config  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return False, f"sglang_omni.config does not import: {type(exc).__name__}: {exc}"
    from importlib.metadata import PackageNotFoundError, version

    try:
        return True, version("sglang-omni")
    except PackageNotFoundError:
        return True, "unknown"


def schema_from_package() -> dict[str, Any]:
    """Field lists of the real pydantic models (needs ``sglang_omni``)."""
    from importlib.metadata import version

    from sglang_omni.config import schema as s

    return {
        "schema": "porting-kit/sglang-omni-fields/1",
        "package": "sglang-omni",
        "version": version("sglang-omni"),
        "generated_from": "model_fields of sglang_omni.config.schema",
        "stage_fields": sorted(s.StageConfig.model_fields),
        "engine_fields": sorted(s.EngineArgs.model_fields),
        "factory_fields": sorted(s.FactoryArgs.model_fields),
        "pipeline_fields": sorted(s.PipelineConfig.model_fields),
        "process_fields": sorted(s.ProcessConfig.model_fields),
        "topology_fields": list(TOPOLOGY_FIELDS),
    }


def stored_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def load_schema(prefer_real: bool = True) -> tuple[dict[str, Any], str]:
    """``(schema, tier)``; tier ``"real"`` or ``"stored"``."""
    if prefer_real and real_available()[0]:
        return schema_from_package(), "real"
    return stored_schema(), "stored"


def write_schema(path: Path = SCHEMA_FILE) -> Path:
    from porting_kit.fsutil import atomic_write_text

    atomic_write_text(path, json.dumps(schema_from_package(), indent=2) + "\n")
    return path


def _f(code: str, status: str, message: str, file: str | None = None, hint: str = "", **evidence) -> Finding:
    return Finding("scaffold", code, status, message, {k: v for k, v in evidence.items() if v is not None},
                   Where(candidate=file), hint)


def real_validate(root: Path, manifest: dict[str, Any], overrides: dict[str, Any]) -> list[Finding]:
    """Build the generated config with the real SGLang-Omni, apply the YAML
    overrides, compile the process plan. Codes: ``scaffold.sglang_invalid``,
    ``scaffold.sglang_override_rejected``, ``scaffold.process_plan_failed``."""
    from sglang_omni.config import PipelineConfig, compile_logical_processes
    from sglang_omni.config.resolver import ConfigResolver
    from sglang_omni.config.sources import patches_from_stages_mapping

    files = {k.split(":", 1)[0]: v for k, v in manifest["files"].items()}
    config_rel, yaml_rel = files["config"], files["overrides"]
    name = f"_pk_scaffold_{manifest['model_type']}_sglang_config"
    try:
        spec = importlib.util.spec_from_file_location(name, root / config_rel)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        classes = [v for v in vars(module).values()
                   if isinstance(v, type) and issubclass(v, PipelineConfig) and v is not PipelineConfig]
        wanted = overrides.get("config_cls")
        cls = next((c for c in classes if c.__name__ == wanted), classes[0] if classes else None)
        if cls is None:
            raise ValueError(f"no PipelineConfig subclass in {config_rel}")
        config = cls(model_path=str(overrides.get("model_path") or "placeholder/model"))
    except Exception as exc:  # noqa: BLE001
        return [_f("scaffold.sglang_invalid", "fail", f"{config_rel}: SGLang-Omni rejects the config: "
                   f"{type(exc).__name__}: {str(exc).strip()[:400]}", config_rel)]
    if overrides.get("config_cls") not in (None, cls.__name__):
        return [_f("scaffold.sglang_override_rejected", "fail", f"{yaml_rel}: config_cls "
                   f"{overrides.get('config_cls')!r} is not the class in {config_rel} ({cls.__name__})", yaml_rel)]
    stages_block = overrides.get("stages")
    if stages_block:
        try:
            patches = patches_from_stages_mapping(stages_block, cls, (s.name for s in config.stages),
                                                  origin=str(root / yaml_rel))
            config = ConfigResolver(config).resolve(patches).config
        except Exception as exc:  # noqa: BLE001
            return [_f("scaffold.sglang_override_rejected", "fail", f"{yaml_rel}: SGLang-Omni rejects the "
                       f"overrides: {type(exc).__name__}: {str(exc).strip()[:400]}", yaml_rel)]
    try:
        plan, _ = compile_logical_processes(config)
    except Exception as exc:  # noqa: BLE001
        return [_f("scaffold.process_plan_failed", "fail", f"compile_logical_processes fails: "
                   f"{type(exc).__name__}: {str(exc).strip()[:400]}", config_rel)]
    return [_f("scaffold.ok", "pass", f"SGLang-Omni built {cls.__name__}, applied {yaml_rel} and compiled "
               f"{len(plan.processes)} process(es)", config_rel,
               processes=",".join(p.name for p in plan.processes),
               stages=",".join(s.name for s in config.stages))]


if __name__ == "__main__":
    if "--write-schema" in sys.argv:
        print(write_schema())
    else:
        print(json.dumps(schema_from_package(), indent=2))
