"""Facts read across the files of a scaffold (or a framework tree) for the consistency tier.

Plain AST / YAML reading, no torch, no Finding: :mod:`porting_kit.scaffold.validate`
judges these facts and builds every ``consistency.*`` code. Each fact carries the
:class:`Site` (file and line) it was read at, so a finding can name both ends of
a contradiction. A fact that cannot be read from the code (a width computed at
run time, a key built from a variable) is ``None`` / absent: the tier fires only
on what it can prove.

What is read:

* the codec frame width of the stage-0 -> stage-1 handoff: what the producer
  model emits (a top-level ``CODES_PER_FRAME`` / ``FRAME_WIDTH`` constant, or the
  empty-batch fallback ``torch.zeros((0, W))`` of its ``forward``), what the
  stage-input processor accepts (its ``x.shape[1] != W`` test, else its
  ``NUM_CODEBOOKS``), what the consumer un-flattens (its ``NUM_CODEBOOKS``);
* payload keys written (``OmniPayloadStruct(meta=MetaStruct(left_context_size=...))``
  -> ``meta.left_context_size``; ``multimodal_outputs={"codes": {"audio": x}}`` ->
  ``codes.audio``) and read (``.get("k")`` / ``["k"]`` string keys);
* connector ``extra`` keys a processor reads (``extra.get("codec_chunk_frames")``);
* the request fields an adapter's ``build()`` forwards, and under which key;
* stop token ids of a pipeline's ``sampling_constraints``;
* a deploy YAML with its ``base_config`` chain resolved, and the pipeline that
  names it (``pipeline:`` key or ``default_deploy_config_name``), for single-YAML
  validation.
"""

from __future__ import annotations

import ast
import functools
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from porting_kit.fsutil import MAX_DEPLOY_YAML_BYTES, read_input_text

#: Module constants that declare the per-frame width a producer emits.
WIDTH_CONSTANTS = ("CODES_PER_FRAME", "FRAME_WIDTH", "CODEC_FRAME_WIDTH", "EMITTED_CODEBOOKS")
#: Module constants holding the codebooks per frame a reader expects.
CODEBOOK_CONSTANTS = ("NUM_CODEBOOKS", "NUM_CODE_GROUPS", "N_CODEBOOKS")
#: Request fields (``OpenAICreateSpeechRequest`` attributes) that must reach the model.
REQUEST_FIELDS = ("ref_text", "ref_audio", "voice", "speaker", "language")


@dataclass(frozen=True)
class Site:
    """Where a fact was read: file (relative to the scaffold root) and 1-based line."""

    file: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass(frozen=True)
class Width:
    """A per-frame codebook width (codes per frame) and where it was read."""

    value: int
    site: Site
    how: str


@dataclass(frozen=True)
class KeyUse:
    """A string key written or read, and where."""

    key: str
    site: Site


@dataclass(frozen=True)
class ForwardedField:
    """A request field an adapter's ``build()`` reads: the info key it is stored under (None: not stored)."""

    field: str
    info_key: str | None
    site: Site


@dataclass
class DeployFacts:
    """A deploy YAML with its ``base_config`` chain merged (stage ids, connectors, pipeline name)."""

    path: Path
    doc: dict[str, Any]
    stage_ids: list[Any] = field(default_factory=list)
    connectors: dict[str, Any] = field(default_factory=dict)
    pipeline: str | None = None
    chain: list[str] = field(default_factory=list)


