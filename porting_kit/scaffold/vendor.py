"""Import the upstream package, or vendor its codec / config files (issue 31 point 9).

A port reuses the upstream model's codec and config code instead of rewriting it. Whether it can
*import* the upstream package depends on the package's pins: ``voxcpm`` asks for
``transformers>=4.36.2`` (an import works next to vLLM's transformers), ``qwen-tts`` pins
``transformers==4.57.3`` (installing it would downgrade the serving stack). :func:`plan_vendoring`
reads the distribution's ``Requires-Dist`` (a wheel or an unpacked folder with its ``*.dist-info``;
nothing of the package is imported or run) and checks each pin against what is installed;
:func:`vendor_files` copies the codec / config files of a package that cannot be imported into the
port, each marked as vendored, and records every compatibility patch in ``VENDORED.json``:

* imports of the package itself are made relative (the copy lives under the port's package);
* ``from transformers... import X`` names that the installed transformers does not have are listed
  as **needs a patch** (found with ``importlib.util.find_spec`` / ``hasattr`` on transformers' own
  modules, never by running the vendored code) -- they are not rewritten by guess.
"""

from __future__ import annotations

import ast
import json
import re
import zipfile
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatch
from pathlib import Path

from porting_kit.errors import InputError

#: Files vendored by default: the codec and the config classes (the model's own code is ported).
DEFAULT_PATTERNS = ("*configuration_*.py", "*tokenizer_12hz/*.py", "*codec*.py", "*/vq/*.py", "*audio_vae*.py",
                    "*audiovae*/*.py")


@dataclass
class Pin:
    """One ``Requires-Dist`` requirement checked against the environment."""

    requirement: str
    package: str
    installed: str | None
    ok: bool


@dataclass
class VendorPlan:
    """Import or vendor, and why."""

    package: str
    version: str
    decision: str  # "import" or "vendor"
    conflicts: list[Pin] = field(default_factory=list)
    checked: list[Pin] = field(default_factory=list)

    def reason(self) -> str:
        if self.decision == "import":
            return (f"{self.package} {self.version}: every pin holds next to the installed packages "
                    f"({', '.join(p.requirement for p in self.checked) or 'none checked'}): import it")
        return (f"{self.package} {self.version} pins " + ", ".join(
            f"{p.requirement} (installed {p.installed})" for p in self.conflicts)
            + ": importing it would change the serving stack, so its codec / config files are vendored")


@dataclass
class Patch:
    """One compatibility change (or one still needed) in a vendored file."""

    file: str
    line: int
    before: str
    after: str | None
    why: str


