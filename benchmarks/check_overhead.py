"""Layer-parity overhead and memory vs depth (DESIGN.md, "Quality bars").

Prints::

    overhead_ratio=R        time of a full layer-parity check / (one reference forward + one
                            candidate forward), same inputs, same process, models already loaded
    depth_memory_ratio=M    extra peak memory of the check for a model 4x deeper / for the base
                            model, same width (extra = check peak - two-forwards peak)

Model (CPU form of the bar): a Qwen3-shaped random model, width 1024, 8 layers, small vocabulary,
256 tokens; the reference is transformers' Qwen3ForCausalLM, the candidate the embedded example's
vLLM-style port (fused qkv / gate_up, its own RoPE and RMSNorm). ``--device cuda --dtype bfloat16``
for the GPU figures. Targets: overhead_ratio <= 1.5, depth_memory_ratio <= 1.3.

    python benchmarks/check_overhead.py                   # CPU, full size (a few minutes on 2 cores)
    python benchmarks/check_overhead.py --quick           # tiny sizes: correctness only (CI)
    python benchmarks/check_overhead.py --device cuda --dtype bfloat16 --width 1024 --layers 7 \
        --tokens 512                                      # the H200 figure
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import types


def build_spec(width: int, layers: int, tokens: int, vocab: int, variant_options: dict | None = None,
               head_dim: int = 64, intermediate: int | None = None):
    """A port spec object for a Qwen3-shaped pair of the given size (no file needed)."""
    from porting_kit.adapters.torchaudio_guard import ensure_importable

    ensure_importable()
    import torch

    from porting_kit.embedded import tts, tts_reference
    from porting_kit.embedded.tts_port import PortOptions, TinyTTSPort
    from porting_kit.spec import Spec

    heads = max(width // 64, 1)
    lm_cfg = tts_reference.lm_config(hidden_size=width, intermediate_size=intermediate or 3 * width,
                                     num_hidden_layers=layers, num_attention_heads=heads,
                                     num_key_value_heads=max(heads // 2, 1), head_dim=head_dim,
                                     vocab_size=vocab, max_position_embeddings=max(2 * tokens, 512))
    codec_cfg = tts_reference.codec_config()
    mod = types.ModuleType("benchmark_spec")
    mod.reference = lambda: tts_reference.build_reference(lm_cfg, codec_cfg)

    def candidate():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1)
            return TinyTTSPort(lm_cfg, codec_cfg, PortOptions(**(variant_options or {}))).eval()

    mod.candidate = candidate
    mod.inputs = lambda: {"input_ids": (torch.arange(tokens).reshape(1, tokens) * 7919) % 1024}
    mod.run_reference = tts.run_reference
    mod.run_candidate = tts.run_candidate
    return Spec(module=mod, name=f"benchmark:w{width}xl{layers}")


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _two_forwards(spec, pair, device):
    import torch

    with torch.no_grad():
        spec.module.run_reference(pair.reference, pair.inputs)
        spec.module.run_candidate(pair.candidate, pair.inputs)
    _sync(device)


def _loaded_context(args, layers: int, variant_options=None):
    from porting_kit.load import load_pair
    from porting_kit.context import CheckContext

    spec = build_spec(args.width, layers, args.tokens, args.vocab, variant_options,
                      head_dim=args.head_dim, intermediate=args.intermediate)
    ctx = CheckContext(spec=spec, device=args.device, dtype=args.dtype)
    pair = load_pair(ctx)
    return spec, ctx, pair


def measure_time(args) -> dict:
    """Median seconds of two plain forwards and of a full parity check (models loaded once)."""
    from porting_kit.probes.layers import get_result

    spec, ctx, pair = _loaded_context(args, args.layers)
    _two_forwards(spec, pair, args.device)  # warm-up
    fwd, chk = [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        _two_forwards(spec, pair, args.device)
        fwd.append(time.perf_counter() - t0)
        ctx.state.pop("parity", None)
        t0 = time.perf_counter()
        res = get_result(ctx)
        _sync(args.device)
        chk.append(time.perf_counter() - t0)
    worst = max(res.stats, key=lambda st: st.rel_err)
    out = {"two_forwards_s": statistics.median(fwd), "check_s": statistics.median(chk),
           "compared_modules": len(res.stats),
           "clean_status": "pass" if res.first_divergence is None else "fail",
           "check_parts_s": {k: round(v, 5) for k, v in res.timing.items()},
           "clean_max_module_rel_err": worst.rel_err, "clean_worst_module": worst.pair.reference.key}
    # the failing case also re-runs both forwards to capture the located pair in full
    spec_f, ctx_f, pair_f = _loaded_context(args, args.layers, {"rope_theta_top_level_only": True})
    _two_forwards(spec_f, pair_f, args.device)
    fail = []
    for _ in range(args.repeats):
        ctx_f.state.pop("parity", None)
        t0 = time.perf_counter()
        res_f = get_result(ctx_f)
        _sync(args.device)
        fail.append(time.perf_counter() - t0)
    out["failing_located"] = None if res_f.first_divergence is None else \
        res_f.first_divergence.pair.reference.key
    out["check_failing_s"] = statistics.median(fail)
    return out


class _RssPeak:
    """Peak resident set size (bytes) sampled every 0.5 ms from /proc/self/statm."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE")

    def _rss(self) -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * self._page

    def __enter__(self):
        self.start = self._rss()
        self.peak = self.start
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            time.sleep(0.0005)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self._rss())

    @property
    def increase(self) -> int:
        return self.peak - self.start


