"""``porting-kit notebooks DIR``: copy the walkthroughs out of the installed package.

The walkthroughs (``notebooks/*.ipynb``) and the example specs they point at
(``examples/*.py``, so that ``SPEC = "examples/llama_meta.py"`` works from DIR)
are copied into DIR. The reference clips stay in the package; the walkthroughs
find them through :func:`porting_kit.resources.shipped`.

Nothing a user has is lost: DIR must be absent or a directory; a file that
exists there with other content stops the copy before anything is written
(exit 2 naming it) unless ``force``, which keeps a numbered ``.bak`` of it. A
file with the same content is left as it is, so copying twice changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from porting_kit.errors import InputError
from porting_kit.fsutil import atomic_write
from porting_kit.resources import shipped


@dataclass
class CopyResult:
    """What :func:`copy_notebooks` did. Paths are relative to ``dest``."""

    dest: Path
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    backed_up: list[str] = field(default_factory=list)


def planned_files() -> list[tuple[Path, str]]:
    """``(source file, path relative to DIR)`` for every file the copy writes."""
    out: list[tuple[Path, str]] = []
    for nb in sorted(shipped("notebooks").glob("*.ipynb")):
        out.append((nb, nb.name))
    for ex in sorted(shipped("examples").glob("*.py")):
        out.append((ex, f"examples/{ex.name}"))
    return out


def copy_notebooks(dest: str | Path, *, force: bool = False) -> CopyResult:
    """Copy the walkthroughs and the example specs they use into ``dest``.

    Parameters
    ----------
    dest : str or Path
        An absent path (created) or an existing directory.
    force : bool
        Replace files that differ, keeping a ``.bak`` of each.

    Returns
    -------
    CopyResult

    Raises
    ------
    InputError
        ``dest`` exists and is not a directory (or is a symlink to one elsewhere
        than it says), lies inside the installed package, or a file there differs and
        ``force`` is not given (nothing is written then).
    """
    from porting_kit.fsutil import check_output_dir

    dest = Path(dest)
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise InputError(f"notebooks: {dest} exists and is not a directory")
    check_output_dir(dest, what="notebooks")
    plan = planned_files()
    result = CopyResult(dest=dest)
    todo: list[tuple[Path, Path, bool]] = []
    for src, rel in plan:
        target = dest / rel
        if target.is_symlink() or (target.exists() and not target.is_file()):
            raise InputError(f"notebooks: {target} exists and is not a regular file; nothing was written")
        if target.exists():
            if target.read_bytes() == src.read_bytes():
                result.unchanged.append(rel)
                continue
            if not force:
                raise InputError(f"notebooks: {target} exists and differs from the shipped copy; "
                                 "nothing was written (use --force to replace it, keeping a .bak)")
            result.backed_up.append(rel)
        todo.append((src, target, target.exists()))
    for src, target, existed in todo:
        data = src.read_bytes()

        def write(tmp: str, data: bytes = data) -> None:
            with open(tmp, "wb") as fh:
                fh.write(data)

        try:
            atomic_write(target, write, backup=existed)
        except OSError as exc:
            raise InputError(f"notebooks: cannot write {target}: {exc.strerror or exc}") from exc
        result.written.append(str(target.relative_to(dest)))
    return result
