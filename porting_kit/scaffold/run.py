"""Drive a generated vLLM-Omni pipeline end to end (facts for the run tier).

:func:`run_pipeline` loads the generated files of a scaffold (the seam
``_vllm_seam.py``, the stage models, the stage-input processors) under a
private package name -- nothing is put in ``sys.modules`` under ``vllm`` or
``vllm_omni`` -- builds every stage model from a tiny LM config (hidden 64,
2 layers, head width 32; vocabulary, codebooks, hop length and stop ids stay
the generated file's own) with seeded random weights, and drives the pipeline
through the stage engines of :mod:`porting_kit.adapters.vllm_omni.engine`.
Where the seam's ``Attention`` is vLLM's own (vLLM importable), the models are
built under ``set_current_vllm_config`` with a minimal real ``VllmConfig`` and
the AR stage gets a paged KV cache on vLLM's CPU attention backend
(:class:`~porting_kit.adapters.vllm_omni.engine.PagedKV`, installed with vLLM's
``set_forward_context``). The run:

* the dummy / profile call of every stage;
* each request alone (solo), then 4 requests interleaved (two join at step 0,
  two at step 2) plus a fifth that is aborted at step 2;
* two-stage: each stage-0 row goes through the generated processor
  (``*_async_chunk`` when the deploy YAML says ``async_chunk``, else
  ``*_full_payload`` + ``*_token_only`` once stage 0 finishes) into stage 1.

Facts only (:class:`RunFacts`); the verdicts (``run.*``, ``rng.*``) are built in
:func:`porting_kit.scaffold.validate.run_tier`. The single-stage (generator)
shape needs an upstream model with ``inference_stream()``: a seeded stand-in
that draws from the process RNG (as upstream code does) is passed in, and the
facts say so.
"""

from __future__ import annotations

import ast
import importlib
import sys
import traceback
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from porting_kit.fsutil import MAX_DEPLOY_YAML_BYTES, read_input_text

#: The LM config the stage models are built from (shrunk: seconds on 2 CPU cores).
#: Head width 32: the smallest vLLM's CPU attention kernels take.
TINY_LM = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
           "intermediate_size": 128, "rms_norm_eps": 1e-6}
#: Requests: (id, text, seed, max new tokens); different lengths so they finish apart.
RUN_REQUESTS = (("req-a", "the quick brown fox", 11, 7), ("req-b", "hello there", 22, 10),
                ("req-c", "a longer sentence that keeps going", 33, 13), ("req-d", "one two three", 44, 9))
ABORTED = ("req-x", "this one is aborted mid-stream", 55, 13)
#: Frames per async chunk in the run (the deploy's codec_chunk_frames, at most this).
RUN_CHUNK_FRAMES = 4
WEIGHT_SEED = 0
#: Audio of a batched request must equal its solo run within this (float32 rounding).
ATOL = 1e-4


@dataclass
class StageFault:
    """The first contract a stage broke.

    Attributes
    ----------
    kind : str
        ``"exception"``, ``"handoff_shape"``, ``"no_audio"`` or ``"upstream_mismatch"`` (a real
        single-stage upstream lacks an attribute or an ``inference_stream`` parameter the model needs).
    stage : int
        Stage id (0, 1).
    where : str
        What was being called (``"stage 0 forward"``, ``"processor my_tts2code2wav_async_chunk"``).
    message : str
    file : str or None
        Generated file (relative to the scaffold root) and ``line`` where it happened.
    line : int or None
    """

    kind: str
    stage: int
    where: str
    message: str
    file: str | None = None
    line: int | None = None


@dataclass
class RunFacts:
    """What driving a generated pipeline showed.

    Attributes
    ----------
    shape : str
    seam : str
        ``"real"`` or ``"stand-ins"`` (the generated seam's ``SEAM``); ``seam_detail`` says more.
    attention : str
        The seam's ``ATTENTION`` line.
    device : str
    async_chunk : bool
        Whether stage 0 -> 1 ran through the async-chunk processor.
    upstream : str
        ``"stand-in"`` for the single-stage shape (no checkpoint), else ``""``.
    requests : int
        Requests interleaved (besides the aborted one).
    steps : int
        Engine steps of the interleaved run (all stages).
    chunks : int
        Stage-1 chunks of the interleaved run (two-stage).
    samples : dict of str to int
        Audio samples each request received in the interleaved run.
    frames : dict of str to int
        Valid codec frames stage 0 produced per request (two-stage).
    hop_length : int
    crosstalk : list of tuple
        ``(request, first differing sample, max abs diff)`` where a batched request's
        audio differs from its solo run.
    left_state : list of str
        Per-request state keys a model still held after every request finished or was aborted.
    aborted : str
    fault : StageFault or None
    """

    shape: str
    seam: str = ""
    seam_detail: str = ""
    attention: str = ""
    device: str = "cpu"
    async_chunk: bool = False
    upstream: str = ""
    requests: int = 0
    steps: int = 0
    chunks: int = 0
    samples: dict[str, int] = field(default_factory=dict)
    frames: dict[str, int] = field(default_factory=dict)
    hop_length: int = 0
    crosstalk: list[tuple[str, int, float]] = field(default_factory=list)
    left_state: list[str] = field(default_factory=list)
    aborted: str = ""
    fault: StageFault | None = None


