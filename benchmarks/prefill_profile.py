"""Where the prefill families' time goes: per family, the functions that take it (cProfile).

The diagnostic behind ``check_overhead.py --families``: the same Qwen3-shaped pair, loaded
once; one untimed warm-up of the families, then one profiled run. Prints each family's
seconds, its findings (code and the screen figures in the evidence), and the top functions
by cumulative time inside it::

    python benchmarks/prefill_profile.py --shape qwen3-0.6b --layers 7 --device cuda --dtype bfloat16

``--parts`` prints, without the profiler (whose own cost distorts Python-bound code), the
median milliseconds of each side's plain forward, of the same forward under each instrument
of the parity pass (sketch hooks, the prefill facts, both), of the Python walks that set them
up, and of each family's ``run(ctx)`` on the loaded pair.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_overhead as co  # noqa: E402  (the benchmark's pair builder)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(co.SHAPES), default=None)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--vocab", type=int, default=1100)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None)
    p.add_argument("--families", default="parity,rope,norm,config,dtype")
    p.add_argument("--top", type=int, default=18)
    p.add_argument("--sort", default="cumulative", help="pstats order: cumulative or tottime")
    p.add_argument("--parts", action="store_true", help="median ms of each instrument and family, no profiler")
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args(argv)
    args.heads = args.kv_heads = args.intermediate = None
    if args.shape:
        for k, v in co.SHAPES[args.shape].items():
            setattr(args, k, v)
    from porting_kit.runner import FAMILIES, parse_only

    families = parse_only(args.families)
    spec, ctx, pair = co._loaded_context(args, args.layers)
    co._two_forwards(spec, pair, args.device)
    co._check(ctx, families)  # warm-up

    def reset():
        ctx.state.clear()
        ctx.state["pair"] = pair
        ctx.extras.clear()
        ctx.families = tuple(families)

    reset()
    if args.parts:
        return parts(args, spec, ctx, pair, families, reset)
    whole = None  # every family's stats, added up
    for fam in families:
        mod = importlib.import_module(f"porting_kit.checks.{FAMILIES[fam]}")
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        findings = mod.run(ctx)
        co._sync(args.device)
        prof.disable()
        spent = time.perf_counter() - t0
        print(f"\n=== {fam}: {spent:.4f} s")
        for f in findings:
            ev = {k: v for k, v in (f.evidence or {}).items()
                  if isinstance(v, (int, float, str)) and len(str(v)) < 80}
            print(f"  {f.code} [{f.status}] {ev}")
        whole = pstats.Stats(prof) if whole is None else whole.add(prof)
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(args.sort).print_stats(args.top)
        print("\n".join(line for line in s.getvalue().splitlines()[6:] if line.strip()))
    print("\n=== all families, by own time")
    s = io.StringIO()
    whole.stream = s
    whole.sort_stats("tottime").print_stats(2 * args.top)
    print("\n".join(line for line in s.getvalue().splitlines()[6:] if line.strip()))
    return 0


def parts(args, spec, ctx, pair, families, reset) -> int:
    """Median ms of each instrument of the parity pass and of each family (``--parts``)."""
    import statistics

    import torch

    from porting_kit.locate import find_norms, find_rotary
    from porting_kit.probes.capture import capture_summaries, coarse_names, coarse_walk
    from porting_kit.probes.layers import _run
    from porting_kit.probes.prefill import capture_prefill_facts

    def ms(fn) -> float:
        fn()
        xs = []
        for _ in range(args.repeats):
            co._sync(args.device)
            t0 = time.perf_counter()
            fn()
            co._sync(args.device)
            xs.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(xs)

    for side, m in (("reference", pair.reference), ("candidate", pair.candidate)):
        walk = list(m.named_modules())
        only = coarse_names(m)

        def fwd(sketch: bool, rope: bool, norm: bool) -> None:
            recs: list = []
            with capture_summaries(m, recs, only=only, defer=True, modules=dict(walk)) if sketch \
                    else _nothing() as ps, \
                    capture_prefill_facts(m, side, rope=rope, norm=norm, walk=walk), torch.no_grad():
                _run(spec, side, m, pair.inputs)
            if ps is not None:
                ps.finish()

        print(f"{side}: {len(walk)} modules, {len(only or ())} hooked by the coarse pass")
        for name, fn in (("plain forward", lambda: fwd(False, False, False)),
                         ("+ sketch hooks", lambda: fwd(True, False, False)),
                         ("+ rope facts", lambda: fwd(False, True, False)),
                         ("+ norm facts", lambda: fwd(False, False, True)),
                         ("+ all (the parity pass)", lambda: fwd(True, True, True)),
                         ("walk named_modules", lambda: list(m.named_modules())),
                         ("coarse_walk", lambda: coarse_walk(m)),
                         ("find_norms", lambda: find_norms(m, walk)),
                         ("find_rotary", lambda: find_rotary(m, walk))):
            print(f"  {name:26s} {ms(fn):8.3f} ms")
    from porting_kit.runner import FAMILIES

    co._check(ctx, families)  # the families read the parity pass's facts
    for fam in families:
        mod = importlib.import_module(f"porting_kit.checks.{FAMILIES[fam]}")
        if fam == "parity":
            def fn():
                reset()
                mod.run(ctx)
        else:
            def fn():
                mod.run(ctx)
        print(f"  family {fam:19s} {ms(fn):8.3f} ms")
    return 0


class _nothing:
    """A ``with`` target that does nothing (yields None)."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    raise SystemExit(main())
