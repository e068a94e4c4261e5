"""Rich rendering of a :class:`~porting_kit.report.findings.Report` for the terminal."""

from __future__ import annotations

from rich.console import Console
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