class _Fault(Exception):
    def __init__(self, fault: StageFault) -> None:
        super().__init__(fault.message)
        self.fault = fault


# -- loading ----------------------------------------------------------------------------------
def _where_in_tree(exc: BaseException, root: Path) -> tuple[str | None, int | None]:
    """The innermost traceback frame inside the generated tree: (relative file, line)."""
    found: tuple[str | None, int | None] = (None, None)
    for frame in traceback.extract_tb(exc.__traceback__):
        path = Path(frame.filename)
        if path.is_relative_to(root):
            found = (str(path.relative_to(root)), frame.lineno)
    return found


def _def_line(fn: Any, root: Path) -> tuple[str | None, int | None]:
    code = getattr(fn, "__code__", None)
    if code is None or not Path(code.co_filename).is_relative_to(root):
        return None, None
    return str(Path(code.co_filename).relative_to(root)), code.co_firstlineno


@dataclass
class _Tree:
    root: Path
    package: str
    seam: Any
    models: dict[int, Any]
    processors: Any
    stages: list[dict[str, Any]]
    deploy: dict[str, Any]
    #: ``() -> VllmConfig`` when the seam's attention is vLLM's (a fresh config per pipeline).
    real_config: Any = None
    config_dir: Path | None = None
    #: The single-stage shape's upstream model (None: :class:`StandInUpstream`).
    upstream: Any = None
    #: Requests carry ``ref_audio`` / ``ref_text`` (the scaffold's stage fields include them).
    reference: bool = False


