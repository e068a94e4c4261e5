"""The ``porting-kit`` command line: a thin layer over the library.

Every command calls one library function and renders its result, inside the
one error guard :func:`_guard`. Exit codes (DESIGN.md): 0 pass, 1 a fault was
found, 2 the tool could not run — an :class:`~porting_kit.errors.InputError`,
a usage error the parser caught, or a crash — printed as one line on stderr,
the traceback only with ``--debug``. Long work shows a transient Rich progress
line on stderr, only when stderr is a terminal.

``porting-kit-lint`` (the pre-commit hook, ``porting_kit.cli:lint_main``) is
the ``lint`` command run on its own: :data:`lint_app`, :func:`lint_main`.
The options of every command are listed in README.md ("Command line");
``tests/cli/test_cli_help.py`` keeps the two in step.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from porting_kit.version import __version__
from porting_kit.errors import InputError
from porting_kit.report.findings import EXIT_INPUT
from porting_kit.scaffold.generate import FRAMEWORKS, SHAPE_HELP, SHAPES

app = typer.Typer(add_completion=False, no_args_is_help=False,
                  help="Find the silent faults in ports of HF TTS/audio models to vLLM-Omni / SGLang-Omni.")
baseline_app = typer.Typer(help="Record and compare reference-audio baselines (reference_audio/).")
app.add_typer(baseline_app, name="baseline")
#: ``porting-kit-lint``: the ``lint`` command as a program of its own (registered below).
lint_app = typer.Typer(add_completion=False)

console = Console(emoji=False)  # ":x:" in a device name or message must stay text
err_console = Console(stderr=True, emoji=False)
_DEBUG = {"on": False}
#: Set while ``porting-kit-lint`` (the pre-commit hook) runs: silent on success, as hooks are.
_HOOK = {"on": False}

#: ``--framework`` / ``--shape`` choices (values as typed on the command line).
Framework = Enum("Framework", {name.replace("-", "_"): name for name in FRAMEWORKS}, type=str)
Shape = Enum("Shape", {name.replace("-", "_"): name for name in SHAPES}, type=str)


def _guard(fn: Callable[[], int]) -> int:
    """Run ``fn``; turn InputError (and any crash) into one stderr line and exit 2."""
    try:
        return fn()
    except InputError as exc:
        if _DEBUG["on"]:
            traceback.print_exc()
        err_console.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_INPUT
    except KeyboardInterrupt:
        err_console.print("interrupted", markup=False)
        return EXIT_INPUT
    except Exception as exc:  # never a traceback without --debug; the exit code stays 2 with it
        if _DEBUG["on"]:
            traceback.print_exc()
        err_console.print(f"error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
                          markup=False, highlight=False, soft_wrap=True)
        return EXIT_INPUT


@contextmanager
def _progress(description: str, total: int | None = None,
              plain_lines: bool = False) -> Iterator[Callable[..., None]]:
    """A transient progress line on stderr while the block runs.

    Yields ``update(text=None, done=None, finished=False)``: a new description
    and/or the number of items done out of ``total`` (a bar is shown when
    ``total`` is given, a spinner otherwise); ``finished=True`` removes the line
    before the block ends (so that what the block prints next is not mixed with
    it). When stderr is not a terminal (pre-commit, CI, a pipe) nothing is
    shown and Rich's progress module is not even imported, unless ``plain_lines``
    (``check --progress``): then each new description is one plain line on stderr
    (``porting-kit: ...``), so long work shows in logs and notebooks too. (Not by default:
    an input error must stay the one line on stderr.)
    """
    if not err_console.is_terminal:
        def plain(text: str | None = None, done: int | None = None, finished: bool = False) -> None:
            if plain_lines and text is not None and not finished:
                err_console.print(f"porting-kit: {text}", markup=False, highlight=False, soft_wrap=True)
        yield plain
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn()]
    columns.append(TimeElapsedColumn())
    # no stdout/stderr redirection: what the block prints must stay on its own stream
    with Progress(*columns, console=err_console, transient=True, redirect_stdout=False,
                  redirect_stderr=False) as prog:
        task = prog.add_task(description, total=total)

        def update(text: str | None = None, done: int | None = None, finished: bool = False) -> None:
            if finished:
                prog.stop()
                return
            changes: dict[str, Any] = {}
            if text is not None:
                changes["description"] = text
            if done is not None:
                changes["completed"] = done
            prog.update(task, **changes)

        yield update


def _report_console(json_path: Path | None) -> Console:
    """Where the human-readable report goes: stderr when ``--json -`` takes stdout."""
    return err_console if json_path is not None and str(json_path) == "-" else console


def _write_json(report, json_path: Path | None) -> None:
    """``--json PATH``: write the report and say so on stderr, as ``--plot`` does (not for ``-``)."""
    if not json_path:
        return
    report.write_json(json_path)
    if str(json_path) != "-":
        err_console.print(f"wrote {json_path}", markup=False, highlight=False, soft_wrap=True)


def _exit(code: int) -> None:
    raise typer.Exit(code)


def _version(value: bool) -> None:
    if value:
        console.print(f"porting-kit {__version__}")
        raise typer.Exit(0)


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context,
          version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit."),
          debug: bool = typer.Option(False, "--debug", help="Show tracebacks instead of one-line errors.")):
    _DEBUG["on"] = debug
    if ctx.invoked_subcommand is None:
        console.print(ctx.get_help())
        raise typer.Exit(0)


@app.command()
def check(spec: Path | None = typer.Argument(None, help="Port spec .py file (default: the embedded example)."),
          example: str | None = typer.Option(None, "--example", "-e",
                                             help="Embedded example, optionally with a variant: tts, "
                                                  "tts:qkv_shard_order (see porting-kit examples)."),
          variant: str | None = typer.Option(None, "--variant", help="Planted-fault variant declared by the spec."),
          only: str | None = typer.Option(None, "--only",
                                          help="Comma-separated families: "
                                               "config,parity,rope,norm,tp,decode,sampling,hop,channel,dtype,batch,rng,"
                                               "lifecycle,cudagraph,quality."),
          json_path: Path | None = typer.Option(None, "--json", help="Write the JSON report here (- for standard output)."),
          plot: Path | None = typer.Option(None, "--plot", metavar="DIR",
                                           help="Write PNG plots here: error per layer, per decode step, "
                                                "step x layer, RoPE error vs position."),
          device: str = typer.Option("cpu", "--device", help="Torch device: cpu, cuda, cuda:1."),
          dtype: str | None = typer.Option(None, "--dtype", help="Serving dtype: float32, bfloat16, float16."),
          tp: int = typer.Option(1, "--tp", min=1,
                                 help="Tensor-parallel size: run the spec's candidate_tp on N ranks "
                                      "(gloo on CPU, NCCL on N GPUs) and compare the gathered outputs."),
          trust_remote_code: bool = typer.Option(False, "--trust-remote-code",
                                                 help="Allow a local reference directory whose config needs "
                                                      "remote code (auto_map). Never implicit."),
          progress: bool = typer.Option(False, "--progress",
                                        help="Print each stage as a plain line on stderr even when it is "
                                             "not a terminal (logs, CI, notebooks)."),
          debug: bool = typer.Option(False, "--debug", help="Show tracebacks instead of one-line errors.")):
    """Compare the candidate port against the HF reference and name the fault."""
    _DEBUG["on"] = _DEBUG["on"] or debug

    def body() -> int:
        from porting_kit.fsutil import check_output_dir, check_output_path
        from porting_kit.report.render import print_report
        from porting_kit.runner import run_check

        check_output_path(json_path, inputs=[spec])
        check_output_dir(plot, what="--plot")
        with _progress("loading spec", plain_lines=progress) as update:
            report = run_check(str(spec) if spec else None, example=example, variant=variant,
                               only=only, device=device, dtype=dtype, tp=tp, trust_remote_code=trust_remote_code,
                               progress=lambda text: update(f"check: {text}"))
        print_report(report, _report_console(json_path))
        _write_json(report, json_path)
        if plot is not None:
            from porting_kit.report.plots import save_check_plots

            for path in save_check_plots(report, plot):
                err_console.print(f"wrote {path}", markup=False, highlight=False)
        return report.exit_code

    _exit(_guard(body))


@app.command()
def examples():
    """List the embedded examples and their planted-fault variants."""

    def body() -> int:
        from rich.table import Table

        from porting_kit.spec import list_examples

        rows = list_examples()
        name_w = max(len(name) for name, _ in rows)
        if console.is_terminal and name_w + 7 + 30 <= console.width:
            table = Table(title="embedded examples (use --example NAME)")
            table.add_column("name", no_wrap=True, overflow="ignore")  # a name is typed back: never cut
            table.add_column("description", ratio=1)
            for name, desc in rows:
                table.add_row(escape(name), escape(desc))
            console.print(table)
        else:  # a log, a pipe or a narrow terminal: one example a line, the name whole
            console.print("embedded examples (use --example NAME)", soft_wrap=True, highlight=False)
            for name, desc in rows:
                console.print(f"{escape(name)}  {escape(desc)}", soft_wrap=True, highlight=False)
        return 0

    _exit(_guard(body))


@app.command()
def audio(ref: Path = typer.Argument(..., help="Reference audio file (WAV/FLAC)."),
          cand: Path = typer.Argument(..., help="Candidate audio file (WAV/FLAC)."),
          hop_length: int | None = typer.Option(None, "--hop-length", min=1, help="Codec hop length in samples."),
          sample_rate: int | None = typer.Option(None, "--sample-rate", min=1, help="Expected sample rate in Hz."),
          channels: int = typer.Option(1, "--channels", min=1,
                                       help="Channels the candidate serves (2: stereo, compared "
                                            "channel by channel)."),
          json_path: Path | None = typer.Option(None, "--json", help="Write the JSON report here (- for standard output)."),
          plot: Path | None = typer.Option(None, "--plot", help="Write waveform/spectrogram plots (PNG) here.")):
    """Compare two audio files: length, sample rate, channels, lag, SNR, log-mel distance."""

    def body() -> int:
        from porting_kit.audio_files import compare_files
        from porting_kit.fsutil import check_output_path
        from porting_kit.report.render import print_report

        check_output_path(json_path, inputs=[ref, cand])
        check_output_path(plot, inputs=[ref, cand], what="--plot", allow_stdout=False)
        if plot is not None:
            plot.parent.mkdir(parents=True, exist_ok=True)
        with _progress(f"audio: comparing {cand.name} with {ref.name}"):
            report = compare_files(ref, cand, hop_length=hop_length, sample_rate=sample_rate, plot=plot,
                                   channels=channels)
        print_report(report, _report_console(json_path))
        _write_json(report, json_path)
        return report.exit_code

    _exit(_guard(body))


@app.command()
def quality(ref_dir: Path = typer.Argument(..., help="Reference takes: <prompt_id>/take<k>.wav + prompts.json."),
            cand_dir: Path = typer.Argument(..., help="Candidate takes, same layout and prompts."),
            metrics: str | None = typer.Option(None, "--metrics",
                                               help="Comma-separated: duration,mcd,seam,stoi,pesq,wer,speaker,mos "
                                                    "(default all; a metric whose package is absent skips)."),
            chunk_samples: int | None = typer.Option(None, "--chunk-samples", min=2,
                                                     help="The candidate's streaming chunk in samples: "
                                                          "where the seams are."),
            asr: str | None = typer.Option(None, "--asr", metavar="MODULE:FUNCTION",
                                           help="Your recogniser (waveform, sample_rate) -> text "
                                                "(default: pocketsphinx's bundled English model)."),
            speaker: str | None = typer.Option(None, "--speaker", metavar="MODULE:FUNCTION",
                                               help="Your speaker encoder (waveform, sample_rate) -> vector "
                                                    "(default: resemblyzer's GE2E)."),
            json_path: Path | None = typer.Option(None, "--json",
                                                  help="Write the JSON report here (- for standard output).")):
    """Does the port sound like the reference? WER, speaker, MOS, MCD, seams, duration vs its own spread."""

    def body() -> int:
        from porting_kit.fsutil import check_output_path
        from porting_kit.quality_files import compare_quality
        from porting_kit.report.render import print_report

        check_output_path(json_path, inputs=[ref_dir, cand_dir])
        with _progress(f"quality: {cand_dir.name} against {ref_dir.name}"):
            report = compare_quality(ref_dir, cand_dir, metrics=metrics, chunk_samples=chunk_samples,
                                     asr=asr, speaker=speaker)
        print_report(report, _report_console(json_path))
        if json_path:
            report.write_json(json_path)
        return report.exit_code

    _exit(_guard(body))


_SPEC_HELP = "Port spec .py file (default: the embedded example)."
_EXAMPLE_HELP = "Embedded example, optionally with a variant: tts, tts:audio_hop_trim (default: tts)."
_BASELINE_DIR_HELP = "Baseline folder (clips + sidecars)."


@baseline_app.command("record")
def baseline_record(spec: Path | None = typer.Argument(None, help=_SPEC_HELP),
                    example: str | None = typer.Option(None, "--example", "-e",
                                                       help="Embedded example whose reference is recorded "
                                                            "(default: tts)."),
                    out: Path | None = typer.Option(None, "--out",
                                                    help="Baseline folder to write (clips + sidecars); required: "
                                                         "nothing is written where you did not say."),
                    force: bool = typer.Option(False, "--force", help="Replace an existing baseline (a .bak is kept).")):
    """Save the reference's audio with a sidecar (sample rate, seed, inputs, sha256, versions)."""

    def body() -> int:
        from porting_kit.baseline import record

        if out is None:
            raise InputError("baseline record needs --out DIR: the folder to write the reference clips and "
                             "sidecars in (nothing is written without it; compare reads reference_audio/ by default)")

        with _progress("baseline: decoding the reference's audio"):
            paths = record(str(spec) if spec else None, example=example, out_dir=out, force=force)
        for p in paths:
            console.print(f"wrote {p}", markup=False, highlight=False)
        return 0

    _exit(_guard(body))


