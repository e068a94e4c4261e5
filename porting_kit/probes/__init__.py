"""Probes: measure, never judge.

Each module returns facts (numbers, captured tensors' summaries, fitted
parameters, aligned pairs); the check families in :mod:`porting_kit.checks` turn
facts into findings and fault codes. A probe never builds a
:class:`~porting_kit.report.findings.Finding`.
"""
