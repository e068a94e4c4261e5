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
from porting_kit.fsutil import MAX_DEPLOY_YAML_BYTES
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


#: Files larger than this are not linted (a note says so): no quadratic pass, no unbounded read.
MAX_FILE_BYTES = 8 * 1024 * 1024


def project_excludes(start: Path) -> tuple[Path | None, list[str]]:
    """The ``exclude`` globs of ``[tool.porting-kit]`` in the nearest ``pyproject.toml``.

    Parameters
    ----------
    start : Path
        The folder to search from, then its parents (as ruff finds its configuration).

    Returns
    -------
    (Path or None, list of str)
        The folder holding that ``pyproject.toml`` (globs are relative to it) and the
        globs (``fnmatch`` style; ``tests/**`` excludes everything under ``tests``);
        ``(None, [])`` when there is none.

    Raises
    ------
    InputError
        The pyproject.toml is not valid TOML, or ``exclude`` is not a list of strings.
    """
    import tomllib

    for folder in [start.resolve(), *start.resolve().parents]:
        cfg = folder / "pyproject.toml"
        if not cfg.is_file():
            continue
        try:
            data = tomllib.loads(cfg.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise InputError(f"{cfg}: cannot read it ({exc})") from exc
        section = data.get("tool", {}).get("porting-kit", {})
        globs = section.get("exclude", []) if isinstance(section, dict) else []
        if not isinstance(globs, list) or not all(isinstance(g, str) for g in globs):
            raise InputError(f"{cfg}: [tool.porting-kit] exclude must be a list of strings")
        return folder, globs
    return None, []


def _excluded(path: str, root: Path | None, globs: list[str]) -> bool:
    if root is None or not globs:
        return False
    from fnmatch import fnmatch

    try:
        rel = Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return False
    return any(fnmatch(rel, g) or fnmatch(rel + "/", g) for g in globs)


def _not_regular(path: str) -> str | None:
    """Why ``path`` is not linted although it was listed: not a regular file, or too large
    (:data:`MAX_FILE_BYTES`; YAML over :data:`porting_kit.fsutil.MAX_DEPLOY_YAML_BYTES`)."""
    import stat

    try:
        st = os.stat(path)
    except OSError as exc:
        return f"cannot stat it ({exc.strerror or exc})"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a FIFO, a device or a socket)"
    if st.st_size > MAX_FILE_BYTES:
        return f"{st.st_size / 2**20:.1f} MiB, over the {MAX_FILE_BYTES // 2**20} MiB cap"
    if path.endswith(YAML_SUFFIXES) and st.st_size > MAX_DEPLOY_YAML_BYTES:
        return (f"{st.st_size / 2**20:.1f} MiB, over the {MAX_DEPLOY_YAML_BYTES / 2**20:g} MiB cap for YAML "
                "(a deploy file is a few KB; parsing this one would take minutes)")
    return None


def iter_files(paths: Sequence[str], notes: list[str] | None = None) -> list[str]:
    """Expand ``paths`` into the Python and YAML files to lint, in a stable order.

    Files named explicitly are linted when they end in ``.py`` / ``.yaml`` /
    ``.yml`` or are extension-less python scripts (a ``#!...python`` first line);
    other files are skipped silently, as pre-commit may pass them. Directories are
    walked, leaving out what the nearest ``pyproject.toml``'s ``[tool.porting-kit]
    exclude`` globs match. FIFOs, devices and files over :data:`MAX_FILE_BYTES` are
    never opened: each gets a line in ``notes``.

    Parameters
    ----------
    paths : sequence of str
        Files and directories.
    notes : list of str, optional
        Receives one line per path skipped for what it is (not for its name).

    Returns
    -------
    list of str
        The files to lint.

    Raises
    ------
    InputError
        A path that does not exist.
    """
    notes = notes if notes is not None else []
    root, globs = project_excludes(Path.cwd())
    out: list[str] = []
    seen: set[str] = set()

    def add(path: str) -> None:
        if path in seen:
            return
        seen.add(path)
        why = _not_regular(path)
        if why:
            notes.append(f"note: skipped {path}: {why}")
        else:
            out.append(path)

    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            for dirpath, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS
                                 and not d.endswith(".egg-info")
                                 and not _excluded(os.path.join(dirpath, d), root, globs))
                for name in sorted(files):
                    path = os.path.join(dirpath, name)
                    if name.endswith(PY_SUFFIXES + YAML_SUFFIXES) and not _excluded(path, root, globs):
                        add(path)
        elif p.exists() and not p.is_file():
            add(raw)  # a FIFO or a device named on the command line: a note, never a read
        elif p.is_file():
            if raw.endswith(PY_SUFFIXES + YAML_SUFFIXES) or _python_script(p):
                add(raw)
        else:
            raise InputError(f"{raw}: no such file or directory")
    return out


