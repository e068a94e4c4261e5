"""The uniform result type of every check family, and the JSON report.

Every family emits :class:`Finding` objects of one shape (DESIGN.md,
"Checks: results, report, exit codes"). A family that ran and found nothing
emits one ``<prefix>.ok`` finding with status ``pass``; a family that could not
run emits one ``skip`` finding with the reason (:func:`ok`, :func:`skip`).
"""

from __future__ import annotations

import json
import sys
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "porting-kit/report/1"
STATUSES = ("pass", "fail", "warn", "skip")

#: Exit codes (DESIGN.md): 0 everything that ran passed (warn and skip allowed),
#: 1 a comparison ran and found a fault, 2 the tool could not run.
EXIT_OK, EXIT_FAULT, EXIT_INPUT = 0, 1, 2


@dataclass
class Where:
    """Where a finding is located.

    Attributes
    ----------
    reference : str or None, default None
        Reference module name (``model.layers.0.self_attn``), or ``None``.
    candidate : str or None, default None
        Candidate module name (``layers.0.attention``), or ``None``.
    samples : list of int or None, default None
        ``[start, end)`` in audio samples of the compared waveform, or ``None``.
    """

    reference: str | None = None
    candidate: str | None = None
    samples: list[int] | None = None


@dataclass
class Finding:
    """One result of one check family.

    Attributes
    ----------
    check : str
        The family prefix: ``parity``, ``rope``, ``norm``, ``config``, ``hop``,
        ``channel``, ``dtype``, ``rng``, ``lifecycle`` (``lint`` for hooks).
    code : str
        Stable fault code, e.g. ``rope.theta_mismatch``; ``<prefix>.ok`` on pass.
    status : str
        One of ``pass``, ``fail``, ``warn``, ``skip``.
    message : str
        One sentence a person can act on.
    evidence : dict
        Flat dict of numbers and strings (no nesting; lists of numbers allowed
        for short series such as per-position errors).
    where : Where
        Module names on each side and/or a sample range.
    hint : str
        The fix.
    """

    check: str
    code: str
    status: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    where: Where = field(default_factory=Where)
    hint: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if not self.code.startswith(self.check + "."):
            raise ValueError(f"code {self.code!r} must start with its check prefix {self.check!r}")

    def to_dict(self) -> dict[str, Any]:
        """The finding as JSON data.

        Returns
        -------
        dict
            The seven fields (``where`` as a dict); evidence values made JSON-safe: NaN/Inf as
            strings, tensors/arrays as lists, other objects as ``str``.
        """
        d = asdict(self)
        d["evidence"] = {k: _jsonable(v) for k, v in self.evidence.items()}
        return d

    def _repr_html_(self) -> str:
        """The finding as an HTML table row with its evidence (JupyterLab); text repr unchanged.

        Returns
        -------
        str
            :func:`porting_kit.report.html.finding_html`; every value escaped.
        """
        from porting_kit.report.html import finding_html

        return finding_html(self)


def ok(check: str, message: str = "", evidence: dict[str, Any] | None = None) -> Finding:
    """The single ``<check>.ok`` pass finding of a family that ran and found nothing.

    Parameters
    ----------
    check : str
        The family prefix (``"parity"``, ``"hop"``...).
    message : str, default ""
        One sentence; empty gives ``"<check>: no fault found."``.
    evidence : dict, optional
        Flat numbers and strings (e.g. the measured margin); default ``{}``.

    Returns
    -------
    Finding
        ``code="<check>.ok"``, ``status="pass"``.
    """
    return Finding(check, f"{check}.ok", "pass", message or f"{check}: no fault found.",
                   evidence or {})


def skip(check: str, reason: str) -> Finding:
    """The single ``<check>.skipped`` finding of a family that could not run.

    Parameters
    ----------
    check : str
        The family prefix.
    reason : str
        One sentence saying why it could not run (what the spec lacks).

    Returns
    -------
    Finding
        ``code="<check>.skipped"``, ``status="skip"`` (does not change the exit code).
    """
    return Finding(check, f"{check}.skipped", "skip", reason)


def _jsonable(v: Any) -> Any:
    """Numbers and strings as JSON accepts them: NaN/Inf become strings, tensors/arrays lists."""
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (str, int, bool)) or v is None:
        return v
    return str(v)