@baseline_app.command("compare")
def baseline_compare(spec: Path | None = typer.Argument(None, help=_SPEC_HELP),
                     example: str | None = typer.Option(None, "--example", "-e", help=_EXAMPLE_HELP),
                     variant: str | None = typer.Option(None, "--variant",
                                                        help="Planted-fault variant declared by the spec."),
                     out: Path = typer.Option(Path("reference_audio"), "--out", help=_BASELINE_DIR_HELP),
                     json_path: Path | None = typer.Option(None, "--json", help="Write the JSON report here (- for standard output).")):
    """Compare the candidate's audio to the recorded baseline."""

    def body() -> int:
        from porting_kit.baseline import compare
        from porting_kit.fsutil import check_output_path
        from porting_kit.report.render import print_report

        check_output_path(json_path, inputs=[spec])
        with _progress("baseline: decoding the candidate's audio"):
            report = compare(str(spec) if spec else None, example=example, variant=variant, out_dir=out)
        print_report(report, _report_console(json_path))
        _write_json(report, json_path)
        return report.exit_code

    _exit(_guard(body))


@app.command()
def notebooks(dest: Path = typer.Argument(..., help="Folder to copy the walkthroughs into (absent or a directory)."),
              force: bool = typer.Option(False, "--force", help="Replace files that differ, keeping a .bak.")):
    """Copy the walkthrough notebooks and the example specs they use into DEST."""

    def body() -> int:
        from porting_kit.notebooks import copy_notebooks

        result = copy_notebooks(dest, force=force)
        for rel in result.written:
            console.print(f"wrote {dest / rel}", markup=False, highlight=False)
        if result.unchanged:
            console.print(f"{len(result.unchanged)} file(s) already up to date", markup=False)
        if result.written:
            console.print(f"open them with: jupyter lab {dest}", markup=False, highlight=False)
        return 0

    _exit(_guard(body))


