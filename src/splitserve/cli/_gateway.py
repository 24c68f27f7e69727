"""``splitserve serve``, ``splitserve keys add`` and ``splitserve doctor tools``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from .._errors import UsageError
from ..cluster import GatewaySettings
from ..engine import split_engine_url
from ._app import API_KEY_ENV, API_KEY_HELP, app, make_console, maps_errors, renamed

console = make_console()
#: serve's defaults are the gateway settings' own (cluster.GatewaySettings: also the spec's [gateway])
_D = GatewaySettings()

keys_app = typer.Typer(
    help="API keys for the gateway, stored hashed.\n\nExample: splitserve keys add keys.txt --name alice",
    no_args_is_help=True,
)
app.add_typer(keys_app, name="keys")
doctor_app = typer.Typer(
    help="Probe endpoints.\n\nExample: splitserve doctor tools http://127.0.0.1:8000", no_args_is_help=True
)
app.add_typer(doctor_app, name="doctor")


@app.command("serve")
@maps_errors
def serve_cmd(
    engine: Annotated[
        str,
        typer.Option(
            help="llama-server base URL, e.g. http://127.0.0.1:8080; vLLM/SGLang: vllm+http://HOST:PORT; "
            "replicas of one model: a comma-separated list (URL or NAME=URL items)"
        ),
    ],
    model_format: Annotated[
        str | None,
        typer.Option(
            help="tool-call format (default: detected from the chat template; 'plain' for a template "
            "without tool support: tools then go through a Hermes-style fallback)"
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="address to bind (beyond loopback needs a key)")] = _D.host,
    port: Annotated[int, typer.Option(help="port to listen on")] = _D.port,
    api_key: Annotated[
        str | None, typer.Option("--api-key", envvar=API_KEY_ENV, help=f"accepted API key (or set {API_KEY_ENV})")
    ] = None,
    keys_file: Annotated[Path | None, typer.Option(help="file of hashed keys (`splitserve keys add`)")] = None,
    chat_template: Annotated[
        Path | None, typer.Option(help="jinja chat template file (default: the engine's, from /props)")
    ] = None,
    model_name: Annotated[str | None, typer.Option(help="model id to serve (default: the GGUF's file name)")] = None,
    engine_api_key: Annotated[
        str | None, typer.Option(help="key the engine itself expects (or set SPLITSERVE_ENGINE_API_KEY)")
    ] = None,
    max_concurrent: Annotated[int, typer.Option(help="requests at once per API key")] = _D.max_concurrent,
    max_queue: Annotated[int, typer.Option(help="requests waiting per API key before 429")] = _D.max_queue,
    max_body_bytes: Annotated[int, typer.Option(help="request body limit (413 beyond)")] = _D.max_body_bytes,
    test_hooks: Annotated[bool, typer.Option(help="allow the test-only force_output field")] = False,
    restore_reasoning: Annotated[
        bool,
        typer.Option(
            help="put back the reasoning a client dropped from its earlier assistant turns (found by "
            "the tool-call ids the gateway issued), so the history stays in the prompt cache"
        ),
    ] = _D.restore_reasoning,
    slot_affinity: Annotated[
        bool,
        typer.Option(help="send the requests of one session (X-Session-Id header, else `user`) to one engine slot"),
    ] = _D.slot_affinity,
    strict_model_names: Annotated[
        bool,
        typer.Option(
            help="answer 404 for a `model` that is not the served model's id, path or file name "
            "(default: serve any name, as llama-server does, and answer with the served id)"
        ),
    ] = _D.strict_model_names,
    max_header_bytes: Annotated[
        int, typer.Option(help="request line and headers of one request, in bytes (431 or 400 beyond)")
    ] = _D.max_header_bytes,
    max_headers: Annotated[int, typer.Option(help="header lines of one request (431 beyond)")] = _D.max_headers,
    header_timeout: Annotated[
        float, typer.Option(help="seconds a connection has to send a whole request head (408, closed)")
    ] = _D.header_timeout,
    body_timeout: Annotated[
        float, typer.Option(help="seconds a client has to send the whole request body (408)")
    ] = _D.body_timeout,
    keep_alive_timeout: Annotated[
        float, typer.Option(help="seconds an idle kept-alive connection stays open")
    ] = _D.keep_alive_timeout,
    http: Annotated[
        str,
        typer.Option(
            help="uvicorn's HTTP implementation: auto (httptools when installed), httptools or h11; "
            "the header limits hold for both"
        ),
    ] = "auto",
    route: Annotated[
        str,
        typer.Option(
            help="over replicas: affinity (a session sticks to the replica holding its cache, new "
            "ones go to the least loaded), round-robin or least-loaded (both ignore sessions)"
        ),
    ] = _D.route,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "warning",
    access_log: Annotated[
        bool,
        typer.Option(
            help="one line per request on stderr: id, key name, request, status, tokens, queue, "
            "TTFT, duration (logger splitserve.access, whatever --log-level)"
        ),
    ] = True,
) -> None:
    """Serve an OpenAI-compatible API in front of a llama-server (chat template and tool calls in Python).

    Example: splitserve serve --engine http://127.0.0.1:8080 --port 8000
    """
    from ..gateway import GatewayConfig, require_auth_off_loopback, serve

    config = GatewayConfig.from_flags(
        engine_url=engine,
        host=host,
        port=port,
        api_key=api_key or os.environ.get("SPLITSERVE_API_KEY"),
        keys_file=keys_file,
        model_format=model_format,
        model_name=model_name,
        chat_template_file=chat_template,
        engine_api_key=engine_api_key or os.environ.get("SPLITSERVE_ENGINE_API_KEY"),
        max_concurrent=max_concurrent,
        max_queue=max_queue,
        max_body_bytes=max_body_bytes,
        test_hooks=test_hooks,
        restore_reasoning=restore_reasoning,
        slot_affinity=slot_affinity,
        strict_model_names=strict_model_names,
        max_header_bytes=max_header_bytes,
        max_headers=max_headers,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        keep_alive_timeout=keep_alive_timeout,
        route=route,
    )
    if http not in ("auto", "httptools", "h11"):
        raise UsageError(f"--http {http}: choose auto, httptools or h11")
    for item in engine.split(","):
        name, sep, rest = item.strip().partition("=")
        url = rest if sep and "://" not in name else item.strip()
        if not split_engine_url(url)[1].startswith(("http://", "https://")):
            raise UsageError(
                f"--engine {item.strip() or engine}: give llama-server's base URL, e.g. http://127.0.0.1:8080 "
                "(vLLM or SGLang: vllm+http://HOST:PORT, sglang+http://HOST:PORT; replicas: URL,URL or NAME=URL,...)"
            )
    require_auth_off_loopback(host, config.keys)
    console.print(
        f"splitserve gateway on http://{host}:{port}/v1 -> engine {engine}{' (auth on)' if config.keys.enabled else ''}",
        markup=False,
    )
    serve(config, log_level=log_level, http=http, access_log=access_log)


@keys_app.command("add")
@maps_errors
def keys_add_cmd(
    keys_file: Annotated[Path, typer.Argument(help="the keys file (created if missing)")],
    name: Annotated[str, typer.Option(help="who the key is for")],
) -> None:
    """Create an API key, store its SHA-256 in KEYS_FILE and print the key once.

    Example: splitserve keys add ~/.config/splitserve/keys.txt --name alice
    """
    from ..gateway import add_key

    key = add_key(keys_file, name)
    console.print(key, markup=False)


@doctor_app.command("tools")
@maps_errors
def doctor_tools_cmd(
    url: Annotated[
        str | None,
        typer.Option(
            "--url", help="base URL of an OpenAI-compatible endpoint, e.g. the gateway's http://127.0.0.1:8000"
        ),
    ] = None,
    model: Annotated[str | None, typer.Option(help="model id (default: the first of /v1/models)")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar=API_KEY_ENV, help=API_KEY_HELP)] = None,
    force_template: Annotated[
        Path | None,
        typer.Option(
            help="splitserve gateway with --test-hooks only: force each answer to what this "
            "chat template writes for the expected reply (exercises parsing with any model)"
        ),
    ] = None,
    force_prefill: Annotated[
        Path | None,
        typer.Option(
            help="llama-server's own endpoint: send what this chat template writes for the expected "
            "reply as a final assistant message to continue, and force end of sequence, so "
            "llama-server's own parser reads it (exercises its parsing with any model)"
        ),
    ] = None,
    raw: Annotated[
        bool,
        typer.Option(
            help="llama-server only: ask for its verbose field and keep the raw generated text and "
            "the chat format it parsed with in the report"
        ),
    ] = False,
    out: Annotated[
        list[Path] | None,
        typer.Option("-o", "--out", help="write the report here: Markdown, or JSON for a .json name; repeatable"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the results as JSON instead of lines")] = False,
    timeout: Annotated[float, typer.Option(help="seconds per request")] = 120.0,
    max_tokens: Annotated[int, typer.Option(help="max_tokens of each probe")] = 256,
    url_arg: Annotated[str | None, typer.Argument(hidden=True, help="old: the URL without --url")] = None,
    markdown: Annotated[Path | None, typer.Option("--markdown", hidden=True, help="old name of -o")] = None,
) -> None:
    """Probe an endpoint's tool calling: single, multi-turn, parallel, required, none, reasoning, streaming.

    Example: splitserve doctor tools --url http://127.0.0.1:8000 -o report.md
    """
    from ..gateway import probe_tools, report_markdown

    if force_template and force_prefill:
        raise UsageError(
            "--force-template and --force-prefill exclude each other: the first "
            "is for a splitserve gateway, the second for llama-server itself"
        )
    url = renamed(url, url_arg, "--url", "URL")
    if url is None:
        raise UsageError("give the endpoint: --url URL (e.g. the gateway's http://127.0.0.1:8000)")
    outs = [*(out or []), *([markdown] if markdown else [])]
    path = force_template or force_prefill
    try:
        text = path.read_text() if path else None
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror}; pass an existing template file") from None
    report = probe_tools(
        url,
        model=model,
        api_key=api_key,
        force_template=text if force_template else None,
        prefill_template=text if force_prefill else None,
        timeout=timeout,
        max_tokens=max_tokens,
        raw=raw,
    )
    as_text = json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n"
    if as_json:
        print(as_text, end="")
    else:
        for check in report.checks:
            mark = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}[check.status]
            console.print(f"{mark}  {check.name:<12} {check.detail}", markup=False)
        console.print(f"{report.passed}/{len(report.checks)} passed ({report.url}, model {report.model})", markup=False)
    for dest in outs:
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(as_text if dest.suffix.lower() == ".json" else report_markdown(report))
        except OSError as exc:
            raise UsageError(f"-o {dest}: cannot write the report: {exc.strerror}") from None
    if report.failed:
        raise typer.Exit(1)