def _func_name(node: ast.expr) -> str | None:
    """Last dotted component of a processor path (a str or an f-string)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.rsplit(".", 1)[-1]
    if isinstance(node, ast.JoinedStr):
        text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
        return text.rsplit(".", 1)[-1]
    return None


def _pipeline_stages(path: Path) -> list[dict[str, Any]]:
    tree = ast.parse(read_input_text(path))
    stages = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) \
                == "StagePipelineConfig":
            stage: dict[str, Any] = {}
            for kw in node.keywords:
                try:
                    stage[kw.arg] = ast.literal_eval(kw.value)
                except ValueError:
                    stage[kw.arg] = _func_name(kw.value)
            stages.append(stage)
    return sorted(stages, key=lambda s: s.get("stage_id", 0))


def _import(name: str, root: Path, stage: int, what: str) -> Any:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - any import error of generated code is a finding
        file, line = _where_in_tree(exc, root)
        raise _Fault(StageFault("exception", stage, f"import {what}", f"{type(exc).__name__}: {exc}",
                                file, line)) from exc


def _load_tree(root: Path, manifest: dict[str, Any]) -> _Tree:
    import types

    import yaml

    from porting_kit.errors import InputError

    m = manifest["model_type"]
    models_dir = f"vllm_omni/model_executor/models/{m}"
    for rel in (f"{models_dir}/_vllm_seam.py", f"{models_dir}/pipeline.py", f"{models_dir}/modeling_{m}.py",
                f"vllm_omni/deploy/{m}.yaml"):
        if not (root / rel).is_file():
            raise InputError(f"{root / rel} not found: the run tier needs the generated file "
                             "(regenerate the scaffold with porting-kit scaffold)")
    try:
        deploy = yaml.safe_load(read_input_text(root / f"vllm_omni/deploy/{m}.yaml", max_bytes=MAX_DEPLOY_YAML_BYTES,
                                                 what="deploy YAML")) or {}
        stages = _pipeline_stages(root / f"{models_dir}/pipeline.py")
    except (yaml.YAMLError, SyntaxError, ValueError) as exc:
        raise InputError(f"{root}: the deploy YAML or pipeline.py of {m} does not parse: {exc}") from exc
    if not isinstance(deploy, dict) or not stages:
        raise InputError(f"{root}: {m}'s deploy YAML is not a mapping or pipeline.py has no StagePipelineConfig")
    package = f"_pk_run_{uuid.uuid4().hex[:8]}"
    pkg = types.ModuleType(package)
    pkg.__path__ = [str(root / "vllm_omni")]
    sys.modules[package] = pkg
    # the framework's own package __init__s (a tree after scaffold --into: models/__init__.py imports
    # registry.py, which imports vllm) are not run: their folders are bare packages, as in a --out tree,
    # so the generated files load through their seam (real vLLM or its stand-ins) either way
    for sub in ("model_executor", "model_executor.models", "model_executor.stage_input_processors"):
        folder = root / "vllm_omni" / sub.replace(".", "/")
        if folder.is_dir():
            bare = types.ModuleType(f"{package}.{sub}")
            bare.__path__ = [str(folder)]
            sys.modules[bare.__name__] = bare
    base = f"{package}.model_executor.models.{m}"
    try:
        seam = _import(f"{base}._vllm_seam", root, 0, "_vllm_seam.py")
        models = {0: _import(f"{base}.modeling_{m}", root, 0, f"modeling_{m}.py")}
        processors = None
        if manifest["shape"] == "two-stage":
            models[1] = _import(f"{base}.{m}_code2wav", root, 1, f"{m}_code2wav.py")
            processors = _import(f"{package}.model_executor.stage_input_processors.{m}", root, 0,
                                 "stage_input_processors")
    except BaseException:
        _unload(package)
        raise
    tree = _Tree(root, package, seam, models, processors, stages, deploy)
    if getattr(seam, "ATTENTION_IMPL", "") == "vllm":
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="porting-kit-run-"))
        tree.real_config = lambda: _real_vllm_config("cpu", folder)
        tree.config_dir = folder
    return tree


def _model_rel(manifest: dict[str, Any]) -> str:
    m = manifest["model_type"]
    return f"vllm_omni/model_executor/models/{m}/modeling_{m}.py"


def _unload(package: str) -> None:
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]


def _model_class(module: Any, name: str | None) -> type:
    import torch

    if name and isinstance(getattr(module, name, None), type):
        return getattr(module, name)
    classes = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, torch.nn.Module)
               and v.__module__ == module.__name__ and not v.__name__.startswith("_")]
    if not classes:
        raise ValueError(f"{module.__name__} defines no public nn.Module")
    return classes[-1]


# -- the single-stage stand-in upstream ---------------------------------------------------------
class StandInUpstream:
    """Upstream stand-in for the generator shape: ``inference_stream(text)`` yields audio events.

    Draws its noise from the process RNGs (torch, numpy) as upstream code often does, so a
    skeleton that does not swap per-request RNG state in shows crosstalk. Chunks: 64 samples
    each, ``2 + len(text) % 3`` of them, then a ``result`` event.
    """

    def __init__(self) -> None:
        import torch

        self.weight = torch.ones(1)

    def inference_stream(self, text: str, **kwargs: Any):
        import numpy as np
        import torch

        for _ in range(2 + len(text) % 3):
            yield {"type": "audio", "waveform": torch.randn(64) * 0.1 + float(np.random.rand()) * 0.01}  # noqa: PK502 - stand-in upstream draws from the global RNG like real upstream code; the skeleton's RNG swap isolates it
        yield {"type": "result", "waveform": torch.zeros(64)}


#: Request values the contract check maps onto a real upstream's ``inference_stream``: every
#: field the generated adapter may forward, so a field upstream cannot take is found before a
#: user's request hits it.
CONTRACT_VALUES = {"voice": "a", "ref_audio": [[0.0], 16000], "ref_text": "a", "language": "en",
                   "instructions": "a", "max_new_tokens": 1, "codec": object(), "generator": object()}


def upstream_problems(module: Any, upstream: Any) -> list[str]:
    """Where ``upstream`` breaks what the generated single-stage model expects of it.

    The generated module declares ``UPSTREAM_ATTRIBUTES`` (attributes it reads) and
    ``stream_kwargs`` (request values -> upstream's parameter names, raising ValueError on a
    value with no parameter or a required parameter it never passes). A module without them
    (an older scaffold) is not checked.

    Returns
    -------
    list of str
        One line per problem; empty when the upstream fits.
    """
    out = [f"upstream {type(upstream).__name__} has no attribute {name!r}"
           for name in getattr(module, "UPSTREAM_ATTRIBUTES", ()) if not hasattr(upstream, name)]
    mapper, fn = getattr(module, "stream_kwargs", None), getattr(upstream, "inference_stream", None)
    if callable(mapper) and callable(fn):
        for key, value in CONTRACT_VALUES.items():
            try:
                mapper(fn, {key: value} if key in ("codec", "generator") else {key: value, "codec": object()})
            except ValueError as exc:
                out.append(str(exc))
            except Exception:  # noqa: BLE001 - converting the value (e.g. a temp WAV) is not the contract
                continue
    return list(dict.fromkeys(out))


def upstream_from_source(path: Path, class_name: str) -> Any | None:
    """A stub of the upstream class read from its source, never run: its methods with their
    signatures (``inspect.signature`` works on them) and the attributes its code sets (``self.x =``,
    class-level names), for :func:`upstream_problems`. None when the file or class is not there."""
    import inspect

    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if cls is None:
        return None
    attrs: dict[str, Any] = {}
    for node in ast.walk(cls):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    attrs[t.attr] = None
                elif isinstance(t, ast.Name):
                    attrs[t.id] = None
    P = inspect.Parameter  # noqa: N806

    def signature(fn: ast.FunctionDef) -> inspect.Signature:
        a = fn.args
        params = []
        positional = [*a.posonlyargs, *a.args][1:]  # drop self
        n_required = len(positional) - len(a.defaults)
        for i, arg in enumerate(positional):
            kind = P.POSITIONAL_ONLY if arg in a.posonlyargs else P.POSITIONAL_OR_KEYWORD
            params.append(P(arg.arg, kind, default=P.empty if i < n_required else None))
        if a.vararg:
            params.append(P(a.vararg.arg, P.VAR_POSITIONAL))
        for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
            params.append(P(arg.arg, P.KEYWORD_ONLY, default=P.empty if default is None else None))
        if a.kwarg:
            params.append(P(a.kwarg.arg, P.VAR_KEYWORD))
        return inspect.Signature(params)

    for fn in cls.body:
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and not fn.name.startswith("__"):
            def stub(*args: Any, **kwargs: Any) -> Any:
                raise RuntimeError("read from source, not runnable")
            stub.__signature__ = signature(fn)  # type: ignore[attr-defined]
            attrs[fn.name] = staticmethod(stub)
    return type(class_name, (), attrs)()


# -- building ---------------------------------------------------------------------------------
def _real_vllm_config(device: str, folder: Path) -> Any:
    """A minimal real ``VllmConfig`` for the tiny LM (its config.json written to ``folder``)."""
    import json

    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig

    doc = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256,
           "max_position_embeddings": 512, "torch_dtype": "float32", **TINY_LM}
    (folder / "config").with_suffix(".json").write_text(json.dumps(doc), encoding="utf-8")  # HF config file
    model = ModelConfig(model=str(folder), tokenizer=str(folder), skip_tokenizer_init=True, dtype="float32",
                        max_model_len=512)
    return VllmConfig(model_config=model, cache_config=CacheConfig(block_size=16),
                      scheduler_config=SchedulerConfig(max_num_seqs=8, max_model_len=512,
                                                       is_encoder_decoder=False))


def _vllm_config(device: str, async_chunk: bool) -> Any:
    hf = SimpleNamespace(**TINY_LM)
    return SimpleNamespace(
        model_config=SimpleNamespace(hf_config=hf, model="porting-kit-run-tier", async_chunk=async_chunk),
        scheduler_config=SimpleNamespace(max_num_seqs=8),
        device_config=SimpleNamespace(device=device))


def _build(tree: _Tree, stage: int, device: str, async_chunk: bool, shape: str,
           real_config: Any = None) -> Any:
    import contextlib

    import torch

    from porting_kit.adapters.vllm_omni.engine import preserved_rng_state

    module = tree.models[stage]
    cls = _model_class(module, None)
    config = real_config if real_config is not None else _vllm_config(device, async_chunk)
    kwargs: dict[str, Any] = {"vllm_config": config, "prefix": ""}
    if shape == "single-stage-ar":
        import inspect

        kwargs["upstream"] = tree.upstream if tree.upstream is not None else StandInUpstream()
        if getattr(module, "CODEC_CHECKPOINT", None) is not None and "codec" in inspect.signature(cls).parameters:
            kwargs["codec"] = torch.nn.Identity()  # no checkpoint download in the run tier
    current = contextlib.nullcontext()
    if real_config is not None:  # vLLM layers read the config of the model being built
        from vllm.config import set_current_vllm_config

        current = set_current_vllm_config(real_config)
    with preserved_rng_state(), current:
        torch.manual_seed(WEIGHT_SEED)  # noqa: PK501 - seeded random weights, RNG restored after
        try:
            model = cls(**kwargs)
        except Exception as exc:  # noqa: BLE001
            file, line = _where_in_tree(exc, tree.root)
            raise _Fault(StageFault("exception", stage, f"stage {stage} {cls.__name__}.__init__",
                                    f"{type(exc).__name__}: {exc}", file, line)) from exc
    return model.to(device).eval() if isinstance(model, torch.nn.Module) else model


def _paged(paged_cls: Any, model: Any, config: Any, device: str) -> Any:
    from vllm.config import set_current_vllm_config

    with set_current_vllm_config(config):
        return paged_cls(model, config, device=device)


class _TransferManager:
    """What the async-chunk processors read: per-request frames, payload state, connector config."""

    def __init__(self, extra: dict[str, Any]) -> None:
        self.code_prompt_token_ids: dict[str, list] = defaultdict(list)
        self.request_payload: dict[str, Any] = {}
        self.put_req_chunk: dict[str, int] = defaultdict(int)
        self.connector = SimpleNamespace(config={"extra": dict(extra)})
        self.scheduler_max_num_seqs = 8


class _Request:
    def __init__(self, request_id: str, info: dict[str, Any]) -> None:
        self.external_req_id = request_id
        self.request_id = request_id
        self.additional_information = info
        self.finished = False

    def is_finished(self) -> bool:
        return self.finished


# -- the run ----------------------------------------------------------------------------------
class _Pipeline:
    """Fresh stage models and engines for one scenario."""

    def __init__(self, tree: _Tree, shape: str, device: str, async_chunk: bool, facts: RunFacts) -> None:
        from porting_kit.adapters.vllm_omni.engine import PagedKV, StageEngine

        self.tree, self.shape, self.device, self.async_chunk, self.facts = tree, shape, device, async_chunk, facts
        self.reference = tree.reference
        stop = tree.stages[0].get("sampling_constraints", {}).get("stop_token_ids") or []
        paged = None
        if tree.real_config is not None and shape != "single-stage-ar":
            config = tree.real_config()
            model0 = _build(tree, 0, device, async_chunk, shape, config)
            paged = self.call(0, "stage 0 KV cache (vLLM attention backend)", _paged, PagedKV, model0, config,
                              device)
        else:
            model0 = _build(tree, 0, device, async_chunk, shape)
        self.engines = {0: StageEngine(model0, tree.seam, kind="ar", stop_token_ids=stop, device=device,
                                       paged=paged)}
        if shape == "two-stage":
            self.engines[1] = StageEngine(_build(tree, 1, device, async_chunk, shape), tree.seam,
                                          kind="generation", device=device)
        extra = {}
        for conn in (tree.deploy.get("connectors") or {}).values():
            extra.update((conn or {}).get("extra") or {})
        extra["codec_chunk_frames"] = min(int(extra.get("codec_chunk_frames", RUN_CHUNK_FRAMES)), RUN_CHUNK_FRAMES)
        self.tm = _TransferManager(extra)
        self.audio: dict[str, list] = defaultdict(list)
        self.frames: dict[str, int] = defaultdict(int)
        self.pooled: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.requests: dict[str, _Request] = {}
        self.steps = 0
        self.chunks = 0

    def call(self, stage: int, where: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _Fault:
            raise
        except Exception as exc:  # noqa: BLE001 - the model's exception is the finding
            file, line = _where_in_tree(exc, self.tree.root)
            raise _Fault(StageFault("exception", stage, where, f"{type(exc).__name__}: {exc}", file,
                                    line)) from exc

    def dummy(self) -> None:
        for sid, eng in self.engines.items():
            left = self.call(sid, f"stage {sid} dummy/profile run", eng.dummy_run, 2)
            if left:
                self.facts.left_state += [f"stage {sid} after dummy run: {k}" for k in left]

    def add(self, rid: str, text: str, seed: int, max_tokens: int) -> None:
        from porting_kit.adapters.vllm_omni.engine import PROMPT_TOKEN_ID, StageRequest

        info = {"text": [text], "seed": [seed], "global_request_id": [rid]}
        if self.reference:  # voice cloning: a reference clip and its transcript, distinct per request
            import numpy as np

            clip = np.sin(np.linspace(0.0, 3.0 * (1 + len(text) % 5), 160 + 7 * len(text))).astype(np.float32)
            info |= {"ref_audio": [[clip, 16000]], "ref_text": [f"reference for {text}"]}
        self.requests[rid] = _Request(rid, info)
        self.engines[0].add(StageRequest(rid, [PROMPT_TOKEN_ID], info, max_tokens=max_tokens))

    def abort(self, rid: str) -> None:
        for eng in self.engines.values():
            eng.abort(rid)
        self.requests[rid].finished = True

    def step(self) -> None:
        step0 = self.call(0, "stage 0 forward", self.engines[0].step)
        self.steps += 1
        if step0 is not None:
            if step0.problem:
                self._handoff(0, step0.problem, self.tree.models[0], "forward")
            for rid, row, done in zip(step0.request_ids, step0.row_outputs, step0.finished):
                self.requests[rid].finished = done
                if self.shape == "two-stage":
                    self._hand_off(rid, row, done)
                else:
                    self._collect(rid, row.get("model_outputs"))
        if 1 in self.engines:
            step1 = self.call(1, "stage 1 forward", self.engines[1].step)
            if step1 is not None:
                if step1.problem:
                    self._handoff(1, step1.problem, self.tree.models[1], "forward")
                for rid, row in zip(step1.request_ids, step1.row_outputs):
                    self._collect(rid, row.get("model_outputs"))

    @property
    def idle(self) -> bool:
        return all(e.idle for e in self.engines.values())

    def finish(self) -> None:
        for sid, eng in self.engines.items():
            self.call(sid, f"stage {sid} on_requests_finished", eng.notify_finished)

    def _handoff(self, stage: int, message: str, module: Any, fn_name: str) -> None:
        cls = _model_class(module, None)
        file, line = _def_line(getattr(cls, fn_name, None), self.tree.root)
        raise _Fault(StageFault("handoff_shape", stage, f"stage {stage} {cls.__name__}.{fn_name}", message,
                                file, line))

    def _collect(self, rid: str, out: Any) -> None:
        import torch

        if isinstance(out, torch.Tensor) and out.numel():
            self.audio[rid].append(out.detach().float().reshape(-1).cpu())

    def _hand_off(self, rid: str, row: dict[str, Any], done: bool) -> None:
        import torch

        valid = ((row.get("meta") or {}).get("codec_frame_valid"))
        audio = (row.get("codes") or {}).get("audio")
        if isinstance(valid, torch.Tensor):
            self.frames[rid] += int(valid.to(torch.bool).sum())
        elif isinstance(audio, torch.Tensor):
            self.frames[rid] += int(audio.shape[0]) if audio.ndim == 2 else 0
        procs = self.tree.processors
        q = int(getattr(procs, "NUM_CODEBOOKS", 0) or 0)
        if isinstance(audio, torch.Tensor) and (audio.ndim != 2 or (q and audio.shape[1] != q)):
            self._handoff(0, f"codes.audio of one row is {tuple(audio.shape)}; the processor takes "
                          f"(rows, NUM_CODEBOOKS={q})", self.tree.models[0], "forward")
        m = self.tree.stages[0]
        request = self.requests[rid]
        if self.async_chunk:
            name = m.get("async_chunk_process_next_stage_input_func") or ""
            fn = getattr(procs, name, None)
            payload = self.call(0, f"processor {name}", fn, self.tm, row, request, is_finished=done)
            if payload is not None:
                self._enqueue(rid, payload, done, name, fn)
            return
        self.pooled[rid].append(row)
        if not done:
            return
        name = m.get("custom_process_next_stage_input_func") or ""
        fn = getattr(procs, name, None)
        pooled = _concat_rows(self.pooled.pop(rid))
        payload = self.call(0, f"processor {name}", fn, self.tm, pooled, request)
        tok_name = self.tree.stages[1].get("sync_process_input_func") or ""
        tok_fn = getattr(procs, tok_name, None)
        done_req = self.engines[0].done.get(rid)
        tokens = list(done_req.tokens) if done_req is not None else []
        source = SimpleNamespace(finished=True, request_id=rid,
                                 outputs=[SimpleNamespace(cumulative_token_ids=tokens)])
        prompts = self.call(1, f"processor {tok_name}", tok_fn, [source])
        prompt_ids = [0]
        if prompts:
            first = prompts[0]
            prompt_ids = list((first.get("prompt_token_ids") if isinstance(first, dict)
                               else getattr(first, "prompt_token_ids", [0])) or [0])
        self._enqueue(rid, payload, True, name, fn, prompt_ids)

    def _enqueue(self, rid: str, payload: Any, last: bool, name: str, fn: Any,
                 prompt_ids: list[int] | None = None) -> None:
        import torch

        from porting_kit.adapters.vllm_omni.engine import StageRequest

        info = self.tree.seam.to_dict(payload) if not isinstance(payload, dict) else dict(payload)
        codes = (info.get("codes") or {}).get("audio")
        q = int(getattr(self.tree.processors, "NUM_CODEBOOKS", 0) or 0)
        file, line = _def_line(fn, self.tree.root)
        if not isinstance(codes, torch.Tensor) or codes.ndim != 1 or (q and codes.numel() % q):
            shape = tuple(codes.shape) if isinstance(codes, torch.Tensor) else type(codes).__name__
            raise _Fault(StageFault("handoff_shape", 0, f"processor {name}",
                                    f"codes.audio handed to stage 1 is {shape}: stage 1 un-flattens a 1-D "
                                    f"codebook-major tensor of NUM_CODEBOOKS ({q}) x frames", file, line))
        context = int((info.get("meta") or {}).get("left_context_size") or 0)
        if q and context > codes.numel() // q:
            raise _Fault(StageFault("handoff_shape", 0, f"processor {name}",
                                    f"left_context_size {context} exceeds the {codes.numel() // q} frames sent",
                                    file, line))
        info["_last_chunk"] = last
        ids = prompt_ids if prompt_ids is not None else codes.tolist()
        self.chunks += 1
        self.engines[1].add(StageRequest(rid, ids or [0], info))

    def waveform(self, rid: str):
        import torch

        parts = self.audio.get(rid) or []
        return torch.cat(parts) if parts else torch.zeros(0)


def _concat_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Accumulate a request's per-step stage-0 outputs (tensors concatenated on dim 0)."""
    import torch

    def merge(values: list[Any]) -> Any:
        if all(isinstance(v, dict) for v in values):
            keys = {k for v in values for k in v}
            return {k: merge([v[k] for v in values if k in v]) for k in keys}
        if all(isinstance(v, torch.Tensor) for v in values):
            return torch.cat([v.reshape(v.shape if v.ndim else (1,)) for v in values], dim=0)
        return values[-1]

    return merge(rows) if rows else {}


