"""File writes that never lose a user's file: atomic replace, numbered backups; input reads
that never hang or run away (:func:`read_input_text`)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from porting_kit.errors import InputError


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """Ctrl-C waits until the block is done (a rollback or a tree swap is never cut in half).

    Off the main thread SIGINT cannot arrive there anyway, and the block runs as it is.
    """
    import signal

    try:
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)


def backup_path(path: Path) -> Path:
    """The first free backup name for ``path``.

    Tries ``name.bak``, then ``name.bak.1``, ``name.bak.2``... so a second ``--force``
    never overwrites the first backup.

    Parameters
    ----------
    path : Path
        The file about to be replaced (need not exist).

    Returns
    -------
    Path
        A sibling of ``path`` that does not exist yet (nothing is created).
    """
    cand = path.with_name(path.name + ".bak")
    n = 1
    while cand.exists():
        cand = path.with_name(f"{path.name}.bak.{n}")
        n += 1
    return cand


def atomic_write(path: Path, write: Callable[[str], None], *, backup: bool = False,
                 suffix: str = ".tmp") -> None:
    """Write ``path`` atomically.

    ``write(tmp_path)`` fills a temporary file in the same folder, then ``os.replace``
    puts it in place, so a crash never leaves a half-written file.

    Parameters
    ----------
    path : Path
        Destination; missing parent folders are created.
    write : callable
        ``write(tmp: str) -> None`` writes the whole content to the path it is given.
    backup : bool, default False
        Copy an existing ``path`` to a fresh :func:`backup_path` first (``--force``).
    suffix : str, default ".tmp"
        Suffix of the temporary file; give the real one (``".wav"``) when the writer
        picks the format from it (soundfile does).

    Raises
    ------
    InputError
        Something other than a regular file is at ``path`` (a link, a FIFO, a device,
        a directory): it is never replaced.
    OSError
        The folder cannot be written (callers turn it into :class:`InputError`).

    Notes
    -----
    A new file gets the usual permissions (``0o666`` less the umask); a replaced one
    keeps its mode. On any exception the temporary file is removed and the exception
    re-raised; ``path`` is untouched.
    """
    path = Path(path)
    kind = _kind(path)
    if kind is not None:
        raise InputError(f"{path}: is {kind}; porting-kit replaces only regular files")
    path.parent.mkdir(parents=True, exist_ok=True)
    if backup and path.exists():
        shutil.copy2(path, backup_path(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        if path.exists():
            shutil.copymode(path, tmp)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str, *, backup: bool = False) -> None:
    """:func:`atomic_write` of UTF-8 ``text``.

    Parameters
    ----------
    path : Path
        Destination.
    text : str
        The whole content, written as UTF-8 (no newline translation beyond the platform's).
    backup : bool, default False
        Keep the replaced file as a ``.bak`` (see :func:`backup_path`).

    Raises
    ------
    OSError
        The folder cannot be written.
    """

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    atomic_write(path, write, backup=backup)


#: Deploy YAML larger than this is refused (vLLM-Omni 0.30.0's largest is 6.7 KB; YAML parsing
#: costs ~20 s of CPU per MB, so a 2.3 MB file would take a minute).
MAX_DEPLOY_YAML_BYTES = 512 * 1024
#: Any other text input (pipeline.py, a manifest, a config) larger than this is refused.
MAX_INPUT_TEXT_BYTES = 8 * 1024 * 1024


def read_input_text(path: Path | str, *, max_bytes: int = MAX_INPUT_TEXT_BYTES, what: str = "file") -> str:
    """The UTF-8 text of an input file, refusing what would hang or run away.

    Parameters
    ----------
    path : Path or str
        The file (a symbolic link is followed: reading through it changes nothing).
    max_bytes : int, default :data:`MAX_INPUT_TEXT_BYTES`
        Larger files are refused (:data:`MAX_DEPLOY_YAML_BYTES` for deploy YAML).
    what : str, default "file"
        Named in the refusal (``"deploy YAML"``).

    Returns
    -------
    str

    Raises
    ------
    InputError
        Something other than a regular file is there (a FIFO would block the read for ever, a
        device never ends), or the file is over ``max_bytes``.
    FileNotFoundError, OSError, UnicodeDecodeError
        As :meth:`pathlib.Path.read_text` (callers keep their own handling).
    """
    p = Path(path)
    st = p.stat()
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise InputError(f"{p}: is {kind}; porting-kit reads only regular files")
    if st.st_size > max_bytes:
        raise InputError(f"{p}: {st.st_size / 2**20:.1f} MiB is over the {max_bytes / 2**20:g} MiB limit for a "
                         f"{what}; refused without reading it")
    with open(p, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:  # grew since the stat
        raise InputError(f"{p}: over the {max_bytes / 2**20:g} MiB limit for a {what}; refused")
    return data.decode("utf-8")


#: The explicit name for standard output in ``--json -``.
STDOUT = "-"


def _kind(p: Path) -> str | None:
    """What is at ``p`` when it is not a regular file or absent: "a symbolic link",
    "a directory", "a FIFO", "a device", "a socket"; None for a regular file or nothing."""
    if p.is_symlink():
        return "a symbolic link"
    try:
        mode = p.stat().st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _package_dir() -> Path:
    return Path(__file__).resolve().parent


def _inside(p: Path, folder: Path) -> bool:
    try:
        p.resolve().relative_to(folder.resolve())
        return True
    except (ValueError, OSError):
        return False


def check_output_path(path: Path | str | None, *, inputs: list[Path | str | None] = (),
                      what: str = "--json", allow_stdout: bool = True) -> None:
    """Refuse, before any work, an output file the tool must not or cannot write.

    A file-valued output is written (atomically) only where nothing is, or over a
    regular file. Anything else at the path — a symbolic link (its target would be
    replaced or written through), a directory, a FIFO, a device such as ``/dev/null``
    — is refused; ``-`` means standard output where ``allow_stdout``.

    Parameters
    ----------
    path : Path, str or None
        The output file (``--json PATH``, a baseline file...); ``None`` accepts at once.
    inputs : list of (Path or str or None), default ()
        The command's input files or folders; ``None`` entries are skipped. The output
        may be none of them (compared with ``os.path.samefile``, so a link or another
        spelling is caught) and may not lie inside an input folder (``validate --json``
        into the scaffold it validates).
    what : str, default "--json"
        The option's name, used to start the error message.
    allow_stdout : bool, default True
        Accept ``-`` (standard output).

    Raises
    ------
    InputError
        Any of the cases above; a path inside the installed porting_kit package; a path
        under something that is not a directory; a folder that cannot be written.
    """
    if path is None:
        return
    if str(path) == STDOUT:
        if allow_stdout:
            return
        raise InputError(f"{what} -: standard output is not accepted here; give a file path")
    p = Path(path)
    for inp in inputs:
        if inp is None:
            continue
        ip = Path(inp)
        try:
            if ip.exists() and p.exists() and os.path.samefile(p, ip):
                raise InputError(f"{what} {p}: is one of this command's inputs; choose another file")
        except OSError:
            pass
        if ip.is_dir() and _inside(p, ip):
            raise InputError(f"{what} {p}: lies inside the input folder {ip}; write the report elsewhere")
    kind = _kind(p)
    if kind is not None:
        raise InputError(f"{what} {p}: is {kind}; give the path of a regular file (or a new one)")
    if _inside(p, _package_dir()):
        raise InputError(f"{what} {p}: lies inside the installed porting_kit package; write elsewhere")
    parent = p.parent
    while not parent.exists() and not parent.is_symlink():
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{what} {p}: {parent} is not a directory")
    if not os.access(parent, os.W_OK):
        raise InputError(f"{what} {p}: cannot write in {parent}")


def check_output_dir(path: Path | str | None, *, what: str = "--out") -> None:
    """Refuse a directory-valued output that is neither absent nor a directory.

    Parameters
    ----------
    path : Path, str or None
        The output folder (``--out``, ``--plot DIR``, ``notebooks DIR``); ``None`` accepts.
    what : str, default "--out"
        The option's name, used to start the error message.

    Raises
    ------
    InputError
        ``path`` is a symbolic link, a file, a FIFO or a device; lies inside the
        installed porting_kit package; or its nearest existing folder cannot be written.
    """
    if path is None:
        return
    p = Path(path)
    kind = _kind(p)
    if kind is None and p.exists():
        kind = "a file, not a directory"
    if kind is not None and kind != "a directory":
        raise InputError(f"{what} {p}: is {kind}; give a directory (or a new path)")
    if _inside(p, _package_dir()):
        raise InputError(f"{what} {p}: lies inside the installed porting_kit package; write elsewhere")
    parent = p if p.is_dir() else p.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{what} {p}: {parent} is not a directory")
    if not os.access(parent, os.W_OK):
        raise InputError(f"{what} {p}: cannot write in {parent}")


class WriteTransaction:
    """Several file writes that land together or not at all (a scaffold, a notebook copy).

    Each :meth:`write_text` is atomic on its own (:func:`atomic_write_text`); the
    transaction remembers what each path held before (its bytes, or that it did not
    exist) and which folders it created. When the ``with`` block ends in an exception —
    ``KeyboardInterrupt`` (Ctrl-C, SIGINT) included — every write is undone: new files and
    folders removed, replaced files restored, the ``.bak`` copies made on the way removed.
    SIGINT is held back while undoing, so a second Ctrl-C cannot leave half a rollback.

    Examples
    --------
    >>> with WriteTransaction() as txn:          # doctest: +SKIP
    ...     txn.write_text(Path("out/a.py"), "x = 1\\n")
    """

    def __init__(self) -> None:
        self._before: dict[Path, bytes | None] = {}
        self._dirs: list[Path] = []
        self._baks: list[Path] = []

    def __enter__(self) -> WriteTransaction:
        return self

    def write_text(self, path: Path, text: str, *, backup: bool = False) -> None:
        """Write ``text`` to ``path`` (UTF-8, atomic), remembering how to undo it.

        Parameters
        ----------
        path : Path
            Destination; missing folders are created (and removed again on rollback).
        text : str
            The whole content.
        backup : bool, default False
            Keep a ``.bak`` of a replaced file (kept on success, removed on rollback).

        Raises
        ------
        InputError
            Something other than a regular file is at ``path``.
        OSError
            The folder cannot be written.
        """
        path = Path(path)
        if path not in self._before:
            self._before[path] = path.read_bytes() if path.is_file() else None
        missing = []
        parent = path.parent
        while not parent.exists():
            missing.append(parent)
            parent = parent.parent
        self._dirs += reversed(missing)
        bak = backup_path(path) if backup and path.exists() else None
        atomic_write_text(path, text, backup=backup)
        if bak is not None and bak.exists():
            self._baks.append(bak)

    def rollback(self) -> None:
        """Undo every write of this transaction (see the class docstring)."""
        with sigint_ignored():
            for path, data in self._before.items():
                try:
                    if data is None:
                        path.unlink(missing_ok=True)
                    else:
                        atomic_write(path, lambda tmp, data=data: Path(tmp).write_bytes(data))
                except OSError:
                    pass
            for bak in self._baks:
                bak.unlink(missing_ok=True)
            for folder in reversed(self._dirs):
                try:
                    folder.rmdir()
                except OSError:
                    pass

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            self.rollback()
        return False


def _link_or_copy(src: str, dst: str) -> None:
    """Hard-link ``src`` at ``dst`` (same inode: free, and a later atomic replace in the copy
    leaves the original untouched); copy when the filesystem cannot link."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``); False when the
    system cannot (then the caller renames twice)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def replace_tree(root: Path, fill: Callable[[Path], None]) -> None:
    """Give the existing folder ``root`` its next state all at once: build it in a copy beside
    it, then swap the copy in by rename.

    ``root`` is copied (hard links, so it costs no data) to a hidden sibling folder;
    ``fill(copy)`` writes the new files there (each one by atomic replace, so the original
    inodes stay untouched); then the two folders are exchanged in one ``renameat2`` call (two
    renames with SIGINT held back where the system lacks it) and the old tree is removed. An
    exception or Ctrl-C before the swap leaves ``root`` exactly as it was (the copy is
    removed); after it, ``root`` is the complete new tree. The old tree survives until the
    new one is complete.

    Parameters
    ----------
    root : Path
        An existing directory (not a link).
    fill : callable
        ``fill(staging_root)`` writes the new state under ``staging_root``.

    Raises
    ------
    OSError
        The folder beside ``root`` cannot be written.
    """

    root = Path(root)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.pk-new-", dir=root.parent))
    swapped = False
    try:
        staging.rmdir()
        shutil.copytree(root, staging, symlinks=True, copy_function=_link_or_copy)
        shutil.copymode(root, staging)
        fill(staging)
        with sigint_ignored():
            if not _exchange(staging, root):
                aside = staging.with_name(staging.name.replace(".pk-new-", ".pk-old-"))
                os.rename(root, aside)
                os.rename(staging, root)
                os.rename(aside, staging)
            swapped = True
            shutil.rmtree(staging, ignore_errors=True)  # now the old tree
    finally:
        if not swapped:
            shutil.rmtree(staging, ignore_errors=True)
