"""vLLM-Omni 0.30.0: its config-layer schema and the real loading path.

Two tiers (``porting-kit validate --static`` says which one ran):

* **real** — ``vllm_omni`` imports (the config-layer environment built by
  ``.ci/vllm-omni-env.sh``): the allowed keys come from the real dataclasses
  with :func:`dataclasses.fields`, and :func:`real_validate` runs the real
  loader: construct the generated ``PipelineConfig``, ``load_deploy_config``
  the YAML, ``merge_pipeline_deploy``, ``register_pipeline`` +
  ``resolve_pipeline_config``, import the adapter (it registers itself),
  ``detect_tts_model_type``, and the adapter's ``validate()`` / ``build()`` on a
  real ``OpenAICreateSpeechRequest``.
* **stored** — no ``vllm_omni``: the same field lists, stored in
  ``porting_kit/data/vllm_omni_schema.json`` (generated from the real package by
  ``python -m porting_kit.adapters.vllm_omni.schema --write-schema`` in that
  environment, stamped with the package version).

A list of field names is a fact about the package, not its code (DESIGN.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from porting_kit.report.findings import Finding, Where
from porting_kit.resources import data_file

SCHEMA_FILE = data_file("vllm_omni_schema.json")
TARGET_VERSION = "0.30.0"


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


def schema_from_package() -> dict[str, Any]:
    """Field lists of the real dataclasses (needs ``vllm_omni``).

    Returns
    -------
    dict
        ``version``, ``stage_pipeline_fields``, ``pipeline_fields``,
        ``stage_deploy_fields``, ``deploy_fields``, ``stage_reserved_keys``
        (keys the deploy loader handles itself), ``execution_types``.
    """
    import vllm_omni
    from vllm_omni.config import stage_config as sc

    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    return {
        "schema": "porting-kit/vllm-omni-fields/1",
        "package": "vllm-omni",
        "version": str(vllm_omni.__version__),
        "generated_from": "dataclasses.fields() of vllm_omni.config.stage_config",
        "stage_pipeline_fields": names(sc.StagePipelineConfig),
        "pipeline_fields": names(sc.PipelineConfig),
        "stage_deploy_fields": names(sc.StageDeployConfig),
        "deploy_fields": names(sc.DeployConfig),
        "stage_reserved_keys": sorted(sc._STAGE_RESERVED_KEYS),
        "execution_types": [e.value for e in sc.StageExecutionType],
        "deploy_top_level_extra": ["base_config"],
        "pipeline_wide_engine_fields": list(sc.PIPELINE_WIDE_ENGINE_FIELDS),
    }


def stored_schema() -> dict[str, Any]:
    """The field lists stored in ``porting_kit/data/vllm_omni_schema.json``."""
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def load_schema(prefer_real: bool = True) -> tuple[dict[str, Any], str]:
    """``(schema, tier)`` where tier is ``"real"`` or ``"stored"``."""
    if prefer_real and _import_error() is None:
        return schema_from_package(), "real"
    return stored_schema(), "stored"


def write_schema(path: Path = SCHEMA_FILE) -> Path:
    """Regenerate the stored field lists from the installed package."""
    from porting_kit.fsutil import atomic_write_text

    atomic_write_text(path, json.dumps(schema_from_package(), indent=2) + "\n")
    return path


# -- real tier ---------------------------------------------------------------------------------
def _load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class _StubServer:
    """The parts of ``OmniOpenAIServingSpeech`` a generated adapter may touch."""

    uploaded_speakers: dict = {}  # noqa: RUF012 - read-only stub
    model_name = "porting-kit-validate"

    async def _resolve_ref_audio(self, ref_audio):
        return [0.0] * 160, 16000, "stub-cache-key"

    def _get_available_speakers(self):
        return {"default"}


def _f(code: str, status: str, message: str, file: str | None = None, hint: str = "",
       **evidence) -> Finding:
    return Finding("scaffold", code, status, message, {k: v for k, v in evidence.items() if v is not None},
                   Where(candidate=file), hint)


def real_validate(root: Path, manifest: dict[str, Any]) -> list[Finding]:
    """Run the real vLLM-Omni loading path on a scaffold (needs ``vllm_omni``).

    Returns findings with codes ``scaffold.pipeline_invalid``,
    ``scaffold.deploy_invalid``, ``scaffold.merge_failed``,
    ``scaffold.adapter_not_detected``, ``scaffold.adapter_build_failed``,
    ``scaffold.adapter_drops_value``, ``scaffold.import_failed`` (a model or
    stage-input-processor file that does not import) — none when everything loads.
    """
    from vllm_omni.config import pipeline_registry as preg
    from vllm_omni.config.stage_config import (
        PipelineConfig,
        load_deploy_config,
        merge_pipeline_deploy,
    )
    from vllm_omni.entrypoints.openai import tts_adapters as tts
    from vllm_omni.entrypoints.openai.protocol.audio import OpenAICreateSpeechRequest
    from vllm_omni.entrypoints.openai.tts_adapters.base import PreparedRequest, SpeechServingContext

    m = manifest["model_type"]
    files = {k.split(":", 1)[0]: v for k, v in manifest["files"].items()}
    out: list[Finding] = []
    pipe_rel, deploy_rel, adapter_rel = files["pipeline"], files["deploy"], files["adapter"]

    try:
        mod = _load_module(root / pipe_rel, f"_pk_scaffold_{m}_pipeline")
        pipelines = [v for v in vars(mod).values() if isinstance(v, PipelineConfig)]
        if len(pipelines) != 1:
            raise ValueError(f"expected one PipelineConfig in {pipe_rel}, found {len(pipelines)}")
        pipeline = pipelines[0]
    except Exception as exc:  # noqa: BLE001 - report, do not crash
        return [_f("scaffold.pipeline_invalid", "fail", f"{pipe_rel}: the real PipelineConfig rejects it: "
                   f"{type(exc).__name__}: {exc}", pipe_rel, "Fix the topology in pipeline.py.")]
    try:
        deploy = load_deploy_config(root / deploy_rel)
    except Exception as exc:  # noqa: BLE001
        return [_f("scaffold.deploy_invalid", "fail", f"{deploy_rel}: load_deploy_config fails: "
                   f"{type(exc).__name__}: {exc}", deploy_rel)]
    try:
        stages = merge_pipeline_deploy(pipeline, deploy)
    except Exception as exc:  # noqa: BLE001
        return [_f("scaffold.merge_failed", "fail", f"merge_pipeline_deploy({pipe_rel}, {deploy_rel}) fails: "
                   f"{type(exc).__name__}: {exc}", deploy_rel)]

    for kind_path, rel in manifest["files"].items():
        if kind_path.split(":", 1)[0] in ("model", "processor"):
            try:
                _load_module(root / rel, f"_pk_scaffold_{m}_{Path(rel).stem}")
            except Exception as exc:  # noqa: BLE001
                out.append(_f("scaffold.import_failed", "fail", f"{rel} does not import against vLLM-Omni: "
                              f"{type(exc).__name__}: {exc}", rel))

    previous = preg.OMNI_PIPELINES.get(pipeline.model_type)
    old_adapter = tts.TTS_ADAPTER_REGISTRY.pop(m, None)
    try:
        preg.register_pipeline(pipeline)
        if preg.resolve_pipeline_config(pipeline.model_type) is not pipeline:
            out.append(_f("scaffold.pipeline_invalid", "fail", f"resolve_pipeline_config({pipeline.model_type!r}) "
                          "does not return the registered pipeline", pipe_rel))
        try:
            _load_module(root / adapter_rel, f"_pk_scaffold_{m}_adapter")
        except Exception as exc:  # noqa: BLE001
            out.append(_f("scaffold.adapter_build_failed", "fail", f"{adapter_rel} does not import: "
                          f"{type(exc).__name__}: {exc}", adapter_rel))
            return out
        entry = pipeline.stages[0]
        arch = entry.model_arch or pipeline.model_arch
        detected = tts.detect_tts_model_type(entry.model_stage, arch)
        if detected != m:
            out.append(_f("scaffold.adapter_not_detected", "fail",
                          f"detect_tts_model_type({entry.model_stage!r}, {arch!r}) returns {detected!r}, "
                          f"not {m!r}: /v1/audio/speech would not route to this adapter",
                          adapter_rel, "Put the entry stage's model_stage in the adapter's stage_keys.",
                          detected=str(detected), model_stage=entry.model_stage))
            return out
        adapter_cls = tts.resolve_adapter(m)
        engine = type("EngineStub", (), {"model_config": None, "stage_configs": ()})()
        adapter = adapter_cls(SpeechServingContext(server=_StubServer(), engine_client=engine))
        request = OpenAICreateSpeechRequest(input="Hello from porting-kit.", seed=7, max_new_tokens=64,
                                            language="English", voice="default")
        error = adapter.validate(request)
        bad = adapter.validate(OpenAICreateSpeechRequest(input=" "))
        if error is not None:
            out.append(_f("scaffold.adapter_build_failed", "fail",
                          f"adapter.validate() rejects a plain request: {error}", adapter_rel))
        if bad is None:
            out.append(_f("scaffold.adapter_build_failed", "fail",
                          "adapter.validate() accepts an empty input", adapter_rel))
        try:
            prepared = asyncio.run(adapter.build(request, [], False))
        except Exception as exc:  # noqa: BLE001
            out.append(_f("scaffold.adapter_build_failed", "fail", f"adapter.build() raises "
                          f"{type(exc).__name__}: {exc}", adapter_rel))
            return out
        if not isinstance(prepared, PreparedRequest):
            out.append(_f("scaffold.adapter_build_failed", "fail",
                          f"adapter.build() returns {type(prepared).__name__}, not PreparedRequest", adapter_rel))
            return out
        info = (prepared.prompt or {}).get("additional_information") or {}
        sent = {"text": "Hello from porting-kit.", "seed": 7, "max_new_tokens": 64, "language": "English"}
        for key, value in sent.items():
            got = info.get(key)
            got = got[0] if isinstance(got, list) and got else got
            if got != value:
                out.append(_f("scaffold.adapter_drops_value", "fail",
                              f"adapter.build() does not forward request {key}={value!r} into "
                              f"additional_information (got {got!r})", adapter_rel,
                              "Forward every value build() reads.", key=key))
        del stages
    finally:
        tts.TTS_ADAPTER_REGISTRY.pop(m, None)
        if old_adapter is not None:
            tts.TTS_ADAPTER_REGISTRY[m] = old_adapter
        if previous is not None:
            preg.OMNI_PIPELINES[pipeline.model_type] = previous
        else:
            preg.OMNI_PIPELINES.pop(pipeline.model_type, None)
    return out


if __name__ == "__main__":
    if "--write-schema" in sys.argv:
        print(write_schema())
    else:
        print(json.dumps(schema_from_package(), indent=2))
