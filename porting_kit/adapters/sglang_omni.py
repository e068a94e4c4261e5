"""SGLang-Omni 0.1.9: its declarative config schema and the real validation path.

Real tier (``sglang_omni.config`` imports; it needs only pydantic, pyyaml,
msgpack, msgspec, pybase64 next to ``pip install --no-deps sglang-omni``):
:func:`real_load` imports the generated ``config.py``, builds the
``PipelineConfig`` subclass (its ``model_post_init`` runs ``validate_general``
and ``validate_processes``: next/terminal exclusivity, ``wait_for`` needs a
``merge_fn``, referenced stages exist, non-TP stages declare ``process``),
applies the YAML's ``stages:`` overrides through SGLang-Omni's own patch
resolver (``patches_from_stages_mapping`` + ``ConfigResolver``, the path
``ConfigManager.from_file`` takes), then runs ``compile_logical_processes``,
and returns what it said (:class:`SglangLoad`, facts only; the ``scaffold.*``
findings are built in :mod:`porting_kit.scaffold.validate`).

Stored tier: field lists in ``porting_kit/data/sglang_omni_schema.json``,
generated from the real package (``python -m porting_kit.adapters.sglang_omni
--write-schema``) and stamped with its version.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class SglangLoad:
    """What the real SGLang-Omni said about a scaffold (:func:`real_load`).

    Attributes
    ----------
    version : str
        The installed sglang-omni version.
    failed_step : str or None
        ``"config"`` (importing / building the PipelineConfig), ``"config_cls"`` (the YAML's
        ``config_cls`` names another class), ``"overrides"`` (the ``stages:`` overrides),
        ``"process_plan"`` (``compile_logical_processes``); None when everything ran.
    file : str
        The scaffold file (relative) of the failing step, or config.py.
    said : str
        ``"ExcType: message"`` (or a sentence) from the failing step; ``""`` when none failed.
    config_class : str
        The PipelineConfig subclass built (``""`` when none).
    processes, stages : tuple of str
        The compiled process names and the stage names (empty unless everything ran).
    """

    version: str
    failed_step: str | None
    file: str
    said: str = ""
    config_class: str = ""
    processes: tuple[str, ...] = ()
    stages: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when every step ran."""
        return self.failed_step is None


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip()[:400]}"


def _build_config(root: Path, config_rel: str, model_type: str, overrides: dict[str, Any]):
    """``(cls, config)`` built from the generated config.py; raises what SGLang-Omni raises."""
    from sglang_omni.config import PipelineConfig

    name = f"_pk_scaffold_{model_type}_sglang_config"
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
    return cls, cls(model_path=str(overrides.get("model_path") or "placeholder/model"))


def real_load(root: Path, manifest: dict[str, Any], overrides: dict[str, Any]) -> SglangLoad:
    """Build the generated config with the real SGLang-Omni, apply the YAML
    overrides, compile the process plan (needs ``sglang_omni``).

    Parameters
    ----------
    root : Path
        The scaffold's folder.
    manifest : dict
        Its manifest (``model_type``, ``files``: kind -> relative path).
    overrides : dict
        The overrides YAML, loaded plainly (``yaml.safe_load``).

    Returns
    -------
    SglangLoad
        The first failing step and what SGLang-Omni said, or the compiled plan.
    """
    from sglang_omni.config import compile_logical_processes
    from sglang_omni.config.resolver import ConfigResolver
    from sglang_omni.config.sources import patches_from_stages_mapping

    files = {k.split(":", 1)[0]: v for k, v in manifest["files"].items()}
    config_rel, yaml_rel = files["config"], files["overrides"]
    version = real_available()[1]
    try:
        cls, config = _build_config(root, config_rel, manifest["model_type"], overrides)
    except Exception as exc:  # noqa: BLE001 - report, do not crash
        return SglangLoad(version, "config", config_rel, _said(exc))
    if overrides.get("config_cls") not in (None, cls.__name__):
        return SglangLoad(version, "config_cls", yaml_rel, f"config_cls {overrides.get('config_cls')!r} is not "
                          f"the class in {config_rel} ({cls.__name__})", cls.__name__)
    stages_block = overrides.get("stages")
    if stages_block:
        try:
            patches = patches_from_stages_mapping(stages_block, cls, (s.name for s in config.stages),
                                                  origin=str(root / yaml_rel))
            config = ConfigResolver(config).resolve(patches).config
        except Exception as exc:  # noqa: BLE001
            return SglangLoad(version, "overrides", yaml_rel, _said(exc), cls.__name__)
    try:
        plan, _ = compile_logical_processes(config)
    except Exception as exc:  # noqa: BLE001
        return SglangLoad(version, "process_plan", config_rel, _said(exc), cls.__name__)
    return SglangLoad(version, None, config_rel, "", cls.__name__, tuple(p.name for p in plan.processes),
                      tuple(s.name for s in config.stages))


if __name__ == "__main__":
    if "--write-schema" in sys.argv:
        print(write_schema())
    else:
        print(json.dumps(schema_from_package(), indent=2))
