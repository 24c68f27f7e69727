"""The top-level Typer app; each command group lives in a module of its own."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import IO, Any, ParamSpec, TypeVar

import typer
from rich.console import Console

from .._errors import SplitserveError

app = typer.Typer(
    name="splitserve",
    help=(
        "Serve one very large GGUF model split across llama.cpp RPC workers, as one "
        "OpenAI-compatible endpoint, and measure it.\n\n"
        "Example: splitserve demo"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def make_console(stderr: bool = False) -> Console:
    """A console for command output: whole lines (tables uncut, paths unbroken) when the output
    is a pipe or a file rather than 80 columns; no markup guessing in what it prints."""
    stream = sys.stderr if stderr else sys.stdout
    piped = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=200 if piped else None)


err_console = make_console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__

        print(f"splitserve {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    # Keeps Typer in group mode when the lazy registry imports a module with a single
    # command (otherwise `splitserve fetch REPO` would parse REPO as a stray argument).
    pass


# Which module defines each top-level command. Only the module of the command
# being run is imported, so `splitserve up` does not pay for the chat layer or
# matplotlib. A new command group adds its names here.
COMMAND_MODULES: dict[str, str] = {
    "engine": "_engine",
    "up": "_cluster",
    "down": "_cluster",
    "status": "_cluster",
    "logs": "_cluster",
    "preflight": "_cluster",
    "run": "_cluster",
    "systemd": "_cluster",
    "demo": "_demo",
    "bench": "_bench",
    "fetch": "_fetch",
    "template": "_template",
    "parse": "_template",
    "inspect": "_inspect",
    "plan": "_inspect",
    "serve": "_gateway",
    "keys": "_gateway",
    "doctor": "_gateway",
    "eval": "_eval",
    "tune": "_tune",
    "ui": "_ui",
    "connect": "_connect",
}


def _register(argv: list[str]) -> None:
    import importlib

    first = next((a for a in argv if not a.startswith("-")), None)
    modules = [COMMAND_MODULES[first]] if first in COMMAND_MODULES else sorted(set(COMMAND_MODULES.values()))
    for name in modules:
        importlib.import_module(f"{__package__}.{name}")


def _one_line_usage_errors() -> None:
    """Typer's own usage errors (a bad int, an unknown option or command) in one line, like ours,
    instead of click's three-line usage block; `splitserve` alone still prints its help."""
    from typer._click.exceptions import NoArgsIsHelpError, UsageError

    shown = UsageError.show

    def show(self: UsageError, file: IO[Any] | None = None) -> None:
        if isinstance(self, NoArgsIsHelpError):
            shown(self, file)
            return
        where = self.ctx.command_path if self.ctx is not None else "splitserve"
        at = "" if where == "splitserve" else f"{where}: "  # the prefix already names it
        err_console.print(f"splitserve: error: {at}{self.format_message()} (see `{where} --help`)", markup=False)

    UsageError.show = show  # type: ignore[method-assign]  # a deliberate patch of click's method


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``splitserve`` script."""
    _one_line_usage_errors()
    _register(sys.argv[1:] if argv is None else argv)
    try:
        app(args=argv, prog_name="splitserve", standalone_mode=True)
    except SplitserveError as exc:  # raised outside a command's own handler
        err_console.print(f"splitserve: error: {exc}", markup=False)
        sys.exit(exc.exit_code)


def fail(exc: SplitserveError) -> typer.Exit:
    """Print a user error in one line and return the Exit to raise."""
    err_console.print(f"splitserve: error: {exc}", markup=False)
    return typer.Exit(exc.exit_code)


P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

# The names every command uses for one idea: -c/--config (a cluster spec), --url (an endpoint),
# --api-key (env SPLITSERVE_API_KEY), --json (a flag: JSON on stdout), -o/--out (a file or folder).
# Older spellings stay as hidden options for one release (tests/unit/cli/test_vocabulary.py).
API_KEY_ENV = "SPLITSERVE_API_KEY"
SPEC_HELP = "cluster spec (TOML)"
API_KEY_HELP = f"API key of the endpoint (or set {API_KEY_ENV})"
AUTH_HINT = f"pass --api-key (or set {API_KEY_ENV})"


def renamed(new: T | None, old: T | None, new_name: str, old_name: str) -> T | None:
    """The value of an option given by its name or by its old, hidden name (not both)."""
    if old is None:
        return new
    if new is not None and new != old:
        from .._errors import UsageError

        raise UsageError(f"{old_name} is the old name of {new_name}: give one of them")
    return old


def maps_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Decorate a command (below its ``@app.command``) so a SplitserveError from its body ends it
    as `fail` does: one line on stderr and the error's exit code. functools.wraps keeps the
    signature that Typer reads the options from."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except SplitserveError as exc:
            raise fail(exc) from None

    return run
