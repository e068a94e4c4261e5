"""End-to-end quality parity (``porting-kit quality REF_DIR CAND_DIR``): probes, then verdicts.

A thin composer like :mod:`porting_kit.audio_files`: read both take folders
(:func:`porting_kit.probes.quality.read_take_set`), measure
(:func:`porting_kit.probes.quality.measure_quality`), judge
(:func:`porting_kit.checks.quality.findings`), report. The same call serves the
CLI, walkthrough 07 and the JSON report (command ``quality``); the ``quality``
family of ``porting-kit check`` uses the same probe and verdicts on takes a spec
synthesises.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from porting_kit.errors import InputError

__all__ = ["compare_quality", "quality_report"]


def quality_report(ref: Any, cand: Any, *, metrics: Sequence[str] | None = None,
                   asr: Callable[[Any, int], str] | str | None = None,
                   speaker: Callable[[Any, int], Any] | str | None = None) -> Any:
    """Measure and judge two :class:`~porting_kit.probes.quality.TakeSet` objects.

    Parameters
    ----------
    ref, cand : TakeSet
        Same prompt ids, N takes each (same seeds).
    metrics : sequence of str, optional
        Subset of :data:`porting_kit.probes.quality.METRICS` (default all).
    asr, speaker : callable or ``"module:function"``, optional
        The user's recogniser ``(waveform, sample_rate) -> str`` / speaker encoder
        ``(waveform, sample_rate) -> vector``; default pocketsphinx / resemblyzer.

    Returns
    -------
    Report
        Command ``quality``; ``quality.*`` findings; ``report.quality`` is the JSON's ``quality``
        object (metric table with the reference's spread, prompts, limits, hooks) and
        ``report.extras["quality"]`` the :class:`~porting_kit.probes.quality.QualityMeasurement`.
    """
    from porting_kit.checks import quality as verdicts
    from porting_kit.probes.quality import METRICS, load_callable, measure_quality
    from porting_kit.report.findings import Report

    if isinstance(asr, str):
        asr = load_callable(asr, "--asr")
    if isinstance(speaker, str):
        speaker = load_callable(speaker, "--speaker")
    t0 = time.perf_counter()
    m = measure_quality(ref, cand, metrics=metrics or METRICS, asr=asr, speaker=speaker)
    report = Report(command="quality", findings=verdicts.findings(m))
    report.quality = verdicts.summary(m)
    report.extras["quality"] = m
    report.timing = {"measure": time.perf_counter() - t0}
    return report


def compare_quality(ref_dir: str | Path, cand_dir: str | Path, *, metrics: Sequence[str] | str | None = None,
                    chunk_samples: int | None = None, asr: Callable[[Any, int], str] | str | None = None,
                    speaker: Callable[[Any, int], Any] | str | None = None) -> Any:
    """Compare two folders of takes (``<prompt_id>/take<k>.wav`` + ``prompts.json``).

    Parameters
    ----------
    ref_dir, cand_dir : str or Path
        The layout of :mod:`porting_kit.probes.quality`; ``cand_dir`` may omit ``prompts.json``.
    metrics : sequence of str or comma-separated str, optional
        Default: every metric (those whose package is absent skip with the install command).
    chunk_samples : int, optional
        The candidate's streaming chunk in samples (wins over its ``prompts.json``); places the seams.
    asr, speaker : callable or ``"module:function"``, optional
        See :func:`quality_report`.

    Returns
    -------
    Report
        As :func:`quality_report`; exit code 1 when a ``quality.*`` finding fails.

    Raises
    ------
    InputError
        A folder, sidecar or clip the tool cannot use; a reference with fewer takes per
        prompt than the candidate... (one line, exit 2).
    """
    from porting_kit.probes.quality import read_take_set

    t0 = time.perf_counter()
    if isinstance(metrics, str):
        metrics = [m.strip() for m in metrics.split(",") if m.strip()]
        if not metrics:
            raise InputError("--metrics: no metric given")
    if chunk_samples is not None and chunk_samples < 2:
        raise InputError(f"--chunk-samples {chunk_samples}: give a chunk of 2 samples or more")
    ref = read_take_set(ref_dir)
    cand = read_take_set(cand_dir, prompts=ref.prompts)
    if chunk_samples is not None:
        cand.chunk_samples = chunk_samples
    t_read = time.perf_counter() - t0
    report = quality_report(ref, cand, metrics=metrics, asr=asr, speaker=speaker)
    report.timing = {"read": t_read, **report.timing, "total": time.perf_counter() - t0}
    return report

