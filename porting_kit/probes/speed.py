"""Speed figures of a generator-style model served through the engine-contract driver.

Facts only (the GPU tier of ``validate`` and ``benchmarks/gpu_speed.py`` report them):

* real-time factor (RTF): wall seconds from a request joining to its EOS / seconds of audio
  it received (below 1 is faster than real time);
* time to first audio (TTFA): milliseconds from joining to the first non-empty chunk;
* host-device syncs per engine step, counted with ``torch.cuda.set_sync_debug_mode("warn")``
  (CUDA only; 0 elsewhere);
* the AR decode step eager vs replayed as a CUDA graph: microseconds and syncs per step.

The model is driven by :class:`porting_kit.adapters.vllm_omni.engine.EngineDriver` (the
AR-runner calling contract), not by a vLLM engine.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Texts of the timed requests (different lengths: 1 to 7 words).
TEXTS = ("hello there", "a longer sentence to speak now", "one two three four", "quick test",
         "the quick brown fox jumps", "good morning to you", "short", "seven words in this one here")


@dataclass
class RequestSpeed:
    """Per-request figures at one concurrency (medians over the requests).

    Attributes
    ----------
    concurrency : int
        Requests in flight at once.
    requests : int
        Requests that reached EOS.
    rtf : float
        Median real-time factor (unitless).
    ttfa_ms : float
        Median time to first audio, milliseconds.
    syncs_per_step : float
        Host-device syncs per engine step (0 on CPU).
    steps : int
        Engine steps run.
    """

    concurrency: int
    requests: int
    rtf: float
    ttfa_ms: float
    syncs_per_step: float
    steps: int


@dataclass
class GraphSpeed:
    """The AR decode step, eager and as a replayed CUDA graph.

    Attributes
    ----------
    eager_us, graph_us : float
        Microseconds per step (mean over the timed steps, after a warm-up).
    eager_syncs_per_step, graph_syncs_per_step : float
        Host-device syncs per step.
    """

    eager_us: float
    graph_us: float
    eager_syncs_per_step: float
    graph_syncs_per_step: float


class SyncCounter:
    """Counts host-device syncs (CUDA only) through ``torch.cuda.set_sync_debug_mode("warn")``.

    Parameters
    ----------
    device : str
        Counting is on only for a CUDA device; ``count`` stays 0 otherwise.
    """

    def __init__(self, device: str) -> None:
        self.on = str(device).startswith("cuda")
        self.count = 0

    def __enter__(self) -> SyncCounter:
        if self.on:
            import torch

            self._w = warnings.catch_warnings(record=True)
            self._log = self._w.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.on:
            import torch

            torch.cuda.set_sync_debug_mode("default")
            self.count = sum("synchroniz" in str(w.message).lower() for w in self._log)
            self._w.__exit__(*exc)


def request_speed(model_factory: Callable[[], Any], concurrency: int, n_requests: int,
                  device: str, sample_rate: int | None = None) -> RequestSpeed:
    """Serve ``n_requests`` seeded requests, ``concurrency`` at a time, and time each.

    Parameters
    ----------
    model_factory : callable
        ``model_factory() -> model`` with ``forward`` / ``compute_logits`` (called once,
        under ``with torch.device(device)``).
    concurrency : int
        Requests in flight at once (a new one joins as one finishes).
    n_requests : int
        Requests in all (texts from :data:`TEXTS`, seeds ``0..n-1``).
    device : str
        Where the driver puts input ids and positions, and where syncs are counted.
    sample_rate : int, optional
        Hz of the served audio (for the RTF); default: what the model reports in
        ``multimodal_outputs["sr"]``, else 24000.

    Returns
    -------
    RequestSpeed

    Raises
    ------
    ValueError
        No request reached EOS.
    """
    import torch

    from porting_kit.adapters.vllm_omni.engine import EngineDriver, EngineRequest

    with torch.device(device):
        model = model_factory()
    rtf, ttfa, steps, syncs = [], [], 0, 0
    pending = [EngineRequest(f"r{i}", TEXTS[i % len(TEXTS)], seed=i) for i in range(n_requests)]
    joined: dict[str, float] = {}
    first: dict[str, float] = {}
    audio: dict[str, int] = {}
    done: set[str] = set()
    with EngineDriver(model, device=device) as drv:
        while pending or drv.running:
            while pending and len(drv.running) < concurrency:
                req = pending.pop(0)
                drv.add_request(req)
                joined[req.request_id] = time.perf_counter()
                audio[req.request_id] = 0
            with SyncCounter(device) as sc:
                call = drv.step()
            syncs += sc.count
            steps += 1
            now = time.perf_counter()
            if call is None:
                break
            for rid, out, eos in zip(call.req_ids, call.outputs, call.eos):
                n = 0 if out is None else int(out.numel())
                if n and rid not in first:
                    first[rid] = now
                audio[rid] += n
                if eos and rid not in done:
                    done.add(rid)
                    res = drv.results.get(rid)
                    sr = sample_rate or (res.sample_rate if res is not None else None) or 24000
                    rtf.append((now - joined[rid]) / max(audio[rid] / sr, 1e-9))
                    ttfa.append(1e3 * (first.get(rid, now) - joined[rid]))
    if not rtf:
        raise ValueError("no request reached EOS")
    return RequestSpeed(concurrency, len(rtf), statistics.median(rtf), statistics.median(ttfa),
                        syncs / max(steps, 1), steps)


def graph_speed(step, device: str, steps: int = 200) -> GraphSpeed:
    """Time the AR decode step eager and replayed as a CUDA graph.

    Parameters
    ----------
    step : porting_kit.probes.cudagraph.DecodeStep
        ``eager(inputs)``, ``graph_runner(device)`` and ``inputs(t, device)``.
    device : str
        A CUDA device.
    steps : int, default 200
        Timed steps of each mode (after 5 eager warm-up steps and one graph capture).

    Returns
    -------
    GraphSpeed
    """
    import torch

    inputs = [step.inputs(t % 4, device) for t in range(4)]
    with torch.no_grad():
        for _ in range(5):
            step.eager(inputs[0])
        torch.cuda.synchronize()
        with SyncCounter(device) as sc_e:
            t0 = time.perf_counter()
            for t in range(steps):
                step.eager(inputs[t % 4])
            torch.cuda.synchronize()
            eager_us = 1e6 * (time.perf_counter() - t0) / steps
        runner = step.graph_runner(device)
        runner(inputs[0])
        torch.cuda.synchronize()
        with SyncCounter(device) as sc_g:
            t0 = time.perf_counter()
            for t in range(steps):
                runner(inputs[t % 4])
            torch.cuda.synchronize()
            graph_us = 1e6 * (time.perf_counter() - t0) / steps
    return GraphSpeed(eager_us, graph_us, sc_e.count / steps, sc_g.count / steps)