@app.command()
def lint(paths: list[str] | None = typer.Argument(None, metavar="PATHS", show_default=False,
                                                  help="Files or directories (Python and deploy YAML; directories "
                                                       "are walked). None: the current directory."),
         select: str | None = typer.Option(None, "--select", metavar="CODES",
                                           help="Comma-separated rule codes or prefixes to enable (default: all)."),
         ignore: str | None = typer.Option(None, "--ignore", metavar="CODES",
                                           help="Comma-separated rule codes or prefixes to disable."),
         baseline: str | None = typer.Option(None, "--baseline", metavar="FILE",
                                             help="JSON file of accepted findings: only findings not in it fail."),
         write_baseline: bool = typer.Option(False, "--write-baseline",
                                             help="Record today's findings into --baseline FILE and exit 0."),
         statistics: bool = typer.Option(False, "--statistics", help="Also print the number of findings per code."),
         list_rules: bool = typer.Option(False, "--list-rules", help="Print every rule code and exit."),
         debug: bool = typer.Option(False, "--debug", help="Show tracebacks instead of one-line errors.")):
    """Run the port rules over Python and deploy-YAML files (the pre-commit hook, porting-kit-lint).

    Prints path:line:col: CODE message (fix: ...) per finding; exit 1 with findings.
    """
    _DEBUG["on"] = _DEBUG["on"] or debug

    def body() -> int:
        from porting_kit.lint.main import run

        with _progress("lint") as update:  # the findings print after the last file: stop the line first
            return run(paths or [], select=select, ignore=ignore, baseline=baseline,
                       write_baseline=write_baseline, statistics=statistics, list_rules=list_rules,
                       progress=lambda done, total: update(f"lint: {done}/{total} files", finished=done == total),
                       summary=not _HOOK["on"])

    _exit(_guard(body))