def memory_child(args, mode: str, layers: int) -> int:
    """Peak memory increase (bytes) of two forwards (``mode='forwards'``) or of a check (``'check'``),
    measured cold in a fresh process so allocator caching does not hide it."""
    import torch

    from porting_kit.probes.layers import get_result

    spec, ctx, pair = _loaded_context(args, layers)
    if args.device.startswith("cuda"):
        _sync(args.device)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        if mode == "forwards":
            _two_forwards(spec, pair, args.device)
        else:
            get_result(ctx)
            _sync(args.device)
        return torch.cuda.max_memory_allocated() - base
    with _RssPeak() as m:
        if mode == "forwards":
            _two_forwards(spec, pair, args.device)
        else:
            get_result(ctx)
    return m.increase


def _child_argv(args, mode: str, layers: int) -> list[str]:
    return [sys.executable, __file__, "--_memory-child", mode, "--layers", str(layers),
            "--width", str(args.width), "--tokens", str(args.tokens), "--vocab", str(args.vocab),
            "--device", args.device, "--head-dim", str(args.head_dim)] + (
                ["--dtype", args.dtype] if args.dtype else []) + (
                ["--intermediate", str(args.intermediate)] if args.intermediate else [])


#: On CPU the peak is read from the resident set size. glibc keeps freed small blocks in its
#: heap, so RSS would also count fragmentation; these settings make every block of 16 kB or
#: more its own mapping, returned on free, so RSS follows live memory (no effect on CUDA).
_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "16384", "MALLOC_TRIM_THRESHOLD_": "0", "MALLOC_ARENA_MAX": "1"}


def measure_memory(args) -> dict:
    """Extra peak memory of the check at the base depth and at 4x the depth."""
    out = {}
    for layers in (args.layers, 4 * args.layers):
        vals = {}
        for mode in ("forwards", "check"):
            proc = subprocess.run(_child_argv(args, mode, layers), capture_output=True, text=True,
                                  env={**os.environ, **_MALLOC_ENV})
            if proc.returncode != 0:
                raise SystemExit(f"memory child failed:\n{proc.stderr[-2000:]}")
            vals[mode] = int(proc.stdout.strip().splitlines()[-1])
        out[layers] = {"forwards_peak_bytes": vals["forwards"], "check_peak_bytes": vals["check"],
                       "extra_bytes": max(vals["check"] - vals["forwards"], 1)}
    return out


def measure_tolerance(device: str) -> None:
    """Print the largest per-module relative error of clean pairs in bf16 and fp16 (the
    measurement behind porting_kit.probes.tolerance's defaults)."""
    from pathlib import Path

    from porting_kit.runner import run_check

    llama = Path(__file__).resolve().parents[1] / "examples" / "llama_meta.py"
    for dtype in ("bfloat16", "float16"):
        for name, kwargs in (("embedded tts", {"example": "tts"}), ("llama pair", {"spec": str(llama)})):
            try:
                r = run_check(only="parity", device=device, dtype=dtype, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the examples extra may be missing
                print(f"tolerance {dtype} {name}: not measured ({exc})")
                continue
            res = r.extras["parity"]
            worst = max(res.stats, key=lambda st: st.rel_err)
            print(f"tolerance {dtype} {name}: max_module_rel_err={worst.rel_err:.3e} "
                  f"({worst.pair.reference.key}) output_rel_err={res.output_metric.rel_err:.3e} "
                  f"status={r.status}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None, help="float32 (default), bfloat16, float16")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--vocab", type=int, default=2048, help="vocabulary size (>= 1028: 1024 codec tokens + specials)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="tiny sizes, one repeat: correctness only")
    p.add_argument("--no-memory", action="store_true", help="skip the depth-memory measurement")
    p.add_argument("--json", default=None, help="also write the figures here")
    p.add_argument("--measure-tolerance", action="store_true",
                   help="print the clean pairs' per-module bf16/fp16 error and exit")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--intermediate", type=int, default=None, help="MLP width (default 3 x width)")
    p.add_argument("--_memory-child", dest="memory_child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.width, args.layers, args.tokens, args.vocab, args.repeats = 128, 2, 32, 1100, 1
    if args.measure_tolerance:
        measure_tolerance(args.device)
        return 0
    if args.memory_child:
        print(memory_child(args, args.memory_child, args.layers))
        return 0
    t = measure_time(args)
    ratio = t["check_s"] / t["two_forwards_s"]
    print(f"model: width={args.width} layers={args.layers} tokens={args.tokens} vocab={args.vocab} "
          f"device={args.device} dtype={args.dtype or 'float32'}")
    print(f"two_forwards_s={t['two_forwards_s']:.4f} check_s={t['check_s']:.4f} "
          f"check_failing_s={t['check_failing_s']:.4f} compared_modules={t['compared_modules']}")
    print(f"clean_status={t['clean_status']} clean_max_module_rel_err={t['clean_max_module_rel_err']:.3e} "
          f"({t['clean_worst_module']}) failing_located={t['failing_located']}")
    print(f"check_parts_s={t['check_parts_s']}")
    print(f"overhead_ratio={ratio:.3f}")
    print(f"overhead_failing_ratio={t['check_failing_s'] / t['two_forwards_s']:.3f}")
    figures = {"overhead_ratio": ratio, **t}
    if not args.no_memory:
        m = measure_memory(args)
        base, deep = m[args.layers], m[4 * args.layers]
        dm = deep["extra_bytes"] / base["extra_bytes"]
        for layers, v in m.items():
            print(f"layers={layers} forwards_peak_mb={v['forwards_peak_bytes'] / 2**20:.1f} "
                  f"check_peak_mb={v['check_peak_bytes'] / 2**20:.1f} extra_mb={v['extra_bytes'] / 2**20:.1f}")
        print(f"depth_memory_ratio={dm:.3f}")
        figures.update({"depth_memory_ratio": dm, "memory": {str(k): v for k, v in m.items()}})
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
