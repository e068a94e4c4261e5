"""Speed figures of the embedded generator model through the engine-contract driver.

Per request, at concurrency 1 and 4 (``EngineDriver`` from
``porting_kit/adapters/vllm_omni/engine.py``, the AR-runner calling contract; the real vLLM
engine does not run on the GPU machine: its 0.30 CUDA wheel needs torch 2.13 and flashinfer):

* ``rtf`` -- real-time factor: wall seconds from the request joining to its EOS / seconds of
  audio it received (below 1 is faster than real time);
* ``ttfa_ms`` -- time to first audio: from joining to the first non-empty chunk;
* ``syncs_per_step`` -- host-device synchronisations per engine step, counted with
  ``torch.cuda.set_sync_debug_mode("warn")`` (each sync warns once per call site and
  occurrence; CUDA only);
* eager vs CUDA graph of the AR decode step (:mod:`porting_kit.embedded.graph_step`, batch 4):
  microseconds per step, eager and replayed, and the syncs per step of each.

Writes a markdown table with the environment (GPU, driver, torch, transformers):

    python benchmarks/gpu_speed.py OUT.md [--device cuda] [--requests 8]
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def environment(device: str) -> dict:
    import torch
    import transformers

    env = {"torch": torch.__version__, "transformers": transformers.__version__,
           "python": platform.python_version(), "device": device, "gpu": "-", "driver": "-"}
    if device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=20).stdout.strip() or "-"
        except (OSError, subprocess.TimeoutExpired):
            pass
        env["cuda"] = torch.version.cuda
    return env


class SyncCounter:
    """Counts host-device syncs (CUDA only) through ``torch.cuda.set_sync_debug_mode("warn")``."""

    def __init__(self, device: str):
        self.on = device.startswith("cuda")
        self.count = 0

    def __enter__(self):
        if self.on:
            import torch

            self._w = warnings.catch_warnings(record=True)
            self._log = self._w.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc):
        if self.on:
            import torch

            torch.cuda.set_sync_debug_mode("default")
            self.count = sum("synchroniz" in str(w.message).lower() for w in self._log)
            self._w.__exit__(*exc)


def per_request(concurrency: int, n_requests: int, device: str) -> dict:
    """Median RTF / TTFA over ``n_requests`` requests served ``concurrency`` at a time."""
    import statistics

    from porting_kit.adapters.vllm_omni.engine import EngineDriver, EngineRequest
    from porting_kit.embedded.generator_model import SAMPLE_RATE, build_model

    model = build_model(device=device)  # weights, sampling generators and codec on the device
    texts = ["hello there", "a longer sentence to speak now", "one two three four", "quick test",
             "the quick brown fox jumps", "good morning to you", "short", "seven words in this one here"]
    rtf, ttfa, steps, syncs = [], [], 0, 0
    with EngineDriver(model, device=device) as drv:
        pending = [EngineRequest(f"r{i}", texts[i % len(texts)], seed=i) for i in range(n_requests)]
        joined: dict[str, float] = {}
        first: dict[str, float] = {}
        audio: dict[str, int] = {}
        done: set[str] = set()
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
                    rtf.append((now - joined[rid]) / max(audio[rid] / SAMPLE_RATE, 1e-9))
                    ttfa.append(1e3 * (first.get(rid, now) - joined[rid]))
    return {"concurrency": concurrency, "requests": len(rtf), "rtf": statistics.median(rtf),
            "ttfa_ms": statistics.median(ttfa), "syncs_per_step": syncs / max(steps, 1), "steps": steps}


def graph_vs_eager(device: str, steps: int = 200) -> dict:
    """Microseconds per decode step, eager and CUDA-graph replay, and syncs per step."""
    import torch

    from porting_kit.embedded.graph_step import build_step

    step = build_step(None, device)
    inputs = [step.inputs(t % 4, device) for t in range(4)]
    out: dict = {}
    with torch.no_grad():
        for _ in range(5):
            step.eager(inputs[0])
        torch.cuda.synchronize()
        with SyncCounter(device) as sc:
            t0 = time.perf_counter()
            for t in range(steps):
                step.eager(inputs[t % 4])
            torch.cuda.synchronize()
            out["eager_us"] = 1e6 * (time.perf_counter() - t0) / steps
        out["eager_syncs_per_step"] = sc.count / steps
        runner = step.graph_runner(device)
        runner(inputs[0])
        torch.cuda.synchronize()
        with SyncCounter(device) as sc:
            t0 = time.perf_counter()
            for t in range(steps):
                runner(inputs[t % 4])
            torch.cuda.synchronize()
            out["graph_us"] = 1e6 * (time.perf_counter() - t0) / steps
        out["graph_syncs_per_step"] = sc.count / steps
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="markdown file to write")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--requests", type=int, default=8)
    args = ap.parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_speed: CUDA not available", file=sys.stderr)
        return 2
    env = environment(args.device)
    per_request(1, 1, args.device)  # warm-up (CUDA context, kernels), not reported
    rows = [per_request(c, args.requests, args.device) for c in (1, 4)]
    lines = ["# Speed: embedded generator model through the engine-contract driver", "",
             "Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()) + ".", "",
             f"The generator model runs on {env['device']} (weights, per-request sampling "
             "generators and codec on the device; each sampled code is read back to the host, "
             "as the upstream model does); one untimed warm-up request first. The real "
             "vLLM engine does not run on this machine (vLLM 0.30's CUDA wheel needs torch 2.13 "
             "and flashinfer); the engine-contract driver runs the AR-runner calling contract.", "",
             "| concurrency | requests | RTF (median) | time to first audio, ms (median) | "
             "host-device syncs per step | engine steps |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['concurrency']} | {r['requests']} | {r['rtf']:.4f} | {r['ttfa_ms']:.2f} | "
                     f"{r['syncs_per_step']:.2f} | {r['steps']} |")
    if args.device.startswith("cuda"):
        g = graph_vs_eager(args.device)
        lines += ["", "AR decode step (graph_step, batch 4, GRU cell + head + argmax), 200 steps:", "",
                  "| mode | us per step | syncs per step |", "|---|---|---|",
                  f"| eager | {g['eager_us']:.1f} | {g['eager_syncs_per_step']:.2f} |",
                  f"| CUDA graph | {g['graph_us']:.1f} | {g['graph_syncs_per_step']:.2f} |",
                  "", f"graph_speedup={g['eager_us'] / g['graph_us']:.2f}"]
    text = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
