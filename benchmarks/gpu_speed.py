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
    from porting_kit.embedded.generator_model import SAMPLE_RATE, build_model
    from porting_kit.probes.speed import graph_speed, request_speed

    request_speed(build_model, 1, 1, args.device, SAMPLE_RATE)  # warm-up (CUDA context, kernels)
    rows = [vars(request_speed(build_model, c, args.requests, args.device, SAMPLE_RATE)) for c in (1, 4)]
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
        from porting_kit.embedded.graph_step import build_step

        g = vars(graph_speed(build_step(None, args.device), args.device))
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
