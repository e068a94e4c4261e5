"""Rich rendering of a :class:`~porting_kit.report.findings.Report` for the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from porting_kit.report.findings import Report

_STYLE = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"}


def _where(f) -> str:
    parts = []
    if f.where.reference:
        parts.append(f"ref: {f.where.reference}")
    if f.where.candidate:
        parts.append(f"cand: {f.where.candidate}")
    if f.where.samples:
        parts.append(f"samples {f.where.samples[0]}..{f.where.samples[1]}")
    return "\n".join(parts)


def print_report(report: Report, console: Console | None = None, *, title: str | None = None) -> None:
    """Print the findings table, the hints, the first divergence and the overall status.

    Parameters
    ----------
    report : Report
        What to show; not modified.
    console : rich.console.Console, optional
        Where to print; default a new ``Console()`` on stdout.
    title : str, optional
        Table title; default ``"porting-kit <command>"``.

    Notes
    -----
    Hints are printed for ``fail`` / ``warn`` findings only; ``where`` shows
    ``ref:`` / ``cand:`` module names and a ``samples start..end`` range when set.
    """
    console = console or Console()
    if report.quality is not None:
        print_quality_table(report.quality, console)
    table = Table(title=title or f"porting-kit {report.command}", show_lines=False)
    table.add_column("status")
    table.add_column("code")
    table.add_column("message", overflow="fold")
    table.add_column("where", overflow="fold")
    for f in report.findings:
        table.add_row(f"[{_STYLE[f.status]}]{f.status.upper()}[/]", f.code, f.message, _where(f))
    console.print(table)
    for f in report.findings:
        if f.status in ("fail", "warn") and f.hint:
            console.print(f"[bold]{f.code}[/] hint: {f.hint}")
    if report.first_divergence:
        fd = report.first_divergence
        console.print(f"first divergence: reference [cyan]{fd.get('reference_module')}[/] ~ "
                      f"candidate [cyan]{fd.get('candidate_module')}[/] (order {fd.get('order')})")
    colour = "green" if report.status == "pass" else "bold red"
    console.print(f"[{colour}]{report.status.upper()}[/]")


def _num(v) -> str:
    return "-" if v is None else f"{v:.4g}"


def print_quality_table(quality: dict, console: Console) -> None:
    """Print the quality metric table: the reference's spread, the candidate, the bar, the verdict.

    Parameters
    ----------
    quality : dict
        :attr:`Report.quality` (:func:`porting_kit.checks.quality.summary`).
    console : rich.console.Console
        Where to print.
    """
    table = Table(title=f"quality: {len(quality['prompts'])} prompts x {quality['takes']} takes "
                        f"(reference {quality['sample_rates']['reference']} Hz, "
                        f"candidate {quality['sample_rates']['candidate']} Hz)")
    for col in ("metric (unit)", "reference spread", "candidate", "bar", "verdict", "worst prompt"):
        table.add_column(col, overflow="fold")
    for row in quality["metrics"]:
        v = row["verdict"]
        table.add_row(escape(f"{row['metric']} ({row['unit']})"), _num(row["reference_spread"]),
                      _num(row["candidate"]), _num(row["threshold"]), f"[{_STYLE[v]}]{v.upper()}[/]",
                      escape(row["worst_prompt"] or ""))
    console.print(table)
    for row in quality["metrics"]:
        if row["note"]:
            console.print(f"{row['metric']}: {row['note']}", markup=False, highlight=False)
    console.print("bar = factor x reference spread + floor; cannot see: " + "; ".join(quality["cannot_see"]),
                  markup=False, highlight=False)
    console.print("hooks: " + quality["hooks"], markup=False, highlight=False)
