"""Codec dtype family (``dtype.codec_autocast``): the codec must decode in float32.

A neural codec decoded in bf16 or under autocast loses tens of dB of SNR
against its fp32 decode (the EnCodec decoder's transposed convolutions and
LSTM accumulate rounding). The family:

1. reads the candidate codec's parameters (spec ``codec_candidate()``, optional):
   any parameter that is not float32 is a fault;
2. checks the candidate's raw decode output dtype (float32 required);
3. decodes the reference under ``torch.autocast(..., dtype=torch.bfloat16)``
   and measures the SNR a bf16 decode costs; when the candidate has the right
   length, layout and timing, its residual error is that large
   (SNR < 60 dB and within 20 dB of the bf16 SNR), and the fp32 decode of the
   same codes fixes it (the candidate's ``decode_candidate`` with
   ``codec_candidate()`` cast to float32 reaches 60 dB), the candidate decodes in
   low precision. Without that proof the error is not blamed on the dtype.

Evidence: the candidate's SNR against the fp32 reference, the bf16 SNR and the
loss in dB. Runs when the spec defines the audio names.

``dtype.fp16_overflow`` (``--dtype float16`` and a spec with the parity trio): per side,
the first module whose output holds Inf/NaN in float16
(:func:`porting_kit.probes.overflow.first_nonfinite`) while the same module of a float32
copy of the model is finite on the same inputs: float16's range (max 65504) overflowed
there -- after a matmul whose activations exceed it, or in a norm that squares them.
Evidence: side, module, type, Inf/NaN counts, the module's float32 max |value|, the dtype's
max. Non-finite in float32 too is not a dtype fault (``parity.nan_origin`` names it).

Codes: ``dtype.codec_autocast``, ``dtype.fp16_overflow``, ``dtype.ok``; ``skip`` when
neither part applies (reasons joined).
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
    """``dtype.fp16_overflow`` (float16 serving dtype) and ``dtype.codec_autocast`` (audio
    names), or ``dtype.ok``; ``skip`` with the reasons when neither part can run."""
    from porting_kit.probes.codec_pair import get_audio_pair

    overflow = _overflow(ctx)
    pair = get_audio_pair(ctx)
    if isinstance(pair, str):
        if isinstance(overflow, str):
            return [skip("dtype", pair)]
        return overflow or [ok("dtype", f"no module overflows in {ctx.dtype}")]
    codec = _codec(ctx, pair)
    lengths = pair.comparison.metrics.lengths()
    for f in codec:  # length first: every audio finding carries both lengths
        f.evidence = {**lengths, **f.evidence}
    if isinstance(overflow, list) and overflow:
        return overflow + [f for f in codec if f.status != "pass"]
    return codec


def _overflow(ctx) -> list[Finding] | str:
    """``dtype.fp16_overflow`` findings (``[]`` when none) or the reason the part cannot run."""
    if ctx.dtype not in ("float16", "fp16"):
        return "the float16 overflow check runs with --dtype float16"
    if not ctx.spec.has_parity:
        return "the spec has no parity trio (reference, candidate, inputs)"
    import torch

    from porting_kit.load import load_pair, move_inputs, run_side
    from porting_kit.probes.overflow import first_nonfinite, float32_range

    pair = load_pair(ctx)
    fmax = float(torch.finfo(torch.float16).max)
    found: list[Finding] = []
    for side in ("candidate", "reference"):
        model = getattr(pair, side)
        hit = first_nonfinite(model, lambda: run_side(ctx.spec, side, model, pair.inputs))
        if hit is None:
            continue
        inputs32 = move_inputs(ctx.spec.call("inputs"), ctx.device, torch.float32)
        rng = float32_range(model, hit.module, lambda m: run_side(ctx.spec, side, m, inputs32))
        if rng is None or not rng.finite:
            continue  # non-finite in float32 too: parity.nan_origin's business, not the dtype's
        found.append(Finding(
            "dtype", "dtype.fp16_overflow", "fail",
            f"The {side} overflows float16 first in {hit.module} ({hit.type}): its output has "
            f"{hit.n_inf} Inf and {hit.n_nan} NaN values in float16, while in float32 it is finite "
            f"with max |value| {rng.max_abs:.4g} (float16 max {fmax:g}).",
            {"side": side, "module": hit.module, "type": hit.type, "n_inf": hit.n_inf,
             "n_nan": hit.n_nan, "numel": hit.numel, "float32_max_abs": rng.max_abs,
             "float16_max": fmax, "order": hit.order},
            Where(**{side: hit.module}),
            "Serve this model in bfloat16 (float32's range), or keep this module in float32 "
            "(upcast its input, compute, clamp or rescale before casting back); a norm must "
            "square its input in float32."))
    return found


def _codec(ctx, pair) -> list[Finding]:
    """``dtype.codec_autocast`` when the candidate codec is not float32, else ``dtype.ok``."""
    from porting_kit.probes.waveform import FP32_MIN_SNR_DB, dtype_name

    snr = pair.comparison.content_snr_db
    bf = pair.bf16_snr_db
    ev = {"candidate_snr_db": snr, "bf16_autocast_snr_db": bf,
          "fp32_redecode_snr_db": pair.fp32_redecode_snr_db,
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
                       f"bf16 decode makes ({bf:.1f} dB), and its own decode with the codec in "
                       f"float32 reaches {pair.fp32_redecode_snr_db:.1f} dB")
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
