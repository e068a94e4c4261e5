"""The package layout's rules, checked on the source (issue 11)."""

import ast
import re
from pathlib import Path

from porting_kit.runner import FAMILIES

PACKAGE = Path(__file__).resolve().parents[2] / "porting_kit"
#: A fault-code string literal of a check family (``"hop.offset"``...), every family of the
#: runner's table (a new family is covered at once).
FAULT_CODE = re.compile(r'"(' + "|".join(FAMILIES) + r')\.[a-z_]+"')


def _imported_modules(tree: ast.AST, package: str) -> list[str]:
    """Every module an import statement names (top-level or lazy, relative ones resolved
    against ``package``), with ``module.name`` for each ``from module import name``."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.append(module)
            names += [f"{module}.{a.name}" for a in node.names]
    return names


def test_probes_build_no_fault_codes():
    """Probes measure: no fault-code string in their source, no import of porting_kit.report."""
    bad = []
    probes = sorted((PACKAGE / "probes").rglob("*.py"))
    assert probes, "no probe modules found"
    for path in probes:
        src = path.read_text()
        rel = path.relative_to(PACKAGE.parent)
        bad += [f"{rel}: fault code {m.group(0)}" for m in FAULT_CODE.finditer(src)]
        tree = ast.parse(src, str(path))
        bad += [f"{rel}: fault code {node.value!r}" for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and isinstance(node.value, str)
                and FAULT_CODE.fullmatch(f'"{node.value}"')]
        bad += [f"{rel}: imports {name}" for name in _imported_modules(tree, "porting_kit.probes")
                if name == "porting_kit.report" or name.startswith("porting_kit.report.")]
    assert not bad, "\n".join(sorted(set(bad)))
