"""Tensor-parallel parity measurements: run the sharded candidate on N ranks, gather, compare.

The facts behind the ``tp`` family (:mod:`porting_kit.checks.tp` builds its findings
from the :class:`TPResult` this module returns).

How it runs
-----------
The reference runs once in this process, with the sketch hooks of
:mod:`porting_kit.probes.capture` on every module. Its state dict and the inputs go
to a temporary folder; N ranks are started as fresh interpreters
(``python -m porting_kit.probes.tp RANK JOB``: nothing of the caller's ``__main__``
is re-imported), join one process group (``gloo`` on CPU, ``nccl`` with ``--device cuda``
and N GPUs; ``file://`` rendezvous in that folder, no port to pick), and each:

1. loads the spec again (same file or example, same variant);
2. builds ``candidate_tp(rank, world_size)`` (the process group exists by then);
3. passes the *full* weights, after the spec's ``convert_weights`` when it has one,
   to the model's own ``load_weights`` as ``(name, tensor)`` pairs; the model keeps
   its slice (parameters still all-NaN afterwards were never set);
4. runs ``run_candidate`` with a hook on every module that keeps the full output
   tensor (CPU copy), and writes them, its output and its state dict to the folder.

A rank that raises writes ``ExcType: message (file:line)``; the others are then
terminated, and so are all ranks still running after ``timeout_s`` (the spec's
``tp_timeout``, default 300 s): :func:`measure` raises ``InputError`` (exit 2).

Gathering
---------
Each module call's N per-rank outputs become one tensor (:func:`gather`): rank 0's
when the ranks agree or the layer says its output is replicated (``reduce_results`` /
``gather_output`` true, vLLM's attributes); a concatenation along the last axis when
the layer says it is column- or vocabulary-parallel (``gather_output`` false); for
other modules, the first axis (last first) along which the concatenation has the
shape of some reference output. A module whose ranks disagree where the output
should be replicated is kept as rank 0's and marked ``diverged``.

The gathered outputs are sketched (:func:`porting_kit.probes.capture.summarize_calls`),
aligned with the reference's (:func:`porting_kit.probes.align.align`, with the weight
map traced over all ranks' shards) and screened against the dtype's tolerance in
reference completion order, as at TP 1. The first flagged pair is verified with full
tensors and the known TP hypotheses are measured on it (:class:`Hypotheses`); the
outputs are compared too.

Memory: every rank's full module outputs are kept (fine for CPU-sized models; a GPU
run of a large model would sketch the shards on the ranks instead).
"""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from porting_kit.errors import InputError
from porting_kit.probes.align import Alignment, align
from porting_kit.probes.capture import capture_full, capture_summaries, summarize_calls
from porting_kit.probes.compare import TensorMetrics, first_tensor, tensor_metrics
from porting_kit.probes.layers import PairStat, screen_pairs
from porting_kit.probes.tolerance import Tolerance, tolerance_for

#: Seconds the ranks may run before they are terminated (the spec's ``tp_timeout`` overrides).
DEFAULT_TIMEOUT_S = 300.0
_MAX_VERIFY = 3


@dataclass
class TPJob:
    """What each rank needs to rebuild its part (picklable: sent to spawned processes).

    Attributes
    ----------
    spec_path, example, variant : str or None
        How to load the spec again (:func:`porting_kit.spec.load_spec`).
    world_size : int
    backend : str
        ``"gloo"`` or ``"nccl"``.
    workdir : str
        Temporary folder: rendezvous file, ``weights.pt`` / ``inputs.pt`` in, ``rank{r}.pt``
        or ``rank{r}.err`` out.
    dtype : str or None
        Serving dtype (``--dtype``), applied after loading.
    timeout_s : float
        Seconds the parent waits; the process group's collective timeout is twice that.
    spawned_at : float
        ``time.time()`` when the parent started the ranks (for the start-up figure).
    """

    spec_path: str | None
    example: str | None
    variant: str | None
    world_size: int
    backend: str
    workdir: str
    dtype: str | None
    timeout_s: float
    spawned_at: float = 0.0


@dataclass
class GatheredCall:
    """One module call of the sharded candidate, over all ranks.

    Attributes
    ----------
    key, name, type : str
        As :class:`porting_kit.probes.capture.Record` (rank 0's call).
    depth : int
    layout : str
        ``"replicated"``, ``"cat:<axis>"`` (negative axis), ``"sum"``, ``"diverged"``
        (ranks disagree where the output should be replicated; rank 0 kept) or ``"none"``
        (no floating output).
    tensor : torch.Tensor or None
        The gathered output (CPU).
    ranks : list of torch.Tensor
        Each rank's own output (CPU), rank order.
    """

    key: str
    name: str
    type: str
    depth: int
    layout: str
    tensor: Any = field(repr=False, default=None)
    ranks: list = field(repr=False, default_factory=list)


