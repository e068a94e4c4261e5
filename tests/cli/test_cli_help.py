"""``porting-kit CMD --help`` and README.md say the same thing (issue 11, point 4).

The README's "Command line" table lists each command's options; every option
there must be in the command's ``--help`` and every option in the help must be
in the table. The ``porting-kit ...`` lines of the README's bash blocks may
only use options the command has.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from porting_kit.cli import app, main
from porting_kit.cli import lint_main as lint_hook

README = Path(__file__).resolve().parents[2] / "README.md"
COMMANDS = ["", "check", "examples", "audio", "quality", "baseline record", "baseline compare", "notebooks", "lint",
            "scaffold", "validate"]
_OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def _help(capsys, monkeypatch, argv: list[str], entry=main) -> str:
    monkeypatch.setenv("COLUMNS", "200")
    assert entry([*argv, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage" in out or "usage" in out, out
    return out


def help_options(text: str) -> set[str]:
    """Option names in the option column of a help text (Typer/Rich boxes or argparse), ``--help`` included.

    An option row starts (after the box edge) with at most four spaces, an
    optional ``*`` (required) and a dash; its leading dash tokens are the names.
    Wrapped description lines are indented further and never counted.
    """
    names: set[str] = set()
    for line in text.splitlines():
        line = line.lstrip("│┃|").rstrip("│┃| ")
        m = re.match(r"^ {0,4}(?:\* +)?(-.*)$", line)
        if not m:
            continue
        for token in m.group(1).replace(",", " ").split():
            if not token.startswith("-"):
                break
            names.update(t for t in token.split("/") if t.startswith("-"))
    return names


def _options(text: str) -> set[str]:
    names = help_options(text)
    assert "--help" in names, f"the help parser found no option row in:\n{text}"  # the parser still works
    return names - {"-h", "--help"}


def readme_table() -> dict[str, set[str]]:
    """``{command: options}`` from the README's "Command line" table (command "" is the root)."""
    section = README.read_text(encoding="utf-8").split("\n## Command line\n", 1)
    assert len(section) == 2, "README.md has no '## Command line' section"
    table: dict[str, set[str]] = {}
    for row in section[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`porting-kit"):
            continue
        options = set(_OPTION.findall(" ".join(re.findall(r"`([^`]*)`", cells[1]))))
        for name in re.findall(r"`(porting-kit[^`]*)`", cells[0]):
            table["lint" if name == "porting-kit-lint" else name[len("porting-kit"):].strip()] = options
    return table


def readme_command_lines() -> list[str]:
    """Every ``porting-kit ...`` command of the README's bash blocks (continuations joined, comments cut)."""
    text = README.read_text(encoding="utf-8")
    lines: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("#", 1)[0].split("&&"):
                part = part.strip()
                if part.startswith("porting-kit "):
                    lines.append(part)
    return lines


def _command_of(line: str) -> str:
    words = line.split()[1:]
    for n in (2, 1):
        if " ".join(words[:n]) in COMMANDS:
            return " ".join(words[:n])
    return ""


def test_the_table_lists_every_command():
    group = typer.main.get_command(app)
    commands = set()
    for name, cmd in group.commands.items():
        subs = getattr(cmd, "commands", None)
        commands.update(f"{name} {sub}" for sub in subs) if subs else commands.add(name)
    assert commands | {""} == set(COMMANDS)
    assert set(readme_table()) == set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c or "porting-kit")
def test_help_matches_the_readme(capsys, monkeypatch, command):
    shown = _options(_help(capsys, monkeypatch, command.split()))
    documented = readme_table()[command]
    assert documented - shown == set(), f"README documents options `porting-kit {command} --help` lacks"
    assert shown - documented == set(), f"`porting-kit {command} --help` has options README.md lacks"


def test_the_hook_has_the_lint_command_options(capsys, monkeypatch):
    hook = _options(_help(capsys, monkeypatch, [], entry=lint_hook))
    assert hook == _options(_help(capsys, monkeypatch, ["lint"]))
    assert hook == readme_table()["lint"]


def test_readme_examples_use_only_real_options():
    lines = readme_command_lines()
    assert len(lines) >= 10, lines
    table = readme_table()
    for line in lines:
        command = _command_of(line)
        unknown = set(_OPTION.findall(line.split(None, 1 + len(command.split()))[-1])) - table[command]
        assert not unknown, f"README line `{line}` uses options `porting-kit {command}` does not have"


def test_help_parser_reads_both_styles():
    typer_box = ("│ --example  -e      <str>   Embedded example\n"
                 "│                            --not-an-option wrapped text\n"
                 "│ *  --ref       <path>  required\n")
    argparse_text = ("usage: x [-h] [--static DIR]\n\noptions:\n  -h, --help            show\n"
                     "  --static DIR          validate\n  --model-type MODEL_TYPE\n")
    assert help_options(typer_box) == {"--example", "-e", "--ref"}
    assert help_options(argparse_text) == {"-h", "--help", "--static", "--model-type"}
