"""HTML rendering of reports for JupyterLab (``_repr_html_``); no verdict is decided here.

:class:`~porting_kit.report.findings.Report` and
:class:`~porting_kit.report.findings.Finding` call :func:`report_html` and
:func:`finding_html` from their ``_repr_html_``, so a notebook cell that ends
with a report shows a table, while ``print(report)`` and the terminal keep the
text forms. Every value taken from a report is passed through
:func:`html.escape`; the output is a plain fragment with inline styles (no
script, no external stylesheet), readable in JupyterLab's light and dark themes.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

#: Background colours of the status cells (pale, readable in both themes' text colour).
_STATUS_BG = {"pass": "#d4f4dd", "fail": "#ffd6d6", "warn": "#fff1c2", "skip": "#e8e8e8"}
_CELL = "padding:2px 8px;text-align:left;vertical-align:top;border-bottom:1px solid #ccc"
_TABLE = "border-collapse:collapse;font-size:13px;margin:4px 0"
#: Highlight of the first divergence row of the alignment table.
_FIRST_DIV = "background:#ffb3b3;font-weight:bold"
_DIFFERS = "background:#fff0f0"


def _esc(value: Any) -> str:
    """``value`` as escaped text; floats with 4 significant digits."""
    return html.escape(_fmt(value))


def _fmt(value: Any) -> str:
    """Short text for an evidence or metric value (floats ``.4g``, lists of floats likewise)."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return format(value, ".4g") if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_fmt(v) for v in value[:12])
        return f"[{inner}{', ...' if len(value) > 12 else ''}]"
    return str(value)


def _status_cell(status: str) -> str:
    """A ``<td>`` with the status in capitals on its colour."""
    bg = _STATUS_BG.get(status, "#ffffff")
    return (f'<td style="{_CELL};background:{bg};color:#000;font-weight:bold">'
            f"{html.escape(status.upper())}</td>")


def _where_text(finding) -> str:
    """``ref: A`` / ``cand: B`` / ``samples s..e`` lines of a finding's ``where``, escaped."""
    w = finding.where
    parts = []
    if w.reference:
        parts.append(f"ref: <code>{html.escape(w.reference)}</code>")
    if w.candidate:
        parts.append(f"cand: <code>{html.escape(w.candidate)}</code>")
    if w.samples:
        parts.append(f"samples {_esc(w.samples[0])}..{_esc(w.samples[1])}")
    return "<br>".join(parts)


def evidence_html(evidence: dict[str, Any]) -> str:
    """A two-column key/value table of a finding's evidence.

    Parameters
    ----------
    evidence : dict
        Flat numbers and strings (:attr:`Finding.evidence`).

    Returns
    -------
    str
        An HTML ``<table>``; empty string when ``evidence`` is empty.
    """
    if not evidence:
        return ""
    rows = "".join(f'<tr><td style="{_CELL}"><code>{html.escape(str(k))}</code></td>'
                   f'<td style="{_CELL}">{_esc(v)}</td></tr>' for k, v in evidence.items())
    return f'<table style="{_TABLE}">{rows}</table>'