@dataclass
class Hypotheses:
    """The TP fault hypotheses measured on one differing (reference, candidate) pair.

    Attributes
    ----------
    world_size : int
    permutation : list of int or None
        Candidate shard ``i`` (along ``axis``) equals reference shard ``permutation[i]``
        (not the identity); ``None`` when no permutation explains the difference.
    axis : int or None
        The axis the shards were split along for ``permutation`` (negative).
    regather : tuple of (int, int) or None
        ``(wrong, right)``: the candidate concatenated its N shards along axis ``wrong``;
        split there and concatenated along ``right`` it equals the reference.
    reduce : str or None
        ``"extra_biases"`` (candidate - reference = (N-1) x the layer's bias),
        ``"factor_n"`` (candidate = N x reference), ``"factor_1_over_n"``,
        ``"missing_reduce"`` (ranks disagree; their sum equals the reference).
    fit_rel_err : float or None
        ``||fix(candidate) - reference|| / ||reference||`` of the hypothesis that fits.
    shards_of : str
        ``"output"`` (``permutation`` is over the output's shards along ``axis``) or
        ``"weight"`` (over an embedding weight's vocabulary shards: rank ``i`` holds
        reference shard ``permutation[i]``, :func:`vocab_shard_permutation`).
    """

    world_size: int
    permutation: list[int] | None = None
    axis: int | None = None
    regather: tuple[int, int] | None = None
    reduce: str | None = None
    fit_rel_err: float | None = None
    shards_of: str = "output"

    @property
    def explained(self) -> bool:
        """True when one hypothesis fits."""
        return self.permutation is not None or self.regather is not None or self.reduce is not None


@dataclass
class TPResult:
    """Everything the TP run measured; cached in ``ctx.state['tp']``.

    Attributes
    ----------
    world_size : int
    backend : str
    alignment : Alignment
        Reference records vs the gathered candidate records.
    stats : list of PairStat
        Comparable aligned pairs, reference completion order.
    calls : dict of str to GatheredCall
        Candidate module calls by key.
    first : PairStat or None
        The first aligned pair whose gathered output differs (verified on full tensors).
    first_metric : TensorMetrics or None
    first_hypotheses : Hypotheses or None
    shape_pair : tuple or None
        ``(PairStat-less AlignedPair, Hypotheses)`` of the first aligned pair whose output
        shapes differ in a way a wrong gather axis explains.
    output_shapes : tuple of (tuple, tuple)
        Reference and candidate (rank 0) output shapes.
    output_metric : TensorMetrics or None
        When the shapes agree.
    output_hypotheses : Hypotheses or None
        When the outputs differ.
    ranks_agree : bool
        Every rank returned the same output.
    unset : dict of int to list of str
        Rank -> parameters ``load_weights`` never wrote.
    tolerance : Tolerance
    timing : dict
        Seconds: ``reference``, ``ranks`` (start to last rank done), ``compare``, and the
        slowest rank's ``rank_import`` (interpreter and imports), ``rank_init`` (process
        group), ``rank_load`` (spec, ``candidate_tp``, ``load_weights``), ``rank_forward``
        (forward with every module output copied).
    """

    world_size: int
    backend: str
    alignment: Alignment
    stats: list[PairStat]
    calls: dict[str, GatheredCall]
    first: PairStat | None
    first_metric: TensorMetrics | None
    first_hypotheses: Hypotheses | None
    shape_pair: Any
    output_shapes: tuple
    output_metric: TensorMetrics | None
    output_hypotheses: Hypotheses | None
    ranks_agree: bool
    unset: dict[int, list[str]]
    tolerance: Tolerance
    timing: dict = field(default_factory=dict)
    fused: FusedShard | None = None


# --------------------------------------------------------------------------- ranks


def declared_layout(module) -> str | None:
    """The output layout a vLLM-style parallel layer declares, from its attributes.

    Parameters
    ----------
    module : torch.nn.Module

    Returns
    -------
    str or None
        ``"replicated"`` (``gather_output`` or ``reduce_results`` true), ``"cat:-1"``
        (``gather_output`` false: column- or vocabulary-parallel output), ``"sum"``
        (``reduce_results`` false: partial sums), ``None`` when it declares nothing.
    """
    gather = getattr(module, "gather_output", None)
    reduce = getattr(module, "reduce_results", None)
    if gather is True or reduce is True:
        return "replicated"
    if gather is False:
        return "cat:-1"
    if reduce is False:
        return "sum"
    return None


