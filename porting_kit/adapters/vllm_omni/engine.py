"""Drive a generator-style model through vLLM-Omni 0.30.0's AR-runner calling contract.

The single-stage AR ("generator") shape -- MOSS-TTS-Nano in vLLM-Omni 0.30.0 -- keeps
per-request state across engine steps. Its faults only show when the model is
called the way the engine calls it, so this module reproduces that call sequence
on CPU, without vLLM: :class:`EngineDriver` (one engine, step by step) and
:func:`run_contract_suite` (the scenarios the ``rng`` / ``lifecycle`` checks judge).
It records facts only (what was called, what came back, which global RNG moved);
the checks in ``porting_kit/checks/rng.py`` and ``lifecycle.py`` judge them.

Call sequence followed (vllm-omni 0.30.0 wheel, paths under ``vllm_omni/``)
--------------------------------------------------------------------------
Per real engine step, ``EngineDriver.step()`` does what
``worker/gpu_ar_model_runner.py: GPUARModelRunner.execute_model`` does:

1. ``model.on_requests_finished(finished_req_ids)`` -- called from
   ``execute_model`` right after ``_update_states`` whenever
   ``scheduler_output.finished_req_ids`` is non-empty and the model has the
   method (``hasattr``). The set holds every request that left the batch since
   the previous step: those finished by EOS *and* those aborted. It is called
   even when no request is left to run (before the ``num_scheduled_tokens <= 0``
   early return).
2. ``model.forward(input_ids=, positions=, intermediate_tensors=None,
   inputs_embeds=None, runtime_additional_information=list[dict],
   model_intermediate_buffer=list[dict])`` -- ``worker/gpu_model_runner.py:
   _model_forward`` -> ``_build_model_kwargs_extra`` ->
   ``_gather_runtime_additional_information``: one dict per row in
   ``input_batch.req_ids`` order, the *same* dict object every step (it lives
   in ``model_intermediate_buffer[req_id]``), with ``generated_len`` (number of
   output tokens so far) refreshed each step. Values arrive as the request
   adapter built them: one-element lists (``entrypoints/openai/tts_adapters/
   moss_tts.py: _build_moss_tts_params / build``: ``"text": [input]``,
   ``"seed": [int(seed)]``) and ``global_request_id: [request_id]``
   (``engine/async_engine_utils.py: inject_global_id``). The worker's request
   id equals the global id here (``entrypoints/async_omni.py: generate`` makes
   ``<id>-<8 hex>`` once and both carry it), so ``on_requests_finished``
   receives the string that ``global_request_id`` wraps.
3. ``extract_multimodal_outputs`` (``worker/gpu_model_runner.py``): when the
   model sets ``have_multimodal_outputs`` and returns an ``OmniOutput``
   (``model_executor/models/output_templates.py``: ``text_hidden_states``,
   ``multimodal_outputs``, ...), the hidden states and the ``multimodal_outputs``
   dict are split; a bare tensor gives ``{}``. The served audio of row ``i`` is
   ``multimodal_outputs["model_outputs"][i]`` (a list per row, or a tensor whose
   first dimension is the rows -- ``worker/output/payload_build.py:
   build_omni_mm_payload`` / ``utils/mm_outputs.py: to_payload_element``), the
   key ``entrypoints/openai/serving_speech.py`` reads (``"audio"`` or
   ``"model_outputs"``).
4. ``model.compute_logits(sample_hidden_states, sampling_metadata=...)`` with a
   ``TypeError`` fallback to ``compute_logits(sample_hidden_states)``, where
   ``sample_hidden_states = hidden_states[logits_indices]`` (the last token of
   each row). The driver samples greedily (the model forces the logits) and a
   row whose token is a stop token (``stop_token_ids: [2]`` in
   ``model_executor/models/moss_tts_nano/pipeline.py``) finishes; it leaves the
   batch and is reported through step 1 of the next step.

Dummy/profile calls (``EngineDriver.dummy_run``): the AR runner's
``_dummy_run`` (``worker/gpu_model_runner.py``) goes through the same
``_model_forward`` with an empty input batch, so the model sees
``runtime_additional_information=[]`` and ``num_tokens`` rows of input ids; the
generation runner (``worker/gpu_generation_model_runner.py: _dummy_run``) passes
``model.get_dummy_runtime_additional_information(num_reqs)`` -- rows flagged
``{"_is_dummy": True}`` -- when the model defines it. The driver makes both calls,
then ``compute_logits`` on the dummy rows: every row must come back EOS.

Batch order: vLLM's persistent ``InputBatch`` fills holes left by finished
requests and condenses/reorders rows, so a request's row index changes from step
to step. ``order="shuffle"`` permutes the rows every step (a seeded local
``random.Random``, never the global one); ``"fifo"`` keeps arrival order.

Global RNG: with ``track_rng=True`` the driver snapshots the process RNGs (torch
CPU, torch CUDA when initialised, numpy's global ``RandomState``, Python
``random``) around every model call and records which ones the call changed.

Temporary files: every model call runs with ``tempfile.tempdir`` pointed at a
private directory owned by the driver (restored after the call), so files a
model stages with :mod:`tempfile` (MOSS-TTS-Nano writes one WAV per request) can
be counted: :meth:`EngineDriver.temp_files`.
"""

from __future__ import annotations

import gc
import random
import shutil
import tempfile
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

#: Stop token of the single-stage AR TTS pipeline (moss_tts_nano/pipeline.py ``stop_token_ids``).
DEFAULT_EOS_TOKEN_ID = 2
#: Placeholder prompt of the MOSS-TTS adapter (``tokens_input(prompt_token_ids=[1])``).
PROMPT_TOKEN_ID = 1
RNG_NAMES = ("torch_cpu", "torch_cuda", "numpy", "python")


# ----------------------------------------------------------------------------
# Process RNG state
# ----------------------------------------------------------------------------

