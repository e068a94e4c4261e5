"""Lint speed vs the floor of any AST linter: read + ast.parse + one ast.walk per file.

Prints ``lint_vs_parse_ratio=`` = (time to lint every Python file) / (time to
read, ``ast.parse`` and ``ast.walk`` every node of the same files), both in
this one process, best of ``--repeat`` interleaved rounds. Target <= 1.5
(DESIGN.md quality bars; CI does not gate on timing).

    python benchmarks/lint_speed.py [PATHS...] [--repeat 3]

Default PATHS: the vllm-omni 0.30.0 tree at /work/src/vllm_omni/vllm_omni.
"""

from __future__ import annotations

import argparse
import ast
import time
from collections import Counter

from porting_kit.lint.engine import lint_source
from porting_kit.lint.main import iter_files
from porting_kit.lint.rules import select_codes

DEFAULT = ["/work/src/vllm_omni/vllm_omni"]


def parse_walk(files: list[str]) -> float:
    """Seconds to read, parse and walk every node of ``files``."""
    t0 = time.perf_counter()
    for path in files:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8-sig")
        try:
            tree = ast.parse(text, filename=path)
        except (SyntaxError, ValueError):
            continue
        for _ in ast.walk(tree):
            pass
    return time.perf_counter() - t0


def lint(files: list[str], enabled: frozenset[str]) -> tuple[float, Counter]:
    """Seconds to read and lint ``files`` with every rule; and findings per code."""
    counts: Counter = Counter()
    t0 = time.perf_counter()
    for path in files:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8-sig")
        for f in lint_source(path, text, enabled):
            counts[f.code] += 1
    return time.perf_counter() - t0, counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    files = [f for f in iter_files(args.paths) if f.endswith(".py")]
    enabled = select_codes(None, None)
    best_base = best_lint = float("inf")
    counts: Counter = Counter()
    for _ in range(max(1, args.repeat)):
        best_base = min(best_base, parse_walk(files))
        elapsed, counts = lint(files, enabled)
        best_lint = min(best_lint, elapsed)
    ratio = best_lint / best_base if best_base > 0 else float("nan")
    print(f"files={len(files)}")
    print(f"parse_walk_s={best_base:.3f}")
    print(f"lint_s={best_lint:.3f}")
    print(f"findings={sum(counts.values())} " + " ".join(f"{c}={n}" for c, n in sorted(counts.items())))
    print(f"lint_vs_parse_ratio={ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
