"""Channel-mix family (``channel.*``): how the candidate lays out and serves channels.

Codes (DESIGN.md):

* ``channel.interleaved_flatten`` - a (C, T) waveform flattened into C*T mono
  samples (``x.T.reshape(-1)``; also the channel-major ``x.reshape(-1)``):
  C times the length, played C times slower, an octave down for C = 2;
* ``channel.wrong_downmix`` - one channel served instead of the channel mean;
* ``channel.shape_contract`` - the served output is not mono 1-D float32,
  finite, within [-1, 1].

Each is found by trying the hypothesis on the reference's decode of the same
codes (:func:`porting_kit.probes.waveform.analyse_waveforms`); the decode is shared with
the ``hop`` and ``dtype`` families (:func:`porting_kit.probes.codec_pair.get_audio_pair`).
Runs when the spec defines the audio names; else ``skip`` with the reason.
"""

from __future__ import annotations

from porting_kit.report.findings import Finding, ok, skip


def run(ctx) -> list[Finding]:
    """The ``channel.*`` findings of the spec's decoded pair (or ``channel.ok`` / a skip)."""
    from porting_kit.probes.codec_pair import get_audio_pair

    pair = get_audio_pair(ctx)
    if isinstance(pair, str):
        return [skip("channel", pair)]
    found = [f for f in pair.findings if f.check == "channel"]
    m = pair.comparison.metrics
    return found or [ok("channel", "served output is mono 1-D float32 in [-1, 1] and matches the "
                        "reference's channel mean",
                        {k: m[k] for k in ("reference_channels", "candidate_channels",
                                           "candidate_peak") if k in m})]
