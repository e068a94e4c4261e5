"""Insert registration lines into an existing vLLM-Omni source tree.

Each function takes a file's text and returns the new text with only *added*
lines: an existing line is never changed or removed, and a registration that
is already there is not added again (running twice changes nothing). Positions
come from :mod:`ast` (one parse per file), so formatting of the surrounding
code does not matter as long as the closing bracket of the edited block sits
on its own line, as it does in vLLM-Omni 0.30.0.
"""

from __future__ import annotations

import ast

from porting_kit.errors import InputError


def _insert(text: str, inserts: list[tuple[int, str]]) -> str:
    """Insert ``(line_index, new_text)`` pairs (0-based, before that line)."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    for index, new in sorted(inserts, key=lambda p: p[0], reverse=True):
        lines[index:index] = [new]
    return "".join(lines)


def _module_assign(tree: ast.Module, name: str) -> ast.expr | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node.value
    return None


def _closing_line(text: str, node: ast.expr, what: str, path: str) -> int:
    """0-based index of the line holding ``node``'s closing bracket (alone on it)."""
    line = text.splitlines()[node.end_lineno - 1]
    if line.strip() not in ("}", ")", "},", "),"):
        raise InputError(f"{path}: cannot find the closing line of {what}; add the registration by hand")
    return node.end_lineno - 1


def _parse(text: str, path: str) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as exc:
        raise InputError(f"{path} does not parse ({exc.msg}, line {exc.lineno}); fix it before --into") from None


def add_pipeline_registration(text: str, model_type: str, const_name: str,
                              path: str = "pipeline_registry.py") -> str:
    """Import ``const_name`` from the model's ``pipeline.py`` and map ``model_type`` to it
    in ``OMNI_PIPELINES`` (``vllm_omni/config/pipeline_registry.py``).

    Parameters
    ----------
    text : str
        Current source of ``pipeline_registry.py``.
    model_type : str
        The model's folder under ``vllm_omni/model_executor/models/`` (its HF ``model_type``).
    const_name : str
        Name of the pipeline constant defined in that folder's ``pipeline.py``.
    path : str, default "pipeline_registry.py"
        Path used in error messages only.

    Returns
    -------
    str
        The edited source, or ``text`` itself when both the import and the entry are present.

    Raises
    ------
    InputError
        When ``text`` does not parse, has no import block, has no ``OMNI_PIPELINES`` dict, or maps
        ``model_type`` to another constant (the message names the file and line).
    """
    tree = _parse(text, path)
    module = f"vllm_omni.model_executor.models.{model_type}.pipeline"
    inserts: list[tuple[int, str]] = []
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    if not any(isinstance(n, ast.ImportFrom) and n.module == module for n in imports):
        if not imports:
            raise InputError(f"{path}: no import block found; add the registration by hand")
        inserts.append((max(n.end_lineno for n in imports), f"from {module} import {const_name}\n"))
    table = _module_assign(tree, "OMNI_PIPELINES")
    if not isinstance(table, ast.Dict):
        raise InputError(f"{path}: OMNI_PIPELINES dict not found; add the registration by hand")
    existing = [(k, v) for k, v in zip(table.keys, table.values, strict=True)
                if isinstance(k, ast.Constant) and k.value == model_type]
    for key, value in existing:
        if ast.unparse(value) != const_name:
            raise InputError(f"{path}:{key.lineno}: OMNI_PIPELINES already maps {model_type!r} to "
                             f"{ast.unparse(value)}, not {const_name}; nothing written (pick another --model-type "
                             "or remove that row)")
    if not existing:
        inserts.append((_closing_line(text, table, "OMNI_PIPELINES", path), f'    "{model_type}": {const_name},\n'))
    return _insert(text, inserts) if inserts else text


