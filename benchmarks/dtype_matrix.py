"""Serving-dtype error distributions of the clean pairs, and which planted faults each dtype names.

Part 1 (tolerances): for each clean pair (the Meta-vs-HF Llama pair ``examples/llama_meta.py``
and the embedded ``tts`` example) and each dtype, runs ``parity,rope`` over ``--seeds`` seeded
random inits (the pair's weights and inputs drawn from seed ``s``) and records

* ``angle`` -- the rope check's max angle error in radians (``rope.*`` evidence
  ``angle_error_rad``), the figure ``ROPE_TOLERANCES[dtype]["angle"]`` bounds;
* ``out_rel`` -- the output's ``||a-b|| / ||b||`` (``parity.ok`` evidence ``output_rel_err``),
  the figure ``DEFAULTS[dtype].rel`` bounds.

It prints min / median / max over all runs, the tolerance in force
(:mod:`porting_kit.probes.tolerance`) and its margin (tolerance / worst clean run), and
any clean run with a fail/warn finding (there must be none).

Part 2 (``--variants``): every planted variant of both pairs in float32 and in ``--variant-dtype``
(default bfloat16): one line each, ``pair:variant -> codes (fail/warn)``; a variant named in
float32 but not in the serving dtype is listed as float32-only.

    python benchmarks/dtype_matrix.py [--device cuda] [--seeds 5] [--variants] [--out PATH.md]

Seeds: ``examples/llama_meta.py``'s ``SEED`` and ``porting_kit.embedded.tts_reference``'s seed
defaults are set per run (seed 0 is the shipped pair).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LLAMA = str(ROOT / "examples" / "llama_meta.py")
PAIRS = {"llama": LLAMA, "tts": None}
DTYPES = ("float32", "bfloat16", "float16")
#: Variants whose RoPE is right (the fault is elsewhere): their angle error is pure dtype noise,
#: measured on q/k that are not bit-identical to the reference's.
ROPE_CORRECT = ("tts:norm_eps", "tts:norm_weight_offset")


@contextlib.contextmanager
def seeded(pair: str, spec, seed: int):
    """Draw ``pair``'s weights and inputs from ``seed`` for the duration (restored after)."""
    if pair == "llama":
        old = spec.module.SEED
        spec.module.SEED = seed
        try:
            yield
        finally:
            spec.module.SEED = old
        return
    from porting_kit.embedded import tts_reference as tr

    saved = (tr.build_reference.__defaults__, tr.example_input_ids.__defaults__,
             tr.randomize_.__defaults__)
    tr.build_reference.__defaults__ = (None, None, seed)
    tr.example_input_ids.__defaults__ = (64, 1, seed)
    tr.randomize_.__defaults__ = (seed,)
    try:
        yield
    finally:
        (tr.build_reference.__defaults__, tr.example_input_ids.__defaults__,
         tr.randomize_.__defaults__) = saved


def load(pair: str, variant: str | None = None):
    from porting_kit.spec import load_spec

    if pair == "tts":
        return load_spec(example="tts", variant=variant)
    return load_spec(PAIRS[pair], variant=variant)


def measure(pair: str, dtype: str, seed: int, device: str) -> dict:
    """One run: ``{"angle", "out_rel", "bad": [codes with fail/warn]}``. ``pair`` may name a
    variant (``tts:norm_eps``): a RoPE-correct variant samples the angle noise of a pair
    that is not bit-exact (the clean embedded port is)."""
    from porting_kit.runner import run_check

    name, _, variant = pair.partition(":")
    spec = load(name, variant or None)
    pair = name
    with seeded(pair, spec, seed):
        report = run_check(spec, only="parity,rope,norm", device=device, dtype=dtype)
    row = {"angle": None, "out_rel": None, "bad": []}
    for f in report.findings:
        if "angle_error_rad" in f.evidence and f.check == "rope":
            row["angle"] = float(f.evidence["angle_error_rad"])
        if f.code == "parity.ok":
            row["out_rel"] = float(f.evidence.get("output_rel_err", float("nan")))
        if f.status in ("fail", "warn"):
            row["bad"].append(f.code)
    return row


def codes(pair: str, variant: str, dtype: str, device: str) -> list[str]:
    """fail/warn codes of one planted variant in ``dtype``."""
    from porting_kit.runner import run_check

    report = run_check(load(pair, variant), device=device, dtype=dtype,
                       only="config,parity,rope,norm")
    return sorted({f.code for f in report.findings if f.status in ("fail", "warn")})


