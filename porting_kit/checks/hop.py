"""Hop-length family (``hop.*``): the candidate's audio timeline against the reference's.

Codes (DESIGN.md), each found by trying the hypothesis on the reference's
decode of the same codes (:mod:`porting_kit.probes.waveform`, :mod:`porting_kit.probes.codec_pair`):

* ``hop.sample_rate_mismatch`` - the served sample rate is not the codec's;
* ``hop.length_mismatch`` - samples != frames * hop_length - d (hop = product
  of the codec's upsampling ratios, d = the codec's own trim, read from the
  reference); the common part matches, the end is cut or padded;
* ``hop.duration_drift`` - the audio is time-scaled (resampled from a wrong
  rate): the error grows along the signal;
* ``hop.offset`` - a constant lag, found by cross-correlation;
* ``hop.codebook_order`` - codes fed frame-major where codebook-major is
  expected (found by decoding the transposed layouts);
* ``hop.stream_boundary`` - the port's chunked streaming decode differs from
  its full decode at the seams (:mod:`porting_kit.probes.streaming`);
* ``hop.unexplained`` - the audio differs and no hypothesis fits (numbers shown).

Runs when the spec defines the audio names (README "Port spec: audio names");
else ``skip`` with the reason.
"""

from __future__ import annotations

from porting_kit.report.findings import Finding, ok, skip


def run(ctx) -> list[Finding]:
    """The ``hop.*`` findings of the spec's decoded pair and of its streaming decode."""
    from porting_kit.probes.codec_pair import get_audio_pair
    from porting_kit.probes.streaming import check_stream

    pair = get_audio_pair(ctx)
    if isinstance(pair, str):
        return [skip("hop", pair)]
    found = [f for f in pair.findings if f.check == "hop"]
    m = pair.comparison.metrics
    ev = {k: m[k] for k in ("frames", "hop_length", "reference_samples", "candidate_samples",
                            "reference_sample_rate", "candidate_sample_rate", "lag_samples",
                            "snr_db", "si_sdr_db", "log_mel_distance_db") if k in m}
    if callable(ctx.spec.get("decode_candidate_stream")):
        if pair.hop_length is None:
            found.append(skip("hop", "streaming check needs hop_length or codec_config() in the spec"))
        else:
            n_ref = int(pair.comparison.metrics["reference_samples"])
            d = int(pair.codes.shape[1]) * pair.hop_length - n_ref
            floor = float(m.get("max_abs_diff", 0.0)) if pair.dtype_explains else 0.0
            found.extend(check_stream(ctx.spec, pair.codes, pair.hop_length, pair.candidate, d,
                                      precision_floor=floor))
            ev["streaming_checked"] = True
    if any(f.status == "fail" for f in found):
        return found
    return found + [ok("hop", "length, sample rate, timing and code layout match the reference", ev)]
