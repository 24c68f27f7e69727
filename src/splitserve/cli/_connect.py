"""``splitserve connect CLIENT``: a coding agent's setup for this endpoint, printed or written."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from ._app import API_KEY_ENV, API_KEY_HELP, SPEC_HELP, app, make_console, maps_errors

console = make_console()


@app.command("connect")
@maps_errors
def connect_cmd(
    client: Annotated[str, typer.Argument(help="claude-code, codex, opencode or aider")],
    config: Annotated[Path | None, typer.Option("-c", "--config", help=SPEC_HELP + " of the running cluster")] = None,
    url: Annotated[str | None, typer.Option("--url", help="the gateway, e.g. http://127.0.0.1:8000")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar=API_KEY_ENV, help=API_KEY_HELP)] = None,
    model: Annotated[str | None, typer.Option("--model", help="model name (default: the gateway's)")] = None,
    context: Annotated[
        int | None, typer.Option("--context", min=1, help="context tokens (default: the gateway's n_ctx)")
    ] = None,
    write: Annotated[bool, typer.Option("--write", help="write the files (default: print them)")] = False,
    home: Annotated[
        Path | None,
        typer.Option("--home", help="with --write: the home folder to write into (default: a new temp one)"),
    ] = None,
    disable_betas: Annotated[
        bool,
        typer.Option(
            "--disable-betas",
            help="claude-code: set CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS (all tools inline, a longer first prompt)",
        ),
    ] = False,
) -> None:
    """Print (or write) a coding agent's setup for the served endpoint: Claude Code's env vars,
    Codex's config.toml and model catalog, OpenCode's opencode.json, Aider's config files.
    The model and its context come from the gateway's /v1/models. docs/agents.md says what
    works with each client.

    Example: splitserve connect codex --url http://127.0.0.1:8000 --write --home /tmp/agent-home
    """
    from .._errors import UsageError
    from ..connect import CLIENTS, connect_config, discover, write_setup

    if client not in CLIENTS:
        raise UsageError(f"client {client!r}: use one of {', '.join(CLIENTS)}")
    if home is not None and not write:
        raise UsageError("--home is where --write writes; give --write too")
    endpoint = discover(url, config, api_key=api_key, model=model, context=context)
    if write:
        target = (home or Path(tempfile.mkdtemp(prefix=f"splitserve-{client}-"))).expanduser().resolve()
        setup = connect_config(client, endpoint, home=str(target), disable_betas=disable_betas)
        written = write_setup(setup, target)
        console.print(f"home: {target}", markup=False)
        for path in written:
            console.print(f"wrote {path}", markup=False)
        if setup.env:
            console.print("# export these (or use `env HOME=... <client>`):", markup=False)
            console.print(setup.shell(), end="", markup=False)
        console.print(f"# then, e.g.: HOME={target} {setup.run}", markup=False)
        return
    # paths inside the files (Codex's catalog, Aider's metadata) name the user's own home
    setup = connect_config(client, endpoint, home=str(Path.home()), disable_betas=disable_betas)
    console.print(f"# {client} -> {endpoint.root} (model {endpoint.model}, context {endpoint.context or 'unknown'})")
    if setup.env:
        console.print("# environment", markup=False)
        console.print(setup.shell(), end="", markup=False)
    for rel, text in setup.files.items():
        console.print(f"\n# ~/{rel}", markup=False)
        console.print(text, end="", markup=False)
    for note in setup.notes:
        console.print(f"\n# note: {note}", markup=False)
