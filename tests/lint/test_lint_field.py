"""Lint rules for field faults (issue 17, point 8): PK603 resampler on (samples, channels),
PK702 rope_theta read with a fallback transformers 5 moved."""

import contextlib
import io
import textwrap

import pytest

from porting_kit.cli import lint_main as main

CASES = [
    ("PK603", """
        import librosa
        def to_16k(wav):
            return librosa.resample(wav.T, orig_sr=24000, target_sr=16000)
        """, """
        import librosa
        def to_16k(wav):
            return librosa.resample(wav, orig_sr=24000, target_sr=16000)
        """),
    ("PK603", """
        import torchaudio
        def to_16k(audio):
            return torchaudio.functional.resample(audio.transpose(0, 1), 24000, 16000)
        """, """
        import torchaudio
        def to_16k(audio):
            return torchaudio.functional.resample(audio.transpose(0, 1), 24000, 16000, dim=0)
        """),
    ("PK702", """
        class Attention:
            def __init__(self, config):
                self.base = getattr(config, "rope_theta", 10000.0)
        """, """
        class Attention:
            def __init__(self, config):
                self.base = config.rope_parameters["rope_theta"]
        """),
    ("PK702", """
        def rope_scaling(config):
            \"\"\"The scaling parameters.\"\"\"
            return getattr(config, "rope_scaling", {})
        """, """
        def rope_scaling(config):
            params = config.rope_parameters
            return params if params.get("rope_type", "default") != "default" else getattr(config, "rope_scaling", {})
        """),
]


def _lint(tmp_path, source):
    path = tmp_path / "pkg" / "model.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([str(path)])
    return rc, buf.getvalue(), str(path)


@pytest.mark.parametrize("code,bad,good", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_line_gives_its_code_at_its_line(tmp_path, code, bad, good):
    from porting_kit.lint.rules import severity_of

    rc, out, path = _lint(tmp_path, bad)
    assert rc == (1 if severity_of(code) == "fail" else 0)  # PK702 is a warn: exit 1 on fail only
    lines = out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}:3:") and f" {code} " in lines[0], out
    assert "(fix: " in lines[0]


@pytest.mark.parametrize("code,bad,good", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_good_line_is_clean(tmp_path, code, bad, good):
    assert _lint(tmp_path, good)[:2] == (0, "")


def test_scipy_resample_and_codes_are_left_alone(tmp_path):
    rc, out, _ = _lint(tmp_path, """
        from scipy import signal
        import librosa
        def f(wav, codes):
            a = signal.resample(wav.T, 100)
            b = librosa.resample(codes.T, orig_sr=1, target_sr=2)
            c = getattr(cfg, "rope_theta", None)
            return a, b, c
        """)
    assert (rc, out) == (0, "")


#: (code, source): the rule must fire although a comment, a docstring or a message string names
#: the word that silences it in code (rules read the AST, never the text; issue 29, point 4).
PROSE_CASES = [
    ("PK702", """
        class Attention:
            def __init__(self, config):
                self.base = getattr(config, "rope_theta", 10000.0)  # TODO: rope_parameters
                \"\"\"rope_parameters is transformers 5's home of the base.\"\"\"
        """),
    ("PK404", """
        def stream_decode(decoder, codes, context_frames, upsample):
            trim = context_frames * upsample  # causal decoder? latency? lookahead? (not checked)
            wav = decoder(codes)[trim:]
            return wav
        """),
    ("PK403", """
        import torch
        def code2wav(self, audio_codes):
            safe = torch.clamp(audio_codes, max=self.codebook_size - 1)  # eos / lengths handled upstream?
            return self.codec.decode(safe.unsqueeze(0), note="trim the eos frames later")
        """),
]


@pytest.mark.parametrize("code,bad", PROSE_CASES, ids=[c[0] for c in PROSE_CASES])
def test_prose_never_silences_a_rule(tmp_path, code, bad):
    rc, out, path = _lint(tmp_path, bad)
    lines = out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}:3:") and f" {code} " in lines[0], out


def test_pk701_meta_hint_and_reinit_read_the_ast(tmp_path):
    """A comment naming init_empty_weights is no meta-device build; a comment showing an outside
    re-initialisation is none; a real PreTrainedModel subclass is one."""
    body = textwrap.dedent("""
        import torch
        class Rope(torch.nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.register_buffer("inv_freq", torch.ones(dim), persistent=False)
        """)
    rc, out, _ = _lint(tmp_path, body + "# built with init_empty_weights(); model.rope.inv_freq = fresh\n")
    assert (rc, out) == (0, "")
    rc, out, path = _lint(tmp_path, body + "class MyPreTrainedModel(torch.nn.Module):\n    pass\n"
                                          "class Model(MyPreTrainedModel):\n    pass\n"
                                          "# model.rope.inv_freq = fresh (a comment, not code)\n")
    assert rc == 1 and out.startswith(f"{path}:5:") and " PK701 " in out, out
    rc, out, _ = _lint(tmp_path, body + "class Model(MyPreTrainedModel):\n"
                                        "    def _init_weights(self, module):\n"
                                        "        module.inv_freq = module.compute()\n")
    assert (rc, out) == (0, "")


