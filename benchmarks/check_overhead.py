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
    python benchmarks/check_overhead.py --shape qwen3-0.6b --layers 7 --device cuda --dtype bfloat16
        [--families parity,rope,norm,config,dtype]       # the H200 figures (also --layers 28)

Honest on any machine: both terms run in the same process with the same thread count
(``--threads``, printed), each gets the same warm-up (one untimed run of each before timing),
and the repetitions interleave (forwards, check, forwards, check, ...), each timed run starting
after ``gc.collect()`` (the garbage of earlier repeats is not charged to whichever term runs
when a collection falls due; a term's own allocations still trigger collections inside it,
where they count); the medians are
reported as measured (no clamping: a ratio below 1.0 would be a measurement fault, printed
with a ``WARNING`` line). ``--families`` times the listed check families on the loaded pair
(what ``porting-kit check --only`` runs) instead of the layer-parity pass alone.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import types


#: Named shapes: Qwen3-0.6B's config.json (hidden 1024, 16 heads, 8 kv heads, head_dim 128,
#: intermediate 3072, vocab 151936; 28 layers in the real model), 1 x 512 tokens.
SHAPES = {"qwen3-0.6b": {"width": 1024, "heads": 16, "kv_heads": 8, "head_dim": 128,
                         "intermediate": 3072, "vocab": 151936, "tokens": 512}}


