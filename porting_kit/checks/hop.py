"""Hop-length family (``hop.*``): the candidate's audio timeline against the reference's.

Codes (DESIGN.md), each found by trying the hypothesis on the reference's
decode of the same codes (measured by :mod:`porting_kit.probes.waveform`,
:mod:`porting_kit.probes.codec_pair` and :mod:`porting_kit.probes.streaming`;
every finding is built here):

* ``hop.sample_rate_mismatch`` - the served sample rate is not the codec's;
* ``hop.length_mismatch`` - samples != frames * hop_length - d (hop = product
  of the codec's upsampling ratios, d = the codec's own trim, read from the
  reference); the common part matches, the end is cut or padded; also a streamed
  decode that matches the full decode wherever both have samples but ends early or
  late (its last chunk cut or padded: ``streamed``, ``stream_samples``,
  ``full_decode_samples`` in the evidence);
* ``hop.duration_drift`` - the audio is time-scaled (resampled from a wrong
  rate): the error grows along the signal;
* ``hop.offset`` - a constant lag, found by cross-correlation;
* ``hop.codebook_order`` - codes fed frame-major where codebook-major is
  expected (found by decoding the transposed layouts);
* ``hop.stream_boundary`` - the port's chunked streaming decode differs from
  its full decode at the seams (cause in the message: more left context or more
  lookahead fixes it, the chunk slice drops the decoder's ``d`` samples, or, for
  one request of a batched stream - ``request`` in the evidence - the batched
  decode mixes the requests);
* ``hop.stream_lookahead`` - the lookahead frames' samples are not trimmed from
  each chunk, or trimmed by the wrong count: reading the stream as chunks that
  many samples long matches the full decode (trim, expected trim and the first
  mismatching sample in the evidence);
* ``hop.stream_batch_row`` - in the batched stream (a padded batch of requests
  of different lengths), a request streams another request's (or the padded
  batch's) length: its trim uses the wrong row (``request``, both lengths and
  the first mismatching sample in the evidence);
* ``hop.delay_pattern_tail`` - the candidate differs only at its end: it is whole
  frames longer and equals the reference decode of the codes followed by padding
  frames (special tokens clamped to a code, decoded as audio), or it matches the
  reference up to a frame in its second half and differs only in its last
  ``<= num_codebooks`` code frames (the codec's measured lookahead allowed for): the
  last frames decoded with codebooks still shifted; reported instead of
  ``hop.length_mismatch``, which it explains;
* ``hop.codebook_offset`` - one group of codebooks is shifted by whole frames
  against the others (a delay pattern undone off by one or by more), or spurious
  code groups are decoded before the codes (every codebook late); found by decoding
  the shifted codes on the reference and comparing the samples those codes fix;
* ``hop.unexplained`` - the audio differs and no hypothesis fits (numbers shown).

Length and timing come first: every audio finding's evidence carries both lengths
(``reference_samples``, ``candidate_samples``: :func:`with_lengths`), and a message
says "right length" only when the lengths are equal.

Runs when the spec defines the audio names (README "Port spec: audio names");
else ``skip`` with the reason. The batched stream is checked when the
single-request stream is clean (or not defined): a single-request fault would
show in every row, and is reported once.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from porting_kit.probes.streaming import (BatchStreamMeasurement, StreamMeasurement, measure_stream,
                                          measure_stream_batch)
from porting_kit.probes.waveform import WaveformComparison, fmt_db
from porting_kit.report.findings import Finding, Where, ok, skip

#: Default content tolerance of two audio files, dB SNR (16-bit PCM files of one signal are > 60 dB apart).
FILE_MIN_SNR_DB = 40.0


def _finding(code: str, message: str, evidence: dict[str, Any], hint: str,
             samples: list[int] | None = None) -> Finding:
    return Finding("hop", code, "fail", message, evidence, Where(samples=samples), hint)


# --------------------------------------------------------------------------- waveforms


def waveform_findings(cmp: WaveformComparison, names: tuple[str, str] = ("reference", "candidate"), *,
                      min_snr_db: float = -math.inf, other_faults: bool = False) -> list[Finding]:
    """The ``hop.*`` faults of a waveform comparison, in the order the facts were measured.

    Parameters
    ----------
    cmp : WaveformComparison
        From :func:`porting_kit.probes.waveform.analyse_waveforms`.
    names : (str, str)
        How the reference and the candidate are named in messages (file names for files).
    min_snr_db : float
        The aligned overlap must reach this SNR (dB), else ``hop.unexplained`` when
        no hypothesis explains the difference; ``-inf`` (default) never reports it.
    other_faults : bool
        Another family already explains the difference (e.g. a ``channel.*`` fault):
        no ``hop.unexplained`` then.

    Returns
    -------
    list of Finding
        ``hop.sample_rate_mismatch``, ``hop.duration_drift``, ``hop.offset``,
        ``hop.length_mismatch``, ``hop.unexplained``; empty when none applies.
    """
    found = []
    if cmp.sample_rate_fit is not None:
        found.append(_sample_rate_finding(cmp, names))
    if cmp.drift is not None:
        found.append(_drift_finding(cmp, names))
    if cmp.offset is not None:
        found.append(_offset_finding(cmp, names))
    if cmp.length is not None:
        found.append(_length_finding(cmp, names))
    if not found and not other_faults and cmp.content_snr_db < min_snr_db:
        found.append(_unexplained(cmp, min_snr_db, names))
    return found


def _sample_rate_finding(cmp: WaveformComparison, names: tuple[str, str]) -> Finding:
    f = cmp.sample_rate_fit
    rname, cname = names
    return _finding(
        "hop.sample_rate_mismatch",
        f"{cname} is at {f.candidate_sample_rate} Hz, {rname} at {f.reference_sample_rate} Hz"
        + (" (the samples were resampled to the new rate)." if f.resampled
           else " (same samples, only the reported rate differs)." if f.same_length
           else "."),
        {"reference_sample_rate": f.reference_sample_rate, "candidate_sample_rate": f.candidate_sample_rate,
         "rate_ratio": round(f.rate_ratio, 6), "length_ratio": round(f.length_ratio, 6),
         "resampled": bool(f.resampled)},
        "Serve at the codec's sampling rate (its config's sampling_rate) or resample "
        "and report the rate you serve.")


def _drift_finding(cmp: WaveformComparison, names: tuple[str, str]) -> Finding:
    f = cmp.drift
    rname, cname = names
    ratio, nr, nc, sr = f.duration_ratio, f.reference_samples, f.candidate_samples, f.sample_rate
    return _finding(
        "hop.duration_drift",
        f"{cname} is {rname} time-scaled by {ratio:.4f} ({nc} vs {nr} samples at "
        f"{sr} Hz): it plays {100 * (1 / ratio - 1):+.2f}% fast and drifts "
        f"{abs(nc - nr)} samples by the end.",
        {"duration_ratio": round(ratio, 6), "reference_samples": nr, "candidate_samples": nc,
         "drift_samples": nc - nr, "implied_sample_rate": round(sr * ratio, 1),
         "hypothesis_snr_db": f.hypothesis_snr_db, "unscaled_snr_db": f.unscaled_snr_db},
        "The candidate resamples or stretches the codec output: serve the decoder's samples "
        "at its own sampling_rate, or resample from the rate the samples really have.")


def _offset_finding(cmp: WaveformComparison, names: tuple[str, str]) -> Finding:
    f = cmp.offset
    rname, cname = names
    lag, sr, hop = f.lag_samples, f.sample_rate, f.hop_length
    return _finding(
        "hop.offset",
        f"{cname} is {abs(lag)} samples ({1000 * abs(lag) / sr:.2f} ms) "
        f"{'late' if lag > 0 else 'early'} against {rname}"
        + (f" ({lag / hop:.2f} hops)." if hop else "."),
        {"lag_samples": lag, "lag_ms": round(1000 * lag / sr, 3),
         "lag_hops": round(lag / hop, 4) if hop else "", "correlation": round(f.correlation, 6),
         "aligned_snr_db": f.aligned_snr_db, "unaligned_snr_db": f.unaligned_snr_db},
        "Remove the extra leading samples (or the missing ones): check the decoder's "
        "left padding/trim and any pre-roll or warm-up frames the port adds.",
        [0, abs(lag)])


def _length_finding(cmp: WaveformComparison, names: tuple[str, str]) -> Finding:
    f = cmp.length
    rname, cname = names
    nr, nc, sr, hop, frames = f.reference_samples, f.candidate_samples, f.sample_rate, f.hop_length, f.frames
    ev: dict[str, Any] = {"reference_samples": nr, "candidate_samples": nc,
                          "difference_samples": nc - nr,
                          "difference_seconds": round((nc - nr) / sr, 6)}
    extra = ""
    if hop:
        ev["difference_hops"] = round((nc - nr) / hop, 4)
        extra = f" = {(nc - nr) / hop:+.2f} hops of {hop}"
    if hop and frames:
        ev["expected_samples"] = nr
        ev["trim_d"] = frames * hop - nr
        ev["implied_hop"] = round(nc / frames, 3)
        extra += (f"; {frames} frames x hop {hop} - d {frames * hop - nr} = {nr} expected, "
                  f"the candidate's length implies hop {nc / frames:.2f}")
    return _finding(
        "hop.length_mismatch",
        f"{cname} has {nc} samples, {rname} {nr} ({nc - nr:+d}{extra}); "
        + ("the common part matches." if min(nr, nc) else f"{cname if nc == 0 else rname} served no samples."), ev,
        "Compute the output length as frames * hop_length (product of the codec's "
        "upsampling ratios) minus the codec's own trim; do not trim or pad by hand.",
        [min(nr, nc), max(nr, nc)])


def _unexplained(cmp: WaveformComparison, min_snr_db: float, names: tuple[str, str]) -> Finding:
    m = cmp.metrics.as_dict()
    return _finding(
        "hop.unexplained",
        f"{names[1]} differs from {names[0]} (SNR {fmt_db(cmp.content_snr_db)} dB, SI-SDR "
        f"{fmt_db(m['si_sdr_db'])} dB, log-mel distance {fmt_db(m['log_mel_distance_db'], 2)} dB) and no "
        "audio hypothesis fits (sample rate, layout, drift, offset, length).",
        {k: m[k] for k in ("snr_db", "si_sdr_db", "log_mel_distance_db", "max_abs_diff",
                           "compared_samples") if k in m} | {"min_snr_db": min_snr_db},
        "Compare the decoder layer by layer (porting-kit check on a spec) to find where the codec "
        "output diverges: weight conversion, normalisation, codes.")


def file_rate_findings(rates: list[tuple[str, int]], expected: int | None) -> list[Finding]:
    """``hop.sample_rate_mismatch`` for each file not at the expected rate.

    Parameters
    ----------
    rates : list of (str, int)
        Each file's path and sample rate in Hz (reference first).
    expected : int or None
        The expected rate in Hz; ``None``: nothing is checked.

    Returns
    -------
    list of Finding
    """
    if expected is None:
        return []
    return [_finding("hop.sample_rate_mismatch", f"{Path(p).name} is at {sr} Hz, expected {expected} Hz.",
                     {"file": str(p), "sample_rate": sr, "expected_sample_rate": int(expected)},
                     "Write the audio at the codec's sampling_rate.")
            for p, sr in rates if sr != expected]


# --------------------------------------------------------------------------- codec pair


def with_lengths(findings: list[Finding], lengths: dict[str, Any]) -> list[Finding]:
    """Add both sides' lengths (samples) and rates (Hz) to every finding's evidence.

    Parameters
    ----------
    findings : list of Finding
        The audio findings of one family (changed in place and returned).
    lengths : dict
        :meth:`porting_kit.probes.waveform.AudioMetrics.lengths` of the pair.

    Returns
    -------
    list of Finding
        The same findings; keys a finding already has are kept.
    """
    for f in findings:
        f.evidence = {**lengths, **f.evidence}
    return findings


def _lengths_text(pair) -> str:
    m = pair.comparison.metrics
    nr, nc = m.reference_samples, m.candidate_samples
    return "the right length" if nr == nc else f"a different length ({nc} vs {nr} samples)"


def tail_finding(pair) -> Finding:
    """``hop.delay_pattern_tail`` from the pair's :class:`~porting_kit.probes.codec_pair.TailFit`."""
    t, m = pair.tail, pair.comparison.metrics
    nr, nc = m.reference_samples, m.candidate_samples
    size = (f"{t.extra_frames} frames ({nc - nr} samples) longer than the reference ({nc} vs {nr})"
            if t.extra_frames else f"as long as the reference ({nc} samples)")
    if t.pad:
        how = (f"it decodes the {t.extra_frames} padding frames of a delay pattern ({t.pad}) as "
               f"audio; the reference decode with that padding reproduces it (SNR "
               f"{t.hypothesis_snr_db:.1f} dB vs {t.given_snr_db:.1f} dB as given)")
    else:
        past = f" and {t.extra_frames} frames past the end" if t.extra_frames else ""
        how = (f"it matches the reference up to frame {t.first_divergent_frame} (SNR "
               f"{t.head_snr_db:.1f} dB) and differs only in its last {t.tail_frames} code frames"
               f"{past} (the codec looks {t.lookahead_frames} frames ahead): the end of a delay "
               f"pattern decoded with some codebooks still shifted or holding padding "
               f"(SNR {t.given_snr_db:.1f} dB over the whole length)")
    ev = {"extra_frames": t.extra_frames, "pad": t.pad, "num_codebooks": t.num_codebooks,
          "hop_length": pair.hop_length, "hypothesis_snr_db": t.hypothesis_snr_db,
          "given_snr_db": t.given_snr_db, "difference_samples": nc - nr,
          "tail_frames": t.tail_frames, "first_divergent_frame": t.first_divergent_frame,
          "lookahead_frames": t.lookahead_frames, "head_snr_db": t.head_snr_db}
    start = nr if t.first_divergent_frame is None else t.first_divergent_frame * (pair.hop_length or 0)
    return _finding(
        "hop.delay_pattern_tail", f"The candidate is {size}: {how}.", ev,
        "Undo the delay pattern before decoding: codebook k is codes[k, k:k + frames] (its own "
        "delay), drop the num_codebooks - 1 padding frames (and stop at the first frame holding "
        "a special token) instead of clamping special tokens to a code and decoding them.",
        [int(min(start, nr)), int(max(nr, nc))])