lint_app.command("lint")(lint)


def _ask_missing(values: dict[str, Any], interactive: bool) -> None:
    """Fill the missing required scaffold options in ``values`` by asking, in a terminal.

    Parameters
    ----------
    values : dict
        ``framework``, ``shape``, ``model_type``, ``config``, ``out``, ``into``
        as given on the command line (``None`` when absent); updated in place.
    interactive : bool
        Whether stdin is a terminal. When it is not, nothing is asked.

    Raises
    ------
    InputError
        Something is missing and stdin is not a terminal (names every missing flag).
    """
    missing = [n for n in ("framework", "shape", "model_type", "config") if not values[n]]
    if not values["out"] and not values["into"]:
        missing.append("out")
    if not missing:
        return
    if not interactive:
        flags = ", ".join("--" + n.replace("_", "-") for n in missing)
        raise InputError(f"missing {flags} (no prompts: stdin is not a terminal)")
    from rich.prompt import Prompt

    ask = Console(stderr=True)
    if "framework" in missing:
        values["framework"] = Prompt.ask("target framework", choices=list(FRAMEWORKS), default="vllm-omni")
    if "shape" in missing:
        for name in SHAPES:
            ask.print(f"  [bold]{name}[/]: {SHAPE_HELP[name]}")
        values["shape"] = Prompt.ask("architecture shape", choices=list(SHAPES), default="two-stage")
    if "model_type" in missing:
        values["model_type"] = Prompt.ask("model type (a Python identifier)")
    if "config" in missing:
        values["config"] = Prompt.ask("path to the model's config.json")
    if "out" in missing:
        values["out"] = Prompt.ask("output directory", default=f"scaffold_{values['model_type']}")


