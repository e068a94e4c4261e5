"""Chunked streaming decode vs one full decode, on a decoder whose output is frames*hop - d."""

import numpy as np
import torch

from porting_kit.spec import Spec
from porting_kit.checks.hop import check_stream
from porting_kit.probes.streaming import stream_decode

HOP, D, R = 8, 3, 2  # samples per frame, samples the decoder trims, receptive field (frames)


def toy_decode(codes):
    """(1, T) codes -> frames*HOP - D samples: per-frame value, causal box filter over R frames,
    then a 'valid' (D+1)-tap smoothing that drops D samples at the end."""
    x = torch.repeat_interleave(torch.sin(codes[0].double() * 0.7), HOP)
    x = torch.nn.functional.pad(x, (R * HOP - 1, 0))
    x = x.unfold(0, R * HOP, 1).mean(-1)
    y = x.unfold(0, D + 1, 1).mean(-1)
    return y[None].float(), 16000


class _Spec:
    def __init__(self, stream, context=4):
        self.module = type("M", (), {})()
        self.module.decode_candidate_stream = stream
        self.module.stream_chunk_frames = 5
        self.module.stream_context_frames = context


def _spec(stream, context=4):
    return Spec(module=_Spec(stream, context).module, name="toy")


CODES = torch.randint(0, 100, (1, 40), generator=torch.Generator().manual_seed(0))


def test_stream_decode_matches_full_decode_with_trim():
    full, _ = toy_decode(CODES)
    assert full.shape[-1] == 40 * HOP - D
    for ctx in (R + 1, R + 3):  # R frames of receptive field + the D trimmed samples
        y, _ = stream_decode(toy_decode, CODES, 5, ctx, HOP)
        assert y.shape[-1] == full.shape[-1]
        np.testing.assert_allclose(y[0], full[0].numpy(), atol=1e-6)


def test_correct_port_passes():
    full, _ = toy_decode(CODES)
    good = _spec(lambda c, k, ctx: stream_decode(toy_decode, c, k, ctx, HOP))
    assert check_stream(good, CODES, HOP, full, trim_d=D) == []


def test_fixed_context_slice_drops_d_per_seam():
    def bad(codes, chunk, ctx):  # slices out[ctx*hop:], as if output were frames*hop
        parts = []
        for s in range(0, codes.shape[-1], chunk):
            a = max(0, s - ctx)
            y, _ = toy_decode(codes[:, a:s + chunk])
            parts.append(y[0, (s - a) * HOP:])
        return torch.cat(parts), 16000

    full, _ = toy_decode(CODES)
    (f,) = check_stream(_spec(bad), CODES, HOP, full, trim_d=D)
    assert f.code == "hop.stream_boundary"
    assert f.evidence["missing_per_seam"] == D and f.evidence["more_context_fixes"] is False
    assert f.evidence["worst_seam"] == 1


def test_too_little_context_is_fixed_by_more():
    full, _ = toy_decode(CODES)
    short = _spec(lambda c, k, ctx: stream_decode(toy_decode, c, k, ctx, HOP), context=0)
    (f,) = check_stream(short, CODES, HOP, full, trim_d=D)
    assert f.code == "hop.stream_boundary" and f.evidence["more_context_fixes"] is True
    assert f.evidence["more_context_frames"] >= R - 1