def capture_rng_state() -> dict[str, Any]:
    """Snapshot the process-wide RNGs.

    Returns
    -------
    dict
        ``{"torch_cpu": ByteTensor, "torch_cuda": list[ByteTensor] | None,
        "numpy": tuple | None, "python": tuple}``. CUDA is read only when it is
        already initialised (reading it never initialises CUDA); numpy only when
        importable.
    """
    import torch

    state: dict[str, Any] = {"torch_cpu": torch.get_rng_state(), "torch_cuda": None,
                             "numpy": None, "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch_cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np

        state["numpy"] = np.random.get_state()
    except ImportError:  # pragma: no cover - numpy ships with torch extras
        pass
    return state


def rng_state_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Names of the RNGs whose state differs between two snapshots.

    Parameters
    ----------
    before, after : dict
        Snapshots from :func:`capture_rng_state`.

    Returns
    -------
    list of str
        A subset of :data:`RNG_NAMES`, in that order. CUDA and numpy are compared only when
        both snapshots hold them.
    """
    import torch

    changed = []
    if not torch.equal(before["torch_cpu"], after["torch_cpu"]):
        changed.append("torch_cpu")
    bc, ac = before["torch_cuda"], after["torch_cuda"]
    if bc is not None and ac is not None and (
            len(bc) != len(ac) or any(not torch.equal(x, y) for x, y in zip(bc, ac))):
        changed.append("torch_cuda")
    bn, an = before["numpy"], after["numpy"]
    if bn is not None and an is not None:
        import numpy as np

        if bn[0] != an[0] or not np.array_equal(bn[1], an[1]) or tuple(bn[2:]) != tuple(an[2:]):
            changed.append("numpy")
    if before["python"] != after["python"]:
        changed.append("python")
    return changed


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put back a snapshot taken by :func:`capture_rng_state`.

    Parameters
    ----------
    state : dict
        From :func:`capture_rng_state`; CUDA / numpy entries that are ``None`` are left alone.
    """
    import torch

    torch.set_rng_state(state["torch_cpu"])
    if state["torch_cuda"] is not None:
        torch.cuda.set_rng_state_all(state["torch_cuda"])
    if state["numpy"] is not None:
        import numpy as np

        np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def model_stop_token(model: Any) -> int:
    """The stop token the pipeline's ``stop_token_ids`` backstop uses for ``model``.

    Parameters
    ----------
    model : object
        The generator-style model.

    Returns
    -------
    int
        The first entry of its ``stop_token_ids``, else an int ``eos_token_id`` /
        ``stop_token_id`` attribute, else the module-level ``EOS_TOKEN_ID`` of the model's
        module (the scaffold's skeleton), else :data:`DEFAULT_EOS_TOKEN_ID` (2, the
        ``stop_token_ids`` of vLLM-Omni 0.30.0 ``model_executor/models/moss_tts_nano/pipeline.py``).
    """
    import sys

    ids = getattr(model, "stop_token_ids", None)
    if ids:
        return int(list(ids)[0])
    for attr in ("eos_token_id", "stop_token_id"):
        v = getattr(model, attr, None)
        if isinstance(v, int):
            return v
    mod = sys.modules.get(type(model).__module__)
    v = getattr(mod, "EOS_TOKEN_ID", None)
    return int(v) if isinstance(v, int) else DEFAULT_EOS_TOKEN_ID


def seed_process_rngs(seed: int = 0) -> None:
    """Put every process RNG in a fixed state (torch CPU/CUDA, numpy, ``random``).

    Parameters
    ----------
    seed : int, default 0
        Passed to ``torch.manual_seed`` (also every initialised CUDA device),
        ``random.seed`` and ``numpy.random.seed``.

    Notes
    -----
    The checks call this before each scenario run, so a model that (wrongly) draws
    from the global RNG is still reproducible run to run -- and its fault then
    shows as crosstalk between interleaved requests, as it does in a seeded server.
    """
    import torch

    # the driver (not model code) fixes the process RNGs between scenarios on purpose
    torch.manual_seed(seed)  # noqa: PK501 - also seeds every CUDA device when initialised
    random.seed(seed)  # noqa: PK501
    try:
        import numpy as np

        np.random.seed(seed)  # noqa: PK501
    except ImportError:  # pragma: no cover
        pass


@contextmanager
def preserved_rng_state() -> Iterator[None]:
    """Context manager: whatever happens inside, the process RNGs end as they began."""
    saved = capture_rng_state()
    try:
        yield
    finally:
        restore_rng_state(saved)


# ----------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------

@dataclass
class EngineRequest:
    """One TTS request as the engine hands it to the model.

    Attributes
    ----------
    request_id : str
        The global request id (``global_request_id``; also the worker's req id).
    text : str
        Text to speak (``text``).
    seed : int or None
        Sampling seed (``seed``), as the MOSS-TTS adapter forwards ``request.seed``.
    extra : dict
        More ``additional_information`` keys (e.g. ``audio_temperature``,
        ``audio_top_k``, ``max_new_frames``, ``mode``); wrapped in one-element
        lists like the real adapter.
    arrival_step : int
        Engine step at which the request joins the batch (0 = first step).
    """

    request_id: str
    text: str
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    arrival_step: int = 0


@dataclass
class ForwardCall:
    """What one model call took and returned.

    Attributes
    ----------
    step : int
        Engine step (``-1`` for dummy/profile calls).
    kind : str
        ``"step"``, ``"profile"`` (``runtime_additional_information=[]``) or
        ``"dummy"`` (rows flagged ``_is_dummy``).
    req_ids : list of str
        Batch rows in order (empty for dummy calls).
    chunk_index : list of int
        For each row, how many chunks that request had received before this step.
    finished_notified : list of str
        Ids passed to ``on_requests_finished`` at the start of this step.
    outputs : list
        Per row: the ``model_outputs`` element (a tensor) or ``None`` when absent.
    model_outputs_problem : str or None
        Why ``model_outputs`` could not be read for every row (``None`` when fine).
    eos : list of bool
        Per row: did ``compute_logits`` + sampling finish the row.
    logits_rows : int
        Rows ``compute_logits`` returned (must equal the rows of the batch).
    rng_changed : list of str
        Process RNGs changed by this call's model calls (see :data:`RNG_NAMES`).
    live_generators : int
        Live Python generators held in the model's attributes after the call.
    temp_files : int
        Files in the driver's private temp directory after the call.
    """

    step: int
    kind: str
    req_ids: list[str]
    chunk_index: list[int]
    finished_notified: list[str]
    outputs: list[Any]
    model_outputs_problem: str | None
    eos: list[bool]
    logits_rows: int
    rng_changed: list[str]
    live_generators: int
    temp_files: int


@dataclass
class RequestResult:
    """Everything one request received.

    Attributes
    ----------
    request_id : str
    chunks : list of Tensor
        The per-step ``model_outputs`` elements in order (empty tensors kept).
    steps : int
        Engine steps the request was in the batch.
    finished_by : str
        ``"eos"``, ``"abort"`` or ``"max_steps"`` (never finished), ``"running"``.
    sample_rate : int or None
        From ``multimodal_outputs["sr"]`` when present (Hz).
    """

    request_id: str
    chunks: list[Any] = field(default_factory=list)
    steps: int = 0
    finished_by: str = "running"
    sample_rate: int | None = None

    def waveform(self):
        """The served waveform: all chunks concatenated along the last axis.

        Returns
        -------
        torch.Tensor [shape=(samples,)] for a mono model
            float32 (as served) on the CPU; ``None`` and empty chunks are skipped; chunks of
            inconsistent shapes are flattened first. Empty float32 tensor when none.
        """
        import torch

        parts = [c.detach().to("cpu") for c in self.chunks if c is not None and c.numel() > 0]
        if not parts:
            return torch.zeros(0, dtype=torch.float32)
        try:
            return torch.cat(parts, dim=-1)
        except RuntimeError:  # inconsistent chunk shapes: flatten each
            return torch.cat([p.reshape(-1) for p in parts])


class EngineError(Exception):
    """The model raised while being driven; message names the call."""


# ----------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------

def _live_generators(model: Any) -> int:
    """Count live (not exhausted, not closed) Python generators held by the model.

    Looks at the model's attributes and one level into dict / list / tuple values
    (``self._stream_gens[request_key]`` in MOSS-TTS-Nano).
    """
    count = 0
    for value in vars(model).values():
        items: Sequence[Any]
        if isinstance(value, dict):
            items = list(value.values())
        elif isinstance(value, (list, tuple)):
            items = value
        else:
            items = (value,)
        for item in items:
            if isinstance(item, types.GeneratorType) and item.gi_frame is not None:
                count += 1
    return count


class EngineDriver:
    """One vLLM-Omni AR engine around one model, advanced step by step.

    Parameters
    ----------
    model : object
        The generator-style model: ``forward(input_ids, positions, ...,
        runtime_additional_information=list[dict])``, ``compute_logits``, optional
        ``on_requests_finished``, ``get_dummy_runtime_additional_information``,
        ``have_multimodal_outputs``.
    eos_token_id : int, optional
        Stop token. Default: the model's own (:func:`model_stop_token`), else 2, the
        MOSS-TTS-Nano pipeline's ``stop_token_ids``.
    order : {"fifo", "shuffle"}, default "fifo"
        ``"fifo"`` (arrival order) or ``"shuffle"`` (rows permuted every step, as vLLM's
        persistent ``InputBatch`` condenses and reorders rows).
    max_steps : int, default 256
        Backstop (the ``max_tokens`` of the deploy config): a request still
        running after this many steps ends with ``finished_by="max_steps"``.
    track_rng : bool, default True
        Record which process RNGs each model call changed.
    device : str, default "cpu"
        Where input ids and positions are created.
    shuffle_seed : int, default 1234
        Seed of the local ``random.Random`` that shuffles rows (``shuffle_seed + step``);
        the global RNG is never used.

    Raises
    ------
    ValueError
        ``order`` is neither ``"fifo"`` nor ``"shuffle"``.

    Notes
    -----
    Use as a context manager (or call :meth:`close`) so the private temp
    directory is removed. The module docstring lists the vLLM-Omni functions
    whose call sequence each method follows.
    """

    def __init__(self, model: Any, *, eos_token_id: int | None = None,
                 order: str = "fifo", max_steps: int = 256, track_rng: bool = True,
                 device: str = "cpu", shuffle_seed: int = 1234) -> None:
        if order not in ("fifo", "shuffle"):
            raise ValueError(f"order must be 'fifo' or 'shuffle', got {order!r}")
        self.model = model
        self.eos_token_id = eos_token_id if eos_token_id is not None else model_stop_token(model)
        self.order = order
        self.max_steps = max_steps
        self.track_rng = track_rng
        self.device = device
        self._shuffle_seed = shuffle_seed
        self._tmp = Path(tempfile.mkdtemp(prefix="porting-kit-engine-"))
        self.step_index = 0
        self.calls: list[ForwardCall] = []
        self.results: dict[str, RequestResult] = {}
        self._pending: list[EngineRequest] = []
        self._running: list[str] = []  # arrival order
        self._infos: dict[str, dict[str, Any]] = {}  # model_intermediate_buffer
        self._generated: dict[str, int] = {}
        self._finished_since_last_step: list[str] = []

    # -- housekeeping --------------------------------------------------------
    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the private temp directory."""
        shutil.rmtree(self._tmp, ignore_errors=True)

    def temp_files(self) -> list[str]:
        """Names of the files the model has left in the driver's temp directory."""
        if not self._tmp.exists():
            return []
        return sorted(p.name for p in self._tmp.rglob("*") if p.is_file())

    def live_generators(self) -> int:
        """Live Python generators held in the model's attributes (see module docstring)."""
        return _live_generators(self.model)

    @property
    def running(self) -> list[str]:
        """Ids of the requests in the batch, in arrival order."""
        return list(self._running)

    @property
    def idle(self) -> bool:
        """True when nothing is running or waiting to join."""
        return not self._running and not self._pending

    @contextmanager
    def _model_call(self, changed: list[str]) -> Iterator[None]:
        saved_tempdir = tempfile.tempdir
        tempfile.tempdir = str(self._tmp)
        before = capture_rng_state() if self.track_rng else None
        try:
            yield
        finally:
            tempfile.tempdir = saved_tempdir
            if before is not None:
                for name in rng_state_changes(before, capture_rng_state()):
                    if name not in changed:
                        changed.append(name)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise EngineError(f"{what} raised {type(exc).__name__}: {exc}") from exc

    # -- requests -------------------------------------------------------------
    def _info(self, req: EngineRequest) -> dict[str, Any]:
        info: dict[str, Any] = {"text": [req.text], "global_request_id": [req.request_id]}
        if req.seed is not None:
            info["seed"] = [int(req.seed)]
        for key, value in req.extra.items():
            info[key] = value if isinstance(value, list) else [value]
        return info

    def add_request(self, req: EngineRequest) -> None:
        """Queue a request; it joins the batch at ``req.arrival_step`` (or the next step).

        Parameters
        ----------
        req : EngineRequest
            Its ``additional_information`` dict (``text``, ``global_request_id``, ``seed``,
            ``extra`` keys, each a one-element list) is built when it joins.

        Raises
        ------
        ValueError
            A request with the same id was already added to this driver.
        """
        if req.request_id in self.results:
            raise ValueError(f"duplicate request id {req.request_id!r}")
        self.results[req.request_id] = RequestResult(req.request_id)
        self._pending.append(req)

    def abort(self, request_id: str) -> None:
        """Abort a running request.

        It leaves the batch and is passed to ``on_requests_finished`` at the start of the
        next step (as a client disconnect / ``abort_requests`` does); its result gets
        ``finished_by="abort"``.

        Parameters
        ----------
        request_id : str
            A request now in the batch.

        Raises
        ------
        ValueError
            The request is not running (pending, finished or unknown).
        """
        if request_id not in self._running:
            raise ValueError(f"request {request_id!r} is not running")
        self._running.remove(request_id)
        self.results[request_id].finished_by = "abort"
        self._finished_since_last_step.append(request_id)

    # -- steps ----------------------------------------------------------------
    def _batch_order(self) -> list[str]:
        rows = list(self._running)
        if self.order == "shuffle" and len(rows) > 1:
            random.Random(self._shuffle_seed + self.step_index).shuffle(rows)
        return rows

    def _read_outputs(self, out: Any, n_rows: int,
                      per_row: bool = True) -> tuple[Any, list[Any], str | None, Any]:
        """Split a forward output as ``extract_multimodal_outputs`` does; return
        (hidden, per-row model_outputs, problem, per-row sr)."""
        import torch

        hidden, mm = None, None
        if getattr(self.model, "have_multimodal_outputs", False) and hasattr(out, "multimodal_outputs") \
                and hasattr(out, "text_hidden_states"):
            hidden, mm = out.text_hidden_states, out.multimodal_outputs
        elif isinstance(out, torch.Tensor):
            hidden, mm = out, {}
        elif isinstance(out, (list, tuple)) and out:
            hidden, mm = out[0], {}
        else:
            return None, [None] * n_rows, f"forward returned {type(out).__name__}", None
        if not isinstance(mm, dict) or "model_outputs" not in mm:
            keys = sorted(mm) if isinstance(mm, dict) else type(mm).__name__
            return hidden, [None] * n_rows, f"multimodal_outputs has no 'model_outputs' (got {keys})", None
        mo = mm["model_outputs"]
        srs = mm.get("sr")
        if not per_row:
            return hidden, [], None, srs
        if isinstance(mo, (list, tuple)):
            rows = list(mo)
        elif isinstance(mo, torch.Tensor) and mo.ndim >= 1 and mo.shape[0] == n_rows:
            rows = [mo[i] for i in range(n_rows)]
        else:
            shape = tuple(mo.shape) if isinstance(mo, torch.Tensor) else type(mo).__name__
            return hidden, [None] * n_rows, f"model_outputs is {shape}, not one entry per row", srs
        if len(rows) != n_rows:
            problem = f"model_outputs has {len(rows)} entries for {n_rows} rows"
            rows = (rows + [None] * n_rows)[:n_rows]
            return hidden, rows, problem, srs
        return hidden, rows, None, srs

    def _compute_eos(self, hidden: Any, n_rows: int, changed: list[str]) -> tuple[list[bool], int]:
        import torch

        if hidden is None:
            hidden = torch.zeros((n_rows, 1))
        if isinstance(hidden, torch.Tensor) and hidden.ndim >= 1 and hidden.shape[0] >= n_rows:
            # logits_indices: one scheduled token per row, so row i's last token is i.
            sample_hidden = hidden[torch.arange(n_rows, device=hidden.device)]
        else:
            sample_hidden = hidden
        with self._model_call(changed):
            try:
                logits = self._call("compute_logits", self.model.compute_logits, sample_hidden,
                                    sampling_metadata=None)
            except EngineError as exc:
                if not isinstance(exc.__cause__, TypeError):
                    raise
                logits = self._call("compute_logits", self.model.compute_logits, sample_hidden)
        if not isinstance(logits, torch.Tensor):
            raise EngineError(f"compute_logits returned {type(logits).__name__}, not a tensor")
        logits_rows = int(logits.shape[0]) if logits.ndim >= 1 else 0
        tokens = logits.argmax(dim=-1).reshape(-1).tolist() if logits.ndim == 2 else []
        # A row compute_logits did not cover is taken as finished (the scheduler
        # would get no token for it).
        eos = [(tokens[i] == self.eos_token_id) if i < len(tokens) else True for i in range(n_rows)]
        return eos, logits_rows

    def dummy_run(self, num_reqs: int = 2, *, num_tokens: int | None = None) -> list[ForwardCall]:
        """The warm-up / profile calls of vLLM-Omni's runners.

        First ``runtime_additional_information=[]`` with ``num_tokens`` input ids (AR runner
        ``_dummy_run``, ``worker/gpu_model_runner.py``), then -- when the model defines
        ``get_dummy_runtime_additional_information`` -- ``num_reqs`` rows flagged
        ``_is_dummy`` (``worker/gpu_generation_model_runner.py: _dummy_run``). Each is followed
        by ``compute_logits`` on its rows.

        Parameters
        ----------
        num_reqs : int, default 2
            Dummy rows asked of ``get_dummy_runtime_additional_information``.
        num_tokens : int, optional
            Input ids of the profile call; default ``num_reqs``.

        Returns
        -------
        list of ForwardCall
            The two (or one) calls, ``step=-1``, kinds ``"profile"`` then ``"dummy"``; also
            appended to :attr:`calls`. For the profile call only the presence of the
            ``model_outputs`` key is checked (no per-row outputs).

        Raises
        ------
        EngineError
            The model raised in one of the calls.
        """
        import torch

        num_tokens = num_tokens or num_reqs
        calls = []
        variants: list[tuple[str, list[dict[str, Any]], int]] = [("profile", [], num_tokens)]
        get_dummy = getattr(self.model, "get_dummy_runtime_additional_information", None)
        if callable(get_dummy):
            infos = self._call("get_dummy_runtime_additional_information", get_dummy, num_reqs)
            variants.append(("dummy", list(infos), num_reqs))
        for kind, infos, n_tok in variants:
            changed: list[str] = []
            input_ids = torch.zeros(n_tok, dtype=torch.long, device=self.device)
            positions = torch.arange(n_tok, device=self.device)
            with self._model_call(changed):
                out = self._call(f"forward ({kind} call)", self.model.forward, input_ids=input_ids,
                                 positions=positions, intermediate_tensors=None, inputs_embeds=None,
                                 runtime_additional_information=infos,
                                 model_intermediate_buffer=infos)
            n_rows = len(infos) if infos else n_tok
            # A profile call has no requests: only the key's presence is checked.
            hidden, rows, problem, _ = self._read_outputs(out, len(infos), per_row=bool(infos))
            eos, logits_rows = self._compute_eos(hidden, n_rows, changed)
            calls.append(ForwardCall(-1, kind, [], [], [], rows, problem, eos, logits_rows,
                                     changed, self.live_generators(), len(self.temp_files())))
        self.calls.extend(calls)
        return calls

    def step(self) -> ForwardCall | None:
        """One engine step (see the module docstring for the sequence).

        Returns
        -------
        ForwardCall or None
            ``None`` when no request was in the batch (``on_requests_finished``
            still ran if anything had finished).
        """
        import torch

        changed: list[str] = []
        notified = list(self._finished_since_last_step)
        self._finished_since_last_step = []
        on_finished = getattr(self.model, "on_requests_finished", None)
        if notified and callable(on_finished):
            with self._model_call(changed):
                self._call("on_requests_finished", on_finished, set(notified))
        for req in list(self._pending):
            if req.arrival_step <= self.step_index:
                self._pending.remove(req)
                self._running.append(req.request_id)
                self._infos[req.request_id] = self._info(req)
                self._generated[req.request_id] = 0
        rows = self._batch_order()
        if not rows:
            self.step_index += 1
            return None
        infos = []
        for rid in rows:
            info = self._infos[rid]
            info["generated_len"] = self._generated[rid]
            infos.append(info)
        input_ids = torch.tensor([PROMPT_TOKEN_ID if self._generated[r] == 0 else 1 for r in rows],
                                 dtype=torch.long, device=self.device)
        positions = torch.tensor([self._generated[r] for r in rows], dtype=torch.long,
                                 device=self.device)
        with self._model_call(changed):
            out = self._call(f"forward (step {self.step_index})", self.model.forward,
                             input_ids=input_ids, positions=positions, intermediate_tensors=None,
                             inputs_embeds=None, runtime_additional_information=infos,
                             model_intermediate_buffer=infos)
        hidden, outputs, problem, srs = self._read_outputs(out, len(rows))
        eos, logits_rows = self._compute_eos(hidden, len(rows), changed)
        chunk_index = []
        for i, rid in enumerate(rows):
            res = self.results[rid]
            chunk_index.append(len(res.chunks))
            chunk = outputs[i]
            res.chunks.append(chunk.detach().to("cpu") if isinstance(chunk, torch.Tensor) else None)
            res.steps += 1
            if srs is not None and res.sample_rate is None:
                try:
                    res.sample_rate = int(torch.as_tensor(srs[i]).reshape(-1)[0])
                except (IndexError, TypeError, ValueError, RuntimeError):
                    pass
            self._generated[rid] += 1
            if eos[i]:
                res.finished_by = "eos"
            elif res.steps >= self.max_steps:
                res.finished_by = "max_steps"
            if res.finished_by != "running":
                self._running.remove(rid)
                self._finished_since_last_step.append(rid)
        call = ForwardCall(self.step_index, "step", rows, chunk_index, notified, outputs, problem,
                           eos, logits_rows, changed, self.live_generators(), len(self.temp_files()))
        self.calls.append(call)
        self.step_index += 1
        return call

    def run(self, *, until_idle: bool = True, steps: int | None = None) -> dict[str, RequestResult]:
        """Step until every request finished, or for ``steps`` steps.

        Parameters
        ----------
        until_idle : bool, default True
            Stop once nothing runs or waits and ``on_requests_finished`` was delivered for
            the last finished requests (one more step after the last EOS).
        steps : int, optional
            Run exactly this many steps (``until_idle`` is then ignored). Without it at most
            ``max_steps + 64`` steps run.

        Returns
        -------
        dict of str to RequestResult
            :attr:`results` (every request added so far, not only those of this call).

        Raises
        ------
        EngineError
            The model raised during a step.
        """
        n = 0
        limit = steps if steps is not None else self.max_steps + 64
        while n < limit:
            if until_idle and steps is None and self.idle and not self._finished_since_last_step:
                break
            self.step()
            n += 1
        return self.results


def run_requests(model: Any, requests: Sequence[EngineRequest], *, order: str = "fifo",
                 max_steps: int = 256, device: str = "cpu") -> tuple[dict[str, RequestResult],
                                                                     list[ForwardCall]]:
    """Submit ``requests`` to a fresh :class:`EngineDriver` around ``model`` and run to idle.

    Parameters
    ----------
    model : object
        The generator-style model (reused as is: its state carries over from earlier runs).
    requests : sequence of EngineRequest
    order : {"fifo", "shuffle"}, default "fifo"
    max_steps : int, default 256
        Per-request step backstop.
    device : str, default "cpu"

    Returns
    -------
    results : dict
        request id -> :class:`RequestResult`.
    calls : list of ForwardCall
        Every model call in step order.

    Raises
    ------
    EngineError
        The model raised (the message names the call).
    """
    with EngineDriver(model, order=order, max_steps=max_steps, device=device) as drv:
        for req in requests:
            drv.add_request(req)
        drv.run()
        return drv.results, drv.calls


# ----------------------------------------------------------------------------
# The scenario suite judged by checks/rng.py and checks/lifecycle.py
# ----------------------------------------------------------------------------

#: Four requests of different lengths (so EOS comes at different steps).
DEFAULT_REQUESTS = (
    ("req-a", "the quick brown fox jumps", 11),
    ("req-b", "hello there", 22),
    ("req-c", "a much longer sentence that keeps going for quite a while", 33),
    ("req-d", "one two three four", 44),
)


@dataclass
class Scenario:
    """One run of a set of requests through a driver (see :func:`run_contract_suite`).

    Attributes
    ----------
    name : str
        ``"solo:<request id>"``, ``"solo_repeat"``, ``"solo_continued"``, ``"interleaved"``,
        ``"permuted"``, ``"joining"`` or ``"serial_after_abort"``.
    results : dict of str to RequestResult
        Request id -> what it received.
    calls : list of ForwardCall
        Every model call of the run, in order.
    description : str, default ""
        One line for reports.
    """

    name: str
    results: dict[str, RequestResult]
    calls: list[ForwardCall]
    description: str = ""


@dataclass
class AbortProbe:
    """Three requests in flight, the middle one aborted through ``on_requests_finished``.

    Attributes
    ----------
    aborted : str
        Id of the aborted request (the second-longest text of the three longest).
    survivors : list of str
        The other two.
    before_generators, after_generators : int
        Live Python generators held by the model after the first step (before the abort)
        and after the step that delivered the abort.
    before_temp_files, after_temp_files : list of str
        Files in the driver's temp directory at the same two moments.
    has_on_requests_finished : bool
        Whether the model defines the hook at all.
    survivors_running : int
        Survivors still in the batch after the abort step (2 when the abort hurt neither).
    """

    aborted: str
    survivors: list[str]
    before_generators: int
    after_generators: int
    before_temp_files: list[str]
    after_temp_files: list[str]
    has_on_requests_finished: bool
    survivors_running: int


@dataclass
class ContractSuite:
    """Facts from every scenario (see :func:`run_contract_suite`).

    Attributes
    ----------
    requests : list of EngineRequest
        The requests used (default :func:`default_requests`).
    solo : dict of str to Scenario
        Request id -> that request alone (serially on one model).
    solo_repeat, solo_continued : Scenario
        The first request again on the same model, from the reset process RNG /
        from the state the previous run left.
    batches : list of Scenario
        ``interleaved``, ``permuted``, ``joining``.
    serial_after_abort : Scenario
        Request 0 aborted after two steps, then request 1 alone on the same model.
    serial_aborted : str
        Request 0's id.
    serial_abort_step : int
        Engine step at which it was aborted.
    abort : AbortProbe
    dummy : list of ForwardCall
        The profile / ``_is_dummy`` calls on a fresh model.
    dummy_generators, dummy_temp_files : int
        Live generators and temp files left after the dummy calls.
    sample_rate : int or None
        Hz, from the first solo result that reported ``multimodal_outputs["sr"]``.
    """

    requests: list[EngineRequest]
    solo: dict[str, Scenario]
    solo_repeat: Scenario
    solo_continued: Scenario
    batches: list[Scenario]
    serial_after_abort: Scenario
    serial_aborted: str
    serial_abort_step: int
    abort: AbortProbe
    dummy: list[ForwardCall]
    dummy_generators: int
    dummy_temp_files: int
    sample_rate: int | None

    def scenarios(self) -> list[Scenario]:
        """Every scenario that ran real engine steps, solo runs first."""
        return [*self.solo.values(), self.solo_repeat, self.solo_continued, *self.batches,
                self.serial_after_abort]

    def all_calls(self) -> list[tuple[str, ForwardCall]]:
        """``(scenario name, call)`` for every recorded model call, dummy calls last."""
        out = [(sc.name, c) for sc in self.scenarios() for c in sc.calls]
        return out + [("dummy", c) for c in self.dummy]


def default_requests(n: int = 4) -> list[EngineRequest]:
    """``n`` seeded requests of different lengths: :data:`DEFAULT_REQUESTS`.

    Parameters
    ----------
    n : int, default 4
        How many of the four to take (a larger ``n`` still gives four).

    Returns
    -------
    list of EngineRequest
        Ids ``req-a``..``req-d``, seeds 11, 22, 33, 44, all ``arrival_step=0``.
    """
    return [EngineRequest(rid, text, seed) for rid, text, seed in DEFAULT_REQUESTS[:n]]


def _fresh(model_factory: Callable[[], Any]) -> Any:
    model = model_factory()
    missing = [m for m in ("forward", "compute_logits") if not callable(getattr(model, m, None))]
    if missing:
        raise EngineError(f"returned {type(model).__name__}, which has no "
                          f"{' / '.join(m + '()' for m in missing)}: not a generator-style model")
    return model


def run_contract_suite(model_factory: Callable[[], Any], requests: Sequence[EngineRequest] | None = None,
                       *, max_steps: int = 256, device: str = "cpu", rng_seed: int = 0) -> ContractSuite:
    """Run every scenario the RNG-isolation and lifecycle checks need.

    Each scenario gets a fresh model from ``model_factory`` (the solo runs and their
    repeats share one) and starts from the same process RNG state
    (:func:`seed_process_rngs`); the caller's RNG state is restored at the end.

    Parameters
    ----------
    model_factory : callable
        ``model_factory() -> model``; the model places itself on its device.
    requests : sequence of EngineRequest, optional
        At least 3; default :func:`default_requests` (4).
    max_steps : int, default 256
        Per-request step backstop of every driver.
    device : str, default "cpu"
        Where input ids and positions are created.
    rng_seed : int, default 0
        Seed given to :func:`seed_process_rngs` before each scenario.

    Returns
    -------
    ContractSuite

    Scenarios
    ---------
    solo
        each request alone (the reference for every comparison).
    solo_repeat, solo_continued
        the first request alone again on the same model, once from the reset
        process RNG and once from the state the previous run left (determinism:
        intrinsic vs through the process RNG).
    batches
        ``interleaved`` (all join at step 0, fifo rows), ``permuted`` (rows
        shuffled every step), ``joining`` (two at step 0, the others join at
        steps 2, 3, ..., rows shuffled).
    serial_after_abort
        request 0 runs two steps and is aborted, then request 1 runs alone on the
        same model (a stale per-request state would hand it request 0's rest).
    abort
        the three longest requests in flight, the middle one aborted after one step
        (:class:`AbortProbe`).
    dummy
        the profile and ``_is_dummy`` calls on a fresh model.

    Raises
    ------
    ValueError
        Fewer than 3 requests.
    EngineError
        The model raised during a call, or the factory returned an object without
        ``forward`` / ``compute_logits`` (the message names the call).
    """
    reqs = list(requests) if requests is not None else default_requests(4)
    if len(reqs) < 3:
        raise ValueError("run_contract_suite needs at least 3 requests")

    def clone(req: EngineRequest, **kw: Any) -> EngineRequest:
        data = {"request_id": req.request_id, "text": req.text, "seed": req.seed,
                "extra": dict(req.extra), "arrival_step": req.arrival_step}
        data.update(kw)
        return EngineRequest(**data)

    with preserved_rng_state():
        # solo runs, serially on one model (as a server with max_num_seqs=1 would)
        solo: dict[str, Scenario] = {}
        model = _fresh(model_factory)
        for req in reqs:
            seed_process_rngs(rng_seed)
            res, calls = run_requests(model, [clone(req, arrival_step=0)], max_steps=max_steps,
                                      device=device)
            solo[req.request_id] = Scenario(f"solo:{req.request_id}", res, calls)
        seed_process_rngs(rng_seed)
        res, calls = run_requests(model, [clone(reqs[0], request_id=reqs[0].request_id + "-again",
                                                arrival_step=0)], max_steps=max_steps, device=device)
        solo_repeat = Scenario("solo_repeat", res, calls,
                               f"{reqs[0].request_id} alone again, process RNG reset first")
        # ... and once more without resetting the process RNG (as in a live server)
        res, calls = run_requests(model, [clone(reqs[0], request_id=reqs[0].request_id + "-third",
                                                arrival_step=0)], max_steps=max_steps, device=device)
        solo_continued = Scenario("solo_continued", res, calls,
                                  f"{reqs[0].request_id} alone again, process RNG as the last run left it")

        batches = []
        plans = [
            ("interleaved", "fifo", [0] * len(reqs), "all requests join at step 0, rows in arrival order"),
            ("permuted", "shuffle", [0] * len(reqs), "all requests join at step 0, rows shuffled every step"),
            ("joining", "shuffle", [0, 0] + [2 + i for i in range(len(reqs) - 2)],
             "two requests at step 0, the others join mid-stream, rows shuffled"),
        ]
        for name, order, arrivals, desc in plans:
            seed_process_rngs(rng_seed)
            res, calls = run_requests(_fresh(model_factory),
                                      [clone(r, arrival_step=a) for r, a in zip(reqs, arrivals)],
                                      order=order, max_steps=max_steps, device=device)
            batches.append(Scenario(name, res, calls, desc))

        # serial: request 0 aborted after two steps, then request 1 alone
        seed_process_rngs(rng_seed)
        with EngineDriver(_fresh(model_factory), max_steps=max_steps, device=device) as drv:
            first, second = reqs[0], reqs[1]
            drv.add_request(clone(first, arrival_step=0))
            drv.run(steps=2)
            abort_step = drv.step_index
            if first.request_id in drv.running:
                drv.abort(first.request_id)
            drv.step()  # delivers on_requests_finished
            drv.add_request(clone(second, arrival_step=0))
            drv.run()
            serial = Scenario("serial_after_abort", dict(drv.results), list(drv.calls),
                              f"{first.request_id} aborted after 2 steps, then {second.request_id} alone")

        # abort probe: three in flight, abort the middle one
        seed_process_rngs(rng_seed)
        three = sorted(reqs, key=lambda r: -len(r.text))[:3]
        with EngineDriver(_fresh(model_factory), max_steps=max_steps, device=device) as drv:
            for r in three:
                drv.add_request(clone(r, arrival_step=0))
            drv.run(steps=1)
            before_g, before_f = drv.live_generators(), drv.temp_files()
            victim = three[1].request_id
            if victim in drv.running:
                drv.abort(victim)
            drv.step()
            survivors = [r.request_id for r in three if r.request_id != victim]
            probe = AbortProbe(victim, survivors, before_g, drv.live_generators(), before_f,
                               drv.temp_files(), callable(getattr(drv.model, "on_requests_finished", None)),
                               sum(1 for s in survivors if s in drv.running))

        seed_process_rngs(rng_seed)
        with EngineDriver(_fresh(model_factory), max_steps=max_steps, device=device) as drv:
            dummy = drv.dummy_run(num_reqs=2)
            dummy_g, dummy_f = drv.live_generators(), len(drv.temp_files())

        # The scenarios' models are garbage from here, some in reference cycles (a model holding
        # its unfinished stream generators, whose frames hold the model). Finalise them now:
        # left to the cyclic GC, a generator's ``finally`` (which may restore a saved process
        # RNG) runs at an arbitrary later moment -- inside a later suite's tracked model call,
        # where it reads as that model's rng.global_state_mutated.
        del model, drv
        gc.collect()

    sr = next((r.sample_rate for s in solo.values() for r in s.results.values() if r.sample_rate), None)
    return ContractSuite(reqs, solo, solo_repeat, solo_continued, batches, serial, reqs[0].request_id, abort_step,
                         probe, dummy, dummy_g, dummy_f, sr)


# ----------------------------------------------------------------------------
# Stage engines of a generated pipeline (the run tier, porting_kit/scaffold/run.py)
# ----------------------------------------------------------------------------
#
# One engine per stage, advanced step by step the way vLLM-Omni 0.30.0's runners
# call a stage model: flattened ``input_ids`` / ``positions`` over the batch
# (prefill rows carry every prompt token, decode rows one), the per-row token
# spans in the forward context (``seam.step_context``: the stand-in of vLLM's
# ``set_forward_context``; attention layers read their KV cache from it), one
# ``additional_information`` dict per row refreshed every step only when the
# model sets ``enable_update_additional_information`` or ``has_preprocess``
# (``worker/gpu_model_runner.py: _update_additional_information``),
# ``seq_token_counts`` for generation stages
# (``worker/gpu_generation_model_runner.py``), ``compute_logits`` on each row's
# last token and greedy sampling for AR stages. The KV cache is the engine's:
# freed here when a request finishes or is aborted, as the scheduler frees its
# blocks.


@dataclass
class StageRequest:
    """One request inside one stage engine.

    Attributes
    ----------
    request_id : str
    prompt_ids : list of int
        Prompt token ids (AR prefill) or the placeholder / codes of a generation chunk.
    info : dict
        Its ``additional_information`` (the dict the model sees as its row).
    max_tokens : int
        Tokens an AR request may sample before it finishes.
    tokens : list of int
        Sampled so far (AR).
    finished_by : str
        ``"running"``, ``"stop"``, ``"length"`` or ``"abort"``.
    """

    request_id: str
    prompt_ids: list[int]
    info: dict[str, Any]
    max_tokens: int = 16
    tokens: list[int] = field(default_factory=list)
    finished_by: str = "running"


@dataclass
class StageStep:
    """What one stage step gave each row.

    Attributes
    ----------
    request_ids : list of str
        Rows in order.
    row_outputs : list of dict
        Per row: its slice of ``multimodal_outputs`` (tensors whose first dimension is
        the rows are sliced ``[i:i+1]``, lists of one entry per row give entry ``i``).
    finished : list of bool
        Per row: the request finished at this step (AR: stop token or length).
    problem : str or None
        Why ``multimodal_outputs`` could not be split per row (``None`` when fine).
    """

    request_ids: list[str]
    row_outputs: list[dict[str, Any]]
    finished: list[bool]
    problem: str | None = None


def split_rows(mm: Any, rows: int) -> tuple[list[dict[str, Any]], str | None]:
    """Split a stage's ``multimodal_outputs`` into one dict per batch row.

    Parameters
    ----------
    mm : dict or None
        ``multimodal_outputs`` (nested dicts allowed, e.g. ``{"codes": {"audio": T}}``).
    rows : int
        Requests in the batch.

    Returns
    -------
    per_row : list of dict
        Same nesting; a tensor with ``shape[0] == rows`` gives ``t[i:i+1]``, a list or
        tuple of ``rows`` entries gives entry ``i``; scalars are shared.
    problem : str or None
        The first value that is neither (``"codes.audio is (1, 15) for 4 rows"``).
    """
    import torch

    out: list[dict[str, Any]] = [{} for _ in range(rows)]
    problem: str | None = None

    def walk(value: Any, path: str, targets: list[dict[str, Any]], key: str) -> None:
        nonlocal problem
        if isinstance(value, dict):
            subs = [t.setdefault(key, {}) for t in targets]
            for k, v in value.items():
                walk(v, f"{path}.{k}" if path else str(k), subs, k)
        elif isinstance(value, torch.Tensor) and value.ndim >= 1:
            if value.shape[0] != rows:
                problem = problem or f"{path} is {tuple(value.shape)} for {rows} rows"
                return
            for i, t in enumerate(targets):
                t[key] = value[i:i + 1]
        elif isinstance(value, (list, tuple)):
            if len(value) != rows:
                problem = problem or f"{path} has {len(value)} entries for {rows} rows"
                return
            for i, t in enumerate(targets):
                t[key] = value[i]
        else:
            for t in targets:
                t[key] = value

    if isinstance(mm, dict):
        for k, v in mm.items():
            walk(v, str(k), out, str(k))
    return out, problem


class PagedKV:
    """vLLM's paged KV cache for the real ``Attention`` layers of one stage model.

    What ``GPUModelRunner`` does around a forward call, on vLLM's CPU attention backend:
    one KV cache tensor per layer, ``(num_blocks, kv_heads, block_size, 2 * head_size)``,
    bound to ``layer.kv_cache``; blocks handed to requests as they grow and returned when
    they finish; per call a ``CommonAttentionMetadata`` (query start locations, sequence
    lengths, block table, slot mapping) built into the backend's metadata and installed
    with vLLM's own ``set_forward_context``.

    Parameters
    ----------
    model : torch.nn.Module
        A model whose attention layers are ``vllm.model_executor.layers.attention.Attention``,
        constructed under ``set_current_vllm_config(vllm_config)``.
    vllm_config : vllm.config.VllmConfig
    device : str, default "cpu"
    block_size, num_blocks : int
        KV cache geometry (tokens per block, blocks per layer).

    Raises
    ------
    ValueError
        The model has no vLLM ``Attention`` layer.
    """

    def __init__(self, model: Any, vllm_config: Any, *, device: str = "cpu", block_size: int = 16,
                 num_blocks: int = 256) -> None:
        import torch
        from vllm.model_executor.layers.attention import Attention
        from vllm.v1.kv_cache_interface import FullAttentionSpec

        self.layers = {m.layer_name: m for m in model.modules() if isinstance(m, Attention)}
        if not self.layers:
            raise ValueError("the model has no vllm Attention layer")
        first = next(iter(self.layers.values()))
        dtype = vllm_config.model_config.dtype
        spec = FullAttentionSpec(block_size=block_size, num_kv_heads=first.num_kv_heads,
                                 head_size=first.head_size, dtype=dtype)
        self.builder = first.attn_backend.get_builder_cls()(spec, list(self.layers), vllm_config,
                                                            torch.device(device))
        for layer in self.layers.values():
            layer.kv_cache = torch.zeros((num_blocks, layer.num_kv_heads, block_size, 2 * layer.head_size),
                                         dtype=dtype, device=device)
        self.vllm_config, self.device, self.block_size = vllm_config, device, block_size
        self.free: list[int] = list(range(num_blocks))
        self.blocks: dict[str, list[int]] = {}
        self.lens: dict[str, int] = {}

    def release(self, request_id: str) -> None:
        """Return a request's blocks to the pool."""
        self.free.extend(self.blocks.pop(request_id, []))
        self.lens.pop(request_id, None)

    @contextmanager
    def context(self, request_ids: Sequence[str], counts: Sequence[int]) -> Iterator[None]:
        """vLLM's forward context for one call: ``counts[i]`` new tokens of request ``i``."""
        import torch
        from vllm.forward_context import set_forward_context
        from vllm.v1.attention.backend import CommonAttentionMetadata

        slots: list[int] = []
        seq_lens: list[int] = []
        tables: list[list[int]] = []
        for rid, n in zip(request_ids, counts):
            start = self.lens.get(rid, 0)
            blocks = self.blocks.setdefault(rid, [])
            while len(blocks) * self.block_size < start + n:
                blocks.append(self.free.pop(0))
            slots += [blocks[p // self.block_size] * self.block_size + p % self.block_size
                      for p in range(start, start + n)]
            self.lens[rid] = start + n
            seq_lens.append(start + n)
            tables.append(blocks)
        width = max((len(b) for b in tables), default=1) or 1
        loc = [0]
        for n in counts:
            loc.append(loc[-1] + int(n))
        i32 = {"dtype": torch.int32, "device": self.device}
        qsl = torch.tensor(loc, **i32)
        slot_t = torch.tensor(slots, dtype=torch.int64, device=self.device)
        common = CommonAttentionMetadata(
            query_start_loc=qsl, query_start_loc_cpu=qsl.cpu(), seq_lens=torch.tensor(seq_lens, **i32),
            num_reqs=len(counts), num_actual_tokens=loc[-1], max_query_len=max(counts, default=0),
            max_seq_len=max(seq_lens, default=0),
            block_table_tensor=torch.tensor([b + [0] * (width - len(b)) for b in tables], **i32),
            slot_mapping=slot_t)
        meta = self.builder.build(0, common)
        with set_forward_context({name: meta for name in self.layers}, self.vllm_config,
                                 slot_mapping={name: slot_t for name in self.layers}):
            yield


class StageEngine:
    """One stage of a pipeline (AR or generation), advanced step by step.

    Parameters
    ----------
    model : torch.nn.Module
        The stage model.
    seam : module
        The generated ``_vllm_seam`` module (its ``step_context`` / ``StepContext``).
    kind : {"ar", "generation"}
        AR stages sample through ``compute_logits``; generation stages run each queued
        chunk once.
    stop_token_ids : sequence of int
        AR stop tokens (the pipeline's ``sampling_constraints``).
    device : str, default "cpu"
    """

    def __init__(self, model: Any, seam: Any, *, kind: str, stop_token_ids: Sequence[int] = (),
                 device: str = "cpu", paged: PagedKV | None = None) -> None:
        self.model, self.seam, self.kind = model, seam, kind
        self.paged = paged
        self.stop_token_ids = {int(t) for t in stop_token_ids}
        self.device = device
        self.kv: dict[tuple[str, str], Any] = {}
        self.running: list[StageRequest] = []
        self.queued: list[StageRequest] = []  # generation chunks waiting, in order
        self._finished: list[str] = []
        self.done: dict[str, StageRequest] = {}  # finished requests (their sampled tokens)
        self.refresh_info = bool(getattr(model, "enable_update_additional_information", False)
                                 or getattr(model, "has_preprocess", False))
        self._first_info: dict[str, dict[str, Any]] = {}

    def add(self, req: StageRequest) -> None:
        """Queue a request (AR) or a chunk of one (generation)."""
        (self.running if self.kind == "ar" else self.queued).append(req)

    def abort(self, request_id: str) -> None:
        """Drop a request; ``on_requests_finished`` gets it at the next step."""
        for req in [r for r in self.running + self.queued if r.request_id == request_id]:
            req.finished_by = "abort"
            (self.running if req in self.running else self.queued).remove(req)
        self._finished.append(request_id)
        self._free(request_id)

    def _free(self, request_id: str) -> None:
        for key in [k for k in self.kv if k[1] == request_id]:
            del self.kv[key]
        if self.paged is not None:
            self.paged.release(request_id)

    def kv_requests(self) -> set[str]:
        """Request ids that still hold KV cache entries (stand-in store or paged blocks)."""
        held = {k[1] for k in self.kv}
        return held | set(self.paged.blocks) if self.paged is not None else held

    def notify_finished(self) -> None:
        """``on_requests_finished`` for every request that left since the last call."""
        done, self._finished = self._finished, []
        hook = getattr(self.model, "on_requests_finished", None)
        if done and callable(hook):
            hook(set(done))

    @property
    def idle(self) -> bool:
        """Nothing running or queued."""
        return not self.running and not self.queued

    def _forward(self, rids: list[str], ids: list[list[int]], positions: list[list[int]],
                 infos: list[dict[str, Any]], extra: dict[str, Any]) -> Any:
        import torch

        loc = [0]
        for seq in ids:
            loc.append(loc[-1] + len(seq))
        flat = [t for seq in ids for t in seq]
        pos = [p for seq in positions for p in seq]
        input_ids = torch.tensor(flat, dtype=torch.long, device=self.device)
        pos_t = torch.tensor(pos, dtype=torch.long, device=self.device)
        if self.paged is not None:  # vLLM's forward context; the model reads its spans from it
            cm = self.paged.context(rids or ["_profile"], [len(s) for s in ids])
        else:
            cm = self.seam.step_context(self.seam.StepContext(request_ids=rids, query_start_loc=loc, kv=self.kv))
        with cm, torch.inference_mode():
            out = self.model.forward(input_ids=input_ids, positions=pos_t, intermediate_tensors=None,
                                     inputs_embeds=None, runtime_additional_information=infos,
                                     model_intermediate_buffer=infos, **extra)
        return out, loc

    def dummy_run(self, num_reqs: int = 2) -> list[str]:
        """The profile call (no rows, ``num_reqs`` tokens) then the ``_is_dummy`` rows.

        Returns
        -------
        list of str
            Request ids of per-request state the calls left in the model (should be none).
        """
        import torch

        calls: list[list[dict[str, Any]]] = [[]]
        get_dummy = getattr(self.model, "get_dummy_runtime_additional_information", None)
        if callable(get_dummy):
            calls.append(list(get_dummy(num_reqs)))
        for infos in calls:
            rids = [f"_dummy_{i}" for i in range(len(infos))]
            n = len(infos) or num_reqs
            ids = [[0] for _ in range(n)] if infos else [[0] * n]
            extra = {"seq_token_counts": [1] * len(infos)} if self.kind == "generation" and infos else {}
            out, loc = self._forward(rids, ids, [[0] for _ in ids] if infos else [list(range(n))], infos, extra)
            if self.kind == "ar":
                hidden = getattr(out, "text_hidden_states", out)
                if isinstance(hidden, torch.Tensor) and hidden.ndim >= 1 and hidden.shape[0] >= loc[-1] and infos:
                    with torch.inference_mode():
                        self.model.compute_logits(hidden[[e - 1 for e in loc[1:]]])
        self.kv.clear()
        if self.paged is not None:
            for rid in list(self.paged.blocks):
                self.paged.release(rid)
        return held_request_state(self.model)

    def step(self) -> StageStep | None:
        """One step: notify finished requests, run the batch, sample (AR), retire finished rows.

        Returns
        -------
        StageStep or None
            ``None`` when nothing was scheduled.
        """
        import torch

        self.notify_finished()
        if self.kind == "ar":
            batch = list(self.running)
        else:  # the first queued chunk of each request
            seen: set[str] = set()
            batch = []
            for req in self.queued:
                if req.request_id not in seen:
                    seen.add(req.request_id)
                    batch.append(req)
        if not batch:
            return None
        rids = [r.request_id for r in batch]
        ids, positions, infos = [], [], []
        for req in batch:
            if self.kind == "ar" and req.tokens:
                ids.append([req.tokens[-1]])
                positions.append([len(req.prompt_ids) + len(req.tokens) - 1])
            else:
                ids.append(list(req.prompt_ids))
                positions.append(list(range(len(req.prompt_ids))))
            info = req.info
            if not self.refresh_info:  # the runner keeps the first dict it saw for this request
                info = self._first_info.setdefault(req.request_id, info)
            info["generated_len"] = len(req.tokens)
            infos.append(info)
        extra = {"seq_token_counts": [len(s) for s in ids]} if self.kind == "generation" else {}
        out, loc = self._forward(rids, ids, positions, infos, extra)
        hidden = getattr(out, "text_hidden_states", out)
        mm = getattr(out, "multimodal_outputs", None) if getattr(self.model, "have_multimodal_outputs", False) else {}
        rows, problem = split_rows(mm or {}, len(batch))
        finished = [False] * len(batch)
        if self.kind == "ar":
            last = torch.tensor([e - 1 for e in loc[1:]], device=hidden.device)
            with torch.inference_mode():
                logits = self.model.compute_logits(hidden[last])
            tokens = logits.argmax(dim=-1).reshape(-1).tolist()
            for i, req in enumerate(batch):
                req.tokens.append(int(tokens[i]) if i < len(tokens) else next(iter(self.stop_token_ids), 0))
                if req.tokens[-1] in self.stop_token_ids:
                    req.finished_by = "stop"
                elif len(req.tokens) >= req.max_tokens:
                    req.finished_by = "length"
                finished[i] = req.finished_by != "running"
        else:
            for i, req in enumerate(batch):
                self.queued.remove(req)
                finished[i] = bool(req.info.get("_last_chunk")) if isinstance(req.info, dict) else False
        for req, done in zip(batch, finished):
            if done:
                self.done[req.request_id] = req
                if req in self.running:
                    self.running.remove(req)
                self._finished.append(req.request_id)
                self._free(req.request_id)
        return StageStep(rids, rows, finished, problem)


def held_request_state(model: Any) -> list[str]:
    """Keys of per-request state a model still holds: string keys of its dict attributes.

    Parameters
    ----------
    model : object
        A stage model (``self._generators``, ``self._states``, ``self._streams`` ...).

    Returns
    -------
    list of str
        Sorted keys of every non-empty ``dict`` attribute whose keys are strings.
    """
    keys: set[str] = set()
    for name, value in vars(model).items():
        if name in ("_parameters", "_buffers", "_modules"):  # torch.nn.Module internals
            continue
        if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
            keys.update(value)
    return sorted(keys)