def _where(exc: BaseException) -> str:
    """``file:line`` of the innermost frame of ``exc``'s deepest cause."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


def _capture_calls(model, calls: list[dict]):
    """Hook every module of ``model``; each call appends ``{key, name, type, depth, declared,
    tensor}`` (a detached CPU copy of its first floating output). Returns the hook handles."""
    counts: dict[str, int] = {}
    handles = []

    def make(name: str, module):
        declared = declared_layout(module)

        def post(mod, args, output):
            n = counts.get(name, 0)
            counts[name] = n + 1
            out = first_tensor(output)
            keep = out is not None and (out.is_floating_point() or out.is_complex())
            calls.append({"key": name if n == 0 else f"{name}#{n}", "name": name,
                          "type": type(mod).__name__, "depth": 0 if not name else name.count(".") + 1,
                          "declared": declared, "tensor": out.detach().cpu().clone() if keep else None})
        return post

    for name, module in model.named_modules():
        handles.append(module.register_forward_hook(make(name, module)))
    return handles


def _init_group(rank: int, job: TPJob) -> str:
    """Join the process group (``file://`` rendezvous in the job folder); the rank's device."""
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // job.world_size))
    dist.init_process_group(job.backend, init_method=f"file://{Path(job.workdir) / 'rendezvous'}",
                            rank=rank, world_size=job.world_size,
                            timeout=datetime.timedelta(seconds=2 * job.timeout_s))
    if job.backend == "nccl":
        torch.cuda.set_device(rank)
        return f"cuda:{rank}"
    return "cpu"


def _load_shard(spec, rank: int, job: TPJob):
    """``candidate_tp(rank, N)`` with the full weights passed to its ``load_weights``.

    Returns
    -------
    model : torch.nn.Module
    unset : list of str
        Floating parameters still all-NaN after loading (filled with NaN before it).
    """
    import torch

    weights = torch.load(Path(job.workdir) / "weights.pt", weights_only=False)
    if spec.has("convert_weights"):
        weights = spec.call("convert_weights", dict(weights))
    model = spec.call("candidate_tp", rank, job.world_size)
    if not isinstance(model, torch.nn.Module) or not callable(getattr(model, "load_weights", None)):
        raise InputError(f"{spec.name}: candidate_tp() must return a torch.nn.Module with a "
                         "load_weights(iterable of (name, tensor)) method that keeps its shard")
    params = dict(model.named_parameters())
    with torch.no_grad():
        for p in params.values():
            if p.is_floating_point():
                p.fill_(float("nan"))
    model.load_weights((k, v) for k, v in weights.items() if isinstance(v, torch.Tensor))
    unset = [n for n, p in params.items() if p.is_floating_point() and p.numel()
             and bool(torch.isnan(p).all())]
    return model, unset


def _forward_all(spec, model, inputs) -> tuple[list[dict], Any]:
    """``run_candidate`` with every module's output kept (:func:`_capture_calls`); (calls, output)."""
    import torch

    from porting_kit.load import run_side

    calls: list[dict] = []
    handles = _capture_calls(model, calls)
    try:
        with torch.no_grad():
            out = first_tensor(run_side(spec, "candidate", model, inputs))
    finally:
        for h in handles:
            h.remove()
    if out is None:
        raise InputError(f"{spec.name}: the candidate forward returned no tensor")
    return calls, out


def _rank_body(rank: int, job: TPJob) -> None:
    """One rank's work (see the module docstring); writes ``rank{rank}.pt`` with its module
    calls, output, state dict, unset parameters and timings."""
    import torch
    import torch.distributed as dist

    from porting_kit.context import CheckContext
    from porting_kit.load import move_inputs, to_serving_dtype
    from porting_kit.spec import load_spec

    times = {"rank_import": time.time() - job.spawned_at}
    t0 = time.perf_counter()
    device = _init_group(rank, job)
    times["rank_init"], t0 = time.perf_counter() - t0, time.perf_counter()
    spec = load_spec(job.spec_path, example=job.example, variant=job.variant)
    model, unset = _load_shard(spec, rank, job)
    model.to(device)
    dtype = CheckContext(spec=spec, dtype=job.dtype).torch_dtype()
    if dtype is not None:
        to_serving_dtype(model, dtype)
    model.eval()
    inputs = move_inputs(torch.load(Path(job.workdir) / "inputs.pt", weights_only=False), device, None)
    times["rank_load"], t0 = time.perf_counter() - t0, time.perf_counter()
    calls, out = _forward_all(spec, model, inputs)
    times["rank_forward"] = time.perf_counter() - t0
    state = {k: v.detach().cpu() for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
    torch.save({"calls": calls, "output": out.detach().cpu(), "state": state, "unset": unset,
                "times": times}, Path(job.workdir) / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def _rank_main(rank: int, job: TPJob) -> int:
    """Entry point of a rank process: :func:`_rank_body`, any failure written to ``rank{rank}.err``.

    Returns
    -------
    int
        The process exit status: 0, or 1 after a failure.
    """
    try:
        _rank_body(rank, job)
    except BaseException as exc:  # reported to the parent, which stops the other ranks
        msg = str(exc).splitlines()[0] if str(exc) else ""
        text = f"{type(exc).__name__}: {msg} ({_where(exc)})"
        (Path(job.workdir) / f"rank{rank}.err").write_text(text)
        return 1
    return 0


def _spawn(job: TPJob, timeout_s: float) -> None:
    """Start the ranks and wait for them; InputError when one fails or time runs out.

    Each rank is a fresh interpreter (``python -m porting_kit.probes.tp RANK JOB.json``,
    the parent's ``sys.path`` in ``PYTHONPATH``): nothing of the caller's ``__main__`` is
    re-imported, so a script without an ``if __name__ == "__main__"`` guard works too.
    """
    import json
    import subprocess
    import sys
    from dataclasses import asdict

    work = Path(job.workdir)
    job.spawned_at = time.time()
    (work / "job.json").write_text(json.dumps(asdict(job)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
    procs = []
    try:
        for r in range(job.world_size):
            with open(work / f"rank{r}.log", "wb") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "porting_kit.probes.tp", str(r), str(work / "job.json")],
                    stdout=log, stderr=subprocess.STDOUT, env=env))
        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for p in procs):
            failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
            if failed:
                raise InputError(_failure_text(job, failed[0], procs[failed[0]].returncode))
            if time.monotonic() > deadline:
                raise InputError(f"--tp {job.world_size}: the ranks did not finish within {timeout_s:g} s "
                                 "(a rank waiting in a collective the others never reach?); they were "
                                 "stopped. A spec may set tp_timeout (seconds)")
            time.sleep(0.1)
        failed = [r for r, p in enumerate(procs) if p.returncode != 0]
        if failed:
            raise InputError(_failure_text(job, failed[0], procs[failed[0]].returncode))
    finally:
        _stop(procs)


def _stop(procs) -> None:
    """Terminate the rank processes still running (then kill what ignores SIGTERM)."""
    import subprocess

    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def _failure_text(job: TPJob, rank: int, code: int) -> str:
    """One line naming the failed rank and its exception (or its last log line)."""
    work = Path(job.workdir)
    err = work / f"rank{rank}.err"
    if err.exists():
        return f"--tp {job.world_size}: rank {rank} failed: {err.read_text()}; the other ranks were stopped"
    log = work / f"rank{rank}.log"
    lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    last = lines[-1] if lines else "no output"
    return f"--tp {job.world_size}: rank {rank} exited with status {code} ({last}); the other ranks were stopped"


def _main(argv: list[str]) -> int:
    """``python -m porting_kit.probes.tp RANK JOB_JSON``: run one rank (used by :func:`_spawn`)."""
    import json

    rank, job_path = int(argv[0]), argv[1]
    return _rank_main(rank, TPJob(**json.loads(Path(job_path).read_text())))


# --------------------------------------------------------------------------- gathering


def _all_equal(tensors: list) -> bool:
    import torch

    return all(t.shape == tensors[0].shape and bool(torch.equal(t, tensors[0])) for t in tensors[1:])


def gather(tensors: list, declared: str | None, ref_shapes: set[tuple[int, ...]]) -> tuple[str, Any]:
    """One module call's per-rank outputs as one tensor.

    Parameters
    ----------
    tensors : list of torch.Tensor or None
        Rank order, each [shape=(..., d_local)].
    declared : str or None
        :func:`declared_layout` of the module.
    ref_shapes : set of tuple of int
        Output shapes of the reference's modules (picks the axis of undeclared shards).

    Returns
    -------
    layout : str
        See :class:`GatheredCall`.
    tensor : torch.Tensor or None
    """
    import torch

    if any(t is None for t in tensors):
        return "none", None
    if declared == "replicated" or _all_equal(tensors):
        return ("replicated" if _all_equal(tensors) else "diverged"), tensors[0]
    if len({tuple(t.shape) for t in tensors}) > 1:
        return "diverged", tensors[0]
    if declared is not None and declared.startswith("cat:"):
        axis = int(declared[4:])
        return declared, torch.cat(tensors, dim=axis)
    if declared == "sum":
        return "sum", torch.stack(tensors).sum(0)
    nd = tensors[0].dim()
    for axis in range(-1, -nd - 1, -1):
        shape = list(tensors[0].shape)
        shape[axis] *= len(tensors)
        if tuple(shape) in ref_shapes:
            return f"cat:{axis}", torch.cat(tensors, dim=axis)
    return "diverged", tensors[0]


def _gather_all(rank_data: list[dict], ref_shapes: set) -> dict[str, GatheredCall]:
    """Every module call gathered over the ranks (InputError when the ranks called different modules)."""
    keys = [[c["key"] for c in d["calls"]] for d in rank_data]
    if any(k != keys[0] for k in keys[1:]):
        raise InputError("the tensor-parallel ranks called different modules (rank 0: "
                         f"{len(keys[0])} calls); a sharded model must run the same modules on every rank")
    out: dict[str, GatheredCall] = {}
    for i, c in enumerate(rank_data[0]["calls"]):
        per_rank = [d["calls"][i]["tensor"] for d in rank_data]
        layout, t = gather(per_rank, c["declared"], ref_shapes)
        out[c["key"]] = GatheredCall(c["key"], c["name"], c["type"], c["depth"], layout, t,
                                     [x for x in per_rank if x is not None])
    return out


# --------------------------------------------------------------------------- hypotheses


def _fits(ref, cand, thr: float) -> float | None:
    """``||cand - ref|| / ||ref||`` when it is at most ``thr`` (and the shapes agree), else None."""
    if cand is None or ref is None or tuple(cand.shape) != tuple(ref.shape):
        return None
    r = ref.double()
    n = float(r.norm())
    e = float((cand.double() - r).norm()) / (n if n > 0 else 1.0)
    return e if e <= thr else None


def shard_permutation(ref, cand, n: int, axis: int, thr: float) -> list[int] | None:
    """The permutation of ``n`` equal shards along ``axis`` that maps ``ref`` onto ``cand``.

    Parameters
    ----------
    ref, cand : torch.Tensor [shape=(..., k * n, ...)]
        Same shape.
    n : int
        Number of shards (the tensor-parallel size).
    axis : int
    thr : float
        Relative error under which two shards count as equal.

    Returns
    -------
    list of int or None
        ``perm`` with ``cand.chunk(n, axis)[i] == ref.chunk(n, axis)[perm[i]]``; ``None``
        when no such permutation exists or it is the identity.
    """
    if tuple(ref.shape) != tuple(cand.shape) or ref.shape[axis] % n:
        return None
    rc, cc = ref.chunk(n, axis), cand.chunk(n, axis)
    perm: list[int] = []
    for c in cc:
        j = next((j for j, r in enumerate(rc) if j not in perm and _fits(r, c, thr) is not None), None)
        if j is None:
            return None
        perm.append(j)
    return None if perm == list(range(n)) else perm


def regather_axes(ref, cand, n: int, thr: float) -> tuple[int, int] | None:
    """The (wrong, right) axes when ``cand`` holds ``n`` shards concatenated along the wrong axis.

    Parameters
    ----------
    ref : torch.Tensor [shape=(..., k * n, ...)]
    cand : torch.Tensor
        Same number of dimensions; one axis ``n`` times longer, another ``n`` times shorter.
    n : int
    thr : float

    Returns
    -------
    tuple of (int, int) or None
        Negative axes ``(wrong, right)`` such that splitting ``cand`` into ``n`` along
        ``wrong`` and concatenating along ``right`` gives ``ref``.
    """
    import torch

    if cand.dim() != ref.dim() or tuple(cand.shape) == tuple(ref.shape):
        return None
    nd = ref.dim()
    for wrong in range(nd):
        for right in range(nd):
            if wrong == right or cand.shape[wrong] != n * ref.shape[wrong] \
                    or ref.shape[right] != n * cand.shape[right]:
                continue
            if any(cand.shape[d] != ref.shape[d] for d in range(nd) if d not in (wrong, right)):
                continue
            if _fits(ref, torch.cat(cand.chunk(n, wrong), dim=right), thr) is not None:
                return wrong - nd, right - nd
    return None


@dataclass
class FusedShard:
    """Which reference rows each rank of a fused projection holds (``tp.shard_order`` at it).

    Attributes
    ----------
    candidate_module : str
        The fused candidate module (``qkv_proj``, ``gate_up_proj``).
    parts : list of (str, int)
        The reference modules fused, in the fused order, with their output widths.
    sources : list of str
        Per rank, the reference rows its output holds (``"q_proj[0:64], k_proj[0:16]"``).
    expected : list of str
        Per rank, the rows it should hold (its heads of each part).
    """

    candidate_module: str
    parts: list
    sources: list
    expected: list


def _segments(cols: list[int], parts: list[tuple[str, int]]) -> str:
    """``[0, 1, 2, 64, 65]`` over parts ``[("q", 64), ("k", 16)]`` -> ``"q[0:3], k[0:2]"``."""
    starts, acc = [], 0
    for _, width in parts:
        starts.append(acc)
        acc += width
    out: list[list] = []  # [part index, start, stop]
    for c in cols:
        p = max(i for i, s0 in enumerate(starts) if s0 <= c)
        local = c - starts[p]
        if out and out[-1][0] == p and out[-1][2] == local:
            out[-1][2] += 1
        else:
            out.append([p, local, local + 1])
    return ", ".join(f"{parts[p][0]}[{a}:{b}]" for p, a, b in out)


def fused_rank_sources(parts: list, rank_outputs: list, thr: float) -> list[list[int]] | None:
    """The fused-reference column each column of each rank's output equals.

    Parameters
    ----------
    parts : list of torch.Tensor [shape=(..., d_i)]
        The reference outputs of the fused projections (``q_proj``, ``k_proj``, ``v_proj``).
    rank_outputs : list of torch.Tensor [shape=(..., m)]
        Each rank's own output of the fused candidate module, same leading shape.
    thr : float
        Relative error under which two columns are equal.

    Returns
    -------
    list of list of int or None
        Per rank, the column of ``cat(parts, -1)`` each of its columns equals; ``None`` when some
        column equals none (not a sharding of these parts).
    """
    import torch

    full = torch.cat([p.double() for p in parts], dim=-1)
    ref_cols = full.reshape(-1, full.shape[-1]).T  # (F, T)
    norms = ref_cols.norm(dim=1)
    out = []
    for r in rank_outputs:
        if r is None or tuple(r.shape[:-1]) != tuple(full.shape[:-1]):
            return None
        cand_cols = r.double().reshape(-1, r.shape[-1]).T  # (m, T)
        dist = torch.cdist(cand_cols, ref_cols)  # (m, F)
        best = dist.argmin(dim=1)
        err = dist.gather(1, best[:, None])[:, 0]
        if bool((err > thr * norms[best].clamp_min(1e-12)).any()):
            return None
        out.append(best.tolist())
    return out


def expected_rank_sources(widths: list[int], n: int, head_size: int | None = None) -> list[list[int]] | None:
    """The columns of ``cat(parts)`` rank ``r`` of ``n`` holds in a correct fused shard: its slice
    of each part, in the fused order (vLLM's QKV / merged column layout). A part narrower than
    ``n`` heads (kv heads < tp size: replicated) holds head ``r * heads // n``; ``None`` when a
    width is not divisible by the shard size."""
    out = []
    for r in range(n):
        cols, base = [], 0
        for w in widths:
            if w % n == 0 and (head_size is None or (w // head_size) % n == 0 or w // head_size >= n):
                size = w // n
                cols += range(base + r * size, base + (r + 1) * size)
            elif head_size and w % head_size == 0 and w // head_size < n:
                h = r * (w // head_size) // n
                cols += range(base + h * head_size, base + (h + 1) * head_size)
            else:
                return None
            base += w
        out.append(cols)
    return out


def fused_shard_fault(name: str, parts: list[tuple[str, Any]], rank_outputs: list, n: int, thr: float,
                      head_size: int | None = None) -> FusedShard | None:
    """A fused projection whose ranks hold other reference rows than their own shard of each part.

    Parameters
    ----------
    name : str
        The candidate module.
    parts : list of (str, torch.Tensor)
        Reference module name and full output, in the fused order.
    rank_outputs : list of torch.Tensor
        Each rank's output of the fused module.
    n : int
    thr : float
    head_size : int, optional
        For parts with fewer heads than ranks (replicated kv heads).

    Returns
    -------
    FusedShard or None
        ``None`` when the ranks hold exactly their shards, or the outputs are not a
        sharding of these parts at all.
    """
    found = fused_rank_sources([t for _, t in parts], rank_outputs, thr)
    widths = [int(t.shape[-1]) for _, t in parts]
    want = expected_rank_sources(widths, n, head_size)
    if found is None or want is None or found == want:
        return None
    short = [pname.rsplit(".", 1)[-1] for pname, _ in parts]
    names = short if len(set(short)) == len(short) else [pname for pname, _ in parts]
    labels = list(zip(names, widths))
    return FusedShard(candidate_module=name, parts=labels,
                      sources=[_segments(c, labels) for c in found],
                      expected=[_segments(c, labels) for c in want])


def reduce_hypothesis(ref, cand, ranks: list, bias, n: int, thr: float) -> tuple[str, float] | None:
    """Which reduction fault turns ``ref`` into ``cand``, with its fit.

    Parameters
    ----------
    ref, cand : torch.Tensor [shape=(..., d)]
        Reference output and the gathered candidate output.
    ranks : list of torch.Tensor
        Each rank's own output (for the missing-all-reduce test).
    bias : torch.Tensor [shape=(d,)] or None
        The reference layer's bias.
    n : int
        Tensor-parallel size.
    thr : float

    Returns
    -------
    (str, float) or None
        ``("extra_biases" | "factor_n" | "factor_1_over_n" | "missing_reduce", rel_err)``.
    """
    import torch

    tries = []
    if bias is not None and bias.shape[-1:] == ref.shape[-1:]:
        tries.append(("extra_biases", ref + (n - 1) * bias.to(ref.dtype)))
    tries += [("factor_n", ref * n), ("factor_1_over_n", ref / n)]
    for name, hyp in tries:
        e = _fits(hyp, cand, thr)
        if e is not None:
            return name, e
    if len(ranks) == n and not _all_equal(ranks):
        e = _fits(ref, torch.stack(ranks).sum(0), thr)
        if e is not None:
            return "missing_reduce", e
    return None


def hypotheses(ref, call: GatheredCall | None, cand, bias, n: int, thr: float) -> Hypotheses:
    """Measure every TP hypothesis on one pair (see :class:`Hypotheses`).

    Parameters
    ----------
    ref : torch.Tensor
        Reference output.
    call : GatheredCall or None
        The candidate module call (its layout and per-rank outputs); ``None`` for the
        model output.
    cand : torch.Tensor
        The gathered candidate output.
    bias : torch.Tensor or None
        The reference layer's bias.
    n : int
    thr : float
        Relative error under which a hypothesis fits.

    Returns
    -------
    Hypotheses
    """
    h = Hypotheses(world_size=n)
    if tuple(ref.shape) != tuple(cand.shape):
        h.regather = regather_axes(ref, cand, n, thr)
        return h
    axis = -1
    if call is not None and call.layout.startswith("cat:"):
        axis = int(call.layout[4:])
    h.permutation = shard_permutation(ref, cand, n, axis, thr)
    if h.permutation is not None:
        h.axis = axis
        return h
    fit = reduce_hypothesis(ref, cand, call.ranks if call is not None else [], bias, n, thr)
    if fit is not None:
        h.reduce, h.fit_rel_err = fit
    return h


# --------------------------------------------------------------------------- measure


def _reference(ctx):
    """``(reference, inputs)`` on the device: the parity family's loaded pair when it ran."""
    import torch

    from porting_kit.load import move_inputs, to_serving_dtype

    pair = ctx.state.get("pair")
    if pair is not None:
        return pair.reference, pair.inputs
    spec = ctx.spec
    ref = spec.call("reference")
    if not isinstance(ref, torch.nn.Module):
        raise InputError(f"{spec.name}: reference() must return a torch.nn.Module, got {type(ref).__name__}")
    inputs = spec.call("inputs")
    if not isinstance(inputs, dict):
        raise InputError(f"{spec.name}: inputs() must return a dict, got {type(inputs).__name__}")
    dtype = ctx.torch_dtype()
    ref.to(ctx.device)
    if dtype is not None:
        to_serving_dtype(ref, dtype)
    ref.eval()
    return ref, move_inputs(inputs, ctx.device, dtype)


def _backend(ctx, n: int) -> str:
    import torch

    if not str(ctx.device).startswith("cuda"):
        return "gloo"
    if torch.cuda.device_count() < n:
        raise InputError(f"--tp {n} with --device {ctx.device} needs {n} CUDA GPUs; "
                         f"{torch.cuda.device_count()} found")
    return "nccl"


def _job(ctx, n: int, backend: str, workdir: str, timeout_s: float) -> TPJob:
    spec = ctx.spec
    if spec.name.startswith("example:"):
        return TPJob(None, spec.name[len("example:"):], spec.variant, n, backend, workdir, ctx.dtype,
                     timeout_s)
    return TPJob(str(Path(spec.name).resolve()), None, spec.variant, n, backend, workdir, ctx.dtype,
                 timeout_s)


def _run_ranks(ctx, ref_sd: dict, inputs: dict, n: int, timeout_s: float) -> list[dict]:
    """Spawn the ranks on ``ref_sd`` / ``inputs``; their results in rank order."""
    import torch

    from porting_kit.load import move_inputs

    with tempfile.TemporaryDirectory(prefix="porting-kit-tp-") as workdir:
        torch.save(ref_sd, Path(workdir) / "weights.pt")
        torch.save(move_inputs(inputs, "cpu", None), Path(workdir) / "inputs.pt")
        job = _job(ctx, n, _backend(ctx, n), workdir, timeout_s)
        _spawn(job, timeout_s)
        return [torch.load(Path(workdir) / f"rank{r}.pt", weights_only=False) for r in range(n)]


def _bias_of(model, name: str):
    try:
        b = getattr(model.get_submodule(name), "bias", None)
    except AttributeError:
        return None
    import torch

    return b.detach().cpu().float() if isinstance(b, torch.Tensor) else None


def _hyp_threshold(tol: Tolerance) -> float:
    """Relative error under which a hypothesis fits: the dtype's tensor-level bound, 1e-4 in fp32."""
    return tol.rel if tol.rel is not None else 1e-4


def measure(ctx, world_size: int, timeout_s: float | None = None) -> TPResult:
    """Run the spec's ``candidate_tp`` on ``world_size`` ranks and compare with the reference.

    Parameters
    ----------
    ctx : porting_kit.context.CheckContext
        Spec, device and dtype; the result is cached in ``ctx.state["tp"]``.
    world_size : int
        Tensor-parallel size N (>= 2).
    timeout_s : float, optional
        Seconds before the ranks are stopped; default the spec's ``tp_timeout`` or
        :data:`DEFAULT_TIMEOUT_S`.

    Returns
    -------
    TPResult

    Raises
    ------
    InputError
        A rank failed (its exception and ``file:line``) or timed out, the ranks called
        different modules, a spec function failed, or ``--device cuda`` without N GPUs.
    """
    if "tp" in ctx.state:
        return ctx.state["tp"]
    import torch

    spec = ctx.spec
    timeout_s = float(timeout_s or spec.get("tp_timeout", None) or DEFAULT_TIMEOUT_S)
    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    reference, inputs = _reference(ctx)
    rrec, out_r = _reference_pass(spec, reference, inputs)
    timing["reference"] = time.perf_counter() - t0
    ctx.progress(f"tp: starting {world_size} ranks")
    t0 = time.perf_counter()
    ref_sd = {k: v.detach().cpu() for k, v in reference.state_dict().items() if isinstance(v, torch.Tensor)}
    ranks = _run_ranks(ctx, ref_sd, inputs, world_size, timeout_s)
    timing["ranks"] = time.perf_counter() - t0
    for k in ranks[0]["times"]:
        timing[k] = max(d["times"][k] for d in ranks)  # the slowest rank

    t0 = time.perf_counter()
    ref_param = next(iter(reference.parameters()), None)
    tol = tolerance_for(ref_param.dtype if ref_param is not None else "float32", spec.get("tolerances"))
    thr = _hyp_threshold(tol)
    calls = _gather_all(ranks, {r.out.shape for r in rrec if r.out is not None})
    alignment, weight_map = _align(spec, rrec, calls, ref_sd, ranks)
    stats = screen_pairs(alignment.pairs, tol)
    first, metric, hyp = _verify(spec, reference, inputs, stats, calls, tol, world_size, thr)
    fused = None
    if first is not None and (hyp is None or not hyp.explained):
        # an unaligned fused projection (qkv_proj) before it may hold other ranks' rows
        fused = _fused_fault(spec, reference, inputs, alignment, calls, weight_map, world_size, thr)
    shape_pair = _first_shape_fault(spec, reference, inputs, alignment, calls, world_size, thr)
    out_c, out_ref = ranks[0]["output"], out_r.detach().cpu()
    out_metric, out_hyp = None, None
    if tuple(out_ref.shape) == tuple(out_c.shape):
        out_metric = tensor_metrics(out_ref, out_c, tol)
    if out_metric is None or not out_metric.within_tolerance:
        out_hyp = hypotheses(out_ref.float(), None, out_c.float(), None, world_size, thr)
    timing["compare"] = time.perf_counter() - t0
    result = TPResult(world_size=world_size, backend=_backend(ctx, world_size), alignment=alignment,
                      stats=stats, calls=calls, first=first, first_metric=metric, first_hypotheses=hyp,
                      shape_pair=shape_pair, output_shapes=(tuple(out_ref.shape), tuple(out_c.shape)),
                      output_metric=out_metric, output_hypotheses=out_hyp,
                      ranks_agree=_all_equal([d["output"] for d in ranks]),
                      unset={r: d["unset"] for r, d in enumerate(ranks) if d["unset"]},
                      tolerance=tol, timing=timing, fused=fused)
    ctx.state["tp"] = result
    return result


def _reference_pass(spec, reference, inputs):
    """The reference's forward with sketch hooks on every module: (records, output)."""
    import torch

    from porting_kit.load import run_side

    rrec: list = []
    with capture_summaries(reference, rrec), torch.no_grad():
        out = first_tensor(run_side(spec, "reference", reference, inputs))
    if out is None:
        raise InputError(f"{spec.name}: the reference forward returned no tensor")
    return rrec, out


def _align(spec, rrec, calls: dict[str, GatheredCall], ref_sd: dict, ranks: list[dict]) -> Alignment:
    """Sketch the gathered calls and align them with the reference's records; the weight map is
    traced over every rank's shard of each tensor (flattened and concatenated)."""
    import torch

    from porting_kit.load import trace_weights

    crec = summarize_calls([(c.key, c.name, c.type, c.depth, c.tensor) for c in calls.values()])
    union = {k: torch.cat([d["state"][k].reshape(-1) for d in ranks]) for k in ranks[0]["state"]}
    weights = trace_weights(spec, ref_sd, union)
    return align(rrec, crec, module_map=spec.get("module_map"), weight_map=weights.weight_map), weights.weight_map


def _fused_fault(spec, reference, inputs, alignment, calls, weight_map, n: int, thr: float) -> FusedShard | None:
    """The first unaligned fused candidate projection (its weight holds the rows of several
    reference projections: ``qkv_proj`` <- ``q_proj``, ``k_proj``, ``v_proj``) whose ranks hold
    other rows than their own shard of each (:func:`fused_shard_fault`); one reference re-run
    captures the parts' full outputs."""
    from porting_kit.load import run_side

    aligned = {p.candidate.key for p in alignment.pairs}
    fused = []
    for key, call in calls.items():
        if key in aligned or len(call.ranks) != n or any(r is None for r in call.ranks):
            continue
        mods = list(dict.fromkeys(r.rsplit(".", 1)[0] for r in weight_map.get(f"{call.name}.weight", [])
                                  if r.endswith(".weight")))
        if len(mods) >= 2:
            fused.append((call, mods))
    if not fused:
        return None
    with capture_full(reference, {m for _, mods in fused for m in mods}) as got:
        run_side(spec, "reference", reference, inputs)
    for call, mods in fused:
        outs = [got.get(m, (None, None))[1] for m in mods]
        if any(o is None or not o.is_floating_point() for o in outs):
            continue
        parent = mods[0].rsplit(".", 1)[0] if "." in mods[0] else ""
        try:
            head_size = getattr(reference.get_submodule(parent), "head_dim", None)
        except AttributeError:
            head_size = None
        f = fused_shard_fault(call.name, [(m, o.detach().cpu().float()) for m, o in zip(mods, outs)],
                              [r.float() for r in call.ranks], n, thr,
                              head_size if isinstance(head_size, int) else None)
        if f is not None:
            return f
    return None


def _full_reference(spec, reference, inputs, key: str, with_input: bool = False):
    """The reference's full output of module call ``key`` (CPU, float32), by one re-run;
    ``(input, output)`` with ``with_input`` (the input on CPU, its dtype kept)."""
    from porting_kit.load import run_side

    with capture_full(reference, {key}) as got:
        run_side(spec, "reference", reference, inputs)
    inp, t = got.get(key, (None, None))
    out = None if t is None else t.detach().cpu().float()
    if with_input:
        return (None if inp is None else inp.detach().cpu()), out
    return out


def _verify(spec, reference, inputs, stats, calls, tol, n, thr):
    """The first flagged pair confirmed on full tensors (at most three tried), its metrics and
    hypotheses; ``(None, None, None)`` when none is confirmed."""
    tried = 0
    for st in stats:
        if not st.flagged:
            continue
        if tried == _MAX_VERIFY:
            break
        tried += 1
        ids, ref = _full_reference(spec, reference, inputs, st.pair.reference.key, with_input=True)
        call = calls[st.pair.candidate.key]
        if ref is None or call.tensor is None:
            continue
        cand = call.tensor.float()
        m = tensor_metrics(ref, cand, tol)
        if m.within_tolerance:
            continue  # a false alarm of the sketch screen
        bias = _bias_of(reference, st.pair.reference.name)
        h = hypotheses(ref, call, cand, bias, n, thr)
        if not h.explained:
            h.permutation = vocab_shard_permutation(_embedding_weight(reference, st.pair.reference.name),
                                                    ids, cand, n, thr)
            h.axis = None if h.permutation is None else 0
            h.shards_of = "weight" if h.permutation is not None else h.shards_of
        return st, m, h
    return None, None, None


def _embedding_weight(model, name: str):
    """The weight [shape=(num_embeddings, dim)] of ``model``'s module ``name`` when it is an
    ``nn.Embedding`` (CPU, float32), else None."""
    import torch

    try:
        module = model.get_submodule(name)
    except AttributeError:
        return None
    if not isinstance(module, torch.nn.Embedding):
        return None
    return module.weight.detach().cpu().float()


def vocab_shard_permutation(weight, ids, cand, n: int, thr: float) -> list[int] | None:
    """The permutation of the ``n`` vocabulary shards of an embedding that reproduces ``cand``.

    A vocabulary-parallel embedding whose rank ``r`` masks the ids of its own range
    ``[r * k, (r + 1) * k)`` but holds reference rows of shard ``perm[r]`` (a wrong
    ``vocab_start_index`` or loader offset) returns ``weight[perm[id // k] * k + id % k]``.

    Parameters
    ----------
    weight : torch.Tensor [shape=(vocab, dim)] or None
        The reference embedding's weight; ``vocab`` divisible by ``n``.
    ids : torch.LongTensor [shape=(...)] or None
        The token ids the embedding was called with.
    cand : torch.Tensor [shape=(..., dim)]
        The candidate's (gathered) embedding output.
    n : int
        Tensor-parallel size (at most 6: every permutation is tried).
    thr : float
        Relative error under which the hypothesis fits.

    Returns
    -------
    list of int or None
        ``perm`` (not the identity), or ``None`` when none fits.
    """
    import itertools

    import torch

    if weight is None or ids is None or ids.is_floating_point() or n > 6 or weight.shape[0] % n:
        return None
    k = weight.shape[0] // n
    for perm in itertools.permutations(range(n)):
        if list(perm) == list(range(n)):
            continue
        mapped = torch.tensor(perm)[ids // k] * k + ids % k
        if _fits(torch.nn.functional.embedding(mapped, weight), cand, thr) is not None:
            return list(perm)
    return None


def _first_shape_fault(spec, reference, inputs, alignment, calls, n, thr):
    """The first aligned pair whose shapes differ as a wrong gather axis would make them,
    with its hypotheses when the re-gather fits; else None."""
    for p in alignment.pairs:
        r, c = p.reference.out, p.candidate.out
        if r is None or c is None or r.shape == c.shape or len(r.shape) != len(c.shape):
            continue
        if sorted(r.shape) == sorted(c.shape) or r.numel != c.numel:
            continue
        ref = _full_reference(spec, reference, inputs, p.reference.key)
        cand = calls[p.candidate.key].tensor
        if ref is None or cand is None:
            continue
        h = hypotheses(ref, calls[p.candidate.key], cand.float(), None, n, thr)
        if h.regather is not None:
            return p, h
    return None


if __name__ == "__main__":
    import sys

    raise SystemExit(_main(sys.argv[1:]))