def findings_html(findings, *, collapse_evidence: bool = True) -> str:
    """The findings as one table: status, code, message (with the hint and evidence), where.

    Parameters
    ----------
    findings : list of Finding
        In report order.
    collapse_evidence : bool, default True
        Put each finding's evidence in a collapsed ``<details>``; False shows it open.

    Returns
    -------
    str
        An HTML ``<table>``; the hint is shown for fail / warn findings, the evidence in a
        collapsed ``<details>`` under the message.
    """
    head = "".join(f'<th style="{_CELL}">{h}</th>' for h in ("status", "code", "message", "where"))
    body = []
    for f in findings:
        msg = html.escape(f.message)
        if f.hint and f.status in ("fail", "warn"):
            msg += f"<br><i>fix:</i> {html.escape(f.hint)}"
        if f.evidence and collapse_evidence:
            msg += (f"<details><summary>evidence ({len(f.evidence)})</summary>"
                    f"{evidence_html(f.evidence)}</details>")
        elif f.evidence:
            msg += evidence_html(f.evidence)
        body.append(f"<tr>{_status_cell(f.status)}"
                    f'<td style="{_CELL}"><code>{html.escape(f.code)}</code></td>'
                    f'<td style="{_CELL}">{msg}</td>'
                    f'<td style="{_CELL}">{_where_text(f)}</td></tr>')
    return f'<table style="{_TABLE}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def first_divergence_html(first_divergence: dict[str, Any] | None) -> str:
    """The first divergence (reference ~ candidate module and its metric), highlighted.

    Parameters
    ----------
    first_divergence : dict or None
        :attr:`Report.first_divergence`: ``reference_module``, ``candidate_module``,
        ``metric`` (flat numbers), ``order``.

    Returns
    -------
    str
        A highlighted ``<div>``; empty string when there is none.
    """
    if not first_divergence:
        return ""
    fd = first_divergence
    metric = fd.get("metric") or {}
    keys = [k for k in ("rel_err", "max_abs", "max_rel", "cosine", "mismatched", "numel", "tolerance")
            if k in metric]
    figures = ", ".join(f"{html.escape(k)} {_esc(metric[k])}" for k in keys)
    return (f'<div style="{_FIRST_DIV};padding:4px 8px;margin:4px 0;color:#000">'
            f"first divergence: reference <code>{_esc(fd.get('reference_module'))}</code> ~ "
            f"candidate <code>{_esc(fd.get('candidate_module'))}</code> "
            f"(order {_esc(fd.get('order'))})"
            f'<div style="font-weight:normal">{figures}</div></div>')


def alignment_html(rows: list[dict[str, Any]], first_divergence: dict[str, Any] | None = None,
                   limit: int = 80) -> str:
    """The aligned-module table, the first divergence's row highlighted.

    Parameters
    ----------
    rows : list of dict
        Rows of ``report.extras["alignment"]`` (``order``, ``reference``, ``reference_type``,
        ``candidate``, ``candidate_type``, ``source``, ``rel_err`` or None, ``status``).
    first_divergence : dict, optional
        :attr:`Report.first_divergence`; the row whose reference module is its
        ``reference_module`` is highlighted, rows that differ are tinted.
    limit : int, default 80
        Rows shown before a ``... N more rows`` line.

    Returns
    -------
    str
        An HTML ``<table>`` (empty string when ``rows`` is empty).
    """
    if not rows:
        return ""
    fd_ref = (first_divergence or {}).get("reference_module")
    cols = ("#", "reference", "candidate", "aligned by", "est. rel. error", "status")
    head = "".join(f'<th style="{_CELL}">{h}</th>' for h in cols)
    body = []
    for r in rows[:limit]:
        style = _FIRST_DIV if fd_ref is not None and r.get("reference") == fd_ref else (
            _DIFFERS if r.get("status") == "differs" else "")
        rel = r.get("rel_err")
        mark = " &larr; first divergence" if style == _FIRST_DIV else ""
        cells = (r.get("order"),
                 f"<code>{_esc(r.get('reference'))}</code> ({_esc(r.get('reference_type'))})",
                 f"<code>{_esc(r.get('candidate'))}</code> ({_esc(r.get('candidate_type'))})",
                 _esc(r.get("source")),
                 "" if rel is None else html.escape(format(rel, ".2e")),
                 _esc(r.get("status")) + mark)
        tds = "".join(f'<td style="{_CELL}">{c if i else _esc(c)}</td>' for i, c in enumerate(cells))
        body.append(f'<tr style="{style}">{tds}</tr>')
    more = (f'<div style="font-size:12px">... {len(rows) - limit} more rows</div>'
            if len(rows) > limit else "")
    return (f'<table style="{_TABLE}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>{more}')


def report_html(report) -> str:
    """A report as HTML: status, findings table, first divergence, the aligned modules.

    Parameters
    ----------
    report : Report
        What to show; not modified.

    Returns
    -------
    str
        An HTML fragment: a status line (``PASS`` / ``FAIL`` and the counts per status), the
        findings table, the first divergence highlighted when there is one, and the aligned-module
        table (collapsed) when the parity family ran.
    """
    counts = {s: sum(f.status == s for f in report.findings) for s in ("fail", "warn", "pass", "skip")}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    status = report.status
    title = (f'<div style="margin:4px 0"><span style="background:{_STATUS_BG[status]};color:#000;'
             f'font-weight:bold;padding:2px 8px">{html.escape(status.upper())}</span> '
             f"porting-kit {html.escape(report.command)}: {html.escape(summary or 'no findings')}</div>")
    parts = [title]
    if getattr(report, "quality", None) is not None:
        parts.append(quality_table_html(report.quality))
    parts += [findings_html(report.findings), first_divergence_html(report.first_divergence)]
    rows = report.extras.get("alignment") if isinstance(report.extras, dict) else None
    if rows:
        parts.append(f"<details><summary>aligned modules ({len(rows)})</summary>"
                     f"{alignment_html(rows, report.first_divergence)}</details>")
    return f'<div class="porting-kit-report">{"".join(parts)}</div>'