class _Dist:
    """A wheel file or an unpacked folder with a ``*.dist-info/METADATA``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.is_file() and path.suffix == ".whl":
            self.zip = zipfile.ZipFile(path)
            self.names = [n for n in self.zip.namelist() if not n.endswith("/")]
        elif path.is_dir():
            self.zip = None
            self.names = [str(p.relative_to(path)) for p in sorted(path.rglob("*")) if p.is_file()]
        else:
            raise InputError(f"upstream package {path}: not a wheel (.whl) or an unpacked folder")
        meta = next((n for n in self.names if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None)
        if meta is None:
            raise InputError(f"upstream package {path}: no *.dist-info/METADATA (pip download --no-deps NAME, "
                             "then pass the .whl)")
        self.metadata = self.read(meta)

    def read(self, name: str) -> str:
        if self.zip is not None:
            return self.zip.read(name).decode("utf-8", errors="replace")
        return (self.path / name).read_text(encoding="utf-8", errors="replace")


def _meta_field(metadata: str, key: str) -> list[str]:
    head = metadata.split("\n\n", 1)[0]
    return [ln.split(":", 1)[1].strip() for ln in head.splitlines() if ln.lower().startswith(key.lower() + ":")]


def _installed(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def plan_vendoring(dist: str | Path, installed: dict[str, str | None] | None = None) -> VendorPlan:
    """Import or vendor: every pin of the distribution checked against the installed packages.

    A requirement on a package that is not installed is no conflict (pip would add it); one whose
    environment marker does not hold (an extra, another platform) is skipped.

    Parameters
    ----------
    dist : str or Path
        The upstream package's wheel, or an unpacked folder with its ``*.dist-info``.
    installed : dict, optional
        Package -> installed version (None: not installed); default: this environment's.

    Returns
    -------
    VendorPlan
        ``decision`` ``"vendor"`` when an installed package falls outside a pin, else ``"import"``.

    Raises
    ------
    InputError
        Not a wheel / folder, or no ``METADATA``.
    """
    from packaging.requirements import InvalidRequirement, Requirement

    d = _Dist(Path(dist))
    name = (_meta_field(d.metadata, "Name") or [Path(dist).name])[0]
    version = (_meta_field(d.metadata, "Version") or ["?"])[0]
    plan = VendorPlan(name, version, "import")
    for text in _meta_field(d.metadata, "Requires-Dist"):
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        have = installed.get(req.name) if installed is not None else _installed(req.name)
        if have is None:
            continue
        pin = Pin(str(req), req.name, have, req.specifier.contains(have, prereleases=True))
        plan.checked.append(pin)
        if not pin.ok:
            plan.conflicts.append(pin)
    if plan.conflicts:
        plan.decision = "vendor"
    return plan


def _transformers_has(module: str, attr: str) -> bool:
    """Whether the installed ``module`` defines ``attr``, read without running the module: the
    names of a lazy package (transformers' ``_LazyModule`` lists them in ``dir()``), else the
    top-level definitions / assignments / imports of its source. Unknown (it cannot be read): True,
    so nothing is reported as missing on a guess."""
    import importlib.util
    import sys

    try:
        spec = importlib.util.find_spec(module)
        if spec is None:
            return False
        loaded = sys.modules.get(module)
        if loaded is not None:
            return attr in dir(loaded)
        if not (spec.origin and spec.origin.endswith(".py")):
            return True
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - a parent package that fails to import: unknown, not missing
        return True
    names: set[str] = set()
    todo = list(tree.body)
    while todo:  # module level, through if / try / with blocks (not into functions or classes)
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
            if any(a.name == "*" for a in node.names):
                return True  # a star import: not read statically
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            todo += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                     *(n for h in getattr(node, "handlers", []) for n in h.body)]
    return attr in names


def _patch_source(text: str, rel: str, package: str, depth: int) -> tuple[str, list[Patch]]:
    """Make the package's own imports relative; list transformers names the installed version lacks."""
    lines = text.splitlines(keepends=True)
    patches: list[Patch] = []
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if node.module == package or node.module.startswith(package + "."):
            old = lines[node.lineno - 1]
            rest = node.module[len(package):].lstrip(".")
            new = old.replace(f"from {node.module} ", f"from {'.' * (depth + 1)}{rest} ", 1)
            if new != old:
                lines[node.lineno - 1] = new
                patches.append(Patch(rel, node.lineno, old.strip(), new.strip(),
                                     f"{package} is vendored, not installed: the import is relative"))
        elif node.module.split(".")[0] == "transformers":
            for alias in node.names:
                if not _transformers_has(node.module, alias.name):
                    patches.append(Patch(rel, node.lineno, lines[node.lineno - 1].strip(), None,
                                         f"needs a patch: the installed transformers has no "
                                         f"{node.module}.{alias.name}"))
    return "".join(lines), patches


def vendored_texts(dist: str | Path, plan: VendorPlan,
                   patterns: tuple[str, ...] = DEFAULT_PATTERNS) -> tuple[dict[str, str], dict]:
    """The vendored files (path under the vendor folder -> text) and the ``VENDORED.json`` record.

    Each file gets a header naming the package, version, source path and why it is vendored; the
    package's own absolute imports become relative; every package folder gets an ``__init__.py``.

    Parameters
    ----------
    dist : str or Path
        The wheel or unpacked folder.
    plan : VendorPlan
        From :func:`plan_vendoring` (its reason goes into every header).
    patterns : tuple of str
        ``fnmatch`` patterns of the package paths to copy (:data:`DEFAULT_PATTERNS`).

    Returns
    -------
    files : dict of str to str
        ``<package>/<path>`` -> text, ``VENDORED.json`` included.
    record : dict
        Plan, files and patches (``after`` None: a patch still needed).
    """
    d = _Dist(Path(dist))
    top = re.sub(r"[-.]", "_", plan.package).lower()
    record = {"schema": "porting-kit/vendored/1", "package": plan.package, "version": plan.version,
              "decision": plan.decision, "reason": plan.reason(), "files": [], "patches": []}
    files: dict[str, str] = {}
    for name in d.names:
        if not name.endswith(".py") or not name.startswith(top + "/") or not any(fnmatch(name, p) for p in patterns):
            continue
        rel = name[len(top) + 1:]
        try:
            text, patches = _patch_source(d.read(name), f"{top}/{rel}", top, rel.count("/"))
        except SyntaxError as exc:
            raise InputError(f"upstream package {dist}: {name} does not parse ({exc.msg}); vendor it by hand") from None
        header = (f"# Vendored from {plan.package} {plan.version} ({name}) by porting-kit; do not edit in place.\n"
                  f"# Why: {plan.reason()}\n# Compatibility patches: VENDORED.json\n")
        files[f"{top}/{rel}"] = header + text
        record["files"].append(f"{top}/{rel}")
        record["patches"] += [asdict(p) for p in patches]
    for rel in list(files):
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            files.setdefault("/".join(parts[:i]) + "/__init__.py",
                             f'"""Vendored from {plan.package} {plan.version} by porting-kit."""\n')
    files["VENDORED.json"] = json.dumps(record, indent=2) + "\n"
    return files, record


def vendor_files(dist: str | Path, dest: str | Path, plan: VendorPlan,
                 patterns: tuple[str, ...] = DEFAULT_PATTERNS) -> dict:
    """Write :func:`vendored_texts` under ``dest`` (created); return the ``VENDORED.json`` record."""
    files, record = vendored_texts(dist, plan, patterns)
    for rel, text in files.items():
        target = Path(dest) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return record
