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


# --------------------------------------------------------------------------- lookahead (right context)

LA = 2  # lookahead frames of the port


def centred_decode(codes):
    """(1, T) codes -> T*HOP samples: per-frame value, centred box filter over R frames each side
    (non-causal, zero padded): a chunk needs R frames of left context and R of lookahead."""
    x = torch.repeat_interleave(torch.sin(codes[0].double() * 0.7 + 0.3), HOP)  # code 0 is not silence
    x = torch.nn.functional.pad(x, (R * HOP, R * HOP))
    return x.unfold(0, 2 * R * HOP + 1, 1).mean(-1)[None].float(), 16000


def _la_spec(stream, context=4, lookahead=LA, batch=None):
    m = type("M", (), {})()
    m.decode_candidate_stream = stream
    m.stream_chunk_frames, m.stream_context_frames, m.stream_lookahead_frames = 5, context, lookahead
    if batch is not None:
        m.decode_candidate_stream_batch = batch
        m.decode_candidate = lambda c: centred_decode(c)
    return Spec(module=m, name="toy_lookahead")


def _chunks(decode, codes, chunk, ctx, la, trim):
    """A port's chunk loop that drops ``trim(b - e)`` samples at each chunk's end."""
    T, parts = codes.shape[-1], []
    for s in range(0, T, chunk):
        e, a = min(T, s + chunk), max(0, s - ctx)
        b = min(T, e + la)
        y, _ = decode(codes[:, a:b])
        parts.append(y[0, (s - a) * HOP:y.shape[-1] - trim(b - e)])
    return torch.cat(parts), 16000


def test_stream_decode_with_lookahead_matches_non_causal_full_decode():
    full, _ = centred_decode(CODES)
    y, _ = stream_decode(centred_decode, CODES, 5, R, HOP, lookahead_frames=R)
    np.testing.assert_allclose(y[0], full[0].numpy(), atol=1e-6)


def test_lookahead_port_passes():
    full, _ = centred_decode(CODES)
    good = _la_spec(lambda c, k, ctx, la: stream_decode(centred_decode, c, k, ctx, HOP, la))
    assert check_stream(good, CODES, HOP, full, trim_d=0) == []


def test_spec_without_lookahead_name_is_called_with_three_arguments():
    full, _ = toy_decode(CODES)
    calls = []

    def three(c, k, ctx):
        calls.append((k, ctx))
        return stream_decode(toy_decode, c, k, ctx, HOP)

    assert check_stream(_spec(three), CODES, HOP, full, trim_d=D) == [] and calls == [(5, 4)]


def test_too_little_lookahead_is_fixed_by_more():
    full, _ = centred_decode(CODES)
    spec = _la_spec(lambda c, k, ctx, la: stream_decode(centred_decode, c, k, ctx, HOP, la), lookahead=1)
    (f,) = check_stream(spec, CODES, HOP, full, trim_d=0)
    assert f.code == "hop.stream_boundary"
    assert f.evidence["more_context_fixes"] is False and f.evidence["more_lookahead_fixes"] is True
    assert f.evidence["more_lookahead_frames"] == 2 and f.evidence["lookahead_frames"] == 1


def test_untrimmed_lookahead_is_named_with_its_offset():
    full, _ = centred_decode(CODES)
    spec = _la_spec(lambda c, k, ctx, la: _chunks(centred_decode, c, k, ctx, la, lambda n: 0))
    (f,) = check_stream(spec, CODES, HOP, full, trim_d=0)
    assert f.code == "hop.stream_lookahead" and f.evidence["trim_fit"] == "untrimmed"
    assert f.evidence["trim_samples"] == 0 and f.evidence["expected_trim_samples"] == LA * HOP
    assert f.evidence["missing_samples"] == -7 * LA * HOP  # 8 chunks, the last without lookahead
    assert f.evidence["first_mismatch_sample"] == 5 * HOP  # chunk 1 starts LA*HOP samples late


def test_lookahead_trimmed_by_wrong_count():
    full, _ = centred_decode(CODES)
    spec = _la_spec(lambda c, k, ctx, la: _chunks(centred_decode, c, k, ctx, la,
                                                  lambda n: n * HOP - 3 if n else 0))
    (f,) = check_stream(spec, CODES, HOP, full, trim_d=0)
    assert f.code == "hop.stream_lookahead" and f.evidence["trim_fit"] == "wrong_count"
    assert f.evidence["trim_samples"] == LA * HOP - 3 and f.evidence["missing_samples"] == -7 * 3