def _check_baseline_target(path: Path) -> None:
    """Refuse a ``--write-baseline`` target that is not (or would not become) a baseline.

    Raises
    ------
    InputError
        A source-like name (``.py``, ``.pyi``, ``.yaml``, ``.yml``, ``.toml``, ``.ipynb``),
        an existing file that is not a porting-kit lint baseline, or a path
        :func:`porting_kit.fsutil.check_output_path` refuses (a link, a directory,
        a FIFO, a device, an unwritable folder).
    """
    from porting_kit.fsutil import check_output_path

    if path.suffix.lower() in (".py", ".pyi", ".yaml", ".yml", ".toml", ".ipynb", ".cfg"):
        raise InputError(f"--baseline {path}: a {path.suffix} file is not a baseline; name a .json file")
    check_output_path(path, what="--baseline", allow_stdout=False)
    if path.exists():
        try:
            baseline_mod.read(path)
        except (OSError, ValueError) as exc:
            raise InputError(f"--baseline {path}: exists and is not a porting-kit lint baseline; "
                             "nothing was written") from exc


def lint_file(path: str, enabled: frozenset[str]) -> tuple[list[LintFinding], list[str]]:
    """Lint one file; returns its findings and its lines (for the baseline's line text).

    Never raises for file content: unreadable or undecodable files are a
    ``PK000`` / ``PKY000`` finding.
    """
    is_yaml = path.endswith(YAML_SUFFIXES)
    code = "PKY000" if is_yaml else "PK000"
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
        text = data.decode("utf-8-sig") if is_yaml else _decode_source(data)
    except (OSError, UnicodeDecodeError, SyntaxError, LookupError) as exc:
        return ([LintFinding(path, 1, 1, code, f"cannot read file: {exc}")] if code in enabled else []), []
    if is_yaml:
        from porting_kit.lint.deploy_yaml import lint_yaml, might_be_deploy

        if not might_be_deploy(path, text):
            return [], []
        findings = lint_yaml(path, text, enabled)
    else:
        findings = lint_source(path, text, enabled)
    return findings, (text.splitlines() if findings else [])


def _decode_source(data: bytes) -> str:
    """Python source bytes as text, honouring a PEP 263 coding cookie (and a UTF-8 BOM).

    Raises
    ------
    SyntaxError
        The cookie names an encoding Python does not know.
    UnicodeDecodeError
        The bytes are not in the declared (or default UTF-8) encoding.
    """
    import io
    import tokenize

    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def _codes(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [c for c in value.replace(" ", ",").split(",") if c]


def run(paths: Sequence[str] = (), *, select: str | None = None, ignore: str | None = None,
        baseline: str | Path | None = None, write_baseline: bool = False, statistics: bool = False,
        list_rules: bool = False, out: TextIO | None = None,
        progress: Callable[[int, int], None] | None = None, summary: bool = False) -> int:
    """Lint ``paths`` and print the findings; returns the exit code.

    Parameters
    ----------
    paths : sequence of str
        Files or directories (see :func:`iter_files`); none lints the current
        directory (as ruff does), honouring ``[tool.porting-kit] exclude``.
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
    summary : bool
        On a clean run, say how many files were checked (one line on stderr):
        ``porting-kit lint`` does; the pre-commit hook stays silent on success.

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
    if write_baseline:
        _check_baseline_target(Path(baseline))
    known = None
    if baseline and not write_baseline:
        if not Path(baseline).is_file():
            raise InputError(f"baseline {baseline} not found (create it with --write-baseline)")
        try:
            known = baseline_mod.read(Path(baseline))
        except (OSError, ValueError) as exc:
            raise InputError(str(exc)) from exc
    notes: list[str] = []
    files = iter_files(list(paths) or ["."], notes)
    for note in notes:
        print(note, file=sys.stderr)

    found: list[tuple[LintFinding, tuple]] = []
    for done, path in enumerate(files, 1):
        findings, lines = lint_file(path, enabled)
        for f in findings:
            text = lines[f.line - 1] if 0 < f.line <= len(lines) else ""
            found.append((f, baseline_mod.finding_key(f, text)))
        if progress is not None:
            progress(done, len(files))

    if write_baseline:
        try:
            n = baseline_mod.write(Path(baseline), [key for _, key in found])
        except OSError as exc:
            raise InputError(f"--baseline {baseline}: cannot write it ({exc.strerror or exc})") from exc
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
    elif not findings and summary:  # a clean run says what it looked at (stderr: stdout stays the findings)
        print(f"no findings in {len(files)} file(s) checked", file=sys.stderr)
    return EXIT_FINDINGS if any(f.severity == "fail" for f in findings) else EXIT_OK
