"""PKY1xx deploy YAML: placement only, keys the schema knows, reasons for serial stages.

A YAML file is a deploy file when it lives under a ``deploy/`` directory or its
top level has a ``stages:`` list (a file under ``deploy/`` without ``stages:``
and without any deploy key at all is a side config, e.g. vLLM-Omni's
``qwen3_tts_forced_aligner.yaml``, and is skipped). It is read with ruamel.yaml's
round-trip loader (comments and positions kept). The facts come from
:func:`porting_kit.adapters.vllm_omni.deploy_keys.deploy_key_problems` over the
one stored schema (:mod:`porting_kit.adapters.vllm_omni.schema`), the same
facts ``porting-kit validate`` judges, so both give one verdict:

* PKY101 (fail) a core topology key (``execution_type``, ``model_stage``,
  ``input_sources``, ``owns_tokenizer``, ``engine_output_type`` ...) in a stage,
  its ``engine_args`` or a platform override, or a pipeline field at the top level;
* PKY102 (fail) a key unknown to the schema (top level, stage, ``engine_args``,
  ``runtime``, ``duplex_session``, platform stages), the removed ``stage_args``
  layout, and a stage without ``stage_id``;
* PKY103 (warn) ``max_num_seqs`` below 4 without a reason: a comment on that line,
  in the comment block right above it, or any earlier comment that names
  ``max_num_seqs`` (a header that explains every non-default choice);
* PKY104 (warn) another pipeline-only field in a stage (``scheduler_cls``,
  ``model_arch`` ...) or legacy stage metadata vLLM-Omni tolerates and ignores
  (``final_output``, ``final_output_type``, ``is_comprehension``): its own
  shipped deploy files carry them.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from porting_kit.adapters.vllm_omni.deploy_keys import deploy_key_problems, is_deploy_doc
from porting_kit.adapters.vllm_omni.schema import load_schema
from porting_kit.lint.finding import LintFinding, apply_noqa

_STAGES_LINE = re.compile(r"^stages\s*:", re.MULTILINE)


def might_be_deploy(path: str, text: str) -> bool:
    """Cheap test before parsing: under ``deploy/`` or a top-level ``stages:`` line."""
    return "deploy" in PurePath(path).parts[:-1] or _STAGES_LINE.search(text) is not None


#: KeyProblem kind -> (code, message template).
_CODES = {
    "topology": ("PKY101", "topology key `{key}` in {where}: vLLM-Omni ignores it here "
                           "(topology lives in pipeline.py)"),
    "unknown": ("PKY102", "`{key}` is not a {where} key in the vLLM-Omni {version} deploy schema"),
    "shape": ("PKY102", "a {where} entry without `stage_id`, or `stages` that is not a list: the vLLM-Omni "
                        "{version} loader needs a list of stages with ids"),
    "serial_without_reason": ("PKY103", "max_num_seqs: {value} serialises the stage and no comment says why "
                                        "(an AR stage below 4 leaves audio gaps under load)"),
    "pipeline_only": ("PKY104", "`{key}` in {where} is a pipeline-only field (or legacy stage metadata): "
                                "vLLM-Omni {version} takes it from pipeline.py"),
}


def _findings(path: str, doc, lines: list[str], enabled: frozenset[str]) -> list[LintFinding]:
    schema = load_schema()
    out = []
    for p in deploy_key_problems(doc, schema, lines):
        code, template = _CODES[p.kind]
        if code in enabled:
            message = template.format(key=p.key, where=p.where, version=schema.version, value=p.value)
            out.append(LintFinding(path, p.line or 1, p.col or 1, code, message))
    return out


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
    if not isinstance(doc.get("stages"), list) and not in_deploy_dir:
        return []
    if not is_deploy_doc(doc, load_schema().top_level):
        return []  # a side config kept in deploy/ (e.g. forced_aligner.yaml), not a deploy file
    lines = text.splitlines()
    findings = apply_noqa(_findings(path, doc, lines, enabled), lines)
    findings.sort(key=LintFinding.sort_key)
    return findings