def test_lookahead_trimmed_also_where_the_codes_end():
    full, _ = centred_decode(CODES)
    spec = _la_spec(lambda c, k, ctx, la: _chunks(centred_decode, c, k, ctx, la, lambda n: LA * HOP))
    (f,) = check_stream(spec, CODES, HOP, full, trim_d=0)
    assert f.code == "hop.stream_lookahead" and f.evidence["trim_fit"] == "fixed_trim"
    assert f.evidence["first_mismatch_sample"] == 40 * HOP - LA * HOP
    assert f.where.samples == [40 * HOP - LA * HOP, 40 * HOP]


# --------------------------------------------------------------------------- batched streaming

from porting_kit.errors import InputError  # noqa: E402
from porting_kit.probes.streaming import batch_lengths, stream_decode_batch  # noqa: E402
from porting_kit.checks.hop import check_stream_batch  # noqa: E402


def _good_batch(codes, lengths, k, ctx, la):
    return [y[0] for y in stream_decode_batch(centred_decode, codes, lengths, k, ctx, HOP, la)]


def test_batch_lengths_are_very_different():
    assert batch_lengths(40) == [40, 25, 11] and batch_lengths(1) == [1]


def test_clean_batched_stream_passes():
    assert check_stream_batch(_la_spec(None, batch=_good_batch), CODES, HOP, 0) == []


def test_row_trimmed_with_another_rows_length():
    def bad(codes, lengths, k, ctx, la):  # every row run to the padded batch's length
        return [stream_decode(centred_decode, codes[r], k, ctx, HOP, la)[0][0] for r in range(len(lengths))]

    (f,) = check_stream_batch(_la_spec(None, batch=bad), CODES, HOP, 0)
    assert f.code == "hop.stream_batch_row" and f.evidence["request"] == 1
    assert f.evidence["trimmed_like_request"] == 0 and f.evidence["stream_samples"] == 40 * HOP
    assert f.evidence["expected_samples"] == 25 * HOP
    assert f.where.samples == [(25 - R) * HOP, 25 * HOP]  # the padding reaches R frames back


def test_row_lookahead_read_from_padding_is_a_boundary_fault_of_that_row():
    def bad(codes, lengths, k, ctx, la):  # lookahead read past the row's end, from padding
        out = []
        for r, n in enumerate(lengths):
            y, _ = stream_decode(centred_decode, codes[r], k, ctx, HOP, la)
            out.append(y[0, :n * HOP])
        return out

    (f,) = check_stream_batch(_la_spec(None, batch=bad), CODES, HOP, 0)
    assert f.code == "hop.stream_boundary" and f.evidence["request"] == 1
    assert f.evidence["first_mismatch_sample"] == 25 * HOP - R * HOP  # R frames of padding reach back
    assert f.evidence["batch_lengths"] == [40, 25, 11]


def test_batch_of_wrong_size_is_an_input_error():
    import pytest

    with pytest.raises(InputError, match="one per request"):
        check_stream_batch(_la_spec(None, batch=lambda c, n, k, ctx, la: [c[0, 0].float()]), CODES, HOP, 0)


def test_lookahead_on_a_decoder_that_trims_d_samples():
    """Causal toy decoder (frames*HOP - D samples): a clean lookahead stream passes, an untrimmed
    one is named, though each chunk's end sits D samples before its frame boundary."""
    full, _ = toy_decode(CODES)
    good = _la_spec(lambda c, k, ctx, la: stream_decode(toy_decode, c, k, ctx, HOP, la))
    assert check_stream(good, CODES, HOP, full, trim_d=D) == []

    def untrimmed(c, k, ctx, la):  # slices from (s - a)*HOP - D, keeps the lookahead's samples
        T, parts = c.shape[-1], []
        for s in range(0, T, k):
            a = max(0, s - ctx)
            y, _ = toy_decode(c[:, a:min(T, s + k + la)])
            parts.append(y[0, 0 if s == 0 else (s - a) * HOP - D:])
        return torch.cat(parts), 16000

    (f,) = check_stream(_la_spec(untrimmed), CODES, HOP, full, trim_d=D)
    assert f.code == "hop.stream_lookahead" and f.evidence["trim_fit"] == "untrimmed"
    # causal: the kept lookahead samples are the next ones of the full decode; the stream repeats
    # them, from the end of chunk 0's lookahead on
    assert f.evidence["first_mismatch_sample"] == 5 * HOP - D + LA * HOP


# --------------------------------------------------------------------------- a stream cut short at the end