# -- small AST helpers -------------------------------------------------------------------------
def parse(path: Path) -> ast.Module | None:
    """``ast.parse`` of a file, or None when missing or not Python."""
    try:
        return ast.parse(read_input_text(path), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def eval_int(node: ast.AST | None, consts: dict[str, int]) -> int | None:
    """An int expression of literals, module constants, ``+ - * //``, ``max`` / ``min``; else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    if isinstance(node, ast.BinOp):
        a, b = eval_int(node.left, consts), eval_int(node.right, consts)
        if a is None or b is None:
            return None
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.FloorDiv: lambda: a // b if b else None}
        fn = ops.get(type(node.op))
        return fn() if fn else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("max", "min"):
        vals = [eval_int(a, consts) for a in node.args]
        if vals and None not in vals:
            return max(vals) if node.func.id == "max" else min(vals)
    return None


def module_ints(tree: ast.Module) -> dict[str, int]:
    """Top-level ``NAME = <int expression>`` constants, in order."""
    out: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            v = eval_int(node.value, out)
            if v is not None:
                out[node.targets[0].id] = v
    return out


def per_codebook_heads(tree: ast.Module, rel: str) -> list[Width]:
    """Output widths of the per-codebook heads a model file builds: every ``Linear(in, out)`` made
    inside a comprehension (one head per residual codebook), with ``out`` resolved from literals and
    module constants. Widths computed at run time are left out."""
    consts = module_ints(tree)
    out: list[Width] = []
    for comp in ast.walk(tree):
        if not isinstance(comp, (ast.GeneratorExp, ast.ListComp)):
            continue
        for node in ast.walk(comp.elt):
            if isinstance(node, ast.Call) and _call_name(node) == "Linear":
                arg = node.args[1] if len(node.args) > 1 else next(
                    (k.value for k in node.keywords if k.arg == "out_features"), None)
                width = eval_int(arg, consts)
                if width is not None:
                    out.append(Width(width, Site(rel, node.lineno), "per-codebook head Linear(..., out)"))
    return out


def _const_line(tree: ast.Module, name: str) -> int | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.lineno
    return None


def _call_name(node: ast.Call) -> str | None:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


# -- handoff widths ------------------------------------------------------------------------------
def _constant_width(tree: ast.Module, rel: str, names: tuple[str, ...], how: str) -> Width | None:
    consts = module_ints(tree)
    for name in names:
        if name in consts:
            return Width(consts[name], Site(rel, _const_line(tree, name)), f"{how} {name}")
    return None


def emitted_width(tree: ast.Module, rel: str) -> Width | None:
    """Codes per frame the producer emits: a declared width constant, else the width of the
    empty-batch fallback ``torch.zeros((0, W))`` / ``torch.empty((0, W))`` in ``forward``."""
    declared = _constant_width(tree, rel, WIDTH_CONSTANTS, "constant")
    if declared is not None:
        return declared
    consts = module_ints(tree)
    for fn in ast.walk(tree):
        if not (isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name == "forward"):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and _call_name(node) in ("zeros", "empty") and node.args:
                shape = node.args[0]
                if isinstance(shape, ast.Tuple) and len(shape.elts) == 2 and eval_int(shape.elts[0], consts) == 0:
                    w = eval_int(shape.elts[1], consts)
                    if w is not None:
                        return Width(w, Site(rel, node.lineno), "empty-batch codes shape (0, W) in forward()")
    return None


def accepted_width(tree: ast.Module, rel: str) -> Width | None:
    """Codes per frame a stage-input processor accepts: its ``x.shape[1] != W`` (or ``[-1]``)
    test, else its codebook constant."""
    consts = module_ints(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.NotEq, ast.Eq)):
            left, right = node.left, node.comparators[0]
            if (isinstance(left, ast.Subscript) and isinstance(left.value, ast.Attribute)
                    and left.value.attr == "shape" and eval_int(left.slice, {}) in (1,)) or (
                    isinstance(left, ast.Subscript) and isinstance(left.value, ast.Attribute)
                    and left.value.attr == "shape" and isinstance(left.slice, ast.UnaryOp)
                    and eval_int(left.slice.operand, {}) == 1):
                w = eval_int(right, consts)
                if w is not None:
                    return Width(w, Site(rel, node.lineno), "accepted shape (frames, W)")
    return _constant_width(tree, rel, CODEBOOK_CONSTANTS, "constant")


def consumer_width(tree: ast.Module, rel: str) -> Width | None:
    """Codebooks per frame the consumer stage un-flattens (its codebook constant)."""
    return _constant_width(tree, rel, CODEBOOK_CONSTANTS, "constant")


# -- keys ------------------------------------------------------------------------------------------
def written_payload_keys(tree: ast.Module, rel: str) -> list[KeyUse]:
    """Dotted payload keys a file writes: ``OmniPayloadStruct(meta=MetaStruct(k=...))`` ->
    ``meta.k``; ``multimodal_outputs={"codes": {"audio": x}}`` -> ``codes.audio``."""
    out: list[KeyUse] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        if name == "OmniPayloadStruct":
            for kw in node.keywords:
                if kw.arg and isinstance(kw.value, ast.Call):
                    out += [KeyUse(f"{kw.arg}.{sub.arg}", Site(rel, kw.value.lineno))
                            for sub in kw.value.keywords if sub.arg]
                elif kw.arg:
                    out.append(KeyUse(kw.arg, Site(rel, node.lineno)))
        for kw in node.keywords:
            if kw.arg == "multimodal_outputs" and isinstance(kw.value, ast.Dict):
                for k, v in zip(kw.value.keys, kw.value.values, strict=True):
                    top = _str(k) if k is not None else None
                    if top is None:
                        continue
                    if isinstance(v, ast.Dict):
                        out += [KeyUse(f"{top}.{_str(sk)}", Site(rel, kw.value.lineno))
                                for sk in v.keys if sk is not None and _str(sk)]
                    else:
                        out.append(KeyUse(top, Site(rel, kw.value.lineno)))
    return out


def read_keys(tree: ast.Module, rel: str) -> list[KeyUse]:
    """String keys read with ``.get("k")`` / ``.pop("k")`` / ``x["k"]`` anywhere in the file."""
    out: list[KeyUse] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop") \
                and node.args and _str(node.args[0]):
            out.append(KeyUse(_str(node.args[0]), Site(rel, node.lineno)))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _str(node.slice):
            out.append(KeyUse(_str(node.slice), Site(rel, node.lineno)))
    return out


def string_constants(tree: ast.Module) -> set[str]:
    """Every string literal of a file (a key named anywhere can be read by name)."""
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def connector_extra_reads(tree: ast.Module, rel: str) -> list[KeyUse]:
    """Keys read from a connector's ``extra`` block: ``e = <...>.get("extra", ...)`` then ``e.get("k")``."""
    extra_names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "get"
                   and c.args and _str(c.args[0]) == "extra" for c in ast.walk(node.value)):
                extra_names.add(node.targets[0].id)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in extra_names \
                and node.args and _str(node.args[0]):
            out.append(KeyUse(_str(node.args[0]), Site(rel, node.lineno)))
    return out