def _json_tree(v: Any) -> Any:
    """:func:`_jsonable` through nested dicts and lists."""
    if isinstance(v, dict):
        return {str(k): _json_tree(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_tree(x) for x in v]
    return _jsonable(v)


@dataclass
class Report:
    """The result of one command: findings, first divergence, timing.

    Attributes
    ----------
    command : str
        ``"check"``, ``"audio"``, ``"baseline"``, ``"lint"``...: the JSON's ``command``.
    findings : list of Finding
        In the order the families ran.
    first_divergence : dict or None
        ``{"reference_module", "candidate_module", "metric": {...}, "order"}`` set by the
        parity family, or ``None``.
    timing : dict of str to float
        Seconds per stage; the only non-deterministic part of the JSON.
    extras : dict
        Data for notebooks and plots (not serialised): e.g. the aligned-module table.
    alignment : dict or None
        Written under the JSON's top-level ``"alignment"`` key by ``check``: ``pairs`` (one row
        per aligned pair: ``order``, ``reference``, ``candidate``, their types, ``source``
        -- how it was matched: ``module_map``, ``weights``, ``parent`` or ``order`` --,
        ``shape``, ``rel_err``, ``status``) and ``unaligned_reference`` /
        ``unaligned_candidate`` (module names no source matched).

    Notes
    -----
    ``status`` is ``"fail"`` iff some finding has status ``fail``; ``exit_code`` is then 1
    (``EXIT_FAULT``), else 0. Exit 2 (``EXIT_INPUT``) never comes from a report: it is an
    :class:`~porting_kit.errors.InputError` raised before one exists.
    """

    command: str
    findings: list[Finding] = field(default_factory=list)
    first_divergence: dict[str, Any] | None = None
    timing: dict[str, float] = field(default_factory=dict)
    #: Extra data for notebooks and plots (not serialised): e.g. the aligned-module table.
    extras: dict[str, Any] = field(default_factory=dict, repr=False)
    #: The module alignment of layer parity (``check`` only; ``None`` when parity did not run):
    #: ``{"pairs": [...], "unaligned_reference": [...], "unaligned_candidate": [...]}``.
    alignment: dict[str, Any] | None = None
    #: Written under the JSON's top-level ``"quality"`` key when set (``quality`` command, or a
    #: ``check`` whose quality family ran): the metric table with the reference's spread,
    #: the prompts, what the metrics cannot see and the ASR / speaker hooks.
    quality: dict[str, Any] | None = None

    @property
    def status(self) -> str:
        """``"fail"`` iff some finding has status ``fail``, else ``"pass"`` (warn and skip pass)."""
        return "fail" if any(f.status == "fail" for f in self.findings) else "pass"

    @property
    def exit_code(self) -> int:
        """1 (``EXIT_FAULT``) when :attr:`status` is ``"fail"``, else 0 (``EXIT_OK``)."""
        return EXIT_FAULT if self.status == "fail" else EXIT_OK

    def codes(self, status: str | None = None) -> list[str]:
        """Codes of all findings (or only those with ``status``), in report order.

        Parameters
        ----------
        status : {"pass", "fail", "warn", "skip"}, optional
            Keep only findings with this status; ``None`` keeps all.

        Returns
        -------
        list of str
            May repeat a code that several findings carry.
        """
        return [f.code for f in self.findings if status is None or f.status == status]

    def by_code(self, code: str) -> list[Finding]:
        """The findings whose code is ``code``, in report order.

        Parameters
        ----------
        code : str
            A full code, e.g. ``"rope.theta_mismatch"`` (no prefix matching).

        Returns
        -------
        list of Finding
            Empty when none.
        """
        return [f for f in self.findings if f.code == code]

    def to_dict(self) -> dict[str, Any]:
        """The report as the ``porting-kit/report/1`` JSON object (DESIGN.md).

        Returns
        -------
        dict
            ``schema``, ``command``, ``status``, ``first_divergence`` (``None`` or its record,
            metric values JSON-safe), ``findings`` (:meth:`Finding.to_dict`), for ``check`` the
            ``alignment`` table (:attr:`alignment`, ``None`` without parity) and ``timing``
            (seconds, rounded to 1 us). :attr:`extras` is not serialised.
        """
        fd = None
        if self.first_divergence is not None:
            fd = {k: (_jsonable(v) if k != "metric" else {mk: _jsonable(mv) for mk, mv in v.items()})
                  for k, v in self.first_divergence.items()}
        out = {
            "schema": SCHEMA,
            "command": self.command,
            "status": self.status,
            "first_divergence": fd,
            "findings": [f.to_dict() for f in self.findings],
        }
        if self.command == "check":
            out["alignment"] = None if self.alignment is None else {
                k: [{rk: _jsonable(rv) for rk, rv in row.items()} if isinstance(row, dict) else _jsonable(row)
                    for row in rows] for k, rows in self.alignment.items()}
        if self.quality is not None:
            out["quality"] = _json_tree(self.quality)
        out["timing"] = {k: round(float(v), 6) for k, v in self.timing.items()}
        return out

    def _repr_html_(self) -> str:
        """The report as HTML (JupyterLab): status, findings table, first divergence highlighted,
        aligned modules. The text repr and the terminal rendering are unchanged.

        Returns
        -------
        str
            :func:`porting_kit.report.html.report_html`; every value escaped.
        """
        from porting_kit.report.html import report_html

        return report_html(self)

    def write_json(self, path: str | Path) -> None:
        """Write the report (schema ``porting-kit/report/1``) atomically to ``path``.

        Parameters
        ----------
        path : str or Path
            Destination (``"-"``: standard output); replaced atomically (:func:`porting_kit.fsutil.atomic_write_text`),
            UTF-8, two-space indent, trailing newline. NaN/Inf evidence values are written as
            strings.

        Raises
        ------
        OSError
            The folder cannot be written (the CLI checks the path first with
            :func:`porting_kit.fsutil.check_output_path`).
        """
        from porting_kit.fsutil import STDOUT, atomic_write_text

        text = json.dumps(self.to_dict(), indent=2) + "\n"
        if str(path) == STDOUT:
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        atomic_write_text(Path(path), text)