def codebook_offset_finding(pair) -> Finding:
    """``hop.codebook_offset`` from the pair's ``CodebookShiftFit``."""
    f, m = pair.codebook_shift, pair.comparison.metrics
    rows = ", ".join(str(r) for r in f.rows)
    n = abs(f.shift_frames)
    frames = f"{n} frame{'s' if n > 1 else ''}"
    if len(f.rows) == f.num_codebooks:
        what = (f"The candidate decodes {n} spurious code group{'s' if n > 1 else ''} (frames) before "
                f"the codes: every codebook is read {frames} late")
    else:
        what = (f"Codebook{'s' if len(f.rows) > 1 else ''} {rows} of {f.num_codebooks} are read "
                f"{frames} {'early' if f.shift_frames > 0 else 'late'} against the others")
    return _finding(
        "hop.codebook_offset",
        f"{what} ({f.candidate_frames} frames decoded, {m.candidate_samples} vs "
        f"{m.reference_samples} samples); decoding the reference with that shift reproduces the "
        f"candidate over {f.compared_frames} frames (SNR {f.hypothesis_snr_db:.1f} dB vs "
        f"{f.given_snr_db:.1f} dB as given).",
        {"rows": rows, "shift_frames": f.shift_frames, "frames_used": f.frames_used,
         "candidate_frames": f.candidate_frames, "compared_frames": f.compared_frames,
         "num_codebooks": f.num_codebooks, "hypothesis_snr_db": f.hypothesis_snr_db,
         "given_snr_db": f.given_snr_db},
        "Undo the delay pattern with one offset per codebook (codebook k starts k frames later: "
        "codes[k, k:k + frames]), check the slice of each group against the pattern builder, and "
        "drop any code groups before the first audio frame (prompt or special tokens).")


