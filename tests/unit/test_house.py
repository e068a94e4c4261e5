"""The house rules of docs/architecture.md, checked on the package's own source.

Data flows one way (spec -> load -> locate -> probes -> checks -> report); a check
never imports another check; every fault-code string is built under
porting_kit/checks/ (lint codes under porting_kit/lint/, scaffold tier codes in
the scaffold package's validation modules); ``import porting_kit`` needs no torch.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path


PKG = Path(__file__).resolve().parents[2] / "porting_kit"
FAMILIES = ("parity", "rope", "norm", "config", "hop", "channel", "dtype", "rng", "lifecycle", "decode",
            "sampling", "batch", "features", "tp", "cudagraph", "quality")
CODE = re.compile(r"^(%s)\.(?!(?:json|yaml|yml|py|toml|txt)$)[a-z][a-z0-9_]*$" % "|".join(FAMILIES))


def _modules() -> dict[str, Path]:
    out = {}
    for f in PKG.rglob("*.py"):
        name = ".".join(f.relative_to(PKG.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = f
    return out


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """porting_kit modules imported by ``name`` (module level and inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        found.update(t for t in targets if t in mods and t != name)
    return found


def test_no_import_cycles():
    mods = _modules()
    edges = {m: _imports(m, p, mods) for m, p in mods.items()}
    # a package's __init__ re-exporting its members is not a cycle of data flow
    for m in edges:
        edges[m] = {t for t in edges[m] if not (m.startswith(t + ".") and mods[t].name == "__init__.py")}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        if state.get(m) == 1:
            cycles.append(path[path.index(m):] + [m])
            return
        if state.get(m) == 2:
            return
        state[m] = 1
        for t in sorted(edges[m]):
            visit(t, path + [m])
        state[m] = 2

    for m in sorted(edges):
        visit(m, [])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:5])


def test_checks_do_not_import_other_checks():
    mods = _modules()
    bad = []
    for m, p in mods.items():
        if m.startswith("porting_kit.checks.") and m != "porting_kit.checks":
            for t in _imports(m, p, mods):
                if t.startswith("porting_kit.checks.") and t != m:
                    bad.append(f"{m} imports {t}")
    assert not bad, bad


def test_probes_locate_and_load_never_import_checks_or_report():
    mods = _modules()
    bad = []
    for m, p in mods.items():
        if m.startswith(("porting_kit.probes", "porting_kit.locate", "porting_kit.load")):
            for t in _imports(m, p, mods):
                if t.startswith(("porting_kit.checks", "porting_kit.report", "porting_kit.runner",
                                 "porting_kit.cli")):
                    bad.append(f"{m} imports {t}")
    assert not bad, bad


def _allowed_for_codes(rel: str) -> bool:
    """Where fault codes may be written: the check families, the lint rules, the scaffold
    validation modules, and the embedded examples' variant tables (which name the code a
    planted fault must produce)."""
    return rel.startswith(("checks/", "lint/", "embedded/")) or (
        rel.startswith("scaffold/") and "valid" in rel or rel.startswith("scaffold/consistency")
        or rel.startswith("scaffold/run_tier") or rel.startswith("scaffold/gpu_tier"))


def test_fault_codes_are_built_only_in_check_families():
    bad = []
    for f in PKG.rglob("*.py"):
        rel = f.relative_to(PKG).as_posix()
        if _allowed_for_codes(rel):
            continue
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and CODE.match(node.value):
                bad.append(f"{rel}:{node.lineno}: {node.value}")
    assert not bad, "fault codes built outside porting_kit/checks/: " + ", ".join(bad[:20])


TIER_CODE = re.compile(r"^(scaffold|consistency|run|gpu)\.[a-z][a-z0-9_]*$")


def test_scaffold_tier_codes_are_built_in_the_scaffold_package():
    bad = []
    for f in PKG.rglob("*.py"):
        rel = f.relative_to(PKG).as_posix()
        if rel.startswith(("scaffold/", "lint/")):
            continue
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and TIER_CODE.match(node.value):
                bad.append(f"{rel}:{node.lineno}: {node.value}")
    assert not bad, "validate tier codes built outside porting_kit/scaffold/: " + ", ".join(bad[:20])


def test_import_porting_kit_needs_no_heavy_package():
    code = ("import sys, porting_kit; import porting_kit.lint.main, porting_kit.scaffold; "
            "heavy = [m for m in ('torch', 'numpy', 'transformers', 'librosa', 'matplotlib', 'jinja2') "
            "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_public_api_names_resolve():
    import porting_kit

    for name in porting_kit.__all__:
        assert getattr(porting_kit, name) is not None, name
    assert callable(porting_kit.run_check) and callable(porting_kit.scaffold)