@app.command()
def scaffold(framework: Framework | None = typer.Option(None, "--framework", show_default=False,
                                                        help="Target framework."),
             shape: Shape | None = typer.Option(None, "--shape", show_default=False,
                                                help="Architecture shape: two-stage (Qwen3-TTS style), "
                                                     "single-stage-ar (MOSS-TTS-Nano), native-ar (VoxCPM2)."),
             model_type: str | None = typer.Option(None, "--model-type", metavar="NAME",
                                                   help="A Python identifier: module, registry key, stage name."),
             config: Path | None = typer.Option(None, "--config", metavar="CONFIG_JSON",
                                                help="The model's HF config.json."),
             hf: Path | None = typer.Option(None, "--hf", metavar="DIR",
                                            help="A Hugging Face model folder (save_pretrained): also generate "
                                                 "the port itself (vLLM-style talker, load_weights from the "
                                                 "checkpoint's key names, the reference codec with streaming), "
                                                 "port_spec.py and the weight-map README; --config, --model-type, "
                                                 "--shape and --framework default from it."),
             out: Path | None = typer.Option(None, "--out", metavar="DIR", help="Write a fresh tree here."),
             into: Path | None = typer.Option(None, "--into", metavar="PATH",
                                              help="Write into an existing framework checkout, adding the "
                                                   "registration lines."),
             arch: str | None = typer.Option(None, "--arch", metavar="NAME",
                                             help="Architecture name (default: the config's architectures[0])."),
             hf_id: str | None = typer.Option(None, "--hf-id", metavar="ID",
                                              help="Hub id for the tests, examples and benchmark entry "
                                                   "(default: the config's _name_or_path)."),
             max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", metavar="N",
                                                     help="Concurrency of the AR stage (default 4; below 4 "
                                                          "needs --serial-reason)."),
             serial_reason: str | None = typer.Option(None, "--serial-reason", metavar="TEXT",
                                                      help="Why upstream process-wide state forces "
                                                           "max_num_seqs: 1 (written into the deploy YAML)."),
             trust_remote_code: bool = typer.Option(False, "--trust-remote-code",
                                                    help="Write trust_remote_code: true into the deploy YAML "
                                                         "(only ever set by this flag; offered when config.json "
                                                         "has auto_map)."),
             upstream_package: Path | None = typer.Option(
                 None, "--upstream-package", metavar="WHEEL_OR_DIR",
                 help="The upstream package (pip download --no-deps NAME): import it when its pins allow, else "
                      "vendor its codec / config files with a compatibility-patch list."),
             force: bool = typer.Option(False, "--force", help="Replace differing files, keeping .bak copies.")):
    """Generate the serving framework's files for a port (vLLM-Omni 0.30.0 or SGLang-Omni 0.1.9).

    Needs --framework, --shape, --model-type, --config and one of --out / --into;
    in a terminal, missing ones are asked for, otherwise they are a usage error.
    With --hf DIR the first four default from the folder (the shape is proposed from the
    architecture, and the reason printed) and the port is generated: then
    `porting-kit check OUT/port_spec.py` proves it against the folder's transformers model.
    """

    def body() -> int:
        from porting_kit.scaffold.generate import ScaffoldOptions
        from porting_kit.scaffold.generate import scaffold as write_scaffold

        values: dict[str, Any] = {"framework": framework.value if framework else None,
                                  "shape": shape.value if shape else None,
                                  "model_type": model_type, "config": config, "out": out, "into": into}
        if hf is not None:
            from porting_kit.scaffold.generate import hf_defaults

            values["hf"] = hf
            for line in hf_defaults(values, trust_remote_code=trust_remote_code):
                console.print(line, markup=False)
        _ask_missing(values, interactive=sys.stdin.isatty())
        result = write_scaffold(ScaffoldOptions(**values, arch=arch, force=force, hf_id=hf_id,
                                                max_num_seqs=max_num_seqs, serial_reason=serial_reason,
                                                trust_remote_code=trust_remote_code,
                                                upstream_package=upstream_package))
        console.print(f"scaffold [bold]{result.framework}[/] / {result.shape} / {escape(result.model_type)} "
                      f"-> {escape(result.root)}")
        for p in result.written:
            console.print(f"  wrote {p}", markup=False)
        for p in result.unchanged:
            console.print(f"  unchanged {p}", style="dim", markup=False)
        for p in result.registrations:
            console.print(f"  registered in {p}", markup=False)
        for p in result.backed_up:
            console.print(f"  backup {p}", style="yellow", markup=False)
        for n in result.notes:
            console.print(f"  note: {n}", style="yellow", markup=False)
        if "port_spec.py" in result.written + result.unchanged:
            console.print(f"next: porting-kit check {Path(result.root) / 'port_spec.py'}", markup=False)
        console.print(f"next: porting-kit validate {result.root}", markup=False)
        return 0

    _exit(_guard(body))