def codec_findings(pair) -> list[Finding]:
    """``hop.codebook_order`` / ``hop.unexplained`` of a decoded pair whose layout and
    timing match but whose samples differ.

    Parameters
    ----------
    pair : porting_kit.probes.codec_pair.AudioPair
        Its ``diagnosis`` holds the code-layout fits (``None``: not needed).

    Returns
    -------
    list of Finding
        Empty when no diagnosis ran or the low-precision hypothesis explains the
        difference (the ``dtype`` family reports it).
    """
    if pair.codebook_shift is not None:
        return [codebook_offset_finding(pair)]
    dg = pair.diagnosis
    if dg is None:
        return []
    given = dg.given_snr_db
    if dg.codebook_fits:
        best = dg.best
        return [Finding(
            "hop", "hop.codebook_order", "fail",
            f"The candidate decodes the codes in the wrong layout ({best.replace('_', ' ')}): "
            f"decoding the reference with that layout reproduces the candidate "
            f"(SNR {dg.tried[best]:.1f} dB vs {given:.1f} dB as given).",
            {"hypothesis": best, "num_codebooks": dg.num_codebooks, "frames": dg.frames,
             "hypothesis_snr_db": dg.tried[best], "given_snr_db": given,
             **{f"snr_db_{k}": v for k, v in dg.tried.items()}},
            Where(),
            "Codes are (num_codebooks, frames): rebuild them from the frame-major AR stream with "
            "stream.reshape(frames, num_codebooks).T, not stream.reshape(num_codebooks, frames).")]
    if pair.dtype_explains:
        return []
    m = pair.comparison.metrics
    return [Finding(
        "hop", "hop.unexplained", "fail",
        f"The candidate's audio differs from the reference (SNR {given:.1f} dB) with "
        f"{_lengths_text(pair)}, no timing or layout fit, and no audio hypothesis fits (code "
        "layout, codebook shift, delay-pattern tail, bf16 decode).",
        {"snr_db": given, "si_sdr_db": m.si_sdr_db, "log_mel_distance_db": m.log_mel_distance_db,
         "bf16_snr_db": pair.bf16_snr_db, **{f"snr_db_{k}": v for k, v in dg.tried.items()}},
        Where(),
        "Run the layer-parity family on the codec (weights, conversion, normalisation) to find "
        "where its output diverges.")]


