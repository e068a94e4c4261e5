"""The walkthroughs' face: ``porting-kit notebooks DIR``, and the calls the notebooks make.

:func:`spec_from_parameter` reads a walkthrough's ``SPEC`` / ``VARIANT``
parameters (an embedded example name, ``example:variant``, or a spec path);
:func:`check` is :func:`porting_kit.runner.run_check` with a progress line over the
families (in a kernel a plain-text output updated in place and replaced by a one-line
summary when done, so a saved notebook reopens with no widget error; a ``tqdm`` text bar
elsewhere); :class:`optional_section` runs a section that needs an optional package, or
shows a note saying what it would show and the one command that enables it. None decides
a verdict.

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
from porting_kit.fsutil import WriteTransaction
from porting_kit.resources import shipped

#: Spec files are named by path; anything else is an embedded example (``tts``, ``tts:variant``).
_SPEC_SUFFIX = ".py"


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
    try:
        with WriteTransaction() as txn:  # Ctrl-C half-way: nothing of this copy is left
            for src, target, existed in todo:
                txn.write_text(target, src.read_text(encoding="utf-8"), backup=existed)
                result.written.append(str(target.relative_to(dest)))
    except OSError as exc:
        raise InputError(f"notebooks: cannot write into {dest}: {exc.strerror or exc}") from exc
    return result


def spec_from_parameter(spec: str | Path | None = "tts", variant: str | None = None):
    """Load the spec a walkthrough's ``SPEC`` / ``VARIANT`` parameters name.

    Parameters
    ----------
    spec : str or Path or None, default "tts"
        An embedded example name (``"tts"``, ``"generator"``), ``"example:variant"``, or the path
        of a spec file (a name ending in ``.py``, or any existing file; relative paths are
        relative to the kernel's working directory, the notebook's folder). ``None`` is the
        embedded default example.
    variant : str, optional
        A variant of that spec (as ``--variant``).

    Returns
    -------
    Spec

    Raises
    ------
    InputError
        Unknown example or variant, missing or unimportable spec file
        (:func:`porting_kit.spec.load_spec`).
    """
    from porting_kit.spec import load_spec

    if spec is None:
        return load_spec(variant=variant)
    text = str(spec)
    if text.endswith(_SPEC_SUFFIX) or Path(text).expanduser().is_file():
        return load_spec(Path(text).expanduser(), variant=variant)
    return load_spec(example=text, variant=variant)


def check(spec="tts", *, variant: str | None = None, only=None, device: str = "cpu",
          dtype: str | None = None):
    """Run the checks of a walkthrough's spec with a progress bar over the families.

    Parameters
    ----------
    spec : Spec or str or Path or None, default "tts"
        A loaded spec, or what :func:`spec_from_parameter` takes.
    variant : str, optional
        The spec's variant (ignored when ``spec`` is already a ``Spec``).
    only : str or list of str, optional
        Families to run (``"parity,rope"``); all by default.
    device : str, default "cpu"
        Torch device (``"cpu"``, ``"cuda"``).
    dtype : str, optional
        Serving dtype (``"bfloat16"``...); default keeps the models' dtype.

    Returns
    -------
    Report
        As :func:`porting_kit.runner.run_check` returns it; a failing port is a report with
        status ``fail``, never an exception.

    Raises
    ------
    InputError
        The checks could not run (bad spec, weights that cannot be loaded, unknown family).
    """
    import time

    from porting_kit.runner import parse_only, run_check
    from porting_kit.spec import Spec

    if not isinstance(spec, Spec):
        spec = spec_from_parameter(spec, variant)
    families = parse_only(only)
    bar = _progress_bar(len(families), f"checks of {spec.name}")
    started: list[str] = []
    t0 = time.perf_counter()

    def progress(text: str) -> None:
        family = text.split(":", 1)[0]  # "parity" as a family starts, "parity: loading weights" within
        if family in families and family not in started:
            started.append(family)
        bar.show(max(len(started) - 1, 0), text)

    try:
        report = run_check(spec, only=families, device=device, dtype=dtype, progress=progress)
    except BaseException:
        bar.close(f"checks of {spec.name}: stopped at {started[-1] if started else 'the start'}")
        raise
    n = len(families)
    bar.close(f"checks of {spec.name}: {n} {'family' if n == 1 else 'families'} in {time.perf_counter() - t0:.1f} s")
    return report


class _progress_bar:  # noqa: N801 - a private helper, named as the thing it shows
    """A progress line that leaves nothing a saved notebook cannot show again.

    In a kernel: one ``text/plain`` output updated in place through a display id (no ipywidgets
    widget, whose state a saved notebook does not keep: reopened, it would read "Error
    displaying widget: model not found"), replaced by a one-line summary when done. Elsewhere:
    a ``tqdm`` text bar on stderr, removed when done.
    """

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc = total, desc
        self.handle = self.bar = None
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            get_ipython = None  # noqa: N806
        if get_ipython is not None and getattr(get_ipython(), "kernel", None) is not None:
            self.handle = display(_Plain(self._line(0, "")), display_id=True)
        else:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="family", leave=False)

    def _line(self, done: int, text: str) -> str:
        return f"{self.desc}: {done}/{self.total} families" + (f" ({text})" if text else "")

    def show(self, done: int, text: str) -> None:
        if self.handle is not None:
            self.handle.update(_Plain(self._line(done, text)))
        elif self.bar is not None:
            self.bar.update(done - self.bar.n)
            self.bar.set_postfix_str(text, refresh=True)

    def close(self, summary: str) -> None:
        if self.handle is not None:
            self.handle.update(_Plain(summary))
        elif self.bar is not None:
            self.bar.close()


class _Plain:
    """An object whose only representation is ``text/plain`` (no HTML, no widget)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


@dataclass
class MissingPackages:
    """A walkthrough section that cannot run here: what it would show and the one command that enables it.

    Displays itself (``_repr_markdown_`` in JupyterLab, ``str`` elsewhere); it is a note, not an
    error, so the rest of the walkthrough runs.
    """

    missing: list[str]
    shows: str
    install: str

    def __str__(self) -> str:
        names = ", ".join(self.missing)
        return (f"Skipped: this section shows {self.shows}. It needs {names}, not installed here; "
                f"to enable it: {self.install}")

    def _repr_markdown_(self) -> str:
        names = ", ".join(f"`{m}`" for m in self.missing)
        return (f"> **Skipped here** — this section shows {self.shows}.\n"
                f"> It needs {names}, which is not installed. To enable it: `{self.install}`")


def missing_packages(modules) -> list[str]:
    """The names in ``modules`` (import names, e.g. ``"encodec"``) that cannot be imported here."""
    import importlib.util

    names = [modules] if isinstance(modules, str) else list(modules)
    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


class optional_section:  # noqa: N801 - used as a statement: ``with optional_section(...):``
    """Run a walkthrough section that needs an optional package; a short note instead when it is absent.

    Parameters
    ----------
    needs : str or list of str
        The import names the section needs (``"encodec"``, ``"ruff"``).
    shows : str
        What the section would show, as the end of "this section shows ...".
    install : str
        The one command that enables it (``"pip install 'porting-kit[examples]'"``).

    Notes
    -----
    When every package in ``needs`` is importable the block runs as usual and any exception
    propagates. When one is missing, a :class:`MissingPackages` note is displayed on entry, and an
    :class:`~porting_kit.errors.InputError` or ``ImportError`` the block raises (the missing
    package's own failure) is swallowed, so the notebook goes on with the next cell; any other
    exception still propagates. ``section.available`` says which case it was.

    Examples
    --------
    >>> with optional_section("encodec", shows="the real EnCodec pair",
    ...                       install="pip install 'porting-kit[examples]'"):
    ...     display(check("examples/encodec_pair.py"))                    # doctest: +SKIP
    """

    def __init__(self, needs, *, shows: str, install: str) -> None:
        self.note = MissingPackages(missing_packages(needs), shows, install)
        self.available = not self.note.missing

    def __enter__(self) -> optional_section:
        if not self.available:
            _show(self.note)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.available or exc_type is None:
            return False
        return issubclass(exc_type, (InputError, ImportError))


def _show(obj) -> None:
    """``IPython.display.display`` in a kernel, ``print`` elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        print(obj)
        return
    if get_ipython() is None:
        print(obj)
    else:
        display(obj)