@app.command()
def validate(path: Path | None = typer.Argument(None, metavar="PATH", show_default=False,
                                               help="A scaffold folder (as given to scaffold --out/--into) or "
                                                    "one deploy YAML (static and consistency tiers only)."),
             tier: str | None = typer.Option(None, "--tier", metavar="TIERS",
                                             help="Comma-separated tiers: static, consistency, run, gpu "
                                                  "(default: every tier that applies to PATH)."),
             static: bool = typer.Option(False, "--static", help="Shorthand for --tier static."),
             run: bool = typer.Option(False, "--run", help="Shorthand for --tier run."),
             spec: Path | None = typer.Option(None, "--spec", metavar="SPEC",
                                              help="Port spec for the gpu tier (checks in the serving dtype)."),
             device: str | None = typer.Option(None, "--device", metavar="DEVICE",
                                               help="Device of the run tier (default cpu)."),
             json_path: Path | None = typer.Option(None, "--json", metavar="PATH", help="Write the JSON report here (- for standard output)."),
             stored_only: bool = typer.Option(False, "--stored-only",
                                              help="Use the stored schemas even when the framework imports."),
             model_type: str | None = typer.Option(None, "--model-type", metavar="NAME",
                                                   help="Only the scaffold of this model type."),
             framework: Framework | None = typer.Option(None, "--framework", show_default=False,
                                                        help="vllm-omni or sglang-omni: judge PATH by this "
                                                             "framework (a single YAML: default from its keys; a "
                                                             "folder the kit did not generate: needed)."),
             debug: bool = typer.Option(False, "--debug", help="Show tracebacks instead of one-line errors.")):
    """Validate a scaffold or a deploy YAML tier by tier: static, consistency, run, gpu (skips say why)."""
    _DEBUG["on"] = _DEBUG["on"] or debug

    def body() -> int:
        from porting_kit.fsutil import check_output_path
        from porting_kit.report.render import print_report
        from porting_kit.scaffold.validate import parse_tiers
        from porting_kit.scaffold.validate import validate as run_validate

        if path is None:
            raise InputError("validate needs PATH: the folder given to porting-kit scaffold --out/--into, or a "
                             "deploy YAML (one tier: porting-kit validate --static DIR)")
        chosen = list(parse_tiers(tier) or ())
        chosen += [name for name, on in (("static", static), ("run", run)) if on and name not in chosen]
        check_output_path(json_path, inputs=[path])
        report = run_validate(path, chosen or None, spec=str(spec) if spec else None, device=device,
                              prefer_real=not stored_only, model_type=model_type,
                              framework=framework.value if framework is not None else None)
        ran = ",".join(chosen) if chosen else "all"
        print_report(report, _report_console(json_path), title=f"porting-kit validate ({ran})")
        for note in report.extras.get("notes", ()):
            typer.echo(note, err=True)
        _write_json(report, json_path)
        return report.exit_code

    _exit(_guard(body))