def finding_html(finding) -> str:
    """One finding as HTML: its row of the findings table and its evidence shown open.

    Parameters
    ----------
    finding : Finding

    Returns
    -------
    str
    """
    return f'<div class="porting-kit-finding">{findings_html([finding], collapse_evidence=False)}</div>'


@dataclass
class AudioPlayers:
    """Labelled audio players side by side; a notebook cell ending with one shows them.

    Attributes
    ----------
    clips : list of (str, np.ndarray, int)
        ``(label, waveform [shape=(samples,) or (channels, samples)], sample rate in Hz)``.
    """

    clips: list[tuple[str, Any, int]] = field(default_factory=list)

    def _repr_html_(self) -> str:
        """One row per clip: its label, length in seconds and an ``IPython.display.Audio`` player."""
        from IPython.display import Audio

        rows = []
        for label, wave, rate in self.clips:
            n = wave.shape[-1] if wave is not None else 0
            loud = bool(n) and float(abs(wave).max()) > 0  # all-zero clips cannot be normalised
            player = (Audio(wave, rate=rate, normalize=loud)._repr_html_() if n else "(no samples)")
            seconds = f"{n / rate:.2f} s at {rate} Hz" if n else ""
            rows.append(f'<tr><td style="{_CELL}"><b>{html.escape(label)}</b><br>'
                        f"{html.escape(seconds)}</td><td style=\"{_CELL}\">{player}</td></tr>")
        return f'<table style="{_TABLE}">{"".join(rows)}</table>'


def audio_players(clips: dict[str, tuple[Any, int]]) -> AudioPlayers:
    """Audio players for a reference and a candidate (or any labelled clips).

    Parameters
    ----------
    clips : dict
        label -> ``(waveform, sample_rate)``: a tensor or array [shape=(samples,) or
        (channels, samples)], and Hz. Non-finite samples are played as 0 (the check reports
        them); tensors are copied to the host.

    Returns
    -------
    AudioPlayers
        Displays as one player per clip (``IPython.display.Audio``, which normalises each
        clip's peak to full scale: compare content and timing by ear, loudness with the checks).
    """
    import numpy as np

    out = AudioPlayers()
    for label, (wave, rate) in clips.items():
        if wave is not None and hasattr(wave, "detach"):
            wave = wave.detach().float().cpu().numpy()
        if wave is not None:
            wave = np.nan_to_num(np.asarray(wave, dtype=np.float32), nan=0.0, posinf=0.0, neginf=0.0)
        out.clips.append((label, wave, int(rate)))
    return out


def report_audio_players(report) -> AudioPlayers:
    """Players for the reference decode and the candidate's served audio of an audio check.

    Parameters
    ----------
    report : Report
        With ``extras["audio_pair"]`` (the ``hop`` / ``channel`` / ``dtype`` families ran on a
        spec with audio names).

    Returns
    -------
    AudioPlayers
        ``reference`` and ``candidate (served)`` at their own sample rates (Hz); no clips when the
        report has no audio pair.
    """
    pair = report.extras.get("audio_pair") if isinstance(report.extras, dict) else None
    if pair is None:
        return AudioPlayers()
    return audio_players({"reference (HF codec decode)": (pair.reference, pair.sr_reference),
                          "candidate (what the port serves)": (pair.candidate, pair.sr_candidate)})