def build_spec(width: int, layers: int, tokens: int, vocab: int, variant_options: dict | None = None,
               head_dim: int = 64, intermediate: int | None = None, heads: int | None = None,
               kv_heads: int | None = None):
    """A port spec object for a Qwen3-shaped pair of the given size (no file needed)."""
    from porting_kit.adapters.torchaudio_guard import ensure_importable

    ensure_importable()
    import torch

    from porting_kit.embedded import tts, tts_reference
    from porting_kit.embedded.tts_port import PortOptions, TinyTTSPort
    from porting_kit.spec import Spec

    heads = heads or max(width // 64, 1)
    lm_cfg = tts_reference.lm_config(hidden_size=width, intermediate_size=intermediate or 3 * width,
                                     num_hidden_layers=layers, num_attention_heads=heads,
                                     num_key_value_heads=kv_heads or max(heads // 2, 1), head_dim=head_dim,
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
    mod.candidate_step = tts.candidate_step  # the decode family's candidate driver
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
                      head_dim=args.head_dim, intermediate=args.intermediate, heads=args.heads,
                      kv_heads=args.kv_heads)
    ctx = CheckContext(spec=spec, device=args.device, dtype=args.dtype)
    pair = load_pair(ctx)
    return spec, ctx, pair


def _check(ctx, families: list[str] | None):
    """One check on the loaded pair: the layer-parity pass, or the listed families' ``run(ctx)``.
    Returns the parity result. Everything but the loaded pair is recomputed each time."""
    import importlib

    from porting_kit.probes.layers import get_result
    from porting_kit.runner import FAMILIES

    pair = ctx.state["pair"]
    ctx.state.clear()
    ctx.state["pair"] = pair
    ctx.families = tuple(families or ())  # as run_check sets it: the parity pass records the
    # prefill families' facts in its forward (porting_kit/probes/prefill.py)
    if not families:
        res = get_result(ctx)
    else:
        spent = {}
        for fam in families:
            t0 = _CLOCK[0]()
            importlib.import_module(f"porting_kit.checks.{FAMILIES[fam]}").run(ctx)
            _sync(ctx.device)
            spent[fam] = _CLOCK[0]() - t0
        res = get_result(ctx)  # cached by the parity family
        res.timing["families"] = spent
    _sync(ctx.device)
    return res


def _own_decode(spec, pair, steps: int, device: str) -> None:
    """The two sides' own decode: prefill plus ``steps`` greedy one-token steps each, with the
    drivers the decode family uses (:mod:`porting_kit.probes.decode`), nothing compared."""
    from porting_kit.probes.decode import _drivers, prompt_of

    prompt = prompt_of(pair)
    for drv in _drivers(spec, pair):
        logits = drv.step(prompt, 0)
        pos = prompt.shape[1]
        for _ in range(steps):
            logits = drv.step(logits.argmax(-1, keepdim=True), pos)
            pos += 1
    _sync(device)


def _decode_check(ctx, steps: int) -> None:
    """The decode family on the loaded pair (teacher-forced, compared every step)."""
    from porting_kit.checks import decode

    pair = ctx.state["pair"]
    ctx.state.clear()
    ctx.state["pair"] = pair
    ctx.spec.module.decode_steps = steps
    findings = decode.run(ctx)
    _sync(ctx.device)
    return findings


def measure_decode(args) -> dict:
    """Median seconds of the two sides' own ``N`` decode steps and of the decode family,
    same warm-up, interleaved repeats (issue 13: decode parity <= 2.5x the own steps)."""
    spec, ctx, pair = _loaded_context(args, args.layers)
    n = args.decode_steps
    _own_decode(spec, pair, n, args.device)  # warm-up: one untimed run of each term
    findings = _decode_check(ctx, n)
    own, chk = [], []
    for _ in range(args.repeats):
        own.append(_timed(lambda: _own_decode(spec, pair, n, args.device)))
        chk.append(_timed(lambda: _decode_check(ctx, n)))
    return {"own_decode_s": statistics.median(own), "decode_check_s": statistics.median(chk),
            "own_decode_all_s": own, "decode_check_all_s": chk,
            "decode_codes": sorted({f.code for f in findings})}


def _timed(fn) -> float:
    """Seconds of one ``fn()``, garbage from earlier repeats collected first (both terms alike)."""
    gc.collect()
    t0 = _CLOCK[0]()
    fn()
    return _CLOCK[0]() - t0


#: The clock of both terms: wall seconds, or with ``--cpu-time`` this process's CPU seconds.
_CLOCK = [time.perf_counter]


def measure_time(args) -> dict:
    """Median seconds of two plain forwards and of a check, same warm-up, interleaved repeats."""
    spec, ctx, pair = _loaded_context(args, args.layers)
    _two_forwards(spec, pair, args.device)  # warm-up: one untimed run of each term
    _check(ctx, args.families)
    fwd, chk = [], []
    for _ in range(args.repeats):
        fwd.append(_timed(lambda: _two_forwards(spec, pair, args.device)))
        chk.append(_timed(lambda: _check(ctx, args.families)))
    res = _check(ctx, args.families)
    worst = max(res.stats, key=lambda st: st.rel_err)
    out = {"two_forwards_s": statistics.median(fwd), "check_s": statistics.median(chk),
           "two_forwards_all_s": fwd, "check_all_s": chk,
           "compared_modules": len(res.stats),
           "clean_status": "pass" if res.first_divergence is None else "fail",
           "check_parts_s": {k: (round(v, 5) if isinstance(v, float) else
                                 {f: round(x, 5) for f, x in v.items()}) for k, v in res.timing.items()},
           "clean_max_module_rel_err": worst.rel_err, "clean_worst_module": worst.pair.reference.key}
    # the failing case also re-runs both forwards to capture the located pair in full
    spec_f, ctx_f, pair_f = _loaded_context(args, args.layers, {"rope_theta_top_level_only": True})
    _two_forwards(spec_f, pair_f, args.device)
    _check(ctx_f, None)
    fail = [_timed(lambda: _check(ctx_f, None)) for _ in range(args.repeats)]
    res_f = _check(ctx_f, None)
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

    spec, ctx, pair = _loaded_context(args, layers)
    if args.device.startswith("cuda"):
        _sync(args.device)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        if mode == "forwards":
            _two_forwards(spec, pair, args.device)
        else:
            _check(ctx, args.families)
        return torch.cuda.max_memory_allocated() - base
    with _RssPeak() as m:
        if mode == "forwards":
            _two_forwards(spec, pair, args.device)
        else:
            _check(ctx, args.families)
    return m.increase


def _child_argv(args, mode: str, layers: int) -> list[str]:
    return [sys.executable, __file__, "--_memory-child", mode, "--layers", str(layers),
            "--width", str(args.width), "--tokens", str(args.tokens), "--vocab", str(args.vocab),
            "--device", args.device, "--head-dim", str(args.head_dim), "--threads", str(args.threads),
            "--heads", str(args.heads or 0), "--kv-heads", str(args.kv_heads or 0)] + (
                ["--families", ",".join(args.families)] if args.families else []) + (
                ["--dtype", args.dtype] if args.dtype else []) + (
                ["--intermediate", str(args.intermediate)] if args.intermediate else [])


#: On CPU the peak is read from the resident set size. glibc keeps freed small blocks in its
#: heap, so RSS would also count fragmentation; these settings make every block of 16 kB or
#: more its own mapping, returned on free, so RSS follows live memory (no effect on CUDA).
_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "16384", "MALLOC_TRIM_THRESHOLD_": "0", "MALLOC_ARENA_MAX": "1"}


def measure_memory(args) -> dict:
    """Extra peak memory of the check at the base depth and at 4x the depth."""
    out = {}
    for layers in (args.layers, args.deep_layers):
        vals = {}
        for mode in ("forwards", "check"):
            proc = subprocess.run(_child_argv(args, mode, layers), capture_output=True, text=True,
                                  env={**os.environ, **_MALLOC_ENV})
            if proc.returncode != 0:
                raise SystemExit(f"memory child failed:\n{proc.stderr[-2000:]}")
            vals[mode] = int(proc.stdout.strip().splitlines()[-1])
        out[layers] = {"forwards_peak_bytes": vals["forwards"], "check_peak_bytes": vals["check"],
                       "extra_bytes": vals["check"] - vals["forwards"]}
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
    p.add_argument("--memory-only", action="store_true", help="only the depth-memory measurement")
    p.add_argument("--json", default=None, help="also write the figures here")
    p.add_argument("--measure-tolerance", action="store_true",
                   help="print the clean pairs' per-module bf16/fp16 error and exit")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--intermediate", type=int, default=None, help="MLP width (default 3 x width)")
    p.add_argument("--shape", choices=sorted(SHAPES), default=None,
                   help="a named model shape (overrides width/heads/head-dim/intermediate/vocab/tokens)")
    p.add_argument("--heads", type=int, default=None, help="attention heads (default width // 64)")
    p.add_argument("--kv-heads", type=int, default=None, help="kv heads (default heads // 2)")
    p.add_argument("--deep-layers", type=int, default=None, help="depth of the deep model (default 4 x layers)")
    p.add_argument("--threads", type=int, default=None, help="torch threads for both terms (default: torch's)")
    p.add_argument("--families", default=None,
                   help="time these check families (e.g. parity,rope,norm,config,dtype) instead of "
                        "the layer-parity pass alone")
    p.add_argument("--decode-steps", type=int, default=None,
                   help="time the decode family over N steps against the two sides' own N decode steps")
    p.add_argument("--cpu-time", action="store_true",
                   help="time both terms in this process's CPU seconds (time.process_time), not wall "
                        "seconds: steadier on a shared CPU machine (CPU only: GPU time is not counted)")
    p.add_argument("--_memory-child", dest="memory_child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.cpu_time:
        if args.device != "cpu":
            raise SystemExit("--cpu-time measures CPU seconds: only with --device cpu")
        _CLOCK[0] = time.process_time
    if args.shape:
        for k, v in SHAPES[args.shape].items():
            setattr(args, k, v)
    args.heads = args.heads or None
    args.kv_heads = args.kv_heads or None
    if args.quick:
        args.width, args.layers, args.tokens, args.vocab, args.repeats = 128, 2, 32, 1100, 1
    args.deep_layers = args.deep_layers or 4 * args.layers
    if args.families:
        from porting_kit.runner import parse_only

        args.families = parse_only(args.families)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    args.threads = torch.get_num_threads()
    if args.measure_tolerance:
        measure_tolerance(args.device)
        return 0
    if args.memory_child:
        print(memory_child(args, args.memory_child, args.layers))
        return 0
    if args.decode_steps:
        d = measure_decode(args)
        print(f"decode: layers={args.layers} tokens={args.tokens} steps={args.decode_steps} "
              f"device={args.device} dtype={args.dtype or 'float32'} repeats={args.repeats}")
        print(f"own_decode_all_s={[round(x, 4) for x in d['own_decode_all_s']]} "
              f"decode_check_all_s={[round(x, 4) for x in d['decode_check_all_s']]} codes={d['decode_codes']}")
        print(f"decode_overhead_ratio={d['decode_check_s'] / d['own_decode_s']:.3f}")
        paired = statistics.median(c / o for c, o in zip(d["decode_check_all_s"], d["own_decode_all_s"]))
        print(f"decode_overhead_ratio_paired={paired:.3f}")
        return 0
    if args.memory_only:
        t = None
    else:
        t = measure_time(args)
        print_time(args, t)
    figures = {} if t is None else {"overhead_ratio": t["check_s"] / t["two_forwards_s"], **t}
    if not args.no_memory:
        figures.update(print_memory(args, measure_memory(args)))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=2)
    return 0


def print_time(args, t: dict) -> None:
    """Print the timing figures of :func:`measure_time`."""
    ratio = t["check_s"] / t["two_forwards_s"]
    print(f"model: width={args.width} layers={args.layers} heads={args.heads} kv_heads={args.kv_heads} "
          f"head_dim={args.head_dim} intermediate={args.intermediate} tokens={args.tokens} "
          f"vocab={args.vocab} device={args.device} dtype={args.dtype or 'float32'} "
          f"threads={args.threads} repeats={args.repeats} families={','.join(args.families or ['parity-pass'])} "
          f"clock={'cpu' if args.cpu_time else 'wall'}")
    print(f"two_forwards_all_s={[round(x, 4) for x in t['two_forwards_all_s']]} "
          f"check_all_s={[round(x, 4) for x in t['check_all_s']]}")
    print(f"two_forwards_s={t['two_forwards_s']:.4f} check_s={t['check_s']:.4f} "
          f"check_failing_s={t['check_failing_s']:.4f} compared_modules={t['compared_modules']}")
    print(f"clean_status={t['clean_status']} clean_max_module_rel_err={t['clean_max_module_rel_err']:.3e} "
          f"({t['clean_worst_module']}) failing_located={t['failing_located']}")
    print(f"check_parts_s={t['check_parts_s']}")
    print(f"overhead_ratio={ratio:.3f}")
    paired = statistics.median(c / f for c, f in zip(t["check_all_s"], t["two_forwards_all_s"]))
    print(f"overhead_ratio_paired={paired:.3f}  (median over repeats of check / the forwards just before it: "
          "robust to the machine drifting between repeats)")
    if ratio < 1.0:
        print("WARNING: overhead_ratio < 1.0: the check includes both forwards, so this is noise "
              "or contention; rerun with more --repeats / fewer other processes")
    print(f"overhead_failing_ratio={t['check_failing_s'] / t['two_forwards_s']:.3f}")


def print_memory(args, m: dict) -> dict:
    """Print the depth-memory figures of :func:`measure_memory`; return them."""
    base, deep = m[args.layers], m[args.deep_layers]
    dm = deep["extra_bytes"] / base["extra_bytes"] if base["extra_bytes"] > 0 else float("nan")
    for layers, v in m.items():
        print(f"layers={layers} forwards_peak_mb={v['forwards_peak_bytes'] / 2**20:.1f} "
              f"check_peak_mb={v['check_peak_bytes'] / 2**20:.1f} extra_mb={v['extra_bytes'] / 2**20:.1f}")
    print(f"depth_memory_ratio={dm:.3f}")
    print(f"(depth_memory_ratio: extra memory at {args.deep_layers} layers / at {args.layers})")
    return {"depth_memory_ratio": dm, "memory": {str(k): v for k, v in m.items()}}


if __name__ == "__main__":
    raise SystemExit(main())
