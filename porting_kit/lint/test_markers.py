"""PKT1xx test files without vLLM-Omni's CI tier and hardware markers.

vLLM-Omni's CI selects tests by marker (seeds/001's L1-L4 table and
``tools/pre_commit/check_test_marks.py`` upstream): a test file needs a CI
tier marker (``core_model``, ``advanced_model``, ``full_model``,
``local_model``) and a hardware marker (``cpu``, ``gpu``, ``cuda``, ``rocm``,
``xpu``, ``npu``, ``musa``) or a hardware helper call (``hardware_test(...)``,
``hardware_marks(...)`` from ``tests/helpers/mark.py``); otherwise no CI job
ever runs it. A test file is ``test_*.py`` or ``*_test.py`` under a ``tests``
directory. Markers count wherever they appear as ``<x>.mark.<name>`` or
``mark.<name>`` (decorators, ``pytestmark``, ``pytest.param(marks=...)``).
"""

from __future__ import annotations

import ast
from pathlib import PurePath

TIER_MARKS = frozenset({"core_model", "advanced_model", "full_model", "local_model"})
HARDWARE_MARKS = frozenset({"cpu", "gpu", "cuda", "rocm", "xpu", "npu", "musa"})
HARDWARE_HELPERS = ("hardware_test", "hardware_marks")


class MarkState:
    """Which kinds of marker the file has used so far."""

    __slots__ = ("hardware", "tier")

    def __init__(self) -> None:
        self.tier = False
        self.hardware = False


def is_test_path(path: str) -> bool:
    """Whether ``path`` is a test file that needs CI markers.

    Parameters
    ----------
    path : str
        As given on the command line.

    Returns
    -------
    bool
        True for ``test_*.py`` / ``*_test.py`` with a ``tests`` directory somewhere among
        its parent folders.
    """
    p = PurePath(path)
    name = p.name
    if not (name.startswith("test_") or name.endswith("_test.py")) or not name.endswith(".py"):
        return False
    return "tests" in p.parts[:-1]


def on_attribute(lin, node: ast.Attribute) -> None:
    """Note a ``<x>.mark.<name>`` / ``mark.<name>`` tier or hardware marker.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
        A test file's linter (``lin.marks`` set).
    node : ast.Attribute
        Any attribute access; counted when ``node.attr`` is a tier marker
        (:data:`TIER_MARKS`) or a hardware marker (:data:`HARDWARE_MARKS`).
    """
    attr = node.attr
    if attr not in TIER_MARKS and attr not in HARDWARE_MARKS:
        return
    value = node.value
    if (value.__class__ is ast.Attribute and value.attr == "mark") or \
            (value.__class__ is ast.Name and value.id == "mark"):
        if attr in TIER_MARKS:
            lin.marks.tier = True
        else:
            lin.marks.hardware = True


def _helper(lin, node: ast.Call) -> None:
    lin.marks.hardware = True


CALLS = {name: _helper for name in HARDWARE_HELPERS}


def on_file_end(lin) -> None:
    """Report PKT101 / PKT102 (file-level) when the file used no tier / hardware marker.

    Parameters
    ----------
    lin : porting_kit.lint.engine.Linter
        A test file's linter after the traversal.

    Notes
    -----
    The marker sets follow vLLM-Omni's ``tools/pre_commit/check_test_marks.py`` and its
    ``tests/helpers/mark.py`` helpers (``hardware_test``, ``hardware_marks``).
    """
    if not lin.marks.tier:
        lin.report("PKT101", None, "test file has no CI tier marker, so no CI job selects it",
                   file_level=True)
    if not lin.marks.hardware:
        lin.report("PKT102", None, "test file has no hardware marker, so no CI job selects it",
                   file_level=True)