# --------------------------------------------------------------------------- streaming


def _stream_evidence(sm: StreamMeasurement) -> dict[str, Any]:
    """The configuration and first mismatch every streaming finding carries (``request`` for a batch row)."""
    ev = {"chunk_frames": sm.chunk_frames, "context_frames": sm.context_frames,
          "lookahead_frames": sm.lookahead_frames, "hop_length": sm.hop_length,
          "decoder_trim_d": sm.trim_d, "first_mismatch_sample": sm.first_mismatch_sample,
          "tolerance_abs": sm.tolerance}
    if sm.request is not None:
        ev["request"] = sm.request
        ev["request_frames"] = sm.frames
    return ev


def _mismatch_range(sm: StreamMeasurement) -> list[int]:
    """Samples ``[start, stop)`` of the first mismatch: to the end of its chunk region, or
    the samples one side has beyond the other's end."""
    first, n_full = int(sm.first_mismatch_sample or 0), sm.full_samples
    n_stream = n_full - sm.streamed.missing
    if first >= min(n_full, n_stream):  # the common part matches: the extra / missing samples
        return [first, max(n_full, n_stream)]
    ends = [b for b in sm.seams[1:] + [n_full] if b > first]
    return [first, int(ends[0])]


def lookahead_finding(sm: StreamMeasurement) -> Finding:
    """``hop.stream_lookahead`` from a measurement whose :class:`TrimFit` explains the stream."""
    t, hop, la = sm.trim_fit, sm.hop_length, sm.lookahead_frames
    who = "" if sm.request is None else f"request {sm.request} of the batch ({sm.frames} frames): "
    what = {"untrimmed": f"the {la} lookahead frames' {t.expected_trim_samples} samples are not trimmed "
                         "from the chunks",
            "fixed_trim": f"{t.trim_samples} samples ({la} frames x hop {hop}) are trimmed from every "
                          "chunk, also where the lookahead was cut short at the end of the codes",
            "wrong_count": f"each chunk is trimmed by {t.trim_samples} samples, not the lookahead's "
                           f"{t.expected_trim_samples} ({la} frames x hop {hop})"}[t.name]
    extra = sorted({x for x in t.extra if x})
    ev = {**_stream_evidence(sm), "trim_fit": t.name, "trim_samples": t.trim_samples,
          "expected_trim_samples": t.expected_trim_samples, "extra_samples_per_chunk": t.extra,
          "missing_samples": sm.streamed.missing, "fit_abs_err": t.err}
    return Finding(
        "hop", "hop.stream_lookahead", "fail",
        f"Streaming decode ({sm.chunk_frames}-frame chunks, {sm.context_frames} frames of left "
        f"context, {la} of lookahead): {who}{what}; the stream is {-sm.streamed.missing:+d} samples "
        f"against the full decode (chunks off by {', '.join(f'{x:+d}' for x in extra)} samples), "
        f"first mismatch at sample {sm.first_mismatch_sample}; reading the chunks that way matches the "
        f"full decode (|err| {t.err:.2e}).",
        ev, Where(samples=_mismatch_range(sm)),
        "Decode codes[:, start - context:min(frames, end + lookahead)] and drop the last "
        "(decoded end - end) * hop_length samples of each chunk: the lookahead actually decoded, "
        "fewer frames at the end of the codes.")


