"""Property tests (issue 29, B1): the codec/hop hypotheses hold for their class.

A tiny numpy codec (codebook embeddings summed per frame, a sinusoidal basis per frame,
a smoothing filter that reaches back and, drawn, ahead across frames, as a convolutional
decoder does) is drawn with random codebook counts, frame counts, hops and receptive
fields; each fault class is drawn with its parameters (delay-pattern tails: padding codes,
rows still shifted, extra frames; codebook groups shifted early or late by 1-3 frames with
every candidate length; spurious code groups before the codes), and must give its code with
both lengths in the evidence. The clean twin of every drawn codec passes.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from porting_kit.checks import hop
from porting_kit.context import CheckContext
from porting_kit.spec import Spec

PROPERTY = settings(max_examples=50, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SR = 16000


def toy_codec(K: int, hop_length: int, book: int, seed: int, ahead: int):
    """``decode(codes [K, T] int) -> np.ndarray [T * hop]``: a frame's audio leaks one frame
    back and ``ahead`` half-frames ahead through the smoothing filter."""
    g = np.random.default_rng(seed)
    dim = 6
    emb = g.normal(0.0, 0.3, size=(K, book, dim))
    n = np.arange(hop_length) / SR
    basis = np.sin(2 * np.pi * (250.0 * (1 + np.arange(dim)))[:, None] * n[None, :] + g.uniform(0, 3, (dim, 1)))
    lead = ahead * hop_length // 2
    kernel = np.ones(hop_length // 2 + lead) / (hop_length // 2 + lead)

    def decode(codes) -> np.ndarray:
        codes = np.asarray(codes)
        latent = sum(emb[k][codes[k]] for k in range(K))
        x = (latent @ basis).reshape(-1)
        y = np.convolve(x, kernel)[lead:lead + x.size]
        return (0.2 * y).astype(np.float32)

    return decode


def audio_spec(decode, codes, candidate_codes) -> Spec:
    """An audio-names spec whose candidate decodes ``candidate_codes(codes)`` with the same codec."""
    import torch

    m = types.SimpleNamespace(
        codes=lambda: torch.as_tensor(codes),
        decode_reference=lambda c: (decode(c.numpy()), SR),
        decode_candidate=lambda c: (decode(candidate_codes(c.numpy())), SR),
        hop_length=decode.hop if hasattr(decode, "hop") else None)
    return Spec(module=m, name="toy_hop_class")


@st.composite
def codecs(draw):
    K = draw(st.integers(2, 6))
    T = draw(st.integers(16, 40))
    hop_length = draw(st.sampled_from([8, 12, 16, 24, 32]))
    book = draw(st.integers(8, 64))
    seed = draw(st.integers(0, 2 ** 16))
    ahead = draw(st.integers(0, 2))
    codes = np.random.default_rng(seed + 1).integers(0, book, size=(K, T))
    decode = toy_codec(K, hop_length, book, seed, ahead)
    decode.hop = hop_length
    return {"K": K, "T": T, "hop": hop_length, "book": book, "codes": codes, "decode": decode}


def delayed(codes: np.ndarray, pad: int) -> np.ndarray:
    """The delay pattern: codebook k starts k frames later, padded with ``pad``."""
    K, T = codes.shape
    out = np.full((K, T + K - 1), pad, dtype=codes.dtype)
    for k in range(K):
        out[k, k:k + T] = codes[k]
    return out


@st.composite
def tail_faults(draw):
    """Delay-pattern tails: the candidate undoes the pattern for its first T - m frames and
    reads the last m frames and e extra frames of the delayed codes as they are (some codebooks
    still shifted, padding clamped to a code), or decodes e padding frames of one code."""
    c = draw(codecs())
    K, T, book = c["K"], c["T"], c["book"]
    pad = draw(st.sampled_from([0, book - 1]))
    kind = draw(st.sampled_from(["pad_frames", "still_shifted"]))
    if kind == "pad_frames":
        e = draw(st.integers(1, K - 1))
        m = 0
    else:
        m = draw(st.integers(0, K - 1))
        e = draw(st.integers(0 if m else 1, K - 1))

    def candidate(codes):
        if kind == "pad_frames":
            return np.concatenate([codes, np.full((K, e), pad, dtype=codes.dtype)], axis=1)
        d = delayed(codes, pad)
        head = codes[:, :T - m]
        raw = d[:, T - m:T + e]  # frames past the undo: read without the per-codebook delay
        return np.concatenate([head, raw], axis=1)

    return c, candidate, {"kind": kind, "m": m, "e": e, "pad": pad}


@st.composite
def offset_faults(draw):
    """A contiguous group of codebooks read s frames early or late (delay pattern undone off
    by s), the candidate cut to the common frames, kept at T frames or extended (filler code
    0); or ``spurious`` code groups (frames) decoded before the codes."""
    c = draw(codecs())
    K, T, book = c["K"], c["T"], c["book"]
    s = draw(st.integers(1, 3))
    if draw(st.booleans()):
        filler = np.random.default_rng(s).integers(0, book, size=(K, s))

        def spurious(codes):
            return np.concatenate([filler.astype(codes.dtype), codes], axis=1)
        return c, spurious, {"kind": "spurious", "s": s}
    g0 = draw(st.integers(1, K - 1))
    rows = draw(st.sampled_from([list(range(g0)), list(range(g0, K)), [g0]]))
    early = draw(st.booleans())
    length = draw(st.sampled_from(["cut", "same", "longer"]))

    t0, n = {("early", "cut"): (0, T - s), ("early", "same"): (0, T), ("early", "longer"): (-s, T + s),
             ("late", "cut"): (s, T - s), ("late", "same"): (0, T),
             ("late", "longer"): (0, T + s)}[("early" if early else "late", length)]

    def shifted(codes):
        padded = np.zeros((K, T + 2 * s), dtype=codes.dtype)  # filler code 0 around the codes
        padded[:, s:s + T] = codes
        out = np.empty((K, n), dtype=codes.dtype)
        for k in range(K):
            off = (s if early else -s) if k in rows else 0
            out[k] = padded[k, s + t0 + off:s + t0 + off + n]
        return out

    return c, shifted, {"kind": "group", "rows": rows, "s": s, "early": early, "length": length}


def hop_findings(c, candidate):
    spec = audio_spec(c["decode"], c["codes"], candidate)
    return hop.run(CheckContext(spec=spec))


def fail_codes(findings):
    return [f.code for f in findings if f.status == "fail"]


@PROPERTY
@given(codecs())
def test_clean_codec_twin_passes(c):
    assert fail_codes(hop_findings(c, lambda codes: codes)) == []


@PROPERTY
@given(tail_faults())
def test_delay_pattern_tail_class_is_named(case):
    c, candidate, p = case
    found = hop_findings(c, candidate)
    assert fail_codes(found) == ["hop.delay_pattern_tail"], p
    ev = found[0].evidence
    assert ev["candidate_samples"] - ev["reference_samples"] == p["e"] * c["hop"]
    assert ev["extra_frames"] == p["e"]


@PROPERTY
@given(offset_faults())
def test_codebook_offset_class_is_named(case):
    c, candidate, p = case
    found = hop_findings(c, candidate)
    assert fail_codes(found) == ["hop.codebook_offset"], p
    ev = found[0].evidence
    assert {"reference_samples", "candidate_samples"} <= set(ev)
    if p["kind"] == "spurious":
        assert (ev["rows"], ev["shift_frames"]) == (", ".join(map(str, range(c["K"]))), -p["s"])
        assert ev["candidate_samples"] - ev["reference_samples"] == p["s"] * c["hop"]


def test_spurious_groups_message_names_both_lengths():
    """The field case: 60 frames of hop 96 (5760 samples) served with 3 spurious groups (6048)."""
    decode = toy_codec(4, 96, 32, 5, 1)
    decode.hop = 96
    codes = np.random.default_rng(3).integers(0, 32, size=(4, 60))
    extra = np.random.default_rng(4).integers(0, 32, size=(4, 3))
    found = hop_findings({"decode": decode, "codes": codes},
                         lambda x: np.concatenate([extra, x], axis=1))
    assert fail_codes(found) == ["hop.codebook_offset"]
    f = found[0]
    assert (f.evidence["reference_samples"], f.evidence["candidate_samples"]) == (5760, 6048)
    assert "6048 vs 5760 samples" in f.message and "3 spurious code groups" in f.message


@pytest.mark.parametrize("m,e", [(2, 0), (2, 1), (0, 3)])
def test_tail_with_shifted_codebooks_names_the_frames(m, e):
    decode = toy_codec(4, 16, 32, 9, 2)
    decode.hop = 16
    codes = np.random.default_rng(1).integers(0, 32, size=(4, 30))
    f = hop_findings({"decode": decode, "codes": codes},
                     lambda x: np.concatenate([x[:, :30 - m], delayed(x, 31)[:, 30 - m:30 + e]], axis=1))[0]
    assert f.code == "hop.delay_pattern_tail"
    ev = f.evidence
    assert (ev["extra_frames"], ev["candidate_samples"], ev["reference_samples"]) == (e, 480 + 16 * e, 480)
    if m:
        assert ev["tail_frames"] <= 3 and ev["first_divergent_frame"] >= 30 - m - 2
