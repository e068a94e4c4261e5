"""Lint rules for streaming and codec-I/O field faults (issue 17, point 8): PK205 per-request
stream state popped on every chunk, PK403 special tokens clamped into the codebook before the
decode, PK404 stream trim without the decoder's latency (warn), PK604 axis guessed from the
shape of a stream chunk (warn). Each planted line gives its exact code; each twin is clean."""

import contextlib
import io
import textwrap

import pytest

from porting_kit.cli import lint_main as main
from porting_kit.lint.rules import severity_of

CASES = [
    ("PK205", """
        class Code2Wav:
            def decode_chunk(self, request_id, codes):
                state = self._stream_state.pop(request_id, None)
                return self.codec.decode(codes, state)
        """, """
        class Code2Wav:
            def decode_chunk(self, request_id, codes, is_last):
                state = self._stream_state.get(request_id)
                if is_last:
                    self._stream_state.pop(request_id, None)
                return self.codec.decode(codes, state)
        """),
    ("PK205", """
        class Vocoder:
            def stream_step(self, req_id, mel):
                del self.caches[req_id]
                return self.vocoder(mel)
        """, """
        class Vocoder:
            def stream_step(self, req_id, mel, finished):
                out = self.vocoder(mel, self.caches[req_id])
                if not finished:
                    return out
                del self.caches[req_id]
                return out
        """),
    ("PK205", """
        class Code2Wav:
            def forward(self, codes, info):  # async_chunk: called once per chunk of a request
                state = self._decoder_cache.pop(info["global_request_id"], None)
                return self.codec.decode(codes, state, first=info["chunk_id"] == 0)
        """, """
        class Code2Wav:
            def forward(self, codes, info):  # async_chunk: called once per chunk of a request
                state = self._decoder_cache.get(info["global_request_id"])
                if info.get("finished"):
                    self._decoder_cache.pop(info["global_request_id"], None)
                return self.codec.decode(codes, state, first=info["chunk_id"] == 0)
        """),
    ("PK403", """
        import torch
        def code2wav(self, audio_codes):
            safe = torch.clamp(audio_codes, max=self.codebook_size - 1)
            return self.codec.decode(safe.unsqueeze(0))
        """, """
        import torch
        def code2wav(self, audio_codes):
            safe = torch.clamp(audio_codes[:, : self.num_frames], max=self.codebook_size - 1)
            return self.codec.decode(safe.unsqueeze(0))
        """),
    ("PK403", """
        class Code2Wav:
            def forward(self, codes):
                codes = codes.clamp(0, self.codebook_size - 1)
                return self.codec.decode(codes)
        """, """
        class Code2Wav:
            def forward(self, codes):
                codes = codes[: self.first_eos_frame(codes)]
                codes = codes.clamp(0, self.codebook_size - 1)
                return self.codec.decode(codes)
        """),
    ("PK403", """
        def code2wav(codec, audio_codes, codebook_size):
            audio_codes = audio_codes.clone()
            audio_codes[audio_codes >= codebook_size] = 0
            return codec.decode(audio_codes)
        """, """
        def code2wav(codec, audio_codes, codebook_size):
            valid = (audio_codes < codebook_size).all(dim=0)
            audio_codes = audio_codes[:, valid]
            return codec.decode(audio_codes)
        """),
    ("PK403", """
        import torch
        def vocode(self, codes, vocab):
            codes = torch.where(codes >= vocab, 0, codes)
            return self.vocoder(codes)
        """, """
        import torch
        def vocode(self, codes, vocab):
            codes = torch.where(codes >= vocab, 0, codes)
            return self.embed(codes)
        """),
    ("PK404", """
        class Code2Wav:
            def decode_chunk(self, codes, left_context):
                return self.decoder(codes)[..., left_context * self.hop_length:]
        """, """
        class Code2Wav:
            def decode_chunk(self, codes, left_context):
                start = left_context * self.hop_length + self.decoder_latency
                return self.decoder(codes)[..., start:]
        """),
    ("PK404", """
        def stream_decode(decoder, codes, context_frames, upsample):
            trim = context_frames * upsample
            wav = decoder(codes)[trim:]
            return wav
        """, """
        def stream_decode(decoder, codes, context_frames, upsample):
            assert decoder.causal  # no lookahead: the left trim is exact
            trim = context_frames * upsample
            wav = decoder(codes)[trim:]
            return wav
        """),
    ("PK604", """
        class Streamer:
            def on_chunk(self, wav):
                if wav.shape[0] < wav.shape[1]:
                    wav = wav.T
                return wav
        """, """
        class Streamer:
            def on_chunk(self, wav):
                # the decoder emits (channels, samples); soundfile wants (samples, channels)
                return wav.T
        """),
    ("PK604", """
        def stream_audio(chunk):
            x = chunk.numpy()
            axis = 0 if x.shape[0] <= 2 else 1
            return x.mean(axis=axis)
        """, """
        def stream_audio(chunk):
            x = chunk.numpy()
            if x.shape[0] > 2:
                raise ValueError(f"expected (channels, samples) with at most 2 channels, got {x.shape}")
            return x.mean(axis=0)
        """),
]
IDS = [f"{c[0]}-{i}" for i, c in enumerate(CASES)]