def stream_length_finding(sm: StreamMeasurement) -> Finding:
    """``hop.length_mismatch`` of a stream whose common part matches the full decode.

    The stream ends early (or runs on) while every sample both hold matches: the
    last chunk is cut short (or padded), a length fault at the end, not at a seam.

    Parameters
    ----------
    sm : StreamMeasurement
        Its ``streamed.first_bad`` is ``None`` and ``streamed.missing`` is not 0.

    Returns
    -------
    Finding
        Evidence: the chunk configuration, ``stream_samples``, ``full_decode_samples``,
        ``difference_samples`` (stream - full decode), ``streamed: True``.
    """
    n_full = sm.full_samples
    n = n_full - sm.streamed.missing
    who = "" if sm.request is None else f" of request {sm.request} of the batch ({sm.frames} frames)"
    la_text = f", {sm.lookahead_frames} of lookahead" if sm.uses_lookahead else ""
    how = (f"cut short: samples {n}-{n_full} of the full decode are missing" if n < n_full
           else f"padded: {n - n_full} samples past the full decode's end")
    ev = {**_stream_evidence(sm), "streamed": True, "stream_samples": n, "full_decode_samples": n_full,
          "difference_samples": n - n_full, "missing_samples": sm.streamed.missing}
    return Finding(
        "hop", "hop.length_mismatch", "fail",
        f"The streamed decode{who} ({sm.chunk_frames}-frame chunks, {sm.context_frames} frames of left "
        f"context{la_text}) has {n} samples, the full decode {n_full} ({n - n_full:+d}); every sample "
        f"both hold matches: the last chunk is {how}.",
        ev, Where(samples=[min(n, n_full), max(n, n_full)]),
        f"End the last chunk at the full decode's length (frames * hop_length - d = {n_full} samples): "
        "do not trim or pad the final chunk.")