def add_model_registration(text: str, entries: list[tuple[str, str, str, str]],
                           path: str = "registry.py") -> str:
    """Add ``arch: (folder, module, class)`` rows to ``_OMNI_MODELS``
    (``vllm_omni/model_executor/models/registry.py``); ``entries`` are
    ``(arch, folder, module, class_name)``. A row already there with the same
    values is kept (running twice changes nothing); one with other values is a
    conflict.

    Parameters
    ----------
    text : str
        Current source of ``registry.py``.
    entries : list of (str, str, str, str)
        ``(arch, folder, module, class_name)`` rows; an ``arch`` already a key is skipped.
    path : str, default "registry.py"
        Path used in error messages only.

    Returns
    -------
    str
        The edited source, or ``text`` itself when every ``arch`` is present.

    Raises
    ------
    InputError
        When ``text`` does not parse, has no ``_OMNI_MODELS`` dict, or registers an ``arch``
        of ``entries`` with another row (the message names the file and line).
    """
    tree = _parse(text, path)
    table = _module_assign(tree, "_OMNI_MODELS")
    if not isinstance(table, ast.Dict):
        raise InputError(f"{path}: _OMNI_MODELS dict not found; add the registration by hand")
    present = {k.value: (k, v) for k, v in zip(table.keys, table.values, strict=True) if isinstance(k, ast.Constant)}
    for arch, folder, module, cls in entries:
        if arch in present:
            key, value = present[arch]
            try:
                row = ast.literal_eval(value)
            except ValueError:
                row = None
            if row != (folder, module, cls):
                raise InputError(f"{path}:{key.lineno}: _OMNI_MODELS already registers {arch!r} as "
                                 f"{ast.unparse(value)}, not {(folder, module, cls)!r}; nothing written (pass "
                                 "another --arch or remove that row)")
    new = "".join(
        f'    "{arch}": (\n        "{folder}",\n        "{module}",\n        "{cls}",\n    ),\n'
        for arch, folder, module, cls in entries if arch not in present
    )
    if not new:
        return text
    return _insert(text, [(_closing_line(text, table, "_OMNI_MODELS", path), new)])


def add_adapter_import(text: str, model_type: str, path: str = "tts_adapters/__init__.py") -> str:
    """Add ``model_type`` to the adapter import block at the bottom of
    ``vllm_omni/entrypoints/openai/tts_adapters/__init__.py`` (alphabetical slot).

    Parameters
    ----------
    text : str
        Current source of ``tts_adapters/__init__.py``.
    model_type : str
        Adapter module name to import.
    path : str, default "tts_adapters/__init__.py"
        Path used in error messages only.

    Returns
    -------
    str
        The edited source, or ``text`` itself when the name is already imported.

    Raises
    ------
    InputError
        When ``text`` does not parse or has no multi-line adapter import block.
    """
    tree = _parse(text, path)
    pkg = "vllm_omni.entrypoints.openai.tts_adapters"
    blocks = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == pkg
              and any(a.name not in ("register_tts_adapter",) for a in n.names) and n.end_lineno > n.lineno]
    if not blocks:
        raise InputError(f"{path}: adapter import block not found; add the import by hand")
    block = blocks[-1]
    if any(a.name == model_type for a in block.names):
        return text
    after = [a for a in block.names if a.name > model_type and a.lineno != block.lineno]
    index = (after[0].lineno - 1) if after else _closing_line(text, block, "the adapter import block", path)
    return _insert(text, [(index, f"    {model_type},\n")])


def add_benchmark_entry(text: str | None, hf_id: str, entry: str) -> str:
    """Append ``entry`` (YAML lines under ``models:``) to ``benchmarks/tts/model_configs.yaml``
    unless ``hf_id`` is already a model there; ``text=None`` starts a new file.

    Parameters
    ----------
    text : str or None
        Current content of ``model_configs.yaml``; None when the file does not exist.
    hf_id : str
        Hugging Face model id, the key under ``models:``.
    entry : str
        The YAML lines to append (starting with a newline).

    Returns
    -------
    str
        The new file content, or ``text`` itself when ``hf_id`` is already listed.

    Raises
    ------
    InputError
        When ``text`` is not valid YAML.
    """
    if text is None:
        return "# TTS benchmark model registry (vllm-omni benchmarks/tts).\n\nmodels:" + entry
    import yaml

    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise InputError(f"benchmarks/tts/model_configs.yaml is not valid YAML: {exc}") from None
    if hf_id in (doc.get("models") or {}):
        return text
    return text + ("" if text.endswith("\n") else "\n") + entry.lstrip("\n")


def only_added(old: str, new: str) -> bool:
    """True when ``new`` is ``old`` with lines added and none changed or removed.

    Parameters
    ----------
    old, new : str
        Text before and after an edit.

    Returns
    -------
    bool
        Whether every line of ``old`` appears in ``new`` in the same order.
    """
    old_lines = old.splitlines()
    it = iter(new.splitlines())
    return all(any(line == cand for cand in it) for line in old_lines)
