"""The ``rhythm`` command: one Typer app; every subcommand is a thin layer over a library function.

Errors funnel through :func:`main`: bad input (a :class:`RhythmError` or a usage error) prints one line
on stderr and exits 2; ``RHYTHM_DEBUG=1`` shows the traceback instead. A reader that closes stdout early
(``rhythm generate --output - | head -1``) ends the command with exit 1 and no traceback: Typer catches
the broken pipe inside ``command.main`` and quiets stdout's last flush, so nothing here handles it. A write
the disk refuses (full, over quota, failing: ``--output`` on a full disk, or ``--output -`` into one) is one
line and exit 2; what was written before it stays.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from typing import Annotated

import typer

try:  # typer >= 0.26 vendors click
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - older typer on real click
    from click.exceptions import NoArgsIsHelpError, UsageError

from rhythm.cli.analyze import analyze_app
from rhythm.cli.eval import eval_command
from rhythm.cli.generate import generate_command
from rhythm.cli.grpo import grpo_command
from rhythm.cli.plot import plot_command
from rhythm.cli.quickstart import quickstart_command
from rhythm.cli.reeval import reeval_command
from rhythm.cli.relabel import relabel_command
from rhythm.cli.sft import sft_command
from rhythm.cli.upload import upload_command
from rhythm.errors import RhythmError
from rhythm.provenance import version_line

app = typer.Typer(
    name="rhythm",
    help="Teach small language models to infer a hidden person and act on it: env, teachers, SFT, GRPO, eval, plots."
    "\n\n\b\nExamples:\n  rhythm generate --seeds 0-29\n  rhythm eval --condition ood\n  rhythm sft --flavor a10g-large"
    "\n  rhythm quickstart",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        print(version_line())
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the package and env versions."),
    ] = False,
) -> None:
    """Teach small language models to infer a hidden person and act on it."""


app.command("generate")(generate_command)
app.command("reeval")(reeval_command)
app.command("upload")(upload_command)
app.command("sft")(sft_command)
app.command("grpo")(grpo_command)
app.command("eval")(eval_command)
app.command("plot")(plot_command)
app.command("relabel")(relabel_command)
app.command("quickstart")(quickstart_command)
app.add_typer(analyze_app, name="analyze")


FULL_OR_FAILING = frozenset({errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG})
"""Errors of a disk that refused a write (full, over quota, too large) or failed one, or a read (EIO): the user's
to fix, told in one line."""


def _quiet_stdout() -> None:
    """Point stdout at the null device, so the exit's flush of what stdout still holds cannot fail again (a full
    disk behind ``--output -``) and print a second error."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout closed or not a file: nothing left to flush to it
        pass


def _fail(message: str, code: int = 2) -> None:
    message = " ".join(str(message).split())
    print(f"rhythm: error: {message}", file=sys.stderr)
    sys.exit(code)


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a scheduler ending the job), unwound as Ctrl-C is: workers stopped, files closed whole."""


_signalled: list[int] = []


def _terminated(signum: int, frame: object) -> None:
    _signalled.append(signum)  # typer and click turn the interrupt into Exit(130) or Abort: this says which it was
    raise Terminated


def _interrupted() -> None:
    """The line and exit code of a run stopped by Ctrl-C (130) or SIGTERM (143)."""
    if _signalled:
        print("rhythm: terminated (SIGTERM); everything written so far is whole", file=sys.stderr)
        sys.exit(128 + signal.SIGTERM)
    print("rhythm: interrupted; everything written so far is whole", file=sys.stderr)
    sys.exit(130)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``rhythm`` console script."""
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminated)
        try:
            _main(argv)
        finally:
            signal.signal(signal.SIGTERM, previous)
    else:
        _main(argv)


def _main(argv: list[str] | None) -> None:
    debug = os.environ.get("RHYTHM_DEBUG", "") not in ("", "0")
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="rhythm", standalone_mode=False)
        if isinstance(code, int) and code != 0:  # typer.Exit(n) comes back as a return value here
            if code == 130:  # typer turns Ctrl-C into Exit(130)
                _interrupted()
            sys.exit(code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except NoArgsIsHelpError as exc:
        print(exc.ctx.get_help() if exc.ctx else str(exc), file=sys.stderr)
        sys.exit(2)
    except UsageError as exc:
        if debug:
            raise
        # "rhythm: error:" already names the program; name the subcommand only ("sft: ...")
        path = exc.ctx.command_path.split()[1:] if exc.ctx is not None else []
        where = f"{' '.join(path)}: " if path else ""
        _fail(f"{where}{exc.format_message()} (see --help)")
    except RhythmError as exc:
        if debug:
            raise
        _fail(str(exc), exc.exit_code)
    except OSError as exc:
        if not debug and exc.errno in FULL_OR_FAILING:  # a write that failed (the path is not always known: stdout)
            _quiet_stdout()
            code = errno.errorcode.get(exc.errno, exc.errno)
            if exc.errno == errno.EIO:  # a read as likely as a write
                where = f" on {exc.filename}" if exc.filename is not None else ""
                _fail(f"the device failed a read or write{where}: {exc.strerror or exc} ({code}); what was written "
                      "before stays; fix the device and rerun")
            _fail(f"cannot write the output: {exc.strerror or exc} ({code}); what was written before stays; free space "
                  "(or fix the device) and rerun")
        if debug or exc.filename is None:  # not about a path the user named: a bug or the network, keep the trace
            raise
        paths = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
        _fail(f"{paths}: {exc.strerror or exc}")
    except (KeyboardInterrupt, typer.Abort):
        _interrupted()


if __name__ == "__main__":
    main()