def stream_findings(sm: StreamMeasurement | None) -> list[Finding]:
    """``hop.stream_boundary`` / ``hop.stream_lookahead`` from a streaming measurement, with its cause.

    Parameters
    ----------
    sm : StreamMeasurement or None
        From :func:`porting_kit.probes.streaming.measure_stream`; ``None``: the
        layout does not stream.

    Returns
    -------
    list of Finding
        Empty when the stream does not run or every seam is within tolerance;
        ``hop.stream_lookahead`` when a wrong lookahead trim explains the stream
        (:attr:`StreamMeasurement.trim_fit`); ``hop.length_mismatch`` when the stream
        matches the full decode wherever both have samples but ends early or late
        (:func:`stream_length_finding`); else one ``hop.stream_boundary`` with
        the worst seam (sample range), whether more left context or more lookahead
        fixes it, and the decoder's ``d``.
    """
    if sm is None or sm.streamed.clean:
        return []
    if sm.trim_fit is not None:
        return [lookahead_finding(sm)]
    if sm.streamed.first_bad is None and sm.streamed.missing:  # the common part matches
        return [stream_length_finding(sm)]
    got, bigger, more = sm.streamed, sm.more_context, sm.more_context_frames
    ahead, more_la = sm.more_lookahead, sm.more_lookahead_frames
    chunk, context, d = sm.chunk_frames, sm.context_frames, sm.trim_d
    seams = sm.seams
    i = got.first_bad if got.missing else got.worst
    i = 0 if i is None else i
    start = seams[i] if i < len(seams) else seams[-1]
    db = 20 * math.log10(max(got.worst_err, 1e-30) / sm.peak)
    n_seams = max(len(seams) - 1, 1)
    ev = {**_stream_evidence(sm),
          "seams": n_seams, "worst_seam": i, "worst_seam_sample": start,
          "worst_seam_abs_err": got.worst_err, "worst_seam_db_below_peak": round(-db, 2),
          "missing_samples": got.missing,
          "missing_per_seam": round(got.missing / n_seams, 3),
          "more_context_frames": more,
          "more_context_abs_err": bigger.worst_err if bigger else None,
          "more_context_fixes": bool(bigger and bigger.clean),
          "more_lookahead_frames": more_la,
          "more_lookahead_abs_err": ahead.worst_err if ahead else None,
          "more_lookahead_fixes": bool(ahead and ahead.clean)}
    la_text = f", {sm.lookahead_frames} of lookahead" if sm.uses_lookahead else ""
    if bigger is not None and bigger.clean:
        cause = (f"{more} frames of left context fix it: the decoder's receptive field needs more "
                 f"than {context} frames")
        hint = f"Decode each chunk with at least {more} frames of left context (stream_context_frames)."
    elif ahead is not None and ahead.clean:
        cause = (f"{more_la} frames of lookahead fix it: the decoder looks ahead (non-causal) "
                 f"and needs more than {sm.lookahead_frames} future frames")
        hint = (f"Decode each chunk with at least {more_la} frames of lookahead "
                "(stream_lookahead_frames) and drop their samples.")
    elif sm.request is not None:
        cause = ("its chunks differ from its own full decode: the batched decode mixes the "
                 "requests (per-request context, state or trims)")
        hint = ("Keep each request's streaming state and trims per request: decode row r's chunks "
                "from its own frames (codes[r, :, :lengths[r]]) with its own context and lookahead.")
    elif got.missing > 0 and got.missing % n_seams == 0:
        per = got.missing // n_seams
        cause = (f"more left context does not fix it: the stream is {got.missing} samples short, "
                 f"{per} per seam (the decoder outputs frames*hop - d, d = {d}): the chunk slice "
                 "drops samples")
        hint = ("Slice each chunk's audio from context_frames*hop_length - d (d = frames*hop_length "
                "- output samples), not from context_frames*hop_length.")
    else:
        tried = f"more left context ({more} frames)" + (
            f" or more lookahead ({more_la} frames)" if more_la is not None else "")
        cause = (f"{tried} does not fix it: the chunks are not decoded "
                 "with the requested context, or the seams are joined wrongly")
        hint = ("Decode codes[:, start - context_frames:end + lookahead_frames] for each chunk, drop "
                "the first context_frames*hop_length - d samples and the lookahead's samples.")
    who = "" if sm.request is None else f" request {sm.request} of the batch ({sm.frames} frames):"
    return [Finding(
        "hop", "hop.stream_boundary", "fail",
        f"Streaming decode ({chunk}-frame chunks, {context} frames of left context{la_text}) differs "
        f"from the full decode at{who} seam {i} (sample {start}, |err| {got.worst_err:.2e}, "
        f"{-db:.0f} dB below peak); {cause}.",
        ev, Where(samples=[int(start), int(start + chunk * sm.hop_length)]), hint)]


