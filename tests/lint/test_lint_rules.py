"""Each Python lint rule: a planted fault gives its exact code, the fixed snippet gives nothing.

Snippets include the field cases from issue 7 (MOSS-TTS-Nano's request key,
``d.get(a) or d.get(b)`` on a tensor dict, ``.T.reshape(-1)`` on stereo).
"""

from __future__ import annotations

import textwrap

import pytest

from porting_kit.cli import lint_main as main

CASES = [
    # (code, bad, good)
    ("PK101", """
        import torch
        def pick(extra):
            d = {"a": torch.tensor(0)}
            return d.get("a") or d.get("b")
        """, """
        import torch
        def pick(extra):
            d = {"a": torch.tensor(0)}
            v = d.get("a")
            return v if v is not None else d.get("b")
        """),
    ("PK101", """
        import torch
        def ref(info_dict):
            return info_dict.get("reference_audio") or info_dict.get("ref_audio")
        """, """
        import torch
        def ref(info_dict):
            audio = info_dict.get("reference_audio")
            return audio if audio is not None else info_dict.get("ref_audio")
        """),
    ("PK102", """
        import torch
        def f(x: torch.Tensor, y):
            return x or y
        """, """
        import torch
        def f(x: torch.Tensor, y):
            return x if x is not None else y
        """),
    ("PK102", """
        import torch
        def f(n):
            mask = torch.zeros(n)
            if mask:
                return 1
        """, """
        import torch
        def f(n):
            mask = torch.zeros(n)
            if mask.any():
                return 1
        """),
    ("PK201", """
        class M:
            def forward(self, infos):
                gen = self._stream_gens["default"]
                return next(gen)
        """, """
        class M:
            def forward(self, infos):
                gen = self._stream_gens[infos[0]["global_request_id"]]
                return next(gen)
        """),
    ("PK202", """
        def key(info):
            return info.get("_omni_req_id")
        """, """
        def key(info):
            return info["global_request_id"]
        """),
    ("PK203", """
        def key(info):
            return str(info.get("global_request_id") or id(info))
        """, """
        def key(info):
            return str(info["global_request_id"])
        """),
    ("PK204", """
        class M:
            def forward(self, infos):
                for i, info in enumerate(infos):
                    self._stream_gens[i] = self.make(info)
        """, """
        class M:
            def forward(self, infos):
                for info in infos:
                    rid = info["global_request_id"]
                    self._stream_gens[rid] = self.make(info)
        """),
    ("PK301", """
        class M:
            def forward(self, x):
                for step in range(10):
                    if x[step].item() == 2:
                        break
        """, """
        class M:
            def forward(self, x):
                hit = (x == 2).nonzero()
                for step in range(10):
                    pass
                return hit.tolist()
        """),
    ("PK301", """
        class M:
            def forward(self, x):
                pass
            def stream_chunks(self, codes):
                for c in codes:
                    yield c.cpu()
        """, """
        class M:
            def forward(self, x):
                pass
            def stream_chunks(self, codes):
                for c in codes:
                    yield c
        """),
    ("PK302", """
        import torch
        def decode_loop(frames):
            for f in frames:
                torch.cuda.synchronize()
        """, """
        import torch
        def decode_loop(frames):
            for f in frames:
                pass
        """),
    ("PK401", """
        import torch
        def synth(self, codes):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return self.codec.decode(codes)
        """, """
        import torch
        def synth(self, codes):
            with torch.autocast("cuda", enabled=False):
                return self.codec.decode(codes.float())
        """),
    ("PK402", """
        import torch
        def load(self):
            self.vocoder = self.vocoder.to(torch.bfloat16)
        """, """
        import torch
        def load(self):
            self.vocoder = self.vocoder.float()
        """),
    ("PK501", """
        import torch
        class M:
            def forward(self, seed):
                torch.manual_seed(seed)
        """, """
        import torch
        class M:
            def forward(self, seed):
                with torch.random.fork_rng():
                    torch.manual_seed(seed)
        """),
    ("PK502", """
        import torch
        class M:
            def forward(self, logits):
                return torch.multinomial(logits.softmax(-1), 1)
        """, """
        import torch
        class M:
            def forward(self, logits, generator):
                return torch.multinomial(logits.softmax(-1), 1, generator=generator)
        """),
    ("PK601", """
        def to_mono(wav):
            return wav.T.reshape(-1)
        """, """
        def to_mono(wav):
            return wav.mean(dim=0)
        """),
    ("PK601", """
        def to_mono(audio):
            return audio.transpose(0, 1).contiguous().reshape(-1)
        """, """
        def to_codes(codes):
            return codes.transpose(0, 1).contiguous().reshape(-1)
        """),
    ("PK602", """
        def to_mono(stereo_wav):
            return stereo_wav.flatten()
        """, """
        def to_mono(stereo_wav):
            return stereo_wav.mean(0)
        """),
    ("PK701", """
        import torch
        from transformers import PreTrainedModel
        class Rope(torch.nn.Module):
            def __init__(self, dim):
                super().__init__()
                inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2) / dim))
                self.register_buffer("inv_freq", inv_freq, persistent=False)
        class Model(PreTrainedModel):
            pass
        """, """
        import torch
        from transformers import PreTrainedModel
        class Rope(torch.nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.dim = dim
                self.register_buffer("inv_freq", torch.empty(dim // 2), persistent=False)
            def reset_inv_freq(self):
                self.inv_freq = 1.0 / (10000 ** (torch.arange(0, self.dim, 2) / self.dim))
        class Model(PreTrainedModel):
            pass
        """),
    ("PK701", """
        import torch
        class DecoderRotatoryEmbedding(torch.nn.Module):
            def __init__(self, inv_freq):
                super().__init__()
                self.register_buffer("inv_freq", inv_freq, persistent=False)
                self.original_inv_freq = self.inv_freq
        """, """
        import torch
        class DecoderRotaryEmbedding(torch.nn.Module):
            def __init__(self, inv_freq):
                super().__init__()
                self.register_buffer("inv_freq", inv_freq, persistent=False)
                self.original_inv_freq = self.inv_freq
        """),
    ("PK801", """
        try:
            import torchaudio
        except ImportError:
            import soundfile
            torchaudio = None
            soundfile.load_wav = soundfile.read
        """, """
        class Model:
            def load_weights(self, weights):
                try:
                    import torchaudio
                except ImportError:
                    import soundfile
                    soundfile.load_wav = soundfile.read
        """),
    ("PK901", """
        class MyAdapter:
            async def build(self, request, sampling_params_list, has_inline_ref_audio):
                ref_audio = request.ref_audio
                params = {"text": request.input}
                return params
        """, """
        class MyAdapter:
            async def build(self, request, sampling_params_list, has_inline_ref_audio):
                ref_audio = request.ref_audio
                params = {"text": request.input, "ref_audio": ref_audio}
                return params
        """),
]


