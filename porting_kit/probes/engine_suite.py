"""The engine-contract suite of a generator-style model, and the facts read from it.

Drives the spec's ``engine_model()`` once per check run through vLLM-Omni's
AR-runner calling contract (:func:`porting_kit.adapters.vllm_omni.engine.run_contract_suite`)
and compares each batched request with its solo run. Facts only: the ``rng``
and ``lifecycle`` families (``porting_kit/checks/``) turn them into findings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from porting_kit.errors import InputError

#: Absolute tolerance for "identical" audio (float32 rounding only: a row must not
#: depend on its batch neighbours).
ATOL = 1e-6
STATE_KEY = "engine_contract_suite"



def get_suite(ctx):
    """The contract suite of this run, computed once and cached in ``ctx.state``.

    Parameters
    ----------
    ctx : porting_kit.context.CheckContext
        Its spec's ``engine_model()`` is the model factory (called once per scenario:
        each scenario gets a fresh model), called under ``with torch.device(ctx.device)``;
        ``ctx.device`` is also where the driver puts input ids and positions. The suite is stored under :data:`STATE_KEY`, shared by the
        ``rng`` and ``lifecycle`` families.

    Returns
    -------
    porting_kit.adapters.vllm_omni.engine.ContractSuite
        The facts of :func:`~porting_kit.adapters.vllm_omni.engine.run_contract_suite`
        with its defaults (4 requests, ``max_steps=256``, process RNGs seeded 0).

    Raises
    ------
    InputError
        ``engine_model()`` raised, returned something without ``forward`` /
        ``compute_logits``, or the model raised while being driven (the message names
        the engine call); exit 2.
    """
    if STATE_KEY not in ctx.state:
        from porting_kit.adapters.vllm_omni.engine import EngineError, run_contract_suite

        def factory():
            # Built under ``with torch.device(ctx.device)``, as vLLM builds a model on its
            # device (a model that places itself elsewhere stays there); the driver puts
            # input ids and positions on ctx.device.
            import torch

            with torch.device(ctx.device):
                return ctx.spec.call("engine_model")

        ctx.progress("rng/lifecycle: driving engine_model() through the AR-runner contract")
        try:
            ctx.state[STATE_KEY] = run_contract_suite(factory, device=ctx.device)
        except EngineError as exc:
            raise InputError(f"{ctx.spec.name}: engine_model(): {exc}") from exc
    return ctx.state[STATE_KEY]


def same_chunk(a: Any, b: Any, atol: float = ATOL) -> bool:
    """True when two chunks are tensors of one shape within ``atol``.

    Parameters
    ----------
    a, b : Any
        Two ``model_outputs`` chunks (audio samples, any float dtype; compared in float32).
    atol : float, default ATOL (1e-6)
        Absolute tolerance in sample units (full scale 1.0); ``rtol`` is 0. The default
        allows float32 rounding only: a row must not depend on its batch neighbours.

    Returns
    -------
    bool
        False when either is not a tensor or the shapes differ; True for two empty
        tensors of one shape.
    """
    import torch

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    return bool(torch.allclose(a.float(), b.float(), rtol=0.0, atol=atol))


@dataclass
class Mismatch:
    """One request whose batched run differs from its solo run.

    Attributes
    ----------
    scenario : str
        Batch scenario name (``"interleaved"``, ``"permuted"``, ``"joining"``).
    request_id : str
        The request that differs.
    kind : {"collapse", "crosstalk", "early", "late"}
        ``"collapse"``: a chunk equals another request's solo chunk; ``"crosstalk"``:
        content differs otherwise; ``"early"`` / ``"late"``: same content, fewer / more
        chunks (an EOS problem).
    chunk : int
        First chunk index that differs (or where the shorter run ends).
    solo_chunks, batch_chunks : int
        Number of chunks the request received alone / in the batch.
    sample : int
        First differing sample of the served waveform (samples, over the common length;
        that length when none differs).
    max_abs_diff : float
        Greatest ``|batched - solo|`` over the common length, in sample units.
    other_request : str or None, default None
        For ``collapse``: whose solo chunk was served instead.
    other_chunk : int or None, default None
        For ``collapse``: which chunk of ``other_request``'s solo run it equals.
    """

    scenario: str
    request_id: str
    kind: str
    chunk: int
    solo_chunks: int
    batch_chunks: int
    sample: int
    max_abs_diff: float
    other_request: str | None = None
    other_chunk: int | None = None


def first_diff(a, b) -> tuple[int, float]:
    """First differing sample of two waveforms and the max |diff| over the common part.

    Parameters
    ----------
    a, b : torch.Tensor
        Waveforms of any shape, flattened (``[shape=(samples,)]`` for mono), compared in
        float32 over ``min(len(a), len(b))`` samples.

    Returns
    -------
    first : int
        Index of the first sample with ``|a - b| > ATOL`` (1e-6); the common length when
        none, 0 when either is empty.
    max_abs_diff : float
        Greatest ``|a - b|`` over the common part, in sample units (0.0 when empty).
    """
    import torch

    a, b = a.reshape(-1).float(), b.reshape(-1).float()
    n = min(a.numel(), b.numel())
    if n == 0:
        return 0, 0.0
    d = (a[:n] - b[:n]).abs()
    bad = torch.nonzero(d > ATOL)
    first = int(bad[0]) if bad.numel() else n
    return first, float(d.max())


def compare_to_solo(suite) -> list[Mismatch]:
    """Compare every request of every batch scenario with its solo run.

    Parameters
    ----------
    suite : porting_kit.adapters.vllm_omni.engine.ContractSuite
        From :func:`get_suite`.

    Returns
    -------
    list of Mismatch
        At most one per (scenario, request), in scenario then request order; empty when
        every batched request got exactly its solo chunks (within :data:`ATOL`).

    Notes
    -----
    Chunks are compared one by one (:func:`same_chunk`); at the first differing chunk the
    solo runs of the other requests are searched for an equal non-empty chunk
    (``collapse``). Requests with an unreadable chunk (``None``: no ``model_outputs``) are
    left to ``lifecycle.missing_model_outputs``.
    """
    solo_chunks = {rid: sc.results[rid].chunks for rid, sc in suite.solo.items()}
    out: list[Mismatch] = []
    for sc in suite.batches:
        for rid, res in sc.results.items():
            ref = solo_chunks[rid]
            if any(c is None for c in res.chunks) or any(c is None for c in ref):
                continue
            n = min(len(ref), len(res.chunks))
            k = next((i for i in range(n) if not same_chunk(res.chunks[i], ref[i])), None)
            sample, diff = first_diff(res.waveform(), suite.solo[rid].results[rid].waveform())
            if k is not None:
                other = None
                for qid, qchunks in solo_chunks.items():
                    if qid == rid:
                        continue
                    j = next((j for j, c in enumerate(qchunks)
                              if c.numel() > 0 and same_chunk(res.chunks[k], c)), None)
                    if j is not None:
                        other = (qid, j)
                        break
                out.append(Mismatch(sc.name, rid, "collapse" if other else "crosstalk", k, len(ref),
                                    len(res.chunks), sample, diff,
                                    other[0] if other else None, other[1] if other else None))
            elif len(ref) != len(res.chunks):
                out.append(Mismatch(sc.name, rid, "early" if len(res.chunks) < len(ref) else "late",
                                    n, len(ref), len(res.chunks), sample, diff))
    return out


def find_origin(segment, sources: dict[str, Any], *, probe: int = 64,
                atol: float = ATOL) -> tuple[str, int, int] | None:
    """Where a served waveform came from: the source containing ``segment``'s start.

    Parameters
    ----------
    segment : Tensor or array [shape=(samples,)]
        E.g. request B's served audio.
    sources : dict
        name -> waveform [shape=(samples,)], e.g. every request's solo audio.
    probe : int
        Samples of ``segment``'s start used to find candidate offsets.

    Returns
    -------
    (name, offset, length) or None
        ``segment[:length] == sources[name][offset:offset + length]`` within
        ``atol``, for the longest such match; ``None`` when no source contains
        the start of ``segment``.
    """
    import torch

    seg = torch.as_tensor(segment).reshape(-1).float()
    best = None
    p = min(probe, seg.numel())
    if p == 0:
        return None
    for name, src in sources.items():
        src = torch.as_tensor(src).reshape(-1).float()
        if src.numel() < p:
            continue
        windows = src.unfold(0, p, 1)  # (positions, p)
        hits = torch.nonzero((windows - seg[:p]).abs().amax(dim=1) <= atol).reshape(-1)
        for off in hits.tolist():
            n = min(seg.numel(), src.numel() - off)
            bad = torch.nonzero((src[off:off + n] - seg[:n]).abs() > atol)
            length = int(bad[0]) if bad.numel() else n
            if best is None or length > best[2]:
                best = (name, int(off), length)
    return best


def determinism(suite) -> tuple[bool, bool, int, float]:
    """Determinism of the first request, intrinsic and through the process RNG.

    Parameters
    ----------
    suite : porting_kit.adapters.vllm_omni.engine.ContractSuite
        From :func:`get_suite`.

    Returns
    -------
    intrinsic_ok : bool
        The repeat from the reset process RNG (``solo_repeat``) equals the solo run,
        chunk by chunk.
    continued_ok : bool
        The repeat from the state the previous run left (``solo_continued``) equals it.
    first_sample : int
        First differing sample (:func:`first_diff`) of the intrinsic repeat when that one
        differs, else of the continued repeat.
    max_abs_diff : float
        Greatest ``|diff|`` of that same comparison, in sample units.
    """
    rid = suite.requests[0].request_id
    base = suite.solo[rid].results[rid]
    rep = next(iter(suite.solo_repeat.results.values()))
    cont = next(iter(suite.solo_continued.results.values()))

    def equal(x) -> bool:
        return len(x.chunks) == len(base.chunks) and all(
            same_chunk(a, b) for a, b in zip(x.chunks, base.chunks))

    intrinsic, continued = equal(rep), equal(cont)
    worse = rep if not intrinsic else cont
    sample, diff = first_diff(worse.waveform(), base.waveform())
    return intrinsic, continued, sample, diff
