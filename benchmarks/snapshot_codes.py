"""Snapshot every check decision: (code, status) of each fail/warn finding and the first divergence.

For every embedded example and its planted variants, every spec under ``tests/specs/`` and
``examples/`` (with their variants), one line of JSON per run. Two snapshots (before and after a
change) are compared with ``--diff OLD NEW``: the decisions must be identical.

    python benchmarks/snapshot_codes.py --out before.jsonl [--only-examples tts,generator]
    python benchmarks/snapshot_codes.py --diff before.jsonl after.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def decision(report) -> dict:
    """The deterministic part of a report: non-pass findings and the first divergence."""
    bad = sorted({(f.code, f.status) for f in report.findings if f.status in ("fail", "warn")})
    first = report.first_divergence
    fd = None
    if first is not None:
        fd = [first.get("reference_module"), first.get("candidate_module")] if isinstance(first, dict) \
            else [getattr(first, "reference_module", None), getattr(first, "candidate_module", None)]
    return {"status": report.status, "findings": [list(b) for b in bad], "first_divergence": fd}


def targets(root: Path, only: set[str] | None, skip: set[str] = frozenset()):
    from porting_kit.spec import EMBEDDED, load_spec

    for name in sorted(EMBEDDED):
        if (only and name not in only) or name in skip:
            continue
        spec = load_spec(example=name)
        yield name, {"example": name}
        for v in spec.variants:
            yield f"{name}:{v}", {"example": f"{name}:{v}"}
    if only:
        return
    for folder in ("tests/specs", "examples"):
        for path in sorted((root / folder).glob("*.py")):
            try:
                spec = load_spec(str(path))
            except Exception as exc:  # a spec whose package is missing: recorded, not fatal
                yield f"{folder}/{path.name}", {"error": f"{type(exc).__name__}: {exc}"}
                continue
            yield f"{folder}/{path.name}", {"spec": str(path)}
            for v in spec.variants:
                yield f"{folder}/{path.name}:{v}", {"spec": str(path), "variant": v}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--only-examples", default=None)
    ap.add_argument("--skip-examples", default="", help="embedded examples to leave out (comma-separated)")
    ap.add_argument("--diff", nargs=2, type=Path)
    args = ap.parse_args()
    if args.diff:
        old = {json.loads(s)["name"]: json.loads(s) for s in args.diff[0].read_text().splitlines()}
        new = {json.loads(s)["name"]: json.loads(s) for s in args.diff[1].read_text().splitlines()}
        changed = 0

        def strip(d):
            return {k: v for k, v in d.items() if k != "seconds"} if d else d

        for name in sorted(set(old) | set(new)):
            a, b = old.get(name), new.get(name)
            if strip(a) != strip(b):
                changed += 1
                print(f"CHANGED {name}\n  before: {strip(a)}\n  after:  {strip(b)}")
        print(f"{len(set(old) | set(new))} runs compared, {changed} changed")
        return 1 if changed else 0
    import time

    from porting_kit.runner import run_check

    only = set(args.only_examples.split(",")) if args.only_examples else None
    root = Path(__file__).resolve().parent.parent
    out = args.out.open("w") if args.out else sys.stdout
    skip = set(filter(None, args.skip_examples.split(",")))
    for name, how in targets(root, only, skip):
        t = time.perf_counter()
        if "error" in how:
            rec = {"name": name, "error": how["error"]}
        else:
            try:
                rep = run_check(how.get("spec"), example=how.get("example"), variant=how.get("variant"))
                rec = {"name": name, **decision(rep)}
            except Exception as exc:  # one line per run, whatever happens
                rec = {"name": name, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        rec["seconds"] = round(time.perf_counter() - t, 2)
        print(json.dumps(rec), file=out, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
