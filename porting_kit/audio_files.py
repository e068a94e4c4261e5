"""Audio-file comparison (``porting-kit audio REF CAND``): probes, then the hop/channel verdicts.

A thin composer over one direction of the data flow: read both files
(:func:`porting_kit.probes.waveform.read_audio`), measure
(:func:`porting_kit.probes.waveform.analyse_waveforms`), judge
(:func:`porting_kit.checks.channel.waveform_findings`,
:func:`porting_kit.checks.hop.waveform_findings`), report. No verdict is
decided here; the baseline comparison (:mod:`porting_kit.baseline`) uses
:func:`waveform_findings` the same way.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from porting_kit.checks import channel, hop
from porting_kit.checks.hop import FILE_MIN_SNR_DB
from porting_kit.probes.waveform import WaveformComparison, analyse_waveforms, read_audio
from porting_kit.report.findings import Finding, Report, ok

__all__ = ["FILE_MIN_SNR_DB", "compare_files", "compare_waveforms", "waveform_findings"]

#: The figures a clean ``<prefix>.ok`` of a file comparison shows.
_OK_KEYS = ("reference_samples", "candidate_samples", "reference_sample_rate", "snr_db",
            "si_sdr_db", "log_mel_distance_db", "lag_samples")


def waveform_findings(cmp: WaveformComparison, names: tuple[str, str] = ("reference", "candidate"), *,
                      min_snr_db: float = FILE_MIN_SNR_DB) -> dict[str, list[Finding]]:
    """The ``hop`` and ``channel`` faults of one waveform comparison.

    Parameters
    ----------
    cmp : WaveformComparison
        From :func:`porting_kit.probes.waveform.analyse_waveforms`.
    names : (str, str)
        How the reference and the candidate are named in messages.
    min_snr_db : float
        Content tolerance of the aligned overlap in dB SNR (``hop.unexplained``
        below it when nothing else explains the difference).

    Returns
    -------
    dict
        ``{"hop": [...], "channel": [...]}``, each list empty when that family found nothing.
    """
    found_channel = channel.waveform_findings(cmp, names)
    found_hop = hop.waveform_findings(cmp, names, min_snr_db=min_snr_db, other_faults=bool(found_channel))
    return {"hop": found_hop, "channel": found_channel}


def compare_waveforms(ref: Any, cand: Any, sr_ref: int, sr_cand: int, hop_length: int | None = None, *,
                      names: tuple[str, str] = ("reference", "candidate"),
                      min_snr_db: float = FILE_MIN_SNR_DB, **kwargs: Any) -> list[Finding]:
    """The ``hop.*`` then ``channel.*`` faults of two waveforms, empty when they match.

    Parameters
    ----------
    ref, cand : np.ndarray or torch.Tensor [shape=(samples,) or (channels, samples)]
    sr_ref, sr_cand : int
        Sample rates in Hz.
    hop_length : int, optional
        Codec hop in samples.
    names : (str, str)
        How the two sides are named in messages.
    min_snr_db : float
        Content tolerance in dB SNR.
    **kwargs
        ``frames``, ``served``: as in :func:`porting_kit.probes.waveform.analyse_waveforms`.

    Returns
    -------
    list of Finding

    Raises
    ------
    ValueError
        The reference is not a waveform shape.
    """
    cmp = analyse_waveforms(ref, cand, sr_ref, sr_cand, hop_length=hop_length, **kwargs)
    by_family = waveform_findings(cmp, names, min_snr_db=min_snr_db)
    return by_family["hop"] + by_family["channel"]


def compare_files(ref_path: str | Path, cand_path: str | Path, *, hop_length: int | None = None,
                  sample_rate: int | None = None, plot: str | Path | None = None,
                  min_snr_db: float = FILE_MIN_SNR_DB, channels: int = 1) -> Report:
    """Compare two audio files: length, sample rate, channels, lag, SNR, log-mel distance.

    Parameters
    ----------
    ref_path, cand_path : str or Path
        Reference and candidate audio (any format soundfile reads: WAV, FLAC,
        OGG), read as ``[shape=(channels, samples)]``.
    hop_length : int, optional
        Codec hop in samples; lengths are also reported in hops.
    sample_rate : int, optional
        Expected sample rate in Hz; a file at another rate is
        ``hop.sample_rate_mismatch``.
    plot : str or Path, optional
        Write a PNG with the waveforms overlaid and the spectrogram difference.
    min_snr_db : float
        Content tolerance of the aligned overlap in dB SNR (default 40 dB).
    channels : int, default 1
        Channels the candidate should serve (``--channels``): with 2, a clean stereo pair
        passes channel by channel, a mono candidate of a stereo reference is
        ``channel.wrong_downmix`` and a stereo file whose rows hold interleaved samples is
        ``channel.axis_mismatch``; 1 keeps the mono comparison (a mono candidate of a
        stereo reference is compared with its channel mean).

    Returns
    -------
    Report
        Command ``audio``; families ``hop`` and ``channel`` (one ``<prefix>.ok``
        each when nothing was found). ``report.extras["comparison"]`` holds the
        :class:`~porting_kit.probes.waveform.WaveformComparison`. Exit code 1 on
        a fault (a sample-rate mismatch between two readable files, NaN samples...).

    Raises
    ------
    InputError
        Missing, unreadable, corrupt or empty file (exit 2).
    """
    t0 = time.perf_counter()
    ref, sr_r = read_audio(ref_path)
    cand, sr_c = read_audio(cand_path)
    t_read = time.perf_counter() - t0
    cmp = analyse_waveforms(ref, cand, sr_r, sr_c, hop_length=hop_length, served_channels=channels)
    by_family = waveform_findings(cmp, (Path(ref_path).name, Path(cand_path).name), min_snr_db=min_snr_db)
    by_family["hop"] += hop.file_rate_findings([(str(ref_path), sr_r), (str(cand_path), sr_c)], sample_rate)
    report = Report(command="audio")
    m = cmp.metrics.as_dict()
    for fam in ("hop", "channel"):
        found = by_family[fam] or [ok(fam, evidence={k: m[k] for k in _OK_KEYS if k in m})]
        report.findings.extend(hop.with_lengths(found, cmp.metrics.lengths()))
    if plot is not None:
        from porting_kit.report.plots import save_audio_comparison

        save_audio_comparison(cmp, plot)
    report.timing = {"read": t_read, "total": time.perf_counter() - t0}
    report.extras["comparison"] = cmp
    return report
