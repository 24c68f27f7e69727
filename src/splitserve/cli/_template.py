"""``splitserve template extract|render|check|transplant`` and ``splitserve parse``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import typer
from rich.table import Table
from rich.text import Text

from .._errors import UsageError
from ..chat import (
    NO_FORMAT_HINT,
    check_template,
    detect_format,
    get_format,
    list_formats,
    load_recipe,
    parse_complete,
    read_chat_templates,
    render_chat,
    transplant,
)
from ._app import app, make_console, maps_errors, renamed

template_app = typer.Typer(
    help="Read, render, check and transplant chat templates.\n\nExample: splitserve template check --model model.gguf",
    no_args_is_help=True,
)
app.add_typer(template_app, name="template")
console = make_console()
err = make_console(stderr=True)


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{what} {path}: not UTF-8 text") from None


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(_read_text(path, what))
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} {path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


def _template_from(path: Path, name: str | None = None) -> str:
    """A template file, or the template embedded in a .gguf (its default or ``name``)."""
    if path.suffix == ".gguf":
        templates = read_chat_templates(path)
        key = name or "default"
        if key not in templates:
            have = ", ".join(templates) or "none"
            raise UsageError(f"{path}: no embedded chat template {key!r} (found: {have}); pass --template FILE")
        return templates[key]
    return _read_text(path, "template")


def _pick_template(template: Path | None, model: Path | None, name: str | None) -> str:
    if (template is None) == (model is None):
        raise UsageError("give exactly one of --template FILE or --model MODEL.gguf")
    if model is not None:
        if model.suffix != ".gguf":
            raise UsageError(f"--model {model}: expected a .gguf file")
        return _template_from(model, name)
    assert template is not None
    return _template_from(template, name)


def _tools_from(path: Path | None) -> list[dict[str, Any]] | None:
    if path is None:
        return None
    data = _read_json(path, "tools file")
    if isinstance(data, dict) and "tools" in data:
        data = data["tools"]
    if not isinstance(data, list):
        raise UsageError(f'tools file {path}: expected a JSON list of tools (or an object with "tools")')
    return data


def _kwargs_from(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--kwargs: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise UsageError("--kwargs: expected a JSON object, e.g. '{\"enable_thinking\": false}'")
    return data


TemplateOpt = Annotated[Path | None, typer.Option("--template", help="a .jinja file")]
ModelOpt = Annotated[Path | None, typer.Option("--model", help="a .gguf whose template to use")]
NameOpt = Annotated[str | None, typer.Option("--name", help="a named alternate (tool_use, ...)")]
KwargsOpt = Annotated[str | None, typer.Option("--kwargs", help="template variables as JSON")]
OldOutputOpt = Annotated[Path | None, typer.Option("--output", hidden=True, help="old name of -o/--out")]


@template_app.command("extract")
@maps_errors
def extract_cmd(
    model: Annotated[Path, typer.Argument(help="the .gguf model")],
    out: Annotated[Path | None, typer.Option("-o", "--out", help="write to this file")] = None,
    name: NameOpt = None,
    list_names: Annotated[bool, typer.Option("--list", help="list the embedded templates")] = False,
    old_output: OldOutputOpt = None,
) -> None:
    """Print the chat template embedded in a GGUF (reads the header only).

    Example: splitserve template extract model.gguf -o model.jinja
    """
    templates = read_chat_templates(model)
    if list_names:
        for key, text in templates.items():
            console.print(f"{key}\t{len(text)} chars\t{detect_format(text) or '-'}")
        return
    text = _template_from(model, name)
    output = renamed(out, old_output, "-o/--out", "--output")
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    output.write_text(text, encoding="utf-8")
    err.print(f"wrote {output} ({len(text)} chars, format {detect_format(text) or 'unknown'})")


@template_app.command("render")
@maps_errors
def render_cmd(
    messages: Annotated[
        Path, typer.Option("--messages", help="JSON list of messages, or a request body with messages (and tools)")
    ],
    template: TemplateOpt = None,
    model: ModelOpt = None,
    name: NameOpt = None,
    tools: Annotated[Path | None, typer.Option("--tools", help="JSON list of tools")] = None,
    kwargs: KwargsOpt = None,
    generation_prompt: Annotated[bool, typer.Option(help="end with the assistant header")] = True,
) -> None:
    """Render messages with a chat template (HF-compatible jinja2) and print the prompt.

    Example: splitserve template render --model model.gguf --messages chat.json --tools tools.json
    """
    text = _pick_template(template, model, name)
    data = _read_json(messages, "messages file")
    tool_list = _tools_from(tools)
    if isinstance(data, dict):
        if tool_list is None and isinstance(data.get("tools"), list):
            tool_list = data["tools"]
        data = data.get("messages")
    if not isinstance(data, list):
        raise UsageError(f"messages file {messages}: expected a JSON list of messages")
    prompt = render_chat(text, data, tool_list, add_generation_prompt=generation_prompt, **_kwargs_from(kwargs))
    sys.stdout.write(prompt)
    if not prompt.endswith("\n"):
        sys.stdout.write("\n")


def _report(results: list[Any], fmt_name: str | None) -> bool:
    table = Table(title=f"chat template check (format: {fmt_name or 'none: rendering only'})")
    table.add_column("conversation")
    table.add_column("result")
    table.add_column("details")
    for r in results:
        details = "; ".join(r.problems + r.notes)
        table.add_row(r.name, "ok" if r.ok else "FAIL", details)
    console.print(table)
    if fmt_name is None:
        err.print(NO_FORMAT_HINT.replace("--model-format", "--format"), markup=False)
    return all(r.ok for r in results)


@template_app.command("check")
@maps_errors
def check_cmd(
    template: TemplateOpt = None,
    model: ModelOpt = None,
    name: NameOpt = None,
    fmt: Annotated[
        str | None, typer.Option("--format", help="tool-call format (default: detected from the template)")
    ] = None,
    kwargs: KwargsOpt = None,
    strict: Annotated[
        bool, typer.Option(help="also fail a template that has no tool-call format (only rendering could be checked)")
    ] = False,
) -> None:
    """Render canonical conversations and check each reads back as written.

    Plain chat, one tool call, call -> result -> answer, parallel calls, reasoning on and
    off: each must render, and the assistant turn it writes must parse back (with the
    template's format) to the same content, reasoning and calls. Exits 1 when a conversation
    fails.

    Example: splitserve template check --template MiniMax-M3.jinja --strict
    """
    text = _pick_template(template, model, name)
    fmt_name = fmt or detect_format(text)
    results = check_template(text, get_format(fmt_name) if fmt_name else None, _kwargs_from(kwargs))
    if not _report(results, fmt_name) or (strict and not fmt_name):
        raise typer.Exit(1)


class _FormatRow(TypedDict):
    name: str
    reasoning: list[str] | None
    end_markers: list[str]


@template_app.command("formats")
@maps_errors
def formats_cmd(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """List the tool-call formats (the names `--format`, `--model-format` and the spec's
    `gateway.model_format` take), with their reasoning markers.

    Example: splitserve template formats
    """
    from ..chat import list_formats

    rows: list[_FormatRow] = [
        {
            "name": f.name,
            "reasoning": [f.reasoning.open, f.reasoning.close] if f.reasoning else None,
            "end_markers": list(f.end_markers),
        }
        for f in list_formats()
    ]
    rows.append({"name": "plain", "reasoning": None, "end_markers": []})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("format", "reasoning", title="tool-call formats")
    for r in rows:
        # Text, not markup: markers such as Mistral's [THINK]...[/THINK] look like rich's tags
        table.add_row(Text(r["name"]), Text(" ... ".join(r["reasoning"]) if r["reasoning"] else "-"))
    console.print(table)


@template_app.command("transplant")
@maps_errors
def transplant_cmd(
    base: Annotated[Path, typer.Option("--base", help="the template to keep (.jinja or .gguf)")],
    donor: Annotated[Path, typer.Option("--donor", help="the template to take blocks from")],
    recipe: Annotated[str, typer.Option("--recipe", help="a shipped recipe name or a .toml")],
    out: Annotated[Path | None, typer.Option("-o", "--out", help="where to write the result")] = None,
    verify: Annotated[bool, typer.Option(help="check the result renders the canonical conversations")] = True,
    old_output: OldOutputOpt = None,
) -> None:
    """Build a hybrid template: the base with the recipe's blocks taken from the donor.

    Every block must match exactly once in both files, or nothing is written and the
    failing block is named. Shipped recipe: minimax-m3-hybrid.

    Example: splitserve template transplant --base MiniMax-M3.jinja --donor MiniMax-M2.jinja --recipe minimax-m3-hybrid -o MiniMax-M3-hybrid.jinja
    """
    output = renamed(out, old_output, "-o/--out", "--output")
    if output is None:
        raise UsageError("give -o FILE: where to write the result")
    r = load_recipe(recipe)
    result = transplant(_template_from(base), _template_from(donor), r, str(base), str(donor))
    fmt_name = r.format or detect_format(result)
    results = check_template(result, get_format(fmt_name) if fmt_name else None) if verify else []
    if results and not _report(results, fmt_name):
        err.print(
            f"splitserve: error: the transplanted template fails the check above; {output} not written", markup=False
        )
        raise typer.Exit(1)
    output.write_text(result, encoding="utf-8")
    err.print(f"wrote {output}: recipe {r.name}, {len(r.blocks)} blocks replaced, format {fmt_name or 'unknown'}")


@app.command("parse")
@maps_errors
def parse_cmd(
    fmt: Annotated[
        str, typer.Option("--format", help="tool-call format: " + ", ".join(f.name for f in list_formats()))
    ],
    tools: Annotated[
        Path | None, typer.Option("--tools", help="JSON list of tools (their schemas type the arguments)")
    ] = None,
    prefilled: Annotated[
        bool | None,
        typer.Option(
            "--prefilled/--not-prefilled",
            help="the prompt ended with the reasoning opener "
            "(default: pre-filled for a format whose prompts always pre-fill it, such as minimax-m2; "
            "else decided by the output: text before a bare closer is reasoning)",
        ),
    ] = None,
    warnings: Annotated[bool, typer.Option("--warnings", help="also print parser warnings on stderr")] = False,
) -> None:
    """Parse raw model output from stdin; print content, reasoning and tool calls as JSON.

    Prints {"content", "reasoning_content", "tool_calls"} like the OpenAI API, with each
    call's arguments a JSON string. Exits 0 for any model output: what cannot be parsed
    becomes content.

    Example: splitserve parse --format minimax-m3 --tools tools.json < output.txt
    """
    f = get_format(fmt)
    tool_list = _tools_from(tools)
    raw = sys.stdin.buffer.read().decode("utf-8", "replace")
    parsed = parse_complete(f, raw, tool_list, prefilled=prefilled)
    print(json.dumps(parsed.to_openai(), ensure_ascii=False, indent=2))
    if warnings:
        for w in parsed.warnings:
            err.print(f"warning: {w}", markup=False)
