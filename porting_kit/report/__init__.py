"""The report: findings (one shape for every family), JSON, terminal text, plots.

:mod:`~porting_kit.report.findings` (the types and the JSON schema),
:mod:`~porting_kit.report.render` (Rich text), :mod:`~porting_kit.report.plots`
(matplotlib, lazily imported). Nothing here decides a verdict.
"""
