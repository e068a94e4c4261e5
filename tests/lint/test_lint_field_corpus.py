"""A field-idiom corpus from the frameworks' real files, with faults planted by AST edits (issue 29,
point 4).

Every ``.py`` vLLM-Omni 0.30.0 and SGLang-Omni 0.1.9 ship is read from their wheels at test time
(downloaded as ``test_framework_sweep.py`` does; nothing of theirs enters this repository). Each
plant below is an :class:`ast.NodeTransformer` that makes one field fault at one site of a real
file (drop an RMSNorm's fp32 upcast, replace its eps attribute with a literal, apply a plain gain
as ``(1 + w)``, give one of a function's norms a literal eps, read ``rope_theta`` with a fallback
next to a docstring naming ``rope_parameters``, run a codec call under bf16 autocast, resample a
transposed clip, pop a request's streaming state on every chunk, sample without the request's
generator). The mutated file (``ast.unparse``) is linted with the rule family selected and the
plant counts as found when its code appears more often than in the unmutated file unparsed the
same way. Precision: the clean shipped files, linted as shipped, give no finding of the family
beyond the reviewed ones listed in ``test_framework_sweep.py`` / here. Run with ``-s`` to see
the table.
"""

from __future__ import annotations

import ast
import copy
import zipfile
from collections import Counter

import pytest
from test_framework_sweep import WHEELS, _wheel

from porting_kit.lint.astutil import dotted
from porting_kit.lint.codec_precision import is_codec
from porting_kit.lint.engine import lint_source
from porting_kit.lint.rules import select_codes

#: Sites planted per kind (the first ones in path order; enough for a rate, cheap on 2 CPUs).
MAX_SITES = 40


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, str]:
    out: dict[str, str] = {}
    for package in WHEELS:
        tmp = tmp_path_factory.mktemp(package)
        with zipfile.ZipFile(_wheel(package, tmp)) as zf:
            for name in sorted(zf.namelist()):
                if name.endswith(".py"):
                    out[name] = zf.read(name).decode("utf-8", errors="replace")
    return out


# ------------------------------------------------------------------ the plants

class _Plant(ast.NodeTransformer):
    """Plants at most one fault: the ``site``-th candidate in walk order (``self.seen`` counts them)."""

    code = ""
    words: tuple[str, ...] = ()

    def __init__(self, site: int):
        self.site, self.seen, self.done = site, 0, False

    def take(self) -> bool:
        hit = self.seen == self.site and not self.done
        self.seen += 1
        if hit:
            self.done = True
        return hit


def _methods(cls: ast.ClassDef, names=("forward", "_norm")):
    return [s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name in names]


class DropUpcast(_Plant):
    """``x.to(torch.float32)`` / ``x.float()`` -> ``x`` in an ``*RMSNorm*`` class's forward / _norm."""

    code = "PKN103"
    words = ("RMSNorm", "RmsNorm", "RMS_Norm", "RMSnorm")

    def visit_ClassDef(self, node):
        if "rmsnorm" in node.name.lower().replace("_", "") and _methods(node):
            casts = [n for m in _methods(node) for n in ast.walk(m) if _is_upcast(n)]
            if casts and self.take():
                _Replace({id(c): c.func.value for c in casts}).visit(node)
                return node
        self.generic_visit(node)
        return node


def _is_upcast(n) -> bool:
    if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
        return False
    dtypes = [dotted(a) for a in n.args] + [dotted(kw.value) for kw in n.keywords if kw.arg == "dtype"]
    return (n.func.attr == "float" and not n.args) or (
        n.func.attr in ("to", "type") and any(d in ("torch.float32", "torch.float") for d in dtypes))


class _Replace(ast.NodeTransformer):
    def __init__(self, table):
        self.table = table

    def visit(self, node):
        if id(node) in self.table:
            return self.table[id(node)]
        return super().visit(node)


