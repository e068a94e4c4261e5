"""Codec dtype family (``dtype.codec_autocast``): the codec must decode in float32.

A neural codec decoded in bf16 or under autocast loses tens of dB of SNR
against its fp32 decode (the EnCodec decoder's transposed convolutions and
LSTM accumulate rounding). The family:

1. reads the candidate codec's parameters (spec ``codec_candidate()``, optional):
   any parameter that is not float32 is a fault;
2. checks the candidate's raw decode output dtype (float32 required);
3. decodes the reference under ``torch.autocast(..., dtype=torch.bfloat16)``
   and measures the SNR a bf16 decode costs; when the candidate has the right
   length, layout and timing but its residual error is that large
   (SNR < 60 dB and within 20 dB of the bf16 SNR), the candidate decodes in
   low precision.

Evidence: the candidate's SNR against the fp32 reference, the bf16 SNR and the
loss in dB. Runs when the spec defines the audio names; else ``skip``.
"""

from __future__ import annotations

from porting_kit.report.findings import Finding, Where, ok, skip


def _codec_dtypes(module) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in list(module.parameters()) + list(module.buffers()):
        if p.is_floating_point():
            k = str(p.dtype).replace("torch.", "")
            counts[k] = counts.get(k, 0) + 1
    return counts


def run(ctx) -> list[Finding]:
    """``dtype.codec_autocast`` when the candidate codec is not float32 (or ``dtype.ok`` / skip)."""
    from porting_kit.probes.waveform import FP32_MIN_SNR_DB, dtype_name
    from porting_kit.probes.codec_pair import get_audio_pair

    pair = get_audio_pair(ctx)
    if isinstance(pair, str):
        return [skip("dtype", pair)]
    snr = pair.comparison.content_snr_db
    bf = pair.bf16_snr_db
    ev = {"candidate_snr_db": snr, "bf16_autocast_snr_db": bf,
          "fp32_min_snr_db": FP32_MIN_SNR_DB, "candidate_output_dtype": dtype_name(pair.candidate)}
    reasons = []
    where = Where()
    if callable(ctx.spec.get("codec_candidate")):
        counts = _codec_dtypes(ctx.spec.call("codec_candidate"))
        ev["codec_parameter_dtypes"] = ", ".join(f"{k}:{v}" for k, v in sorted(counts.items()))
        low = {k: v for k, v in counts.items() if k != "float32"}
        if low:
            reasons.append(f"{sum(low.values())} codec parameters/buffers are "
                           f"{', '.join(sorted(low))}")
            where = Where(candidate="codec_candidate()")
    if dtype_name(pair.candidate) not in ("float32", "ndarray"):
        reasons.append(f"the decode returns {dtype_name(pair.candidate)}")
    if pair.dtype_explains:
        reasons.append(f"its audio is {snr:.1f} dB SNR from the fp32 reference, the error a "
                       f"bf16 decode makes ({bf:.1f} dB)")
    if reasons:
        return [Finding("dtype", "dtype.codec_autocast", "fail",
                        "The candidate decodes the codec in low precision: " + "; ".join(reasons) + ".",
                        {k: v for k, v in ev.items() if v is not None}, where,
                        "Keep the codec in float32: build/load it with dtype=torch.float32, decode "
                        "under torch.autocast(enabled=False), and cast codes' embeddings, not the "
                        "codec, to the serving dtype.")]
    return [ok("dtype", f"codec decodes in float32 (a bf16/autocast decode would cost "
                        f"{'?' if bf is None else format(bf, '.1f')} dB SNR)",
               {k: v for k, v in ev.items() if v is not None})]
