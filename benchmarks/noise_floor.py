"""Calibrate the parity noise model on the clean real pairs (issue 29, point 2).

For each clean pair: every aligned module pair's candidate error against the
reference (``||c - r|| / ||r||``) next to the reference's own error against a
float64 run of itself (the floor, :mod:`porting_kit.probes.noise`), and the
largest ratio; ``NOISE_FACTOR`` must sit above every clean ratio.

Usage: ``PYTHONPATH=$PWD python benchmarks/noise_floor.py`` (needs the examples' packages;
a pair whose package is missing is skipped, named).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

EX = Path(__file__).resolve().parents[1] / "examples"
PAIRS = [("llama_meta.py", None, "llama_models"), ("encodec_pair.py", None, "encodec"),
         ("mimi_pair.py", None, "moshi"), ("mimi_pair.py", "roundtrip", "moshi"),
         ("mimi_pair.py", "roundtrip_conv_as_matmul", "moshi"),
         ("dac_pair.py", None, "dac"), ("dac_pair.py", "codes", "dac")]


def measure(spec_path: str, variant: str | None) -> dict:
    from porting_kit.context import CheckContext
    from porting_kit.probes.layers import _full, _run, get_result
    from porting_kit.probes.noise import _rel, measure_floor
    from porting_kit.spec import load_spec

    ctx = CheckContext(spec=load_spec(spec_path, variant=variant))
    res = get_result(ctx)
    pair, spec = res.pair, ctx.spec
    stats = [s for s in res.stats if s.pair.reference.name]
    got_r, got_c = _full(spec, pair, {s.pair.reference.key for s in stats}, {s.pair.candidate.key for s in stats})
    import torch

    with torch.no_grad():
        out_r = _run(spec, "reference", pair.reference, pair.inputs)
        out_c = _run(spec, "candidate", pair.candidate, pair.inputs)
    floor = measure_floor(pair.reference, pair.inputs, lambda m, x: _run(spec, "reference", m, x),
                          {s.pair.reference.key for s in stats}, got_r, out_r)
    worst, rows = 0.0, 0
    for s in stats:
        r = got_r.get(s.pair.reference.key, (None, None))[1]
        c = got_c.get(s.pair.candidate.key, (None, None))[1]
        err = _rel(c, r) if r is not None and c is not None else None
        f = floor.rel.get(s.pair.reference.key) if floor else None
        if err is not None and f:
            worst, rows = max(worst, err / f), rows + 1
    out_err = _rel(out_c, out_r)
    return {"modules": rows, "worst_module_ratio": worst, "output_rel_err": out_err,
            "output_floor": floor.output_rel if floor else None,
            "output_ratio": (out_err / floor.output_rel) if floor and floor.output_rel else math.nan,
            "output_max_abs": float((out_c.double() - out_r.double()).abs().max()) if out_err is not None else None}


def main() -> None:
    for name, variant, needs in PAIRS:
        label = f"{name}{':' + variant if variant else ''}"
        if importlib.util.find_spec(needs) is None:
            print(f"{label}: skipped (needs {needs})")
            continue
        m = measure(str(EX / name), variant)
        print(f"{label}: {m['modules']} modules, worst candidate/floor ratio {m['worst_module_ratio']:.2f}; "
              f"output rel {m['output_rel_err']:.3g}, floor {m['output_floor'] or 0:.3g}, "
              f"ratio {m['output_ratio']:.2f}, max |diff| {m['output_max_abs']:.3g}")


if __name__ == "__main__":
    main()
