"""One vocabulary across commands: a walk over every command's options (click's tree, as Typer
builds it) that fails on a second spelling of one idea: the spec is -c/--config, an endpoint is
--url, the key is --api-key with env SPLITSERVE_API_KEY, --json is a flag and files go to
-o/--out. Old spellings live on only as hidden options."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from splitserve.cli import app
from splitserve.cli._app import _register

_register([])  # every command module


def walk(cmd: Any, path: str = "splitserve") -> Iterator[tuple[str, Any]]:
    for p in cmd.params:
        yield path, p
    if hasattr(cmd, "commands"):  # a group (Typer vendors its own click)
        for name, sub in cmd.commands.items():
            yield from walk(sub, f"{path} {name}")


def visible() -> list[tuple[str, Any]]:
    root = typer.main.get_command(app)
    return [(where, p) for where, p in walk(root) if not getattr(p, "hidden", False)]


def names(p: Any) -> list[str]:
    return [*p.opts, *getattr(p, "secondary_opts", [])]


def test_the_walk_sees_every_command() -> None:
    seen = {where for where, _ in visible()}
    for cmd in (
        "up",
        "status",
        "bench speed",
        "bench sweep",
        "bench engine",
        "tune",
        "eval run",
        "doctor tools",
        "demo",
        "template extract",
        "serve",
    ):
        assert f"splitserve {cmd}" in seen, cmd


def test_a_spec_is_dash_c_config_everywhere() -> None:
    bad = []
    for where, p in visible():
        opts = names(p)
        if "--cluster" in opts or "--spec" in opts:
            bad.append(f"{where}: {opts}")
        if "-c" in opts and opts != ["-c", "--config"]:
            bad.append(f"{where}: {opts}")
        if "--config" in opts and "-c" not in opts:
            bad.append(f"{where}: {opts}")
    assert bad == []
    # every command that takes a spec
    takes = {where for where, p in visible() if "--config" in names(p)}
    for cmd in (
        "up",
        "down",
        "status",
        "logs",
        "preflight",
        "run",
        "systemd",
        "plan",
        "ui",
        "bench speed",
        "bench context",
        "bench sweep",
        "bench engine",
        "tune",
        "eval run",
    ):
        assert f"splitserve {cmd}" in takes, cmd


def test_an_endpoint_is_url_everywhere() -> None:
    bad = []
    for where, p in visible():
        opts = names(p)
        if p.param_type_name == "argument" and "url" in (p.name or ""):
            bad.append(f"{where}: positional {p.name}")
        for o in opts:
            if o in ("--endpoint", "--base-url", "--server", "--server-url", "--host-url"):
                bad.append(f"{where}: {o}")
        # any option that takes an endpoint's URL is --url; serve's --engine names the engine the
        # gateway itself fronts (it is not an endpoint a client command talks to)
        says_url = "base url" in (getattr(p, "help", None) or "").lower() or "endpoint, e.g." in (
            getattr(p, "help", None) or ""
        )
        if p.param_type_name == "option" and says_url and "--url" not in opts and where != "splitserve serve":
            bad.append(f"{where}: {opts} takes an endpoint")
    assert bad == []
    takes = {where for where, p in visible() if "--url" in names(p)}
    for cmd in ("bench speed", "bench context", "eval run", "doctor tools"):
        assert f"splitserve {cmd}" in takes, cmd


def test_the_key_is_api_key_with_its_env_everywhere() -> None:
    bad = []
    keyed = set()
    for where, p in visible():
        opts = names(p)
        if "--api-key-env" in opts or "--key" in opts or ("--token" in opts and where != "splitserve fetch"):
            bad.append(f"{where}: {opts}")
        if "--api-key" in opts:
            keyed.add(where)
            if getattr(p, "envvar", None) != "SPLITSERVE_API_KEY":
                bad.append(f"{where}: --api-key without env SPLITSERVE_API_KEY")
    assert bad == []
    for cmd in ("bench speed", "bench context", "bench sweep", "tune", "eval run", "doctor tools", "serve"):
        assert f"splitserve {cmd}" in keyed, cmd


def test_json_is_a_flag_and_files_go_to_out() -> None:
    bad = []
    for where, p in visible():
        opts = names(p)
        if "--json" in opts and not (p.param_type_name == "option" and p.is_flag):
            bad.append(f"{where}: --json takes a value")
        for o in opts:
            if o in ("--output", "--markdown", "--json-out", "--out-file", "--report-file"):
                bad.append(f"{where}: {o}")
        if "-o" in opts and opts != ["-o", "--out"] and opts != ["--out", "-o"]:
            bad.append(f"{where}: {opts}")
    assert bad == []


def test_help_examples_point_at_the_gateway() -> None:
    bad = []
    root = typer.main.get_command(app)

    def texts(cmd: Any, path: str) -> Iterator[tuple[str, str]]:
        yield path, cmd.help or ""
        for p in cmd.params:
            yield path, getattr(p, "help", None) or ""
        if hasattr(cmd, "commands"):  # a group (Typer vendors its own click)
            for name, sub in cmd.commands.items():
                yield from texts(sub, f"{path} {name}")

    for where, text in texts(root, "splitserve"):
        if ":8080" in text and where != "splitserve serve":  # serve's --engine is llama-server itself
            bad.append(f"{where}: {text[:80]}")
    assert bad == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "speed", "--cluster", "/nonexistent/a.toml"], "/nonexistent/a.toml"),
        (["tune", "--cluster", "/nonexistent/a.toml"], "/nonexistent/a.toml"),
        (
            ["bench", "speed", "-c", "/nonexistent/a.toml", "--cluster", "/nonexistent/b.toml"],
            "--cluster is the old name of -c",
        ),
        (["doctor", "tools", "http://127.0.0.1:1", "--url", "http://127.0.0.1:2"], "URL is the old name of --url"),
        (["eval", "run", "x", "--url", "http://a", "-c", "b.toml"], "give exactly one of --url URL or -c"),
    ],
)
def test_old_spellings_still_work_and_two_at_once_are_refused(argv: list[str], message: str) -> None:
    res = CliRunner().invoke(app, argv)
    assert res.exit_code != 0
    assert message in res.output, res.output
    assert "Traceback" not in res.output
    assert "No such option" not in res.output
