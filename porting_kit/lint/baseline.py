"""The ratchet: record today's findings once, fail only on new ones.

A baseline entry is ``(path, code, normalised line text)`` with a count, not a
line number, so unrelated edits that move code up or down keep matching; a
finding is "new" when its key occurs more often now than in the baseline.
File-level findings (missing test markers) match on path and code alone.
The file is JSON, written atomically::

    {"schema": "porting-kit/lint-baseline/1",
     "findings": [{"path": "...", "code": "PK301", "line": "x = y.item()", "count": 1}, ...]}
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from porting_kit.fsutil import atomic_write_text
from porting_kit.lint.finding import LintFinding

SCHEMA = "porting-kit/lint-baseline/1"


def normalise(text: str) -> str:
    """Strip a source line and collapse runs of whitespace to one space.

    Parameters
    ----------
    text : str

    Returns
    -------
    str
    """
    return " ".join(text.split())


def finding_key(finding: LintFinding, line_text: str) -> tuple[str, str, str]:
    """The baseline key of a finding: ``(path, code, normalised line text)``.

    Parameters
    ----------
    finding : LintFinding
    line_text : str
        The source line the finding is on (ignored for file-level findings).

    Returns
    -------
    tuple of (str, str, str)
        ``path`` in POSIX form; the text is ``""`` for file-level findings, so they
        match on path and code alone.
    """
    path = Path(finding.path).as_posix()
    return (path, finding.code, "" if finding.file_level else normalise(line_text))


def write(path: Path, keys: list[tuple[str, str, str]]) -> int:
    """Write ``keys`` (with multiplicity) as the baseline at ``path``.

    Parameters
    ----------
    path : Path
        Replaced atomically (:func:`porting_kit.fsutil.atomic_write_text`).
    keys : list of (str, str, str)
        :func:`finding_key` of each finding; repeats become ``count``.

    Returns
    -------
    int
        Number of findings recorded (``len(keys)``, not the number of entries).

    Raises
    ------
    OSError
        The folder cannot be written.
    """
    counts = Counter(keys)
    entries = [{"path": p, "code": c, "line": t, "count": n} for (p, c, t), n in sorted(counts.items())]
    atomic_write_text(Path(path), json.dumps({"schema": SCHEMA, "findings": entries}, indent=1) + "\n")
    return len(keys)


def read(path: Path) -> Counter:
    """Read a baseline into a Counter of keys.

    Parameters
    ----------
    path : Path
        A file written by :func:`write`.

    Returns
    -------
    collections.Counter
        ``(path, code, line) -> count`` (``count`` defaults to 1 when absent).

    Raises
    ------
    ValueError
        The file is not JSON, has another ``schema`` or a malformed entry.
    OSError
        The file cannot be read (missing, a directory...).
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"baseline {path} is not JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("findings"), list):
        raise ValueError(f"baseline {path} is not a porting-kit lint baseline (schema {SCHEMA})")
    counts: Counter = Counter()
    for e in data["findings"]:
        try:
            counts[(e["path"], e["code"], e["line"])] += int(e.get("count", 1))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"baseline {path} has a malformed entry: {e!r}") from exc
    return counts


def new_findings(findings: list[tuple[LintFinding, tuple]], baseline: Counter) -> list[LintFinding]:
    """The findings not covered by ``baseline``.

    Parameters
    ----------
    findings : list of (LintFinding, tuple)
        Each finding with its :func:`finding_key`, in report order.
    baseline : collections.Counter
        From :func:`read`; each entry absorbs up to ``count`` findings with its key,
        in order (not modified).

    Returns
    -------
    list of LintFinding
        The findings left over, order unchanged.
    """
    remaining = Counter(baseline)
    out = []
    for finding, key in findings:
        if remaining[key] > 0:
            remaining[key] -= 1
        else:
            out.append(finding)
    return out