# -- adapter -----------------------------------------------------------------------------------
def adapter_forwarded_fields(tree: ast.Module, rel: str) -> list[ForwardedField]:
    """Request fields (:data:`REQUEST_FIELDS`) read in ``build()``, with the info key each is stored under.

    ``info["ref_text"] = [request.ref_text]`` gives ``("ref_text", "ref_text")``; a field
    read but never stored under a string key gives ``info_key=None``.
    """
    build = next((n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef) and n.name == "build"), None)
    if build is None:
        return []
    stored: dict[str, tuple[str, int]] = {}
    for node in ast.walk(build):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and _str(t.slice) in REQUEST_FIELDS:
                    stored.setdefault(_str(t.slice), (_str(t.slice), node.lineno))
                if isinstance(t, ast.Subscript) and _str(t.slice):
                    for a in ast.walk(node.value):
                        if isinstance(a, ast.Attribute) and a.attr in REQUEST_FIELDS:
                            stored.setdefault(a.attr, (_str(t.slice), node.lineno))
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if k is not None and _str(k):
                    for a in ast.walk(v):
                        if isinstance(a, ast.Attribute) and a.attr in REQUEST_FIELDS:
                            stored.setdefault(a.attr, (_str(k), node.lineno))
    out: list[ForwardedField] = []
    seen: set[str] = set()
    for node in ast.walk(build):
        if isinstance(node, ast.Attribute) and node.attr in REQUEST_FIELDS and isinstance(node.value, ast.Name) \
                and node.value.id == "request" and node.attr not in seen:
            seen.add(node.attr)
            key, line = stored.get(node.attr, (None, node.lineno))
            out.append(ForwardedField(node.attr, key, Site(rel, line)))
    return out


