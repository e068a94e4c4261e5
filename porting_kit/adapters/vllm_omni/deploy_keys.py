"""Facts about the keys of one vLLM-Omni deploy YAML: which ones the schema does not allow where.

One walk over a parsed deploy YAML (ruamel.yaml round-trip, so keys carry line
numbers), used by both ``porting-kit lint`` (PKY1xx) and ``porting-kit
validate`` (``scaffold.*``): the verdicts are built there, from the same facts.
vLLM-Omni's own ``load_deploy_config`` is lenient (unknown stage keys go to
``engine_extras``, topology keys pass silently), so these facts are stricter.

Kinds of :class:`KeyProblem`:

* ``topology`` — a core topology key (:data:`~porting_kit.adapters.vllm_omni.schema.CORE_TOPOLOGY`:
  ``execution_type``, ``model_stage``, ``input_sources`` ...) in a stage, its
  ``engine_args`` or a platform stage, or any ``PipelineConfig`` /
  ``StagePipelineConfig`` field at the top level;
* ``pipeline_only`` — another pipeline-only stage field (``scheduler_cls``,
  ``model_arch`` ...) or the stage metadata vLLM-Omni tolerates in legacy deploy
  files and ignores (``final_output``, ``final_output_type``, ``is_comprehension``):
  vLLM-Omni 0.30.0's own deploy files carry these, so they are advice, not faults;
* ``unknown`` — a key no schema field matches (top level, stage, ``engine_args``,
  ``runtime``, ``duplex_session``), and the removed ``stage_args`` layout;
* ``serial_without_reason`` — ``max_num_seqs`` below :data:`MIN_MAX_NUM_SEQS`
  with no comment giving the reason (on that line, in the comment block right
  above it, or any earlier comment naming ``max_num_seqs``);
* ``shape`` — ``stages`` is not a list of mappings with a ``stage_id``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from porting_kit.adapters.vllm_omni.schema import CORE_TOPOLOGY, DeploySchema

MIN_MAX_NUM_SEQS = 4
KINDS = ("topology", "pipeline_only", "unknown", "serial_without_reason", "shape")


@dataclass(frozen=True)
class KeyProblem:
    """One key of a deploy YAML the schema does not allow where it stands.

    Attributes
    ----------
    kind : str
        One of :data:`KINDS`.
    key : str
        The key as written (``"max_num_seqs"`` for ``serial_without_reason``).
    where : str
        The level: ``"top-level"``, ``"stage"``, ``"stage engine_args"``, ``"stage runtime"``,
        ``"duplex_session"``, ``"platform stage"`` ...
    stage_id : object or None
        The stage's ``stage_id`` (None outside a stage).
    line, col : int or None
        1-based position of the key (None when the mapping carries no positions).
    value : object or None
        The value (``max_num_seqs``'s number for ``serial_without_reason``), else None.
    """

    kind: str
    key: str
    where: str
    stage_id: Any = None
    line: int | None = None
    col: int | None = None
    value: Any = None


def is_deploy_doc(doc: Any, top_level: frozenset[str]) -> bool:
    """A parsed YAML is a deploy file: a mapping with a ``stages:`` list or any top-level deploy key.

    A file kept beside deploy files with neither (vLLM-Omni's ``qwen3_tts_forced_aligner.yaml``)
    is a side config, not a deploy file.
    """
    return isinstance(doc, dict) and (isinstance(doc.get("stages"), list)
                                      or any(str(k) in top_level for k in doc))


def _pos(mapping, key) -> tuple[int | None, int | None]:
    try:
        line, col = mapping.lc.key(key)
        return line + 1, col + 1
    except Exception:  # noqa: BLE001 - plain dicts have no positions
        return None, None


def _has_reason(lines: list[str], line: int | None) -> bool:
    """A comment explains the value on 1-based ``line``: on it, right above it, or naming max_num_seqs earlier."""
    if line is None or not (0 < line <= len(lines)):
        return False
    i = line - 1
    current = lines[i]
    hash_at = current.find("#")
    if hash_at >= 0 and current[hash_at + 1:].strip().lstrip("#").strip():
        return True
    j = i - 1
    while j >= 0 and lines[j].strip().startswith("#"):
        if lines[j].strip().lstrip("#").strip():
            return True
        j -= 1
    return any("max_num_seqs" in ln[ln.find("#"):] for ln in lines[:i] if "#" in ln)


class _Walk:
    def __init__(self, schema: DeploySchema, lines: list[str]):
        self.s = schema
        self.lines = lines
        self.out: list[KeyProblem] = []

    def add(self, kind: str, mapping, key, where: str, stage_id=None, value=None) -> None:
        line, col = _pos(mapping, key)
        self.out.append(KeyProblem(kind, str(key), where, stage_id, line, col, value))

    def keys(self, mapping, allowed: frozenset[str], where: str, stage_id=None, *,
             topology: frozenset[str]) -> None:
        s = self.s
        in_stage = stage_id is not None
        for key in mapping:
            name = str(key)
            if in_stage and (name in s.legacy_metadata or (name in topology and name not in CORE_TOPOLOGY)):
                self.add("pipeline_only", mapping, key, where, stage_id)
            elif name in topology:
                self.add("topology", mapping, key, where, stage_id)
            elif name not in allowed:
                self.add("unknown", mapping, key, where, stage_id)

    def serial(self, mapping, where: str, stage_id) -> None:
        if "max_num_seqs" not in mapping:
            return
        try:
            n = int(mapping["max_num_seqs"])
        except (TypeError, ValueError):
            return
        line, _ = _pos(mapping, "max_num_seqs")
        if n < MIN_MAX_NUM_SEQS and not _has_reason(self.lines, line):
            self.add("serial_without_reason", mapping, "max_num_seqs", where, stage_id, n)

    def stage(self, stage, where: str) -> None:
        s = self.s
        if not isinstance(stage, dict) or "stage_id" not in stage:
            self.out.append(KeyProblem("shape", "stage_id", where))
            return
        sid = stage["stage_id"]
        self.keys(stage, s.stage, where, sid, topology=s.topology)
        self.serial(stage, where, sid)
        engine_args = stage.get("engine_args")
        if isinstance(engine_args, dict):
            self.keys(engine_args, s.stage, f"{where} engine_args", sid, topology=s.topology)
            self.serial(engine_args, f"{where} engine_args", sid)
        runtime = stage.get("runtime")
        if isinstance(runtime, dict):
            self.keys(runtime, s.stage_runtime, f"{where} runtime", sid, topology=frozenset())

    def stages(self, mapping, where: str) -> None:
        stages = mapping.get("stages")
        if stages is None:
            return
        if not isinstance(stages, list):
            self.add("shape", mapping, "stages", where)
            return
        for stage in stages:
            self.stage(stage, where)


def deploy_key_problems(doc: Any, schema: DeploySchema, lines: list[str]) -> list[KeyProblem]:
    """Every key of a deploy YAML the schema does not allow where it stands.

    Parameters
    ----------
    doc : mapping
        The YAML's top level, loaded with ruamel.yaml's round-trip loader (plain dicts
        work too; their problems carry no line numbers).
    schema : DeploySchema
        From :func:`porting_kit.adapters.vllm_omni.schema.load_schema` (or the real package).
    lines : list of str
        The file's text split into lines (comments give ``max_num_seqs`` its reason).

    Returns
    -------
    list of KeyProblem
        In document order; empty for a clean file. Never raises on odd values.
    """
    s = schema
    walk = _Walk(s, lines)
    walk.keys(doc, s.top_level, "top-level", topology=s.top_topology)
    walk.stages(doc, "stage")
    duplex = doc.get("duplex_session")
    if isinstance(duplex, dict):
        walk.keys(duplex, s.duplex_session, "duplex_session", topology=frozenset())
    platforms = doc.get("platforms")
    if isinstance(platforms, dict):
        for platform in platforms.values():
            if isinstance(platform, dict):
                walk.stages(platform, "platform stage")
    return walk.out