def _lint(tmp_path, source: str, *args: str) -> tuple[int, str]:
    path = tmp_path / "pkg" / "model.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([str(path), *args])
    return rc, buf.getvalue()


@pytest.mark.parametrize("code,bad,good", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_snippet_gives_its_code(tmp_path, code, bad, good):
    rc, out = _lint(tmp_path, bad)
    assert rc == 1, out
    codes = [line.split(": ", 1)[1].split(" ", 1)[0] for line in out.splitlines()]
    assert code in codes, out
    for line in out.splitlines():
        assert line.startswith(str(tmp_path / "pkg" / "model.py") + ":")
        assert "(fix: " in line


@pytest.mark.parametrize("code,bad,good", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_fixed_snippet_is_clean(tmp_path, code, bad, good):
    rc, out = _lint(tmp_path, good)
    assert out == "" and rc == 0, out


def test_moss_tts_nano_field_case(tmp_path):
    """vLLM-Omni 0.30.0's MOSS-TTS-Nano line: legacy key and id() fallback, both named."""
    rc, out = _lint(tmp_path, """
        import torch
        class MossTTSNano(torch.nn.Module):
            def forward(self, runtime_additional_information=None):
                for info in runtime_additional_information:
                    request_key = str(info.get("global_request_id") or info.get("_omni_req_id") or id(info))
                    if request_key not in self._stream_gens:
                        self._stream_gens[request_key] = self._create_stream_gen(info)
        """)
    assert rc == 1
    assert [ln.split()[1] for ln in out.splitlines()] == ["PK203", "PK202"]
    assert ":5:" in out.splitlines()[0]


def test_sync_outside_loop_and_in_for_iter_not_flagged(tmp_path):
    rc, out = _lint(tmp_path, """
        class M:
            def forward(self, x):
                n = x.sum().item()
                for v in x.tolist():
                    pass
        """)
    assert (rc, out) == (0, "")


def test_while_test_runs_every_iteration(tmp_path):
    rc, out = _lint(tmp_path, """
        class M:
            def decode(self, x):
                while x.max().item() > 0:
                    x = x - 1
        """)
    assert rc == 1 and " PK301 " in out and ":3:" in out


def test_training_only_sampling_not_flagged(tmp_path):
    rc, out = _lint(tmp_path, """
        import torch
        class DropPath(torch.nn.Module):
            def forward(self, x):
                if self.drop_prob == 0.0 or not self.training:
                    return x
                return x * torch.rand(x.shape[0])
        class Quantizer(torch.nn.Module):
            def forward(self, z):
                if self.training:
                    dropout = torch.randint(1, 4, (z.shape[0],))
                drop = self.training and torch.rand(1) < 0.1
                return z
        """)
    assert (rc, out) == (0, "")


def test_isinstance_narrowing_is_respected(tmp_path):
    rc, out = _lint(tmp_path, """
        import torch
        def prep(image):
            if isinstance(image, list) and image and isinstance(image[0], torch.Tensor):
                image = torch.stack(image, dim=0)
            elif isinstance(image, list) and image:
                image = image[0]
            return image
        def profile(input_ids: torch.Tensor):
            if isinstance(input_ids, torch.Tensor):
                return input_ids.numel() == 0
            else:
                return not input_ids
        """)
    assert (rc, out) == (0, "")


def test_fp32_autocast_and_text_tokenizer_decode_not_flagged(tmp_path):
    rc, out = _lint(tmp_path, """
        import torch
        def run(self, mel, ids):
            with torch.autocast(device_type="cuda", dtype=torch.float32):
                wav = self.vocoder(mel)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                text = self.tokenizer.decode(ids)
            return wav, text
        """)
    assert (rc, out) == (0, "")


def test_seed_in_test_file_is_not_model_code(tmp_path):
    path = tmp_path / "scripts" / "bench.py"
    path.parent.mkdir()
    path.write_text("import torch\ntorch.manual_seed(0)\n")
    assert main([str(path)]) == 0


def test_noqa_suppresses_one_line(tmp_path):
    rc, out = _lint(tmp_path, """
        def to_mono(wav, wav2):
            a = wav.T.reshape(-1)  # noqa: PK601
            b = wav2.T.reshape(-1)  # noqa: E501
            return a, b
        """)
    assert rc == 1
    assert len(out.splitlines()) == 1 and ":3:" in out and "PK601" in out


def test_select_and_ignore(tmp_path):
    bad = """
        import torch
        class M:
            def forward(self, wav, logits):
                torch.manual_seed(0)
                return wav.T.reshape(-1), torch.multinomial(logits, 1)
        """
    rc, out = _lint(tmp_path, bad, "--select", "PK6")
    assert rc == 1 and {ln.split()[1] for ln in out.splitlines()} == {"PK601"}
    rc, out = _lint(tmp_path, bad, "--ignore", "PK5,PK601")
    assert (rc, out) == (0, "")
    rc, out = _lint(tmp_path, bad)
    assert {ln.split()[1] for ln in out.splitlines()} == {"PK501", "PK502", "PK601"}


def test_attribute_words_and_wrong_annotations(tmp_path):
    """`freq_pad` is not a request dict; `flag: Tensor | None = False` is a flag, not a tensor."""
    rc, out = _lint(tmp_path, """
        import torch
        class Conv(torch.nn.Module):
            def forward(self, x, output_attentions: torch.Tensor | None = False):
                x = torch.nn.functional.pad(x, (self.freq_pad[0], self.freq_pad[1]))
                if not output_attentions:
                    return x
        class Talker(torch.nn.Module):
            def forward(self, x):
                return self._stream_states[0]
        """)
    assert rc == 1 and [ln.split()[1] for ln in out.splitlines()] == ["PK201"]
    assert ":9:" in out


def test_pk701_buffer_reinitialised_by_the_models_init_weights_is_not_flagged(tmp_path):
    """transformers 5's modeling files re-initialise a rotary buffer from the model's
    ``_init_weights`` (``init.copy_(module.inv_freq, ...)``): not a PK701 (Nemotron-ASR's case)."""
    src = textwrap.dedent("""
        import torch
        from transformers import PreTrainedModel
        class RelPos(torch.nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.register_buffer("inv_freq", torch.ones(dim), persistent=False)
        class Model(PreTrainedModel):
            def _init_weights(self, module):
                if isinstance(module, RelPos):
                    init.copy_(module.inv_freq, torch.ones(3))
        """)
    good = tmp_path / "good.py"
    good.write_text(src)
    bad = tmp_path / "bad.py"
    bad.write_text(src.replace("init.copy_(module.inv_freq, torch.ones(3))", "pass"))
    assert main([str(good), "--select", "PK701"]) == 0
    assert main([str(bad), "--select", "PK701"]) == 1