def _drive(pipe: _Pipeline, plan: list[tuple[str, str, int, int, int]], abort: tuple[str, int] | None,
           limit: int = 400) -> None:
    """Run ``plan`` ((id, text, seed, max tokens, arrival step)) to idle; abort ``(id, step)``."""
    pending = list(plan)
    for step in range(limit):
        for item in [p for p in pending if p[4] <= step]:
            pending.remove(item)
            pipe.add(*item[:4])
        if abort is not None and step == abort[1]:
            pipe.abort(abort[0])
        if not pending and pipe.idle:
            break
        pipe.step()
    pipe.finish()


def run_pipeline(root: str | Path, manifest: dict[str, Any], *, device: str = "cpu",
                 upstream: Any = None) -> RunFacts:
    """Drive the generated pipeline of a vLLM-Omni scaffold; return what it showed.

    Parameters
    ----------
    root : str or Path
        The scaffold root (the folder given to ``scaffold --out``).
    manifest : dict
        Its ``.porting-kit/scaffold-<model>.json`` (``shape``, ``model_type``).
    device : str, default "cpu"
        Where the stage models run (``"cuda"`` when present).
    upstream : object, optional
        The single-stage shape's real upstream model (its ``inference_stream`` and attributes are
        checked against the generated file first: ``fault.kind == "upstream_mismatch"``);
        default a :class:`StandInUpstream`.

    Returns
    -------
    RunFacts
        ``fault`` holds the first broken contract (and the run stops there).

    Raises
    ------
    InputError
        A generated file the run needs is missing, or the deploy YAML / pipeline.py
        does not parse.
    """
    import torch

    from porting_kit.adapters.vllm_omni.engine import held_request_state, preserved_rng_state

    root = Path(root).resolve()
    shape = manifest["shape"]
    facts = RunFacts(shape=shape, device=device, upstream="" if shape != "single-stage-ar" else
                     "stand-in" if upstream is None else type(upstream).__name__)
    tree = None
    try:
        with preserved_rng_state():
            tree = _load_tree(root, manifest)
            tree.reference = "ref_audio" in (manifest.get("stage_fields") or ()) and shape != "single-stage-ar"
            if shape == "single-stage-ar" and upstream is not None:
                tree.upstream = upstream
                problems = upstream_problems(tree.models[0], upstream)
                if problems:
                    raise _Fault(StageFault("upstream_mismatch", 0, "upstream contract", "; ".join(problems),
                                            manifest["files"].get("model:" + _model_rel(manifest))))
            elif shape == "single-stage-ar" and isinstance(manifest.get("upstream_source"), dict):
                src = manifest["upstream_source"]
                stub = upstream_from_source(Path(str(src.get("file"))), str(src.get("class")))
                if stub is not None:  # the checkpoint's own code, read (not run): its signatures must fit
                    facts.upstream = f"stand-in; signatures checked against {src['file']}"
                    problems = upstream_problems(tree.models[0], stub)
                    if problems:
                        raise _Fault(StageFault(
                            "upstream_mismatch", 0, f"upstream contract ({src['file']}, read not run)",
                            "; ".join(problems), manifest["files"].get("model:" + _model_rel(manifest))))
            facts.seam = str(getattr(tree.seam, "SEAM", "?"))
            facts.seam_detail = str(getattr(tree.seam, "SEAM_DETAIL", ""))
            facts.attention = str(getattr(tree.seam, "ATTENTION", ""))
            facts.hop_length = int(getattr(tree.models[len(tree.models) - 1], "HOP_LENGTH", 0) or 0)
            async_chunk = bool(tree.deploy.get("async_chunk", True)) and shape == "two-stage"
            facts.async_chunk = async_chunk
            plan = [(rid, text, seed, n, 0 if i < 2 else 2) for i, (rid, text, seed, n) in enumerate(RUN_REQUESTS)]
            solo: dict[str, Any] = {}
            for rid, text, seed, n, _ in plan:
                pipe = _Pipeline(tree, shape, device, async_chunk, facts)
                if not solo:
                    pipe.dummy()
                _drive(pipe, [(rid, text, seed, n, 0)], None)
                solo[rid] = pipe.waveform(rid)
            pipe = _Pipeline(tree, shape, device, async_chunk, facts)
            _drive(pipe, [*plan, (*ABORTED, 0)], (ABORTED[0], 2))
            facts.requests, facts.steps, facts.chunks, facts.aborted = len(plan), pipe.steps, pipe.chunks, ABORTED[0]
            facts.frames = {rid: pipe.frames.get(rid, 0) for rid, *_ in plan}
            for rid, *_ in plan:
                wave = pipe.waveform(rid)
                facts.samples[rid] = int(wave.numel())
                ref = solo[rid]
                n = min(wave.numel(), ref.numel())
                diff = (wave[:n] - ref[:n]).abs()
                if wave.numel() != ref.numel() or (n and float(diff.max()) > ATOL):
                    first = int(torch.nonzero(diff > ATOL)[0]) if n and float(diff.max()) > ATOL else n
                    facts.crosstalk.append((rid, first, float(diff.max()) if n else 0.0))
            for sid, eng in pipe.engines.items():
                facts.left_state += [f"stage {sid}: {k}" for k in held_request_state(eng.model)]
                facts.left_state += [f"stage {sid} KV cache: {k}" for k in sorted(eng.kv_requests())]
    except _Fault as exc:
        facts.fault = exc.fault
    finally:
        if tree is not None:
            _unload(tree.package)
            if tree.config_dir is not None:
                import shutil

                shutil.rmtree(tree.config_dir, ignore_errors=True)
    return facts


