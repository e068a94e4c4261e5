"""``porting-kit lint`` / the ``porting-kit-lint`` pre-commit hook entry point.

Usage::

    porting-kit-lint PATHS... [--select CODES] [--ignore CODES]
                     [--baseline FILE [--write-baseline]] [--statistics]

Prints ``path:line:col: CODE message (fix: ...)`` per finding and returns 1
when there is any, 0 otherwise, 2 when it cannot run (a missing path, an
unknown code, an unreadable baseline: one line on stderr). Directories are
walked for ``*.py``, ``*.yaml`` and ``*.yml`` (hidden folders, ``__pycache__``,
virtualenvs, ``build``/``dist`` skipped). Imports only the standard library
and ruamel.yaml, so the hook installs and runs without torch.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from porting_kit.argparse_util import OneLineParser
from porting_kit.errors import InputError
from porting_kit.lint import baseline as baseline_mod
from porting_kit.lint.engine import lint_source
from porting_kit.lint.finding import LintFinding
from porting_kit.lint.rules import RULES, select_codes

EXIT_OK, EXIT_FINDINGS, EXIT_INPUT = 0, 1, 2
PY_SUFFIXES = (".py",)
YAML_SUFFIXES = (".yaml", ".yml")
_SKIP_DIRS = frozenset({"__pycache__", "node_modules", "venv", ".venv", "build", "dist", "site-packages"})


class UsageError(Exception):
    """Bad input: printed as one line, exit 2."""


def _python_script(path: Path) -> bool:
    """A file without a known suffix whose first line is a python shebang (pre-commit's ``python`` type)."""
    if path.suffix:
        return False
    try:
        with open(path, "rb") as fh:
            first = fh.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def iter_files(paths: Sequence[str]) -> list[str]:
    """Expand ``paths`` into the Python and YAML files to lint, in a stable order.

    Files named explicitly are linted when they end in ``.py`` / ``.yaml`` /
    ``.yml`` or are extension-less python scripts (a ``#!...python`` first line);
    other files are skipped silently, as pre-commit may pass them. Raises
    :class:`UsageError` for a path that does not exist.
    """
    out: list[str] = []
    seen: set[str] = set()
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS
                                 and not d.endswith(".egg-info"))
                for name in sorted(files):
                    if name.endswith(PY_SUFFIXES + YAML_SUFFIXES):
                        path = os.path.join(root, name)
                        if path not in seen:
                            seen.add(path)
                            out.append(path)
        elif p.is_file():
            if (raw.endswith(PY_SUFFIXES + YAML_SUFFIXES) or _python_script(p)) and raw not in seen:
                seen.add(raw)
                out.append(raw)
        else:
            raise UsageError(f"{raw}: no such file or directory")
    return out


def lint_file(path: str, enabled: frozenset[str]) -> tuple[list[LintFinding], list[str]]:
    """Lint one file; returns its findings and its lines (for the baseline's line text).

    Never raises for file content: unreadable or undecodable files are a
    ``PK000`` / ``PKY000`` finding.
    """
    is_yaml = path.endswith(YAML_SUFFIXES)
    code = "PKY000" if is_yaml else "PK000"
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        text = data.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        return ([LintFinding(path, 1, 1, code, f"cannot read file: {exc}")] if code in enabled else []), []
    if is_yaml:
        from porting_kit.lint.deploy_yaml import lint_yaml, might_be_deploy

        if not might_be_deploy(path, text):
            return [], []
        findings = lint_yaml(path, text, enabled)
    else:
        findings = lint_source(path, text, enabled)
    return findings, (text.splitlines() if findings else [])


def _codes(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [c for c in value.replace(" ", ",").split(",") if c]


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="porting-kit lint",
        description="Lint Python and vLLM-Omni deploy YAML for the faults ports keep making.")
    parser.add_argument("paths", nargs="*", help="files or directories (Python, deploy YAML)")
    parser.add_argument("--select", help="comma-separated codes or prefixes to enable (default: all)")
    parser.add_argument("--ignore", help="comma-separated codes or prefixes to disable")
    parser.add_argument("--baseline", metavar="FILE",
                        help="JSON file of accepted findings: only findings not in it fail")
    parser.add_argument("--write-baseline", action="store_true",
                        help="record today's findings into --baseline FILE and exit 0")
    parser.add_argument("--statistics", action="store_true", help="print the number of findings per code")
    parser.add_argument("--list-rules", action="store_true", help="print every rule code and exit")
    return parser


def run(args: argparse.Namespace, out=None) -> int:
    """Run the linter for parsed ``args``; returns the exit code. Raises :class:`UsageError`."""
    out = out if out is not None else sys.stdout
    if args.list_rules:
        for rule in RULES.values():
            print(f"{rule.code}\t{rule.summary}", file=out)
        return EXIT_OK
    try:
        enabled = select_codes(_codes(args.select), _codes(args.ignore))
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if args.write_baseline and not args.baseline:
        raise UsageError("--write-baseline needs --baseline FILE")
    known = None
    if args.baseline and not args.write_baseline:
        if not Path(args.baseline).is_file():
            raise UsageError(f"baseline {args.baseline} not found (create it with --write-baseline)")
        try:
            known = baseline_mod.read(Path(args.baseline))
        except (OSError, ValueError) as exc:
            raise UsageError(str(exc)) from exc
    files = iter_files(args.paths)

    found: list[tuple[LintFinding, tuple]] = []
    for path in files:
        findings, lines = lint_file(path, enabled)
        for f in findings:
            text = lines[f.line - 1] if 0 < f.line <= len(lines) else ""
            found.append((f, baseline_mod.finding_key(f, text)))

    if args.write_baseline:
        n = baseline_mod.write(Path(args.baseline), [key for _, key in found])
        print(f"wrote {n} finding(s) to baseline {args.baseline}", file=out)
        return EXIT_OK
    findings = baseline_mod.new_findings(found, known) if known is not None else [f for f, _ in found]
    for f in findings:
        print(f.format(), file=out)
    if args.statistics:
        counts = Counter(f.code for f in findings)
        for code in sorted(counts):
            print(f"{counts[code]:6d}  {code}  {RULES[code].summary}", file=out)
        print(f"{len(findings):6d}  total in {len(files)} file(s)", file=out)
    return EXIT_FINDINGS if findings else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the hook and of ``porting-kit lint``; returns 0, 1 or 2 (see module doc)."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except InputError as exc:  # a usage error: one line
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except SystemExit as exc:  # --help
        return EXIT_INPUT if exc.code else EXIT_OK
    try:
        return run(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
