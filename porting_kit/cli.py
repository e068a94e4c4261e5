"""The ``porting-kit`` command line: a thin layer over the library.

Every command calls one library function and renders its result. Exit codes
(DESIGN.md): 0 pass, 1 a fault was found, 2 the tool could not run (one line on
stderr, no traceback unless ``--debug``).
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import typer
from rich.console import Console

from porting_kit import __version__
from porting_kit.errors import InputError
from porting_kit.report.findings import EXIT_INPUT

app = typer.Typer(add_completion=False, no_args_is_help=False,
                  help="Find the silent faults in ports of HF TTS/audio models to vLLM-Omni / SGLang-Omni.")
baseline_app = typer.Typer(help="Record and compare reference-audio baselines (reference_audio/).")
app.add_typer(baseline_app, name="baseline")

console = Console(emoji=False)  # ":x:" in a device name or message must stay text
err_console = Console(stderr=True, emoji=False)
_DEBUG = {"on": False}


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
                                                help="Embedded example, optionally with a variant: tts, tts:qk_not_permuted."),
          variant: str | None = typer.Option(None, "--variant", help="Planted-fault variant declared by the spec."),
          only: str | None = typer.Option(None, "--only", help="Comma-separated families: config,parity,rope,norm,hop,channel,dtype,rng,lifecycle."),
          json_path: Path | None = typer.Option(None, "--json", help="Write the JSON report here."),
          device: str = typer.Option("cpu", "--device", help="Torch device: cpu, cuda, cuda:1."),
          dtype: str | None = typer.Option(None, "--dtype", help="Serving dtype: float32, bfloat16, float16."),
          debug: bool = typer.Option(False, "--debug", help="Show tracebacks.")):
    """Compare the candidate port against the HF reference and name the fault."""
    _DEBUG["on"] = _DEBUG["on"] or debug

    def body() -> int:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        from porting_kit.fsutil import check_output_path
        from porting_kit.report.render import print_report
        from porting_kit.runner import run_check

        check_output_path(json_path, inputs=[spec])
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=err_console, transient=True, disable=not err_console.is_terminal) as prog:
            task = prog.add_task("loading spec", total=None)
            report = run_check(str(spec) if spec else None, example=example, variant=variant,
                               only=only, device=device, dtype=dtype,
                               progress=lambda text: prog.update(task, description=f"check: {text}"))
        print_report(report, console)
        if json_path:
            report.write_json(json_path)
        return report.exit_code

    _exit(_guard(body))


@app.command()
def examples():
    """List the embedded examples and their planted-fault variants."""

    def body() -> int:
        from rich.table import Table

        from porting_kit.spec import list_examples

        table = Table(title="embedded examples (use --example NAME)")
        table.add_column("name")
        table.add_column("description", overflow="fold")
        for name, desc in list_examples():
            table.add_row(name, desc)
        console.print(table)
        return 0

    _exit(_guard(body))


@app.command()
def audio(ref: Path = typer.Argument(..., help="Reference audio file (WAV/FLAC)."),
          cand: Path = typer.Argument(..., help="Candidate audio file (WAV/FLAC)."),
          hop_length: int | None = typer.Option(None, "--hop-length", min=1, help="Codec hop length in samples."),
          sample_rate: int | None = typer.Option(None, "--sample-rate", min=1, help="Expected sample rate in Hz."),
          json_path: Path | None = typer.Option(None, "--json", help="Write the JSON report here."),
          plot: Path | None = typer.Option(None, "--plot", help="Write waveform/spectrogram plots (PNG) here.")):
    """Compare two audio files: length, sample rate, channels, lag, SNR, log-mel distance."""

    def body() -> int:
        from porting_kit.audio_files import compare_files
        from porting_kit.fsutil import check_output_path
        from porting_kit.report.render import print_report

        check_output_path(json_path, inputs=[ref, cand])
        check_output_path(plot, inputs=[ref, cand], what="--plot")
        if plot is not None:
            plot.parent.mkdir(parents=True, exist_ok=True)
        report = compare_files(ref, cand, hop_length=hop_length, sample_rate=sample_rate, plot=plot)
        print_report(report, console)
        if json_path:
            report.write_json(json_path)
        return report.exit_code

    _exit(_guard(body))


@baseline_app.command("record")
def baseline_record(spec: Path | None = typer.Argument(None, help="Port spec (default: embedded example)."),
                    example: str | None = typer.Option(None, "--example", "-e"),
                    out: Path = typer.Option(Path("reference_audio"), "--out", help="Baseline folder."),
                    force: bool = typer.Option(False, "--force", help="Replace an existing baseline (a .bak is kept).")):
    """Save the reference's audio with a sidecar (sample rate, seed, inputs, sha256, versions)."""

    def body() -> int:
        from porting_kit.baseline import record

        paths = record(str(spec) if spec else None, example=example, out_dir=out, force=force)
        for p in paths:
            console.print(f"wrote {p}")
        return 0

    _exit(_guard(body))


@baseline_app.command("compare")
def baseline_compare(spec: Path | None = typer.Argument(None, help="Port spec (default: embedded example)."),
                     example: str | None = typer.Option(None, "--example", "-e"),
                     variant: str | None = typer.Option(None, "--variant"),
                     out: Path = typer.Option(Path("reference_audio"), "--out", help="Baseline folder."),
                     json_path: Path | None = typer.Option(None, "--json")):
    """Compare the candidate's audio to the recorded baseline."""

    def body() -> int:
        from porting_kit.baseline import compare
        from porting_kit.fsutil import check_output_path
        from porting_kit.report.render import print_report

        check_output_path(json_path, inputs=[spec])
        report = compare(str(spec) if spec else None, example=example, variant=variant, out_dir=out)
        print_report(report, console)
        if json_path:
            report.write_json(json_path)
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


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def lint(ctx: typer.Context):
    """Run the port rules over Python and deploy-YAML files (same as the pre-commit hook).

    Arguments are passed to the hook: PATHS [--select CODES] [--ignore CODES] [--baseline FILE].
    """
    from porting_kit.lint.main import main as lint_main

    _exit(_guard(lambda: lint_main(list(ctx.args))))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def scaffold(ctx: typer.Context):
    """Generate the serving framework's files for a port (vLLM-Omni or SGLang-Omni).

    Options: --framework {vllm-omni,sglang-omni} --shape {two-stage,single-stage-ar,native-ar}
    --model-type NAME --config CONFIG_JSON (--out DIR | --into PATH) [--arch NAME] [--force].
    """
    from porting_kit.scaffold.generate import cli_main

    _exit(_guard(lambda: cli_main(list(ctx.args))))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def validate(ctx: typer.Context):
    """Validate a scaffold: --static DIR against the real framework schemas, or on a GPU."""
    from porting_kit.scaffold.validate import cli_main

    _exit(_guard(lambda: cli_main(list(ctx.args))))


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit code."""
    try:
        rc = app(args=argv, prog_name="porting-kit", standalone_mode=False)
        return rc if isinstance(rc, int) else 0
    except typer.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        err_console.print(f"error: {exc.code}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_INPUT
    except Exception as exc:  # click's UsageError / NoSuchOption / Abort (typer vendors click)
        if hasattr(exc, "format_message"):
            err_console.print(f"error: {exc.format_message()}", markup=False, highlight=False,
                              soft_wrap=True)
            return EXIT_INPUT
        if type(exc).__name__ == "Abort":
            return EXIT_INPUT
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