def _usage_error_line(exc: Exception, prog_name: str) -> str | None:
    """The one-line message of a parser usage error (click's, which Typer vendors), else None.

    Names the command (``porting-kit lint: No such option: --bogus (see porting-kit lint --help)``);
    ``prog_name`` stands in when the error does not say which command raised it.
    """
    if not hasattr(exc, "format_message"):
        return None
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else prog_name
    return f"{where}: {exc.format_message()} (see {where} --help)"


def _blank_flag_metavars(command) -> None:
    """Give every on/off flag of ``command`` and its subcommands an empty metavar.

    Typer 0.29's help shows a ``<bool>`` type for flags that take no value (``--force <bool>``);
    a flag's help line names the flag only. ``--help`` itself is built per context, so the
    command's ``get_help_option`` is wrapped to blank it too.
    """
    for param in getattr(command, "params", ()):
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    if not getattr(command, "_pk_help_blanked", False):
        plain = command.get_help_option

        def get_help_option(ctx):
            option = plain(ctx)
            if option is not None and option.metavar is None:
                option.metavar = ""
            return option

        command.get_help_option = get_help_option
        command._pk_help_blanked = True
    for sub in getattr(command, "commands", {}).values():
        _blank_flag_metavars(sub)


def _run_app(typer_app: typer.Typer, argv: list[str] | None, prog_name: str) -> int:
    """Run ``typer_app`` on ``argv`` under :func:`_guard`; returns the exit code.

    Usage errors (unknown option, bad value, missing argument) become an
    :class:`InputError`, so they print as the same one line, exit 2.
    """
    _DEBUG["on"] = False  # set again by --debug; a previous in-process call must not leak

    def invoke() -> int:
        try:
            command = typer.main.get_command(typer_app)
            _blank_flag_metavars(command)
            rc = command.main(args=argv, prog_name=prog_name, standalone_mode=False)
            return rc if isinstance(rc, int) else 0
        except typer.Exit as exc:
            return exc.exit_code
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                return exc.code or 0
            raise InputError(str(exc.code)) from None
        except Exception as exc:
            line = _usage_error_line(exc, prog_name)
            if line is not None:
                raise InputError(line) from None
            if type(exc).__name__ == "Abort":  # click's Ctrl-C / EOF at a prompt
                raise KeyboardInterrupt from None
            raise

    return _guard(invoke)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``porting-kit`` console script.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after the program name (default ``sys.argv[1:]``).

    Returns
    -------
    int
        0 pass, 1 a fault was found, 2 the tool could not run (one line on stderr).
    """
    return _run_app(app, argv, "porting-kit")


def lint_main(argv: list[str] | None = None) -> int:
    """Entry point of ``porting-kit-lint`` (the pre-commit hook): the ``lint`` command on its own.

    Parameters
    ----------
    argv : list of str, optional
        ``[PATHS]... [--select CODES] ...`` as for ``porting-kit lint`` (default ``sys.argv[1:]``).

    Returns
    -------
    int
        0 no finding, 1 findings, 2 the hook could not run (one line on stderr).
    """
    _HOOK["on"] = True
    try:
        return _run_app(lint_app, argv, "porting-kit-lint")
    finally:
        _HOOK["on"] = False


if __name__ == "__main__":
    sys.exit(main())
