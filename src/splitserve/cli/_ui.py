"""``splitserve ui``: open the dashboard of a running cluster (served by its gateway at ``/ui``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .._errors import NotRunningError
from ._app import app, maps_errors


def dashboard_url(config: Path | None, name: str | None) -> str:
    """The ``/ui`` address of a running cluster's gateway (from its state folder)."""
    from ..cluster import cluster_state_dir, find_state_root, load_spec, read_state

    root = find_state_root(name, cluster_state_dir(load_spec(config)) if config else None)
    state = read_state(root)
    if state is None:
        raise NotRunningError(
            f"cluster {root.name} is not running (no state in {root}); start it with `splitserve up -c FILE`"
        )
    if state.gateway is None:
        raise NotRunningError(
            f"cluster {state.name} runs no gateway (gateway.enabled = false); the dashboard is served by the gateway"
        )
    return state.endpoint.rstrip("/") + "/ui"


@app.command("ui")
@maps_errors
def ui_cmd(
    config: Annotated[Path | None, typer.Option("-c", "--config", help="cluster spec (TOML)")] = None,
    name: Annotated[str | None, typer.Option("--name", help="cluster name (instead of -c)")] = None,
    open_: Annotated[bool, typer.Option("--open/--no-open", help="open it in a browser")] = True,
) -> None:
    """Print the dashboard's address and open it in a browser: nodes, memory, load progress, slots,
    throughput, the gateway's metrics, warnings, the latest bench and eval results. With an API key
    on the gateway, the page asks for it once (kept in that browser tab only).

    Example: splitserve ui -c cluster.toml
    """
    url = dashboard_url(config, name)
    print(url)
    if open_:
        import webbrowser

        try:
            webbrowser.open(url)
        except webbrowser.Error:
            pass  # no browser here: the address is printed
