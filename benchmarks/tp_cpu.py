"""Tensor-parallel check cost on CPU: ``--tp 1`` (layer parity, one process) vs ``--tp 2`` (gloo).

Prints::

    tp1_check_s=S     the parity family on the embedded tts example (one process, models built)
    tp2_check_s=S     the tp family at --tp 2: reference pass, 2 rank processes, gather, compare
    tp2_ratio=R       tp2_check_s / tp1_check_s
    tp2_parts_s={...} rank_import (interpreter + torch + spec import, slowest rank),
                      rank_init (process group), rank_load (build + load_weights),
                      rank_forward (forward with every module output kept), reference, compare
    tp1_forward_s / tp2_rank_forward_s   one candidate forward at TP 1 / on the slowest rank

    python benchmarks/tp_cpu.py [--repeats 3] [--world-size 2]

Both terms are medians over ``--repeats`` interleaved runs in this process (the ranks are
fresh interpreters each time: their start-up is part of the TP cost and dominates on a small
model). CI does not gate on these figures.
"""

from __future__ import annotations

import argparse
import statistics
import time


def _tp1() -> tuple[float, float]:
    """(parity family seconds, one candidate forward seconds) at TP 1."""
    import torch

    from porting_kit.runner import run_check

    t0 = time.perf_counter()
    report = run_check(example="tts", only="parity")
    check_s = time.perf_counter() - t0
    assert report.codes() == ["parity.ok"], report.codes()
    pair = report.extras["parity"].pair
    from porting_kit.load import run_side
    from porting_kit.spec import load_spec

    spec = load_spec(example="tts")
    with torch.no_grad():
        t0 = time.perf_counter()
        run_side(spec, "candidate", pair.candidate, pair.inputs)
        forward_s = time.perf_counter() - t0
    return check_s, forward_s


def _tp(n: int) -> tuple[float, dict]:
    """(tp family seconds, its timing parts) at TP ``n``."""
    from porting_kit.runner import run_check

    t0 = time.perf_counter()
    report = run_check(example="tts", only="tp", tp=n)
    check_s = time.perf_counter() - t0
    assert report.codes() == ["tp.ok"], [f.message for f in report.findings]
    parts = {k: round(v, 3) for k, v in report.extras["tp_timing"].items()}
    return check_s, parts


def main() -> int:
    """Run the benchmark and print the figures (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--world-size", type=int, default=2)
    args = ap.parse_args()
    tp1, fwd1, tpn, parts = [], [], [], []
    for _ in range(args.repeats):
        c, f = _tp1()
        tp1.append(c)
        fwd1.append(f)
        c, p = _tp(args.world_size)
        tpn.append(c)
        parts.append(p)
    med = statistics.median
    n = args.world_size
    print(f"repeats={args.repeats} world_size={n} backend=gloo model=embedded tts (hidden 64, 2 layers, 64 tokens)")
    print(f"tp1_check_all_s={[round(x, 3) for x in tp1]} tp{n}_check_all_s={[round(x, 3) for x in tpn]}")
    print(f"tp1_check_s={med(tp1):.3f}")
    print(f"tp{n}_check_s={med(tpn):.3f}")
    print(f"tp{n}_ratio={med(tpn) / med(tp1):.2f}")
    print(f"tp{n}_parts_s={ {k: med([p[k] for p in parts]) for k in parts[0]} }")
    print(f"tp1_forward_s={med(fwd1):.4f} tp{n}_rank_forward_s={med([p['rank_forward'] for p in parts]):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
