"""Rich rendering of a :class:`~porting_kit.report.findings.Report` for the terminal and for logs.

Two layouts of the same findings:

* a table, on a terminal wide enough that no code and no module name has to be cut or wrapped
  (the code and where columns never fold; only the message wraps, at word boundaries);
* one finding per block (``STATUS code`` on its own line, then the message, where and hint
  lines), on a narrow terminal and whenever the output is not a terminal (CI, ``| tee``, a log
  file). Blocks are printed with ``soft_wrap``: Rich inserts no line breaks, so a code or a
  module name is never truncated or broken however narrow the console says it is.

A finding with no module and no sample range (a pass that covers everything its family
checked, a skip) shows ``where`` as ``(everything checked)`` or ``—``, never a blank cell.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from porting_kit.report.findings import Report

_STYLE = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"}
#: Where a finding names no module and no samples: a pass covers everything its family compared.
_WHERE_ALL = "(everything checked)"
_WHERE_NONE = "—"
#: The message column must keep at least this many cells for the table layout to be used.
_MIN_MESSAGE = 24
#: status column + borders and padding of a four-column Rich table.
_TABLE_OVERHEAD = 6 + 13


def where_parts(f) -> list[str]:
    """The ``where`` of a finding as ``["ref: ...", "cand: ...", "samples a..b"]`` (empty when unset)."""
    parts = []
    if f.where.reference:
        parts.append(f"ref: {f.where.reference}")
    if f.where.candidate:
        parts.append(f"cand: {f.where.candidate}")
    if f.where.samples:
        parts.append(f"samples {f.where.samples[0]}..{f.where.samples[1]}")
    return parts


def where_text(f, sep: str = "\n") -> str:
    """``where`` as text; a pass with no location reads ``(everything checked)``, others ``—``."""
    parts = where_parts(f)
    if parts:
        return sep.join(parts)
    return _WHERE_ALL if f.status == "pass" else _WHERE_NONE


def table_fits(report: Report, width: int) -> bool:
    """Whether a table of ``width`` cells shows every code and where line whole, with room for messages."""
    code_w = max((len(f.code) for f in report.findings), default=4)
    where_w = max((len(line) for f in report.findings for line in where_text(f).split("\n")), default=5)
    return _TABLE_OVERHEAD + code_w + where_w + _MIN_MESSAGE <= width


def _print_table(report: Report, console: Console, title: str) -> None:
    table = Table(title=title, show_lines=False)
    table.add_column("status", no_wrap=True)
    table.add_column("code", no_wrap=True, overflow="ignore")
    table.add_column("message", overflow="fold", ratio=1)
    table.add_column("where", no_wrap=True, overflow="ignore")
    for f in report.findings:
        table.add_row(f"[{_STYLE[f.status]}]{f.status.upper()}[/]", escape(f.code), escape(f.message),
                      escape(where_text(f)))
    console.print(table)
    for f in report.findings:
        if f.status in ("fail", "warn") and f.hint:
            console.print(f"[bold]{escape(f.code)}[/] hint: {escape(f.hint)}", soft_wrap=True)


def _print_blocks(report: Report, console: Console, title: str) -> None:
    console.print(f"[bold]{escape(title)}[/]", soft_wrap=True)
    for f in report.findings:
        console.print(f"[{_STYLE[f.status]}]{f.status.upper()}[/] [bold]{escape(f.code)}[/]", soft_wrap=True)
        console.print(f"  {escape(f.message)}", soft_wrap=True, highlight=False)
        console.print(f"  where: {escape(where_text(f, sep='; '))}", soft_wrap=True, highlight=False)
        if f.status in ("fail", "warn") and f.hint:
            console.print(f"  hint: {escape(f.hint)}", soft_wrap=True, highlight=False)


def print_report(report: Report, console: Console | None = None, *, title: str | None = None) -> None:
    """Print the findings, the hints, the first divergence and the overall status.

    Parameters
    ----------
    report : Report
        What to show; not modified.
    console : rich.console.Console, optional
        Where to print; default a new ``Console()`` on stdout.
    title : str, optional
        Title; default ``"porting-kit <command>"``.

    Notes
    -----
    A table on a terminal wide enough for every code and module name (:func:`table_fits`),
    one block per finding otherwise (and always when the console is not a terminal). Hints
    are printed for ``fail`` / ``warn`` findings only; ``where`` shows ``ref:`` / ``cand:``
    module names and a ``samples start..end`` range when set.
    """
    console = console or Console()
    if report.quality is not None:
        print_quality_table(report.quality, console)
    title = title or f"porting-kit {report.command}"
    if console.is_terminal and table_fits(report, console.width):
        _print_table(report, console, title)
    else:
        _print_blocks(report, console, title)
    if report.first_divergence:
        fd = report.first_divergence
        console.print(f"first divergence: reference [cyan]{escape(str(fd.get('reference_module')))}[/] ~ "
                      f"candidate [cyan]{escape(str(fd.get('candidate_module')))}[/] (order {fd.get('order')})",
                      soft_wrap=True)
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
    title = (f"quality: {len(quality['prompts'])} prompts x {quality['takes']} takes "
             f"(reference {quality['sample_rates']['reference']} Hz, "
             f"candidate {quality['sample_rates']['candidate']} Hz)")
    cols = ("metric (unit)", "reference spread", "candidate", "bar", "verdict", "worst prompt")
    rows = [(f"{row['metric']} ({row['unit']})", _num(row["reference_spread"]), _num(row["candidate"]),
             _num(row["threshold"]), row["verdict"], row["worst_prompt"] or "") for row in quality["metrics"]]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    if console.is_terminal and sum(widths) + 3 * len(cols) + 1 <= console.width:
        table = Table(title=title)
        for col in cols:  # no cell is ever cut or folded: a number split over two lines misreads
            table.add_column(col, no_wrap=True, overflow="ignore")
        for r in rows:
            table.add_row(escape(r[0]), r[1], r[2], r[3], f"[{_STYLE[r[4]]}]{r[4].upper()}[/]", escape(r[5]))
        console.print(table)
    else:  # a log, a pipe or a narrow terminal: one metric a line, every figure whole
        console.print(title, soft_wrap=True, markup=False, highlight=False)
        for r in rows:
            console.print(f"[{_STYLE[r[4]]}]{r[4].upper()}[/] {escape(r[0])}: reference spread {r[1]}, "
                          f"candidate {r[2]}, bar {r[3]}" + (f", worst prompt {escape(r[5])}" if r[5] else ""),
                          soft_wrap=True, highlight=False)
    for row in quality["metrics"]:
        if row["note"]:
            console.print(f"{row['metric']}: {row['note']}", markup=False, highlight=False, soft_wrap=True)
    console.print("bar = factor x reference spread + floor; cannot see: " + "; ".join(quality["cannot_see"]),
                  markup=False, highlight=False, soft_wrap=True)
    console.print("hooks: " + quality["hooks"], markup=False, highlight=False, soft_wrap=True)
