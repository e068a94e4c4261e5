"""The report: findings (one shape for every family), JSON, terminal text, HTML, plots.

:mod:`~porting_kit.report.findings` (the types and the JSON schema),
:mod:`~porting_kit.report.render` (Rich text), :mod:`~porting_kit.report.html`
(what JupyterLab shows: ``_repr_html_``, audio players), :mod:`~porting_kit.report.plots`
(matplotlib, lazily imported; never selects a backend). Nothing here decides a verdict.
"""