# -- the generated port (scaffold --hf) -------------------------------------------------------
#: Requests the port is driven with: (id, text token seed, frames, temperature).
PORT_REQUESTS = (("port-greedy", 1, 6, 0.0), ("port-sampled", 2, 5, 0.9))


@dataclass
class PortRunFacts:
    """What driving the generated port (``<model>_port.py``, ``synthesize``) showed.

    Attributes
    ----------
    file : str
        The port file, relative to the scaffold root.
    frames, samples : dict of str to int
        Codec frames and audio samples per request.
    hop_length : int
        The port's ``HOP_LENGTH``.
    repeat_diff : dict of str to float
        Max |diff| between a request's audio and the same request run again with the same seed.
    fault : StageFault or None
        The exception the port raised (stage 0: talker or codec stage), with file and line.
    no_synthesize : bool
        The port has no ``synthesize`` (a causal LM without a codec): nothing to drive.
    """

    file: str
    no_synthesize: bool = False
    frames: dict[str, int] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)
    hop_length: int = 0
    repeat_diff: dict[str, float] = field(default_factory=dict)
    fault: StageFault | None = None


def run_port(root: str | Path, rel: str, camel: str) -> PortRunFacts:
    """Build the generated port with seeded weights and synthesize :data:`PORT_REQUESTS` through
    its own ``synthesize`` (talker frame by frame, then the codec stage's chunked decode), each twice.

    Parameters
    ----------
    root : str or Path
        The scaffold root.
    rel : str
        The port file relative to ``root`` (the manifest's ``port:`` entry).
    camel : str
        The model's CamelCase (the port class is ``<camel>Port``).

    Returns
    -------
    PortRunFacts
    """
    import importlib.util

    import torch

    from porting_kit.adapters.torchaudio_guard import ensure_importable

    ensure_importable()  # the port's codec stage imports transformers
    root = Path(root).resolve()
    facts = PortRunFacts(file=rel)
    name = f"porting_kit_port_{uuid.uuid4().hex[:8]}"
    try:
        spec = importlib.util.spec_from_file_location(name, root / rel)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        facts.hop_length = int(getattr(module, "HOP_LENGTH", 0) or 0)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(WEIGHT_SEED)
            port = getattr(module, f"{camel}Port")().eval()
        if not callable(getattr(port, "synthesize", None)):
            facts.no_synthesize = True
            return facts
        vocab = int(module.TEXT_VOCAB_SIZE)
        for rid, seed, frames, temperature in PORT_REQUESTS:
            runs = []
            for _ in range(2):
                text = torch.randint(0, vocab, (8,), generator=torch.Generator().manual_seed(seed))
                codes, audio = port.synthesize(text, frames, temperature, torch.Generator().manual_seed(seed))
                runs.append((codes, audio))
            codes, audio = runs[0]
            facts.frames[rid], facts.samples[rid] = int(codes.shape[-1]), int(audio.numel())
            same = runs[1][1].shape == audio.shape
            facts.repeat_diff[rid] = float((runs[1][1] - audio).abs().max()) if same and audio.numel() else (
                0.0 if same else float("inf"))
    except Exception as exc:  # noqa: BLE001 - reported as a finding with the file and line
        file, line = _where_in_tree(exc, root)
        facts.fault = StageFault(kind="exception", stage=0, where=f"{camel}Port.synthesize",
                                 message=f"{type(exc).__name__}: {exc}", file=file, line=line)
    finally:
        sys.modules.pop(name, None)
    return facts
