"""``porting-kit lint`` / the ``porting-kit-lint`` pre-commit hook: the library side.

Usage::

    porting-kit-lint [PATHS]... [--select CODES] [--ignore CODES]
                     [--baseline FILE [--write-baseline]] [--statistics] [--list-rules]

Prints ``path:line:col: CODE message (fix: ...)`` per finding and returns 1
when there is any fail finding, 0 otherwise (warn rules print ``CODE [warn]``
and leave the exit code alone), 2 when it cannot run (a missing path, an
unknown code, an unreadable baseline: one line on stderr). Directories are
walked for ``*.py``, ``*.yaml`` and ``*.yml`` (hidden folders, ``__pycache__``,
virtualenvs, ``build``/``dist`` skipped).

The options are declared once, on the Typer command ``porting_kit.cli.lint``;
:func:`main` runs that same command standalone (the hook's console script), so
``porting-kit lint ARGS`` and ``porting-kit-lint ARGS`` are one parser. The
rules themselves import only the standard library and ruamel.yaml; the command
line adds Typer and Rich (core dependencies). Nothing here imports torch.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from porting_kit.errors import InputError
from porting_kit.lint import baseline as baseline_mod
from porting_kit.lint.engine import lint_source
from porting_kit.lint.finding import LintFinding
from porting_kit.lint.rules import RULES, select_codes

EXIT_OK, EXIT_FINDINGS, EXIT_INPUT = 0, 1, 2
PY_SUFFIXES = (".py",)
YAML_SUFFIXES = (".yaml", ".yml")
_SKIP_DIRS = frozenset({"__pycache__", "node_modules", "venv", ".venv", "build", "dist", "site-packages"})


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
    other files are skipped silently, as pre-commit may pass them.

    Raises
    ------
    InputError
        A path that does not exist.
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
            raise InputError(f"{raw}: no such file or directory")
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


def run(paths: Sequence[str] = (), *, select: str | None = None, ignore: str | None = None,
        baseline: str | Path | None = None, write_baseline: bool = False, statistics: bool = False,
        list_rules: bool = False, out: TextIO | None = None,
        progress: Callable[[int, int], None] | None = None) -> int:
    """Lint ``paths`` and print the findings; returns the exit code.

    Parameters
    ----------
    paths : sequence of str
        Files or directories (see :func:`iter_files`); none lints nothing (exit 0),
        as pre-commit may call the hook with no matching file.
    select, ignore : str, optional
        Comma- (or space-) separated rule codes or prefixes to enable / disable
        (default: every rule enabled).
    baseline : str or Path, optional
        JSON file of accepted findings: only findings not in it are printed and fail.
    write_baseline : bool
        Record today's findings into ``baseline`` instead, and return 0.
    statistics : bool
        Also print the number of findings per code and the total.
    list_rules : bool
        Print every rule code and its summary (tab-separated), lint nothing.
    out : text stream, optional
        Where findings go (default ``sys.stdout``).
    progress : callable, optional
        Called as ``progress(done, total)`` after each file (files counted, not bytes).

    Returns
    -------
    int
        0 no (new) fail finding (warn findings may be printed), 1 a fail finding printed.

    Raises
    ------
    InputError
        An unknown code, ``write_baseline`` without ``baseline``, a baseline that
        is missing or not a baseline file, a path that does not exist.
    """
    out = out if out is not None else sys.stdout
    if list_rules:
        for rule in RULES.values():
            print(f"{rule.code}\t{rule.summary}", file=out)
        return EXIT_OK
    try:
        enabled = select_codes(_codes(select), _codes(ignore))
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    if write_baseline and not baseline:
        raise InputError("--write-baseline needs --baseline FILE")
    known = None
    if baseline and not write_baseline:
        if not Path(baseline).is_file():
            raise InputError(f"baseline {baseline} not found (create it with --write-baseline)")
        try:
            known = baseline_mod.read(Path(baseline))
        except (OSError, ValueError) as exc:
            raise InputError(str(exc)) from exc
    files = iter_files(paths)

    found: list[tuple[LintFinding, tuple]] = []
    for done, path in enumerate(files, 1):
        findings, lines = lint_file(path, enabled)
        for f in findings:
            text = lines[f.line - 1] if 0 < f.line <= len(lines) else ""
            found.append((f, baseline_mod.finding_key(f, text)))
        if progress is not None:
            progress(done, len(files))

    if write_baseline:
        n = baseline_mod.write(Path(baseline), [key for _, key in found])
        print(f"wrote {n} finding(s) to baseline {baseline}", file=out)
        return EXIT_OK
    findings = baseline_mod.new_findings(found, known) if known is not None else [f for f, _ in found]
    for f in findings:
        print(f.format(), file=out)
    if statistics:
        counts = Counter(f.code for f in findings)
        for code in sorted(counts):
            print(f"{counts[code]:6d}  {code}  {RULES[code].summary}", file=out)
        print(f"{len(findings):6d}  total in {len(files)} file(s)", file=out)
    return EXIT_FINDINGS if any(f.severity == "fail" for f in findings) else EXIT_OK
