"""PKY1xx deploy YAML: placement only, keys the schema knows, reasons for serial stages.

A YAML file is a deploy file when it lives under a ``deploy/`` directory or its
top level has a ``stages:`` list (a file under ``deploy/`` without ``stages:``
and without any deploy key at all is a side config, e.g. vLLM-Omni's
``qwen3_tts_forced_aligner.yaml``, and is skipped). It is read with ruamel.yaml's round-trip
loader (comments and positions kept). vLLM-Omni's own ``load_deploy_config``
is lenient: unknown stage keys go to ``engine_extras`` and topology keys pass
silently, so these rules are stricter, with the allowed keys taken from the
real dataclasses (:mod:`porting_kit.lint.deploy_schema`):

* PKY101 a topology key (``execution_type``, ``model_stage``,
  ``input_sources``, ``final_output``, ``owns_tokenizer``,
  ``engine_output_type`` ...) at the top level, in a stage, its
  ``engine_args`` or a platform override;
* PKY102 a key unknown to the schema (top level, stage, ``engine_args``,
  ``runtime``, ``duplex_session``, platform stages), and the removed
  ``stage_args`` layout;
* PKY103 ``max_num_seqs`` below 4 without a reason: a comment on that line,
  in the comment block right above it, or any earlier comment that names
  ``max_num_seqs`` (a header that explains every non-default choice).
"""

from __future__ import annotations

import re
from pathlib import PurePath

from porting_kit.lint.deploy_schema import load_schema
from porting_kit.lint.finding import LintFinding, apply_noqa

_STAGES_LINE = re.compile(r"^stages\s*:", re.MULTILINE)


def might_be_deploy(path: str, text: str) -> bool:
    """Cheap test before parsing: under ``deploy/`` or a top-level ``stages:`` line."""
    return "deploy" in PurePath(path).parts[:-1] or _STAGES_LINE.search(text) is not None


class _YamlLint:
    def __init__(self, path: str, text: str, enabled: frozenset[str]):
        self.path = path
        self.lines = text.splitlines()
        self.enabled = enabled
        self.schema = load_schema()
        self.findings: list[LintFinding] = []

    def report(self, code: str, pos: tuple[int, int] | None, message: str) -> None:
        if code in self.enabled:
            line, col = (pos[0] + 1, pos[1] + 1) if pos else (1, 1)
            self.findings.append(LintFinding(self.path, line, col, code, message))

    @staticmethod
    def key_pos(mapping, key) -> tuple[int, int] | None:
        try:
            return tuple(mapping.lc.key(key))
        except Exception:  # noqa: BLE001 - plain dicts have no positions
            return None

    def check_keys(self, mapping, allowed: frozenset[str], where: str, topology: bool = True) -> None:
        for key in mapping:
            name = str(key)
            pos = self.key_pos(mapping, key)
            if topology and name in self.schema.topology:
                self.report("PKY101", pos, f"topology key `{name}` in {where}: vLLM-Omni ignores it here "
                                           "(topology lives in pipeline.py)")
            elif name not in allowed:
                self.report("PKY102", pos, f"`{name}` is not a {where} key in the vLLM-Omni "
                                           f"{self.schema.version} deploy schema")

    def has_reason(self, line0: int) -> bool:
        lines = self.lines
        if line0 >= len(lines):
            return False
        current = lines[line0]
        hash_at = current.find("#")
        if hash_at >= 0 and current[hash_at + 1:].strip().lstrip("#").strip():
            return True
        j = line0 - 1
        while j >= 0 and lines[j].strip().startswith("#"):
            if lines[j].strip().lstrip("#").strip():
                return True
            j -= 1
        return any("max_num_seqs" in ln[ln.find("#"):] for ln in lines[:line0] if "#" in ln)

    def check_max_num_seqs(self, mapping) -> None:
        if "max_num_seqs" not in mapping:
            return
        value = mapping["max_num_seqs"]
        try:
            n = int(value)
        except (TypeError, ValueError):
            return
        pos = self.key_pos(mapping, "max_num_seqs")
        if n < 4 and not (pos and self.has_reason(pos[0])):
            self.report("PKY103", pos, f"max_num_seqs: {n} serialises the stage and no comment says why "
                                       "(an AR stage below 4 leaves audio gaps under load)")

    def check_stage(self, stage, where: str) -> None:
        if not isinstance(stage, dict):
            return
        s = self.schema
        self.check_keys(stage, s.stage, where)
        self.check_max_num_seqs(stage)
        engine_args = stage.get("engine_args")
        if isinstance(engine_args, dict):
            self.check_keys(engine_args, s.stage, f"{where} engine_args")
            self.check_max_num_seqs(engine_args)
        runtime = stage.get("runtime")
        if isinstance(runtime, dict):
            self.check_keys(runtime, s.stage_runtime, f"{where} runtime", topology=False)

    def run(self, doc) -> None:
        s = self.schema
        self.check_keys(doc, s.top_level, "top-level")
        stages = doc.get("stages")
        if isinstance(stages, list):
            for stage in stages:
                self.check_stage(stage, "stage")
        duplex = doc.get("duplex_session")
        if isinstance(duplex, dict):
            self.check_keys(duplex, s.duplex_session, "duplex_session", topology=False)
        platforms = doc.get("platforms")
        if isinstance(platforms, dict):
            for platform in platforms.values():
                if isinstance(platform, dict) and isinstance(platform.get("stages"), list):
                    for stage in platform["stages"]:
                        self.check_stage(stage, "platform stage")


def lint_yaml(path: str, text: str, enabled: frozenset[str]) -> list[LintFinding]:
    """Lint one YAML file; returns [] for a YAML file that is not a deploy file.

    A deploy file that does not parse, or whose top level is not a mapping,
    yields one ``PKY000`` finding; this never raises on bad YAML.
    """
    if not might_be_deploy(path, text):
        return []
    from ruamel.yaml import YAML  # core dependency; imported only when a deploy file is seen

    yaml = YAML(typ="rt")
    try:
        doc = yaml.load(text)
    except Exception as exc:  # noqa: BLE001 - any parser error is a finding, never a crash
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return [LintFinding(path, line, col, "PKY000", f"YAML does not parse: {problem}")] \
            if "PKY000" in enabled else []
    in_deploy_dir = "deploy" in PurePath(path).parts[:-1]
    if not isinstance(doc, dict):
        if in_deploy_dir and doc is not None and "PKY000" in enabled:
            return [LintFinding(path, 1, 1, "PKY000", "deploy file's top level is not a mapping")]
        return []
    if not isinstance(doc.get("stages"), list):
        if not in_deploy_dir:
            return []
        if not any(str(k) in load_schema().top_level for k in doc):
            return []  # a side config kept in deploy/ (e.g. forced_aligner.yaml), not a deploy file
    lint = _YamlLint(path, text, enabled)
    lint.run(doc)
    findings = apply_noqa(lint.findings, lint.lines)
    findings.sort(key=LintFinding.sort_key)
    return findings