class LiteralEps(_Plant):
    """``self.eps`` / ``self.variance_epsilon`` -> ``1e-6`` in a norm class's forward / _norm."""

    code = "PKN101"
    words = ("Norm",)

    def visit_ClassDef(self, node):
        if "norm" in node.name.lower():
            uses = [n for m in _methods(node) for n in ast.walk(m)
                    if isinstance(n, ast.Attribute) and dotted(n.value) == "self" and "eps" in n.attr.lower()
                    and isinstance(n.ctx, ast.Load)]
            inits = [s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"]
            if uses and inits and self.take():
                _Replace({id(u): ast.Constant(1e-6) for u in uses}).visit(node)
                return node
        self.generic_visit(node)
        return node


class OffsetGain(_Plant):
    """``... * self.weight`` -> ``... * (1 + self.weight)`` in a norm class whose weight starts at ones."""

    code = "PKN102"
    words = ("Norm",)

    def visit_ClassDef(self, node):
        if "norm" in node.name.lower() and any(
                isinstance(n, ast.Call) and dotted(n.func).endswith("ones")
                for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__" for n in ast.walk(s)):
            muls = [n for m in _methods(node) for n in ast.walk(m) if isinstance(n, ast.BinOp)
                    and isinstance(n.op, ast.Mult) and "self.weight" in (dotted(n.left), dotted(n.right))]
            if muls and self.take():
                table = {}
                for b in muls:
                    side = b.left if dotted(b.left) == "self.weight" else b.right
                    table[id(side)] = ast.BinOp(ast.Constant(1), ast.Add(), side)
                _Replace(table).visit(node)
                return node
        self.generic_visit(node)
        return node


class OneLiteralNormEps(_Plant):
    """In a function building two or more norms with ``eps=<config>.<eps>``, the first gets ``eps=1e-6``."""

    code = "PKN101"
    words = ("eps=",)

    def visit_FunctionDef(self, node):
        kws = [kw for n in ast.walk(node) if isinstance(n, ast.Call) for kw in n.keywords
               if kw.arg == "eps" and isinstance(kw.value, ast.Attribute) and "eps" in kw.value.attr
               and "config" in dotted(kw.value.value).lower()]
        if len(kws) >= 2 and self.take():
            kws[0].value = ast.Constant(1e-6)
            return node
        self.generic_visit(node)
        return node


class RopeThetaFallback(_Plant):
    """``<cfg>.rope_theta`` -> ``getattr(<cfg>, "rope_theta", 10000.0)``, and a module docstring naming
    ``rope_parameters`` (prose must not silence PK702), in files whose code never reads rope_parameters."""

    code = "PK702"
    words = (".rope_theta",)

    def visit_Module(self, node):
        if "rope_parameters" in ast.unparse(node):
            return node
        self.generic_visit(node)
        if self.done:
            node.body.insert(0, ast.Expr(ast.Constant("Reads the base the transformers 5 way (rope_parameters).")))
        return node

    def visit_Attribute(self, node):
        if node.attr == "rope_theta" and isinstance(node.ctx, ast.Load) and self.take():
            return ast.Call(ast.Name("getattr", ast.Load()), [node.value, ast.Constant("rope_theta"),
                                                              ast.Constant(10000.0)], [])
        self.generic_visit(node)
        return node


class CodecUnderAutocast(_Plant):
    """A statement calling the codec / vocoder / decoder, wrapped in ``torch.autocast(bf16)``."""

    code = "PK401"
    words = ("codec", "vocoder", "decoder", "code2wav", "token2wav")

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        for i, stmt in enumerate(node.body):
            if isinstance(stmt, (ast.Assign, ast.Return, ast.Expr)) and any(
                    isinstance(n, ast.Call) and is_codec(dotted(n.func)) for n in ast.walk(stmt)) and self.take():
                ctx = ast.parse('torch.autocast("cuda", dtype=torch.bfloat16)', mode="eval").body
                node.body[i] = ast.With([ast.withitem(ctx)], [stmt])
                break
        return node


class ResampleTransposed(_Plant):
    """``librosa.resample(wav, ...)`` / ``torchaudio.functional.resample(wav, ...)`` -> ``(wav.T, ...)``."""

    code = "PK603"
    words = ("resample",)

    def visit_Call(self, node):
        self.generic_visit(node)
        name = dotted(node.func)
        if name.endswith(("librosa.resample", "functional.resample", "torchaudio.functional.resample")) \
                and node.args and not any(kw.arg in ("axis", "dim") for kw in node.keywords) and self.take():
            node.args[0] = ast.Attribute(node.args[0], "T", ast.Load())
        return node


class PopStateEveryChunk(_Plant):
    """In a chunk handler, ``self.<state>.get(<request id>)`` -> ``self.<state>.pop(<request id>, None)``."""

    code = "PK205"
    words = ("chunk",)

    def visit_Module(self, node):
        self.generic_visit(node)
        return node

    def visit_FunctionDef(self, node):
        params = [a.arg for a in node.args.args + node.args.kwonlyargs]
        if "chunk" in node.name.lower() or any("chunk" in p.lower() for p in params):
            for n in ast.walk(node):
                if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get"
                        and dotted(n.func.value).startswith("self.") and n.args
                        and any(w in dotted(n.args[0]).lower() for w in ("req", "rid"))) and self.take():
                    n.func.attr = "pop"
                    n.args = [n.args[0], ast.Constant(None)]
                    return node
        self.generic_visit(node)
        return node


class SampleWithoutGenerator(_Plant):
    """``torch.multinomial(..., generator=g)`` -> without ``generator=`` (draws from the global RNG)."""

    code = "PK502"
    words = ("generator=",)

    def visit_FunctionDef(self, node):
        name = node.name
        if not (name == "forward" or name.startswith(("forward_", "_forward", "sample", "_sample")) or "decode" in name
                or "generate" in name or "stream" in name or name == "step"):
            return node  # outside per-request code the global RNG is not the rule's business
        self.generic_visit(node)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        if dotted(node.func).rpartition(".")[2] in ("multinomial", "rand", "randn", "exponential_", "randint") \
                and any(kw.arg == "generator" for kw in node.keywords) and self.take():
            node.keywords = [kw for kw in node.keywords if kw.arg != "generator"]
        return node


PLANTS = {
    "norm: drop an RMSNorm's fp32 upcast": DropUpcast,
    "norm: eps attribute -> literal": LiteralEps,
    "norm: plain gain applied as (1 + w)": OffsetGain,
    "norm: one of a function's norms gets a literal eps": OneLiteralNormEps,
    "rope: rope_theta read with a fallback (+ docstring naming rope_parameters)": RopeThetaFallback,
    "codec: codec call under bf16 autocast": CodecUnderAutocast,
    "audio loading: resample a transposed clip": ResampleTransposed,
    "async chunk: request state popped on every chunk": PopStateEveryChunk,
    "sampling: draw without the request's generator (per-request code)": SampleWithoutGenerator,
}
FAMILY = {"PKN101": "PKN", "PKN102": "PKN", "PKN103": "PKN", "PK702": "PK7", "PK401": "PK4", "PK603": "PK6",
          "PK205": "PK2", "PK502": "PK5"}


def _codes(path: str, text: str, enabled) -> Counter:
    return Counter(f.code for f in lint_source(path, text, enabled))


def _plant_all(sources: dict[str, str], plant_cls) -> tuple[int, int, list[str]]:
    """(planted, found, missed sites) for one plant kind over every file, MAX_SITES at most."""
    enabled = select_codes([plant_cls.code], None)
    planted = found = 0
    missed: list[str] = []
    for path, text in sources.items():
        if planted >= MAX_SITES:
            break
        if not any(w in text for w in plant_cls.words):
            continue  # the harness's cheap pre-filter (the rules themselves read the AST only)
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        probe = plant_cls(-1)  # counts the sites, plants nothing
        probe.visit(tree)
        if probe.seen == 0:
            continue
        base = _codes(path, ast.unparse(tree), enabled)[plant_cls.code]
        for site in range(probe.seen):
            if planted >= MAX_SITES:
                break
            plant = plant_cls(site)
            mutated = plant.visit(copy.deepcopy(tree))
            if not plant.done:
                continue
            planted += 1
            if _codes(path, ast.unparse(ast.fix_missing_locations(mutated)), enabled)[plant_cls.code] > base:
                found += 1
            else:
                missed.append(f"{path}#{site}")
    return planted, found, missed


@pytest.mark.slow
def test_planted_field_faults_are_found_and_clean_files_pass(sources, capsys):
    assert len(sources) > 2000
    rows, recall = [], {}
    for label, plant_cls in PLANTS.items():
        planted, found, missed = _plant_all(sources, plant_cls)
        assert planted > 0, f"{label}: no site in the real files (the corpus lost its idiom)"
        recall[label] = found / planted
        rows.append(f"{label:<78} {plant_cls.code:<7} planted {planted:>3}  found {found:>3}  "
                    f"recall {found / planted:.2f}" + (f"  missed e.g. {missed[:3]}" if missed else ""))
    # precision: the shipped files as they are, every planted rule enabled
    codes = sorted({p.code for p in PLANTS.values()} - {"PK502"})  # PK502: see NOT_REVIEWED
    enabled = select_codes(codes, None)
    clean = Counter()
    flagged: list[tuple[str, int, str]] = []
    for path, text in sources.items():
        for f in lint_source(path, text, enabled):
            if f.code in codes:
                clean[FAMILY[f.code]] += 1
                flagged.append((path, f.line, f.code))
    with capsys.disabled():
        print("\nfield corpus (vLLM-Omni 0.30.0 + SGLang-Omni 0.1.9):")
        print("\n".join(rows))
        print(f"clean files: {len(sources)}; findings of these rules on them: {flagged}")
    assert flagged == EXPECTED_CLEAN_FINDINGS
    for label, rate in recall.items():
        assert rate >= MIN_RECALL.get(label, 0.9), (label, rate)


#: Findings of the planted rules on the shipped files as shipped, in path order. PK702: see
#: test_framework_sweep.py. PKN103 (warn): Audex's RMSNorm squares in the input dtype (as its own
#: reference may). PK401 (rule of issue 17, unchanged here): codec decodes deliberately run under
#: bf16 autocast (MOSS-TTS's tokenizer says why: NPU's LayerNorm rejects mixed dtypes; the others
#: autocast the flow / vocoder to the serving dtype): a codec in bf16 is the rule's class, so each
#: is a true finding of a documented choice.
EXPECTED_CLEAN_FINDINGS = [
    ("vllm_omni/diffusion/models/mistral_encoder/mistral_encoder.py", 335, "PK702"),
    ("vllm_omni/model_executor/models/audex/speech_decoder/modeling_audex_causal_speech_decoder.py", 109, "PKN103"),
    ("vllm_omni/model_executor/models/moss_tts/audio_tokenizer_v2.py", 2054, "PK401"),
    ("vllm_omni/model_executor/models/moss_tts/audio_tokenizer_v2.py", 2059, "PK401"),
    ("vllm_omni/model_executor/models/moss_tts/audio_tokenizer_v2.py", 2065, "PK401"),
    ("vllm_omni/model_executor/models/voxcpm2/minicpm4_paged.py", 244, "PK702"),
    ("sglang_omni/models/dots_tts/flow_head.py", 607, "PK401"),
    ("sglang_omni/models/fishaudio_s2_pro/stages.py", 364, "PK401"),
    ("sglang_omni/models/minicpm_o/components/code2wav.py", 404, "PK401"),
    ("sglang_omni/models/minicpm_o/components/token2wav/vocoder.py", 346, "PK401"),
    ("sglang_omni/models/moss_tts/audio_tokenizer.py", 2356, "PK401"),
]
#: Not reviewed here: PK502 (issue 12's rule) flags 42 draws without generator= in the shipped
#: files' per-request code (diffusion pipelines' torch.randn latents, mostly); left out of the
#: precision list above and reported to the lead.
NOT_REVIEWED = ("PK502",)
#: Recall floors below 0.9, each with the reason the rule misses what it misses (measured
#: 2026-12-04; the floors sit a little under the measured rate).
MIN_RECALL: dict[str, float] = {
    # Norms through F.rms_norm / fused kernels, or whose variance is built outside forward/_norm:
    # the rule reads the x.pow(2).mean / torch.mean(x**2) / .sum idioms of the class's own methods.
    "norm: drop an RMSNorm's fp32 upcast": 0.85,
    # Epsilons used outside forward/_norm (a helper method or a fused call with eps=self.eps kept).
    "norm: eps attribute -> literal": 0.85,
    "norm: plain gain applied as (1 + w)": 0.85,
    # Many sites are not streaming state: scheduler / prefix-cache / connector functions with a
    # chunk argument (prefill chunks) whose .get(req_id) reads a table the request owns for its life;
    # PK205 looks for a chunk handler of a stream (code2wav's per-chunk decode). Not a rule miss of
    # its class, but counted as planted here.
    "async chunk: request state popped on every chunk": 0.35,
    # Draws in per-request code of modules the rule exempts (VAEs, depth decoders' training paths).
    "sampling: draw without the request's generator (per-request code)": 0.75,
}