def batch_row_finding(bm: BatchStreamMeasurement, sm: StreamMeasurement) -> Finding | None:
    """``hop.stream_batch_row`` when request ``sm.request`` has another request's length.

    Parameters
    ----------
    bm : BatchStreamMeasurement
        The batched stream.
    sm : StreamMeasurement
        One of its rows, not clean.

    Returns
    -------
    Finding or None
        ``None`` when the row's stream length is its own or matches no other request's
        (or the padded batch's) length.
    """
    r = sm.request
    n = bm.expected_samples[r] - sm.streamed.missing
    padded = max(bm.lengths) * sm.hop_length - sm.trim_d
    others = [j for j, m in enumerate(bm.expected_samples) if j != r and m == n]
    if n == bm.expected_samples[r] or (not others and n != padded):
        return None
    whose = f"request {others[0]}'s length ({bm.lengths[others[0]]} frames)" if others else \
        f"the padded batch's length ({max(bm.lengths)} frames)"
    ev = {**_stream_evidence(sm), "batch_lengths": bm.lengths, "expected_samples": bm.expected_samples[r],
          "stream_samples": n, "trimmed_like_request": others[0] if others else None,
          "padded_batch_samples": padded}
    return Finding(
        "hop", "hop.stream_batch_row", "fail",
        f"Batched streaming decode: request {r} ({bm.lengths[r]} frames) streams {n} samples, its "
        f"full decode {bm.expected_samples[r]}: it is trimmed with {whose}; first mismatch at "
        f"sample {sm.first_mismatch_sample}.",
        ev, Where(samples=_mismatch_range(sm)),
        "Trim each request with its own length (lengths[r] * hop_length - d, its own lookahead "
        "clipped at lengths[r]), never with the padded batch's or another row's.")


def stream_batch_findings(bm: BatchStreamMeasurement | None) -> list[Finding]:
    """The faults of a batched stream: one finding for the first request that differs.

    Parameters
    ----------
    bm : BatchStreamMeasurement or None
        From :func:`porting_kit.probes.streaming.measure_stream_batch`; ``None``: the
        layout does not stream in batches.

    Returns
    -------
    list of Finding
        Empty when every request's stream matches its own full decode; else
        ``hop.stream_batch_row`` (the row has another request's length),
        ``hop.stream_lookahead`` (a wrong lookahead trim explains the row) or
        ``hop.stream_boundary`` with ``request`` in the evidence.
    """
    if bm is None:
        return []
    for sm in bm.rows:
        if sm.streamed.clean:
            continue
        f = batch_row_finding(bm, sm)
        if f is None:
            f = stream_findings(sm)[0]
        f.evidence.setdefault("batch_lengths", bm.lengths)
        return [f]
    return []


def check_stream(spec, codes, hop_length: int, full_candidate: Any, trim_d: int | None = None,
                 precision_floor: float = 0.0) -> list[Finding]:
    """Compare the port's streaming decode with its full decode (``hop.stream_boundary``,
    ``hop.stream_lookahead``).

    :func:`porting_kit.probes.streaming.measure_stream` (same parameters: codes
    ``[shape=(num_codebooks, frames)]``, ``hop_length`` in samples, ``trim_d`` in
    samples, ``precision_floor`` a max |diff|) judged by :func:`stream_findings`.

    Parameters
    ----------
    spec : Spec
        The port spec; its ``decode_candidate_stream`` is called.
    codes : torch.Tensor [shape=(num_codebooks, frames)]
        The codec codes decoded in full and in chunks.
    hop_length : int
        Samples per code frame.
    full_candidate : np.ndarray or torch.Tensor [shape=(samples,) or (channels, samples)]
        The candidate's full (non-streaming) decode of ``codes``.
    trim_d : int or None
        Samples a chunk's decoder trims at its left edge, when the layout says.
    precision_floor : float, default 0.0
        Max |diff| (waveform units) below which a seam counts as clean.

    Returns
    -------
    list of Finding
        Empty when the layout does not stream or every seam is clean.

    Raises
    ------
    InputError
        ``decode_candidate_stream`` raised (the tool could not run, exit 2).
    """
    return stream_findings(measure_stream(spec, codes, hop_length, full_candidate, trim_d,
                                          precision_floor=precision_floor))


