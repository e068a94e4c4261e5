"""One lint finding, its ``path:line:col: CODE message (fix: ...)`` line, and ``# noqa``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from porting_kit.lint.rules import fix_for, severity_of

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z0-9]+(?:[\s,]+[A-Za-z0-9]+)*))?", re.IGNORECASE)


@dataclass(frozen=True)
class LintFinding:
    """A rule violation at one place in one file.

    Attributes
    ----------
    path : str
        As given on the command line.
    line, col : int
        1-based (the flake8 / ruff convention).
    code : str
        A code of :data:`porting_kit.lint.rules.RULES` (``PK301``, ``PKY102``...).
    message : str
        What was found; :meth:`format` appends the rule's fix.
    file_level : bool, default False
        A finding about the whole file (missing test markers): the baseline matches it
        by path and code only, and ``# noqa`` does not suppress it.
    """

    path: str
    line: int
    col: int
    code: str
    message: str
    file_level: bool = False

    @property
    def severity(self) -> str:
        """``"fail"`` or ``"warn"``: the rule's severity (:func:`porting_kit.lint.rules.severity_of`)."""
        return severity_of(self.code)

    def format(self) -> str:
        """The finding as one output line.

        Returns
        -------
        str
            ``path:line:col: CODE message (fix: ...)``, the flake8 / ruff shape plus the rule's fix;
            a warn rule's line reads ``CODE [warn] message``.
        """
        mark = " [warn]" if self.severity == "warn" else ""
        return f"{self.path}:{self.line}:{self.col}: {self.code}{mark} {self.message} (fix: {fix_for(self.code)})"

    def sort_key(self) -> tuple:
        """``(path, line, col, code)``: report order."""
        return (self.path, self.line, self.col, self.code)


def noqa_codes(line_text: str) -> frozenset[str] | None:
    """Codes a ``# noqa`` comment on ``line_text`` suppresses.

    Parameters
    ----------
    line_text : str
        One source line (the comment is found by a text search, so a ``# noqa`` inside a
        string literal counts too).

    Returns
    -------
    frozenset of str or None
        ``None`` when the line has no noqa comment, an empty set for a bare ``# noqa``
        (suppresses every code, as in flake8), else the upper-cased codes listed after
        ``# noqa:`` (each also suppresses codes it prefixes).
    """
    if "noqa" not in line_text and "NOQA" not in line_text and "Noqa" not in line_text:
        return None
    m = _NOQA.search(line_text)
    if m is None:
        return None
    codes = m.group("codes")
    if not codes:
        return frozenset()
    return frozenset(c.upper() for c in re.split(r"[\s,]+", codes) if c)


def apply_noqa(findings: list[LintFinding], lines: list[str]) -> list[LintFinding]:
    """Drop findings whose line carries ``# noqa`` or ``# noqa: CODE`` naming them.

    Parameters
    ----------
    findings : list of LintFinding
    lines : list of str
        The file split into lines (index 0 is line 1).

    Returns
    -------
    list of LintFinding
        The kept findings, order unchanged. File-level findings, codes ending in ``000``
        (``PK000`` / ``PKY000``: the file does not parse) and findings on a line outside
        ``lines`` are always kept.
    """
    kept = []
    for f in findings:
        if f.file_level or f.code.endswith("000") or not (0 < f.line <= len(lines)):
            kept.append(f)
            continue
        codes = noqa_codes(lines[f.line - 1])
        if codes is None or codes and not any(f.code.startswith(c) for c in codes):
            kept.append(f)
    return kept