def environment(device: str) -> str:
    import torch
    import transformers

    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") else "-"
    return (f"device {device} ({gpu}), torch {torch.__version__}, transformers {transformers.__version__}, "
            f"Python {platform.python_version()}, threads {torch.get_num_threads()}")


def fmt(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def margin(tol, values) -> str:
    """``tol / max(values)`` as ``"3.2x"``; ``"exact"`` when the worst run is at rounding level."""
    if not tol or not values:
        return "-"
    worst = max(values)
    return "exact" if worst < 1e-9 else f"{tol / worst:.1f}x"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seeds", type=int, default=5, help="seeds per pair and dtype (0..N-1)")
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--pairs", default="llama,tts")
    ap.add_argument("--rope-samples", default=",".join(ROPE_CORRECT),
                    help="RoPE-correct variants whose angle error joins the distribution")
    ap.add_argument("--variants", action="store_true", help="also sweep the planted variants")
    ap.add_argument("--variant-dtype", default="bfloat16")
    ap.add_argument("--out", help="also write the markdown here")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from porting_kit.probes.tolerance import DEFAULTS, ROPE_TOLERANCES

    pairs = [p for p in args.pairs.split(",") if p]
    dtypes = [d for d in args.dtypes.split(",") if d]
    lines = ["# Serving-dtype error distributions (clean pairs) and planted faults", "",
             f"Environment: {environment(args.device)}.", "",
             f"Command: `python benchmarks/dtype_matrix.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
             "", "## Clean pairs", "",
             "| pair | dtype | runs | angle rad min / median / max | angle tol | margin "
             "| out rel min / median / max | rel tol | margin | fail/warn |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    t0 = time.perf_counter()
    false_alarms = 0
    samples = [p for p in args.rope_samples.split(",") if p]
    for pair in pairs + samples:
        for dtype in dtypes:
            rows = [measure(pair, dtype, s, args.device) for s in range(args.seeds)]
            if pair in samples:  # its own fault is expected: only the rope verdict counts
                for r in rows:
                    r["bad"] = [c for c in r["bad"] if c.startswith("rope.")]
            ang = [r["angle"] for r in rows if r["angle"] is not None]
            rel = [r["out_rel"] for r in rows if r["out_rel"] is not None]
            bad = sorted({c for r in rows for c in r["bad"]})
            false_alarms += sum(bool(r["bad"]) for r in rows)
            a_tol = ROPE_TOLERANCES[dtype]["angle"]
            r_tol = DEFAULTS[dtype].rel
            a_m = margin(a_tol, ang)
            r_m = margin(r_tol, rel)
            dist = lambda v: " / ".join(fmt(x) for x in (min(v), statistics.median(v), max(v))) if v else "-"  # noqa: E731
            lines.append(f"| {pair} | {dtype} | {len(rows)} | {dist(ang)} | {a_tol:g} | {a_m} | {dist(rel)} "
                         f"| {fmt(r_tol)} | {r_m} | {', '.join(bad) or 'none'} |")
            print(lines[-1], flush=True)
    lines += ["", f"clean_runs_with_fail_or_warn={false_alarms}"]
    if args.variants:
        vd = args.variant_dtype
        lines += ["", f"## Planted variants: float32 vs {vd}", "",
                  f"| variant | float32 codes | {vd} codes | named in {vd} |", "|---|---|---|---|"]
        fp32_only = []
        for pair in pairs:
            for variant in [v for v in load(pair).variants if not v.startswith("audio_")]:
                c32, cd = codes(pair, variant, "float32", args.device), codes(pair, variant, vd, args.device)
                same = "yes" if set(c32) <= set(cd) else ("no (float32 only)" if not cd else "partly")
                if not cd and c32:
                    fp32_only.append(f"{pair}:{variant}")
                lines.append(f"| {pair}:{variant} | {', '.join(c32) or '-'} | {', '.join(cd) or '-'} | {same} |")
                print(lines[-1], flush=True)
        lines += ["", "(audio_* variants: the codec decodes in float32 whatever --dtype says; "
                  "not swept)", "", f"float32_only={','.join(fp32_only) or 'none'}"]
    lines += ["", f"seconds={time.perf_counter() - t0:.0f}"]
    text = "\n".join(lines) + "\n"
    print(f"clean_runs_with_fail_or_warn={false_alarms}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
