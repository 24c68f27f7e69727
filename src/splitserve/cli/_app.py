"""The top-level Typer app; each command group lives in a module of its own."""

from __future__ import annotations

import sys

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

err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def _register() -> None:
    # Each module adds its commands to `app` when imported.
    from . import _bench, _cluster, _demo, _engine, _fetch, _template  # noqa: F401


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``splitserve`` script."""
    _register()
    try:
        app(args=argv, standalone_mode=True)
    except SplitserveError as exc:  # raised outside a command's own handler
        err_console.print(f"splitserve: error: {exc}", markup=False)
        sys.exit(exc.exit_code)


def fail(exc: SplitserveError) -> typer.Exit:
    """Print a user error in one line and return the Exit to raise."""
    err_console.print(f"splitserve: error: {exc}", markup=False)
    return typer.Exit(exc.exit_code)