def check_stream_batch(spec, codes, hop_length: int, trim_d: int,
                       precision_floor: float = 0.0) -> list[Finding]:
    """Compare each request of the port's batched streaming decode with its own full decode.

    :func:`porting_kit.probes.streaming.measure_stream_batch` judged by
    :func:`stream_batch_findings`.

    Parameters
    ----------
    spec : Spec
        Its ``decode_candidate_stream_batch`` and ``decode_candidate`` are called.
    codes : torch.Tensor [shape=(num_codebooks, frames)]
        The requests are cut from these codes (3 requests of very different lengths).
    hop_length : int
        Samples per code frame.
    trim_d : int
        The codec's ``d`` (samples).
    precision_floor : float, default 0.0
        Max |diff| (waveform units) below which a seam counts as clean.

    Returns
    -------
    list of Finding
        Empty when the layout does not stream in batches or every request is clean.

    Raises
    ------
    InputError
        A spec function raised or returned the wrong number of waveforms (exit 2).
    """
    return stream_batch_findings(measure_stream_batch(spec, codes, hop_length, trim_d,
                                                      precision_floor=precision_floor))


# --------------------------------------------------------------------------- family


def _streaming(spec, pair, m: dict[str, Any], ev: dict[str, Any]) -> list[Finding]:
    """The single-request stream, then (when it is clean or absent) the batched stream.

    Sets ``ev["streaming_checked"]`` / ``ev["batch_streaming_checked"]`` when the spec defines
    the function: ``True`` when it streamed, ``False`` when it returned ``None`` (cannot stream).
    """
    single = callable(spec.get("decode_candidate_stream"))
    batched = callable(spec.get("decode_candidate_stream_batch"))
    if not (single or batched):
        return []
    if pair.hop_length is None:
        return [skip("hop", "streaming check needs hop_length or codec_config() in the spec")]
    d = int(pair.codes.shape[1]) * pair.hop_length - int(m["reference_samples"])
    floor = float(m.get("max_abs_diff", 0.0)) if pair.dtype_explains else 0.0
    found = []
    if single:  # None: decode_candidate_stream says this layout does not stream
        sm = measure_stream(spec, pair.codes, pair.hop_length, pair.candidate, d, precision_floor=floor)
        found = stream_findings(sm)
        ev["streaming_checked"] = sm is not None
    if batched and not found:  # a single-request fault would show in every row: reported once
        bm = measure_stream_batch(spec, pair.codes, pair.hop_length, d, precision_floor=floor)
        found = stream_batch_findings(bm)
        ev["batch_streaming_checked"] = bm is not None
    return found


def run(ctx) -> list[Finding]:
    """The ``hop.*`` findings of the spec's decoded pair and of its streaming decode.

    Parameters
    ----------
    ctx : CheckContext
        The run's context (spec, device, shared state).

    Returns
    -------
    list of Finding
        The faults, else one ``hop.ok`` (or a ``skip`` when the spec has no audio names).
    """
    from porting_kit.probes.codec_pair import get_audio_pair

    pair = get_audio_pair(ctx)
    if isinstance(pair, str):
        return [skip("hop", pair)]
    found = waveform_findings(pair.comparison) + codec_findings(pair)
    if pair.codebook_shift is not None:  # whole frames late: spurious code groups explain the lag
        found = [f for f in found if f.code != "hop.offset"]
    if pair.tail is not None:  # the cause of the length/content difference: reported in its place
        found = [f for f in found if f.code not in ("hop.length_mismatch", "hop.unexplained")]
        found.append(tail_finding(pair))
    m = pair.comparison.metrics.as_dict()
    ev = {k: m[k] for k in ("frames", "hop_length", "reference_samples", "candidate_samples",
                            "reference_sample_rate", "candidate_sample_rate", "lag_samples",
                            "snr_db", "si_sdr_db", "log_mel_distance_db") if k in m}
    found.extend(_streaming(ctx.spec, pair, m, ev))
    if any(f.status == "fail" for f in found):
        return with_lengths(found, pair.comparison.metrics.lengths())
    return with_lengths(found + [ok("hop", "length, sample rate, timing and code layout match the "
                                    "reference", ev)], pair.comparison.metrics.lengths())
