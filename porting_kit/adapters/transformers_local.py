"""transformers, the outside world of the reference: a local model directory.

A spec may name its reference as a path instead of a function::

    reference = "checkpoints/my-tts"   # a directory written by save_pretrained()

:func:`load_local_reference` loads it with ``from_pretrained(..., local_files_only=True)``
(no hub access, ever) in float32. ``trust_remote_code`` is passed explicitly, and is
``True`` only when the user gave ``--trust-remote-code``: a config that needs remote
code (an ``auto_map`` entry) is refused otherwise, naming the option.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from porting_kit.errors import InputError


def resolve_model_dir(path: str | Path, spec_dir: Path | None) -> Path:
    """The model directory ``path`` names, relative to the spec file's folder when relative.

    Parameters
    ----------
    path : str or Path
        As written in the spec.
    spec_dir : Path or None
        The folder of the spec file (None: the current directory).

    Returns
    -------
    Path

    Raises
    ------
    InputError
        The path is not a directory holding a ``config.json``.
    """
    p = Path(path).expanduser()
    if not p.is_absolute() and spec_dir is not None:
        p = spec_dir / p
    if not p.is_dir():
        raise InputError(f"reference {path!r}: {p} is not a model directory")
    if not (p / "config.json").is_file():
        raise InputError(f"reference {path!r}: {p} has no config.json (a save_pretrained() directory is needed)")
    return p


def remote_code_entries(model_dir: Path) -> dict[str, Any]:
    """The ``auto_map`` of ``model_dir/config.json``: what would run remote code ({} when none).

    Raises
    ------
    InputError
        config.json is not a JSON object.
    """
    try:
        cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{model_dir / 'config.json'}: unreadable ({exc})") from exc
    if not isinstance(cfg, dict):
        raise InputError(f"{model_dir / 'config.json'}: not a JSON object")
    auto_map = cfg.get("auto_map") or {}
    return auto_map if isinstance(auto_map, dict) else {"auto_map": auto_map}


def load_local_reference(path: str | Path, *, spec_dir: Path | None = None,
                         trust_remote_code: bool = False) -> Any:
    """Load the reference model from a local ``save_pretrained`` directory, in float32.

    The class is the config's first ``architectures`` entry when transformers has it,
    else ``AutoModel``.

    Parameters
    ----------
    path : str or Path
        The spec's ``reference`` string.
    spec_dir : Path, optional
        The spec file's folder; relative paths are taken from there.
    trust_remote_code : bool, default False
        Only ``True`` when the user passed ``--trust-remote-code``; never set implicitly.

    Returns
    -------
    torch.nn.Module
        In eval mode, float32, on the CPU.

    Raises
    ------
    InputError
        Not a model directory; the config needs remote code and ``trust_remote_code``
        is False (the message names ``--trust-remote-code``); transformers cannot load
        it (the message carries its reason).
    """
    import torch
    import transformers

    model_dir = resolve_model_dir(path, spec_dir)
    auto_map = remote_code_entries(model_dir)
    if auto_map and not trust_remote_code:
        raise InputError(f"reference {path!r}: its config.json needs remote code (auto_map: "
                         f"{', '.join(sorted(auto_map))}); porting-kit never runs it implicitly — "
                         "review that code, then rerun with --trust-remote-code")
    try:
        config = transformers.AutoConfig.from_pretrained(model_dir, local_files_only=True,
                                                         trust_remote_code=trust_remote_code)
        arch = (getattr(config, "architectures", None) or [None])[0]
        cls = getattr(transformers, arch, None) if isinstance(arch, str) else None
        if cls is None or not hasattr(cls, "from_pretrained"):
            cls = transformers.AutoModel
        model = cls.from_pretrained(model_dir, local_files_only=True, trust_remote_code=trust_remote_code,
                                    dtype=torch.float32)
    except InputError:
        raise
    except (OSError, ValueError, KeyError, RuntimeError, ImportError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"reference {path!r}: transformers cannot load {model_dir}: {first}") from exc
    return model.eval()