def checks_summary_html(report) -> str:
    """One row per check family (or validate tier): counts by status, and why it skipped.

    Parameters
    ----------
    report : Report
        Any report; findings are grouped by their ``check`` prefix, in report order.

    Returns
    -------
    str
        An HTML ``<table>``: family, status (``fail`` over ``warn`` over ``pass`` over ``skip``),
        counts, and the message of each ``skip`` finding (the reason it did not run).
    """
    cols = ("family", "status", "findings", "skipped because")
    head = "".join(f'<th style="{_CELL}">{h}</th>' for h in cols)
    body = []
    for check in dict.fromkeys(f.check for f in report.findings):
        group = [f for f in report.findings if f.check == check]
        statuses = {f.status for f in group}
        worst = next(s for s in ("fail", "warn", "pass", "skip") if s in statuses)
        counts = ", ".join(f"{sum(f.status == s for f in group)} {s}"
                           for s in ("fail", "warn", "pass", "skip") if s in statuses)
        reasons = "<br>".join(html.escape(f.message) for f in group if f.status == "skip")
        body.append(f'<tr><td style="{_CELL}"><code>{html.escape(check)}</code></td>'
                    f"{_status_cell(worst)}<td style=\"{_CELL}\">{html.escape(counts)}</td>"
                    f'<td style="{_CELL}">{reasons}</td></tr>')
    return f'<table style="{_TABLE}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def quality_table_html(quality: dict[str, Any]) -> str:
    """The quality metric table as HTML: the reference's spread, the candidate, the bar, the verdict.

    Parameters
    ----------
    quality : dict
        :attr:`~porting_kit.report.findings.Report.quality`
        (:func:`porting_kit.checks.quality.summary`).

    Returns
    -------
    str
        A table (one row per metric) and a line saying what the metrics cannot see and the hooks.
    """
    head = "".join(f'<th style="{_CELL}">{h}</th>' for h in
                   ("metric", "unit", "reference spread", "candidate", "bar", "verdict", "worst prompt", "note"))
    rows = []
    for r in quality["metrics"]:
        cells = [_esc(r["metric"]), _esc(r["unit"]), _fmt(r["reference_spread"]), _fmt(r["candidate"]),
                 _fmt(r["threshold"])]
        rows.append("<tr>" + "".join(f'<td style="{_CELL}">{c}</td>' for c in cells)
                    + _status_cell(r["verdict"])
                    + f'<td style="{_CELL}">{_esc(r["worst_prompt"] or "")}</td>'
                    + f'<td style="{_CELL}">{_esc(r["note"] or "")}</td></tr>')
    limits = html.escape("; ".join(quality["cannot_see"]))
    return (f'<table style="{_TABLE}"><tr>{head}</tr>{"".join(rows)}</table>'
            f'<div style="margin:4px 0;font-size:90%">bar = factor x reference spread + floor. '
            f"Cannot see: {limits}. Hooks: {html.escape(quality['hooks'])}</div>")


def transcripts_html(report, count: int = 3) -> str:
    """The worst prompts of the ASR round trip with both transcripts (HTML).

    Parameters
    ----------
    report : Report
        A ``quality`` report whose ``wer`` metric ran (``extras["quality"]``).
    count : int
        Prompts shown, worst first (candidate WER minus the reference's worst take).

    Returns
    -------
    str
        A table: prompt, its text, the reference's worst transcript and WER, the candidate's worst
        transcript and its mean WER; a one-line note when ``wer`` did not run.
    """
    m = report.extras.get("quality") if isinstance(report.extras, dict) else None
    res = m.metrics.get("wer") if m is not None else None
    if res is None or res.skipped:
        why = res.skipped if res is not None else "the wer metric was not asked for"
        return f"<div>ASR round trip not run: {html.escape(why)}</div>"
    order = sorted(res.per_prompt, key=lambda k: res.per_prompt[k]["candidate"] - res.per_prompt[k]["reference_spread"],
                   reverse=True)[:count]
    head = "".join(f'<th style="{_CELL}">{h}</th>' for h in
                   ("prompt", "text", "reference (worst take)", "WER", "candidate (worst take)", "mean WER"))
    rows = "".join(
        "<tr>" + "".join(f'<td style="{_CELL}">{c}</td>' for c in (
            _esc(pid), _esc(res.per_prompt[pid]["text"]), _esc(res.per_prompt[pid]["reference_transcript"]),
            _fmt(res.per_prompt[pid]["reference_spread"]), _esc(res.per_prompt[pid]["candidate_transcript"]),
            _fmt(res.per_prompt[pid]["candidate"]))) + "</tr>" for pid in order)
    return f'<table style="{_TABLE}"><tr>{head}</tr>{rows}</table>'
