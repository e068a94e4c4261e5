"""Property test (issue 29, B1): a resampler run along the channel axis is named.

A ``(samples, channels)`` clip (soundfile's layout) resampled with ``librosa.resample``
(which works on the last axis: the channels) and mixed down leaves the samples at the source
time scale and mixes the channels with the resampler's weights. Drawn: channel counts,
source and target rates, signals; the reference is the clip resampled along its samples and
mixed down by the mean. Must give ``channel.axis_mismatch`` (layout
``channel_axis_resampled``, both lengths in the evidence); the clean twin passes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from porting_kit.checks import channel, hop
from porting_kit.probes.waveform import analyse_waveforms

PROPERTY = settings(max_examples=50, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clips(draw):
    C = draw(st.integers(2, 4))
    sr_src = draw(st.sampled_from([16000, 22050, 44100, 48000]))
    sr_dst = draw(st.sampled_from([r for r in (16000, 24000, 32000, 44100) if r != sr_src]))
    n = draw(st.integers(2000, 6000))
    seed = draw(st.integers(0, 2 ** 16))
    g = np.random.default_rng(seed)
    t = np.arange(n) / sr_src
    top = 0.35 * min(sr_src, sr_dst)
    x = np.stack([sum(g.uniform(0.05, 0.2) * np.sin(2 * np.pi * g.uniform(80, top) * t + g.uniform(0, 6))
                      for _ in range(4)) for _ in range(C)])
    return x.astype(np.float32), sr_src, sr_dst


def _findings(ref, cand, sr):
    cmp = analyse_waveforms(ref, cand, sr, sr)
    return cmp, channel.waveform_findings(cmp) + hop.waveform_findings(cmp, min_snr_db=40.0)


@pytest.mark.slow
@PROPERTY
@given(clips())
def test_resample_along_the_channel_axis_is_named(clip):
    import librosa

    x, sr_src, sr_dst = clip
    ref = librosa.resample(x, orig_sr=sr_src, target_sr=sr_dst, axis=-1)  # (C, n')
    # librosa.resample(x.T, ...) works row by row on the (samples, channels) clip: each row's
    # C values become C' by the same linear map, so resampling the identity gives that map
    per_row = librosa.resample(np.eye(x.shape[0], dtype=np.float32), orig_sr=sr_src, target_sr=sr_dst)
    cand = x.T @ per_row.mean(axis=-1)  # == librosa.resample(x.T, ...).mean(axis=-1)
    cmp, found = _findings(ref, cand, sr_dst)
    codes = [f.code for f in found]
    if cmp.layout is None:  # the channel resampler's weights were the mean's: a plain drift
        assert codes == ["hop.duration_drift"], codes
        return
    assert codes == ["channel.axis_mismatch"], codes
    ev = found[0].evidence
    assert ev["layout"] == "channel_axis_resampled"
    assert (ev["reference_samples"], ev["candidate_samples"]) == (ref.shape[1], x.shape[1])


@PROPERTY
@given(clips())
def test_resample_along_the_sample_axis_passes(clip):
    import librosa

    x, sr_src, sr_dst = clip
    ref = librosa.resample(x, orig_sr=sr_src, target_sr=sr_dst, axis=-1)
    _, found = _findings(ref, ref.mean(axis=0), sr_dst)
    assert found == []
