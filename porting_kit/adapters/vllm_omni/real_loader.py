"""Run vLLM-Omni 0.30.0's real loading path on a scaffold and say what it said (needs ``vllm_omni``).

The steps, in order (a failing step of the first three ends the run):
``pipeline`` (construct the generated ``PipelineConfig``), ``deploy``
(``load_deploy_config`` the YAML), ``merge`` (``merge_pipeline_deploy``),
``import`` (each model / stage-input-processor file), ``resolve``
(``register_pipeline`` + ``resolve_pipeline_config``), ``adapter_import`` (the
adapter registers itself), ``detect`` (``detect_tts_model_type``), ``validate``
/ ``validate_empty`` (the adapter's ``validate()`` on a plain and an empty
``OpenAICreateSpeechRequest``), ``build`` / ``build_type`` (``build()`` and its
``PreparedRequest``), ``forward`` (each request value reaches
``additional_information``).

Facts only: :func:`real_load` returns a :class:`RealLoad`; the ``scaffold.*``
findings are built in :mod:`porting_kit.scaffold.validate`. The registries
touched are restored afterwards.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: What the plain request sends and the adapter must forward.
SENT = {"text": "Hello from porting-kit.", "seed": 7, "max_new_tokens": 64, "language": "English"}


@dataclass(frozen=True)
class LoaderProblem:
    """One step of the real loading path that did not do what it should.

    Attributes
    ----------
    step : str
        The step's name (module docstring).
    file : str
        The scaffold file (relative to its root) the step loaded.
    said : str
        What the loader said: ``"ExcType: message"`` for an exception, else a sentence.
    details : dict
        Flat strings / numbers (``detected``, ``model_stage``, ``key``, ``sent``, ``got``).
    """

    step: str
    file: str
    said: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RealLoad:
    """The outcome of :func:`real_load`: the steps that ran and the problems found."""

    version: str
    steps: tuple[str, ...]
    problems: tuple[LoaderProblem, ...]

    @property
    def ok(self) -> bool:
        """True when every step that ran did what it should."""
        return not self.problems


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip()[:400]}"


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


class _Run:
    def __init__(self):
        self.steps: list[str] = []
        self.problems: list[LoaderProblem] = []

    def step(self, name: str) -> None:
        self.steps.append(name)

    def problem(self, step: str, file: str, said: str, **details) -> None:
        self.problems.append(LoaderProblem(step, file, said, details))


def _load_config(run: _Run, root: Path, files: dict[str, str], m: str):
    """``(pipeline, deploy)`` or None after recording the failing step."""
    from vllm_omni.config.stage_config import PipelineConfig, load_deploy_config, merge_pipeline_deploy

    pipe_rel, deploy_rel = files["pipeline"], files["deploy"]
    run.step("pipeline")
    try:
        mod = _load_module(root / pipe_rel, f"_pk_scaffold_{m}_pipeline")
        pipelines = [v for v in vars(mod).values() if isinstance(v, PipelineConfig)]
        if len(pipelines) != 1:
            raise ValueError(f"expected one PipelineConfig in {pipe_rel}, found {len(pipelines)}")
        pipeline = pipelines[0]
    except Exception as exc:  # noqa: BLE001 - report, do not crash
        return run.problem("pipeline", pipe_rel, _said(exc))
    run.step("deploy")
    try:
        deploy = load_deploy_config(root / deploy_rel)
    except Exception as exc:  # noqa: BLE001
        return run.problem("deploy", deploy_rel, _said(exc))
    run.step("merge")
    try:
        merge_pipeline_deploy(pipeline, deploy)
    except Exception as exc:  # noqa: BLE001
        return run.problem("merge", deploy_rel, _said(exc), pipeline=pipe_rel)
    return pipeline


def _import_files(run: _Run, root: Path, manifest: dict[str, Any]) -> None:
    """Import the generated model and processor files against the real framework.

    The tree's ``vllm_omni/`` folder is mounted as a private package (never under the
    name ``vllm_omni``), so the files' relative imports (``from ._vllm_seam import ...``)
    resolve to the generated seam; the package is removed from ``sys.modules`` afterwards.
    """
    import types
    import uuid

    package = f"_pk_scaffold_{manifest['model_type']}_{uuid.uuid4().hex[:8]}"
    pkg = types.ModuleType(package)
    pkg.__path__ = [str(root / "vllm_omni")]
    sys.modules[package] = pkg
    try:
        for kind_path, rel in manifest["files"].items():
            if kind_path.split(":", 1)[0] in ("model", "processor"):
                run.step("import")
                try:
                    dotted = ".".join(Path(rel).relative_to("vllm_omni").with_suffix("").parts)
                    importlib.import_module(f"{package}.{dotted}")
                except Exception as exc:  # noqa: BLE001
                    run.problem("import", rel, _said(exc))
    finally:
        for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
            del sys.modules[name]


def _exercise_adapter(run: _Run, adapter_rel: str, adapter_cls) -> None:
    """validate() on a plain and an empty request, build() and what it forwards."""
    from vllm_omni.entrypoints.openai.protocol.audio import OpenAICreateSpeechRequest
    from vllm_omni.entrypoints.openai.tts_adapters.base import PreparedRequest, SpeechServingContext

    engine = type("EngineStub", (), {"model_config": None, "stage_configs": ()})()
    adapter = adapter_cls(SpeechServingContext(server=_StubServer(), engine_client=engine))
    request = OpenAICreateSpeechRequest(input=SENT["text"], seed=SENT["seed"], max_new_tokens=SENT["max_new_tokens"],
                                        language=SENT["language"], voice="default")
    run.step("validate")
    error = adapter.validate(request)
    if error is not None:
        run.problem("validate", adapter_rel, str(error))
    run.step("validate_empty")
    if adapter.validate(OpenAICreateSpeechRequest(input=" ")) is None:
        run.problem("validate_empty", adapter_rel, "validate() accepts an empty input")
    run.step("build")
    try:
        prepared = asyncio.run(adapter.build(request, [], False))
    except Exception as exc:  # noqa: BLE001
        return run.problem("build", adapter_rel, _said(exc))
    run.step("build_type")
    if not isinstance(prepared, PreparedRequest):
        return run.problem("build_type", adapter_rel, f"build() returns {type(prepared).__name__}",
                           got=type(prepared).__name__)
    info = (prepared.prompt or {}).get("additional_information") or {}
    for key, value in SENT.items():
        run.step("forward")
        got = info.get(key)
        got = got[0] if isinstance(got, list) and got else got
        if got != value:
            run.problem("forward", adapter_rel, f"request {key}={value!r} into additional_information "
                                                f"(got {got!r})", key=key,
                        sent=repr(value), got=repr(got))


def _register_and_detect(run: _Run, root: Path, files: dict[str, str], m: str, pipeline) -> None:
    from vllm_omni.config import pipeline_registry as preg
    from vllm_omni.entrypoints.openai import tts_adapters as tts

    pipe_rel, adapter_rel = files["pipeline"], files["adapter"]
    run.step("resolve")
    preg.register_pipeline(pipeline)
    if preg.resolve_pipeline_config(pipeline.model_type) is not pipeline:
        run.problem("resolve", pipe_rel, f"resolve_pipeline_config({pipeline.model_type!r}) does not return "
                                         "the registered pipeline")
    run.step("adapter_import")
    try:
        _load_module(root / adapter_rel, f"_pk_scaffold_{m}_adapter")
    except Exception as exc:  # noqa: BLE001
        return run.problem("adapter_import", adapter_rel, _said(exc))
    entry = pipeline.stages[0]
    arch = entry.model_arch or pipeline.model_arch
    run.step("detect")
    detected = tts.detect_tts_model_type(entry.model_stage, arch)
    if detected != m:
        return run.problem("detect", adapter_rel, f"detect_tts_model_type({entry.model_stage!r}, {arch!r}) "
                                                  f"returns {detected!r}", detected=str(detected),
                           model_stage=entry.model_stage, arch=str(arch))
    _exercise_adapter(run, adapter_rel, tts.resolve_adapter(m))


def real_load(root: Path, manifest: dict[str, Any]) -> RealLoad:
    """Run the real vLLM-Omni loading path on the scaffold recorded by ``manifest``.

    Parameters
    ----------
    root : Path
        The scaffold's folder.
    manifest : dict
        Its ``.porting-kit/scaffold-*.json`` (``model_type``, ``files``: kind -> relative path).

    Returns
    -------
    RealLoad
        The vllm-omni version, the steps that ran, the problems (none when everything loads).

    Raises
    ------
    ImportError
        ``vllm_omni`` does not import (check :func:`porting_kit.adapters.vllm_omni.schema.real_available`).
    """
    import vllm_omni
    from vllm_omni.config import pipeline_registry as preg
    from vllm_omni.entrypoints.openai import tts_adapters as tts

    m = manifest["model_type"]
    files = {k.split(":", 1)[0]: v for k, v in manifest["files"].items()}
    run = _Run()
    version = str(getattr(vllm_omni, "__version__", "unknown"))
    pipeline = _load_config(run, root, files, m)
    if pipeline is None:
        return RealLoad(version, tuple(run.steps), tuple(run.problems))
    _import_files(run, root, manifest)
    previous = preg.OMNI_PIPELINES.get(pipeline.model_type)
    old_adapter = tts.TTS_ADAPTER_REGISTRY.pop(m, None)
    try:
        _register_and_detect(run, root, files, m, pipeline)
    finally:
        tts.TTS_ADAPTER_REGISTRY.pop(m, None)
        if old_adapter is not None:
            tts.TTS_ADAPTER_REGISTRY[m] = old_adapter
        if previous is not None:
            preg.OMNI_PIPELINES[pipeline.model_type] = previous
        else:
            preg.OMNI_PIPELINES.pop(pipeline.model_type, None)
    return RealLoad(version, tuple(run.steps), tuple(run.problems))