#: (bad, line, good): PK702 holds for the class "a rope_theta read whose absence falls back to a
#: literal" (issue 29, point 4): the getattr default, an ``or`` literal, a hasattr conditional
#: (expression or statement) and try / except AttributeError; each twin reads rope_parameters.
PK702_CLASS = [
    ("""
        class Attention:
            def __init__(self, config):
                self.base = getattr(config, "rope_theta", None) or 10000.0
        """, 3, """
        class Attention:
            def __init__(self, config):
                self.base = getattr(config, "rope_parameters", None)["rope_theta"] or 10000.0
        """),
    ("""
        class Attention:
            def __init__(self, config):
                self.base = config.rope_theta if hasattr(config, "rope_theta") else 10000.0
        """, 3, """
        class Attention:
            def __init__(self, config):
                self.base = config.rope_parameters["rope_theta"] if hasattr(config, "rope_parameters") else 1e4
        """),
    ("""
        class Attention:
            def __init__(self, config):
                self.base = 10000.0 if not hasattr(config, "rope_theta") else config.rope_theta
        """, 3, """
        class Attention:
            def __init__(self, config):
                self.base = 10000.0 if not hasattr(config, "rope_theta") else config.rope_theta
                self.params = config.rope_parameters
        """),
    ("""
        def rope_base(config):
            try:
                theta = config.rope_theta
            except AttributeError:
                theta = 10000.0
            return theta
        """, 3, """
        def rope_base(config):
            try:
                theta = config.rope_parameters["rope_theta"]
            except KeyError:
                theta = 10000.0
            return theta
        """),
    ("""
        def rope_scaling(config):
            if hasattr(config, "rope_scaling"):
                scaling = config.rope_scaling
            else:
                scaling = {}
            return scaling
        """, 3, """
        def rope_scaling(config):
            if "rope_parameters" in config.to_dict():
                scaling = config.to_dict()["rope_type"]
            elif hasattr(config, "rope_scaling"):
                scaling = config.rope_scaling
            else:
                scaling = {}
            return scaling
        """),
]


@pytest.mark.parametrize("bad,line,good", PK702_CLASS, ids=[f"PK702-class-{i}" for i in range(len(PK702_CLASS))])
def test_pk702_holds_for_the_class_of_fallback_reads(tmp_path, bad, line, good):
    rc, out, path = _lint(tmp_path, bad)
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 1 and lines[0].startswith(f"{path}:{line}:") and " PK702 " in lines[0], out
    assert _lint(tmp_path, good)[:2] == (0, "")


def test_pk702_reads_without_a_literal_fallback_are_left_alone(tmp_path):
    """No fallback (the read raises), a None default, a non-literal ``or``: not this rule's class."""
    rc, out, _ = _lint(tmp_path, """
        class Attention:
            def __init__(self, config):
                self.a = config.rope_theta
                self.b = getattr(config, "rope_theta", None)
                self.c = getattr(config, "rope_theta", None) or config.default_theta
                try:
                    self.d = config.rope_theta
                except AttributeError:
                    raise ValueError("rope_theta missing")
        """)
    assert (rc, out) == (0, "")


@pytest.mark.parametrize("silencer,silences", [
    ('self.note = "rope_parameters"', False),
    ('logger.info("see rope_parameters")', False),
    ('self.params = config.rope_parameters', True),
    ('self.params = cfg["rope_parameters"]', True),
    ('self.params = getattr(config, "rope_parameters", None)', True),
    ('self.params = hasattr(config, "rope_parameters")', True),
    ('self.params = "rope_parameters" in cfg', True),
    ('self.params = compute_default_rope_parameters(config)', True),
    ('self.params = rope_parameters', True),
])
def test_pk702_only_code_reading_rope_parameters_silences_it(tmp_path, silencer, silences):
    """A string literal that names rope_parameters (an assignment, a message) reads nothing; an
    attribute, name, key, getattr / hasattr / ``in`` test or rope_parameters call does."""
    rc, out, path = _lint(tmp_path, f"""
        class Attention:
            def __init__(self, config, cfg):
                self.base = getattr(config, "rope_theta", 10000.0)
                {silencer}
        """)
    if silences:
        assert (rc, out) == (0, "")
    else:
        assert out.startswith(f"{path}:3:") and " PK702 " in out and len(out.splitlines()) == 1, out


def test_pk702_fallback_must_land_where_the_read_lands(tmp_path):
    """A handler or else branch that assigns a literal to some other name is no fallback for the read."""
    rc, out, _ = _lint(tmp_path, """
        def rope_base(config, module):
            try:
                theta = config.rope_theta
                dim = module.head_dim
            except AttributeError:
                dim = 64
            if hasattr(config, "rope_theta"):
                base = config.rope_theta
            else:
                scale = 1.0
            return theta, dim, base, scale
        """)
    assert (rc, out) == (0, "")