# -- pipeline ----------------------------------------------------------------------------------
def pipeline_stop_ids(tree: ast.Module, rel: str) -> tuple[list[int], Site] | None:
    """``sampling_constraints={"stop_token_ids": [...]}`` of the entry stage (the first that sets it)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if k is not None and _str(k) == "stop_token_ids":
                    try:
                        ids = ast.literal_eval(v)
                    except ValueError:
                        return None
                    if isinstance(ids, (list, tuple)) and all(isinstance(i, int) for i in ids):
                        return [int(i) for i in ids], Site(rel, v.lineno)
    return None


@dataclass(frozen=True)
class PipelineFacts:
    """One ``PipelineConfig(...)`` call of a pipeline.py."""

    file: str
    line: int
    model_type: str | None
    deploy_name: str | None
    stage_ids: tuple[int, ...] | None  # None: not all literal


def _stage_ids(node: ast.AST, assigns: dict[str, ast.AST]) -> tuple[int, ...] | None:
    if isinstance(node, ast.Name) and node.id in assigns:
        node = assigns[node.id]
    if not isinstance(node, (ast.Tuple, ast.List)):
        return None
    ids = []
    for elt in node.elts:
        if isinstance(elt, ast.Name) and elt.id in assigns:
            elt = assigns[elt.id]
        if not (isinstance(elt, ast.Call) and _call_name(elt) == "StagePipelineConfig"):
            return None
        sid = next((kw.value for kw in elt.keywords if kw.arg == "stage_id"), None)
        if not (isinstance(sid, ast.Constant) and isinstance(sid.value, int)):
            return None
        ids.append(sid.value)
    return tuple(ids)


def pipelines_in(path: Path, rel: str) -> list[PipelineFacts]:
    """Every ``PipelineConfig(...)`` of one file (files may hold several pipelines)."""
    tree = parse(path)
    if tree is None:
        return []
    assigns = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
               for t in n.targets if isinstance(t, ast.Name)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) == "PipelineConfig":
            kws = {kw.arg: kw.value for kw in node.keywords if kw.arg}
            stages = kws.get("stages")
            out.append(PipelineFacts(rel, node.lineno, _str(kws["model_type"]) if "model_type" in kws else None,
                                     _str(kws["default_deploy_config_name"])
                                     if "default_deploy_config_name" in kws else None,
                                     _stage_ids(stages, assigns) if stages is not None else None))
    return out


@functools.lru_cache(maxsize=8)
def _tree_pipelines(pkg: str) -> tuple[PipelineFacts, ...]:
    root = Path(pkg)
    out: list[PipelineFacts] = []
    for sub in ("model_executor/models", "diffusion/models"):
        for p in sorted((root / sub).glob("*/pipeline.py")):
            out += pipelines_in(p, p.relative_to(root.parent).as_posix())
    return tuple(out)


def package_root(yaml_path: Path) -> Path | None:
    """The ``vllm_omni`` package folder above a deploy YAML (the one holding ``model_executor/``)."""
    for parent in yaml_path.resolve().parents:
        if (parent / "model_executor").is_dir():
            return parent
    return None


def pipeline_for_deploy(deploy: DeployFacts) -> PipelineFacts | None:
    """The pipeline a deploy YAML belongs to: its ``pipeline:`` name, else the pipeline whose
    ``default_deploy_config_name`` is the file's name (of it or of a file it inherits from).
    None when no pipeline in the tree names it, or the candidates disagree on their stage ids."""
    pkg = package_root(deploy.path)
    if pkg is None:
        return None
    pipelines = _tree_pipelines(str(pkg))
    if deploy.pipeline:
        hits = [p for p in pipelines if p.model_type == deploy.pipeline]
    else:
        hits = [p for p in pipelines if p.deploy_name == deploy.path.name]
    if not hits or len({p.stage_ids for p in hits}) != 1:
        return None
    return hits[0]


# -- deploy YAML -------------------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _load_rt(path: str, mtime_ns: int, size: int) -> Any:
    from ruamel.yaml import YAML

    return YAML(typ="rt").load(read_input_text(path, max_bytes=MAX_DEPLOY_YAML_BYTES, what="deploy YAML"))


def load_yaml_rt(path: Path) -> Any:
    """A YAML file loaded with ruamel's round-trip loader (keys keep their lines), cached per
    (path, mtime, size): the tiers read one deploy YAML several times. Treat it as read-only.

    Raises
    ------
    FileNotFoundError
        The file is missing.
    InputError
        Not a regular file (a FIFO would block), or over
        :data:`porting_kit.fsutil.MAX_DEPLOY_YAML_BYTES`.
    Exception
        Whatever ruamel raises on bad YAML.
    """
    st = Path(path).stat()
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_DEPLOY_YAML_BYTES:
        read_input_text(path, max_bytes=MAX_DEPLOY_YAML_BYTES, what="deploy YAML")  # raises InputError
    return _load_rt(str(path), st.st_mtime_ns, st.st_size)


def _plain_yaml(path: Path) -> Any:
    return load_yaml_rt(path)


def yaml_line(mapping: Any, key: Any) -> int | None:
    """1-based line of ``key`` in a ruamel round-trip mapping (None for plain dicts)."""
    try:
        return mapping.lc.key(key)[0] + 1
    except Exception:  # noqa: BLE001 - plain dicts carry no positions
        return None


def resolve_deploy(path: Path, _depth: int = 0) -> DeployFacts:
    """A deploy YAML with its ``base_config`` chain merged as vLLM-Omni's ``resolve_deploy_yaml`` does
    (stages by ``stage_id``, connectors deep-merged, scalars: overlay wins).

    Raises
    ------
    ValueError
        A file of the chain is missing, not YAML, not a mapping, or the chain loops.
    """
    if _depth > 16:
        raise ValueError(f"{path.name}: base_config chain deeper than 16 (a loop?)")
    try:
        doc = _plain_yaml(path)
    except FileNotFoundError:
        raise ValueError(f"{path.name}: not found") from None
    except Exception as exc:  # noqa: BLE001 - yaml raises many types
        raise ValueError(f"{path.name}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path.name}: top level is not a mapping")
    stages = [s for s in (doc.get("stages") or []) if isinstance(s, dict)] \
        if isinstance(doc.get("stages"), list) else []
    facts = DeployFacts(path, doc, [s.get("stage_id") for s in stages if "stage_id" in s],
                        dict(doc.get("connectors") or {}) if isinstance(doc.get("connectors"), dict) else {},
                        doc.get("pipeline") if isinstance(doc.get("pipeline"), str) else None, [path.name])
    base = doc.get("base_config")
    if isinstance(base, str):
        parent = resolve_deploy(path.parent / base, _depth + 1)
        facts.stage_ids = list(dict.fromkeys([*parent.stage_ids, *facts.stage_ids]))
        facts.connectors = {**parent.connectors, **facts.connectors}
        facts.pipeline = facts.pipeline or parent.pipeline
        facts.chain += parent.chain
    return facts


@dataclass(frozen=True)
class ConnectorRef:
    """One entry of a stage's ``output_connectors`` / ``input_connectors``."""

    stage_id: Any
    direction: str  # "output" or "input"
    edge: str  # "to_stage_1" / "from_stage_0"
    connector: str
    line: int | None


def deploy_stage_connectors(doc: dict[str, Any]) -> list[ConnectorRef]:
    """Every stage's ``output_connectors`` / ``input_connectors`` entries, in document order."""
    out = []
    stages = doc.get("stages")
    for st in stages if isinstance(stages, list) else []:
        if not isinstance(st, dict):
            continue
        for direction in ("output", "input"):
            block = st.get(f"{direction}_connectors")
            if isinstance(block, dict):
                out += [ConnectorRef(st.get("stage_id"), direction, str(k), str(v), yaml_line(block, k))
                        for k, v in block.items()]
    return out