def test_stream_cut_short_at_the_end_is_a_length_fault_not_a_seam():
    """The last chunk trimmed by 7 samples (40 frames, 7 seams: 1 per seam by coincidence)."""
    full, _ = toy_decode(CODES)

    def short(c, k, ctx):
        y, sr = stream_decode(toy_decode, c, k, ctx, HOP)
        return y[:, :-7], sr

    (f,) = check_stream(_spec(short), CODES, HOP, full, trim_d=D)
    n = 40 * HOP - D
    assert f.code == "hop.length_mismatch" and f.evidence["streamed"] is True
    assert f.evidence["stream_samples"] == n - 7 and f.evidence["full_decode_samples"] == n
    assert f.evidence["difference_samples"] == -7 and f.where.samples == [n - 7, n]
    assert "seam" not in f.message and f"samples {n - 7}-{n} of the full decode are missing" in f.message


def test_stream_padded_at_the_end_is_a_length_fault():
    full, _ = toy_decode(CODES)

    def padded(c, k, ctx):
        y, sr = stream_decode(toy_decode, c, k, ctx, HOP)
        return np.concatenate([y, np.zeros((1, 5), y.dtype)], axis=1), sr

    (f,) = check_stream(_spec(padded), CODES, HOP, full, trim_d=D)
    assert f.code == "hop.length_mismatch" and f.evidence["difference_samples"] == 5
    assert "padded: 5 samples past" in f.message


def test_stream_that_cannot_stream_is_not_claimed_checked():
    """decode_candidate_stream returning None: the hop.ok evidence says streaming_checked False."""
    from types import SimpleNamespace

    from porting_kit.checks.hop import _streaming

    full, _ = toy_decode(CODES)
    pair = SimpleNamespace(hop_length=HOP, codes=CODES, candidate=full, dtype_explains=False)
    m = {"reference_samples": int(full.shape[-1])}
    ev = {}
    assert _streaming(_spec(lambda c, k, ctx: None), pair, m, ev) == [] and ev == {"streaming_checked": False}
    ev = {}
    good = _spec(lambda c, k, ctx: stream_decode(toy_decode, c, k, ctx, HOP))
    assert _streaming(good, pair, m, ev) == [] and ev == {"streaming_checked": True}


# --------------------------------------------------------------------------- what the stream functions return

import pytest  # noqa: E402


@pytest.mark.parametrize("ret, line", [
    ("oops", "decode_candidate_stream_batch returned a str, not a list of waveforms (one per request "
             "of the batch of 3)"),
    (3.0, "decode_candidate_stream_batch returned a float, not a list of waveforms"),
    ({"a": 1}, "decode_candidate_stream_batch returned a dict, not a list of waveforms"),
    (["a", "b", "c"], "decode_candidate_stream_batch's waveform for request 0 is a str, not a waveform"),
    ([1.0, 2.0, 3.0], "decode_candidate_stream_batch's waveform for request 0 is a float, not a waveform"),
])
def test_batch_stream_that_returns_no_waveforms_is_one_input_error(ret, line):
    with pytest.raises(InputError) as e:
        check_stream_batch(_la_spec(None, batch=lambda c, n, k, ctx, la: ret), CODES, HOP, 0)
    assert str(e.value).startswith(line) and "\n" not in str(e.value)


@pytest.mark.parametrize("ret, line", [
    ("oops", "decode_candidate_stream returned a str, not (waveform, sample_rate)"),
    (np.zeros(317), "decode_candidate_stream returned a ndarray, not (waveform, sample_rate)"),
    (("oops", 16000), "decode_candidate_stream's waveform is a str, not a waveform"),
    ((np.zeros((1, 2, 3, 4)), 16000), "decode_candidate_stream's waveform is not a waveform of shape"),
])
def test_stream_that_returns_no_waveform_is_one_input_error(ret, line):
    full, _ = toy_decode(CODES)
    with pytest.raises(InputError) as e:
        check_stream(_spec(lambda c, k, ctx: ret), CODES, HOP, full, trim_d=D)
    assert str(e.value).startswith(line) and "\n" not in str(e.value)


@pytest.mark.slow
def test_batch_stream_returning_a_str_is_exit_2_with_one_line(tmp_path, capsys):
    """End to end through the CLI on the audio-only toy codec spec."""
    from pathlib import Path

    from porting_kit.cli import main

    toy = Path(__file__).resolve().parents[1] / "specs"
    p = tmp_path / "stream_str.py"
    p.write_text(f"import sys\nsys.path.insert(0, {str(toy)!r})\nfrom toy_codec import *  # noqa\n\n"
                 "def decode_candidate_stream_batch(codes, lengths, chunk, context, lookahead):\n"
                 "    return 'oops'\n")
    assert main(["check", str(p), "--only", "hop"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "decode_candidate_stream_batch returned a str, not a list of waveforms" in err[0]