def _lint(tmp_path, source):
    path = tmp_path / "pkg" / "model.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([str(path)])
    return rc, buf.getvalue(), str(path)


@pytest.mark.parametrize("code,bad,good", CASES, ids=IDS)
def test_bad_line_gives_its_code_at_its_line(tmp_path, code, bad, good):
    rc, out, path = _lint(tmp_path, bad)
    lines = out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}:3:") and f" {code} " in lines[0], out
    assert "(fix: " in lines[0]
    warn = severity_of(code) == "warn"
    assert rc == (0 if warn else 1) and ("[warn]" in lines[0]) is warn


@pytest.mark.parametrize("code,bad,good", CASES, ids=IDS)
def test_good_line_is_clean(tmp_path, code, bad, good):
    assert _lint(tmp_path, good)[:2] == (0, "")


def test_severities():
    assert [severity_of(c) for c in ("PK205", "PK403", "PK404", "PK604")] == ["fail", "warn", "warn", "warn"]


def test_teardown_and_put_back_pops_are_left_alone(tmp_path):
    rc, out, _ = _lint(tmp_path, """
        class Code2Wav:
            def on_requests_finished(self, request_ids):
                for request_id in request_ids:
                    self._stream_state.pop(request_id, None)
            def decode_chunk(self, request_id, codes):
                state = self._stream_state.pop(request_id, None)
                state, wav = self.codec.decode(codes, state)
                self._stream_state[request_id] = state
                return wav
            def stream_chunk(self, request_id, codes):
                try:
                    return self.codec.decode(codes)
                except RuntimeError:
                    self._stream_state.pop(request_id, None)
                    raise
            def stream_all(self, request_id, chunks):
                for c in chunks:
                    yield self.codec.decode(c, self._stream_state[request_id])
                self._stream_state.pop(request_id, None)
            def next_chunk(self, request_id):
                return self._ready_chunks.pop(request_id, None)  # a one-shot handout, not state
        """)
    assert (rc, out) == (0, "")


def test_known_layouts_and_lower_clamps_are_left_alone(tmp_path):
    rc, out, _ = _lint(tmp_path, """
        import torch
        def decode_chunk(self, wav, codes, ref_wav):
            if wav.shape[0] > 1:
                wav = wav.mean(dim=0)
            codes = torch.clamp(codes, min=0)
            audio = self.codec.decode(codes)
            if ref_wav.shape[0] < ref_wav.shape[1]:
                pass
            return audio, wav
        def load_reference(wav):
            if wav.shape[0] > wav.shape[1]:
                wav = wav.T
            return wav
        """)
    assert (rc, out) == (0, "")
