"""An OpenAI chat request -> the engine's raw ``/completion`` body, and the parser for its output.

The prompt is the chat template rendered in Python (:func:`splitserve.chat.render_chat`),
with the request's tools and ``chat_template_kwargs``. Sampling fields map one to one;
llama.cpp's own fields pass through; ``response_format`` becomes the engine's
``json_schema`` constraint; ``cache_prompt`` is on unless the client turns it off, so an
agent loop re-sending its history costs only the new tokens.

``tool_choice: "required"`` or a named function is enforced, not only checked: the body
carries a GBNF ``grammar`` (:func:`splitserve.chat.tool_call_grammar`) whose sentences are
exactly (reasoning, then) a call in the format's syntax to an allowed tool. A client
constraint (``grammar``, ``json_schema``, ``response_format``) cannot hold at the same time:
400.

A ``plain`` model (a template with no tool support) still gets tool calls: with ``tools``
and a choice other than ``"none"`` the request is planned in the Hermes-style fallback of
:mod:`._generic` (tools described in the system message, history rewritten, the output
read and ``required`` enforced as ``hermes``); :attr:`Plan.format` is the format that
request is read in.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..chat import (
    ChatParser,
    GrammarError,
    TemplateError,
    ToolCallFormat,
    get_format,
    render_chat,
    tool_call_grammar,
)
from ..engine import CompletionRequest
from ._errors import APIError, bad_request
from ._generic import GENERIC, generic_messages, uses_generic
from ._plain import PLAIN
from ._schemas import ENGINE_FIELDS, ChatRequest


@dataclass
class ServedModel:
    """What the gateway serves: the model's id, its chat template and tool-call format."""

    id: str
    template: str
    format: ToolCallFormat
    bos_token: str = ""
    eos_token: str = ""
    aliases: tuple[str, ...] = ()
    n_ctx: int | None = None
    created: int = 0
    add_bos: bool = True
    """Whether the engine puts BOS before a prompt it tokenizes (the GGUF's add_bos_token): only
    then is a BOS the template wrote dropped, else it would be there twice."""

    def answers_to(self, name: str) -> bool:
        return name == self.id or name in self.aliases


@dataclass
class Plan:
    """One chat request, translated: the engine body and how to read the output."""

    body: dict[str, Any]
    prompt: str
    prefilled: bool
    tools: list[dict[str, Any]] | None
    tool_choice: str | None  # "none" | "auto" | "required" | None
    named_tool: str | None
    parallel: bool
    include_usage: bool
    warnings: list[str] = field(default_factory=list)
    format: ToolCallFormat = PLAIN
    """The format this request's output is read in: the model's, or the fallback's."""

    def parser(self, fmt: ToolCallFormat | None = None) -> ChatParser:
        return (fmt or self.format).parser(self.tools, prefilled=self.prefilled)

    def request(self) -> CompletionRequest:
        """The engine request of :attr:`body` (llama.cpp's ``/completion`` fields, as the client's
        passed-on engine fields name them), typed: each backend renders it to its own wire format."""
        return CompletionRequest.of(self.body)


RESERVED_TEMPLATE_KWARGS = frozenset({"messages", "tools", "add_generation_prompt", "template", "self"})
"""Template variables the gateway sets itself (or the renderer's own arguments): a client's
``chat_template_kwargs`` may not name them (400 naming the key)."""


def gbnf_literal(text: str) -> str:
    """A GBNF grammar whose only sentence is ``text`` (the test-only ``force_output`` hook)."""
    escaped = (
        text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    )
    return f'root ::= "{escaped}"\n'


def plan_chat(
    req: ChatRequest,
    model: ServedModel,
    *,
    test_hooks: bool = False,
    restore: Callable[[list[dict[str, Any]]], object] | None = None,
) -> Plan:
    """Render the prompt and build the engine body; 400 for what cannot be served.

    ``restore(messages)`` may fill in what the client dropped from the history before it is
    rendered (the gateway's reasoning memory, see _session)."""
    tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
    choice = req.tool_choice
    named = None
    if isinstance(choice, dict):
        named = choice["function"]["name"]
        choice = "required"
    if choice is None:
        choice = "auto" if tools else "none"
    if not tools:
        choice = "none"
    fmt = model.format
    messages = [m.to_template() for m in req.messages]
    if restore is not None:
        restore(messages)
    kwargs: dict[str, Any] = dict(req.chat_template_kwargs or {})
    for key in kwargs:
        if key in RESERVED_TEMPLATE_KWARGS:
            raise bad_request(
                f"chat_template_kwargs.{key}: {key!r} is set by the gateway "
                "(the request's own fields), not a template variable a client may "
                "set",
                f"chat_template_kwargs.{key}",
            )
    kwargs.setdefault("bos_token", model.bos_token)
    kwargs.setdefault("eos_token", model.eos_token)
    if tools and uses_generic(fmt, tools, choice):
        fmt = GENERIC
        prompt = _render_generic(model.template, messages, tools, kwargs)
    else:
        try:
            prompt = render_chat(model.template, messages, tools, add_generation_prompt=True, **kwargs)
        except TemplateError as exc:
            raise bad_request(f"messages: {exc}", "messages") from None
    if model.add_bos and model.bos_token and prompt.startswith(model.bos_token):
        prompt = prompt[len(model.bos_token) :]  # the engine adds BOS when it tokenizes

    body: dict[str, Any] = {"prompt": prompt, "cache_prompt": True}
    extra = req.model_extra or {}
    for key, value in extra.items():
        if key in ENGINE_FIELDS:
            body[key] = value
    limit = req.max_completion_tokens or req.max_tokens
    body["n_predict"] = limit if limit is not None else -1
    for key in ("temperature", "top_p", "seed"):
        value = getattr(req, key)
        if value is not None:
            body[key] = value
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if len(stops) > 16:
        raise bad_request("stop: at most 16 sequences", "stop")
    body["stop"] = stops + [m for m in fmt.end_markers if m not in stops]

    rf = req.response_format
    if rf is not None and rf.type != "text":
        if "grammar" in body or "json_schema" in body:
            raise bad_request("response_format cannot be combined with grammar or json_schema", "response_format")
        if rf.type == "json_object":
            body["json_schema"] = {"type": "object"}
        else:
            spec = rf.json_schema or {}
            schema = spec.get("schema") if isinstance(spec.get("schema"), dict) else None
            if schema is None:
                raise bad_request(
                    "response_format.json_schema.schema: a JSON Schema object is required",
                    "response_format.json_schema.schema",
                )
            body["json_schema"] = schema
    prefilled = fmt.prefilled_by(prompt)

    if req.force_output is not None:
        if not test_hooks:
            raise bad_request(
                "force_output is a test-only hook; start the gateway with --test-hooks to use it", "force_output"
            )
        body.pop("json_schema", None)
        body["grammar"] = gbnf_literal(req.force_output)
    elif choice == "required" and fmt.call_grammar is not None:
        body["grammar"] = _required_grammar(req, fmt, tools, named, prompt, prefilled, body)
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    return Plan(
        body=body,
        prompt=prompt,
        prefilled=prefilled,
        tools=tools,
        tool_choice=choice,
        named_tool=named,
        parallel=req.parallel_tool_calls,
        include_usage=include_usage,
        format=fmt,
    )


def _render_generic(
    template: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], kwargs: dict[str, Any]
) -> str:
    """The fallback's prompt: tools in the system message, or (a template that refuses a
    system role) at the start of the first user message. The template gets no ``tools``:
    the description it would otherwise write may ask for another syntax."""
    try:
        return render_chat(template, generic_messages(messages, tools), None, add_generation_prompt=True, **kwargs)
    except TemplateError:
        pass
    try:
        return render_chat(
            template, generic_messages(messages, tools, system=False), None, add_generation_prompt=True, **kwargs
        )
    except TemplateError as exc:
        raise bad_request(f"messages: {exc}", "messages") from None


def _required_grammar(
    req: ChatRequest,
    fmt: ToolCallFormat,
    tools: list[dict[str, Any]] | None,
    named: str | None,
    prompt: str,
    prefilled: bool,
    body: dict[str, Any],
) -> str:
    """The grammar that forces the call; 400 when the client constrains the output too."""
    what = f"the function {named!r}" if named else '"required"'
    rf = req.response_format
    if rf is not None and rf.type != "text":
        field_ = "response_format"
    else:
        field_ = next(
            (k for k in ("grammar", "json_schema", "grammar_triggers") if k in body),
            "grammar_lazy" if body.get("grammar_lazy") else "",
        )
    if field_:
        raise bad_request(
            f"{field_} cannot be combined with tool_choice {what}: the gateway "
            "enforces the tool call with its own grammar",
            field_,
        )
    reasoning = fmt.reasoning is not None and not prompt.rstrip().endswith(fmt.reasoning.close)
    try:
        return tool_call_grammar(
            fmt, tools, name=named, parallel=req.parallel_tool_calls, prefilled=prefilled, reasoning=reasoning
        )
    except GrammarError as exc:
        raise bad_request(f"tool_choice: {exc}", "tool_choice") from None
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
        # a tool schema the grammar builder cannot read (the schema checks in _schemas catch
        # the known shapes; this keeps any other one a 400, never a 500)
        raise bad_request(
            f"tools: a tool's parameters schema cannot be enforced with tool_choice "
            f"{what}: {type(exc).__name__}: {exc}",
            "tools",
        ) from None


def resolve_format(name: str | None, template: str) -> ToolCallFormat:
    """The format named on the command line, the one the template is detected as, or plain."""
    from ..chat import NO_FORMAT_HINT, UnknownFormatError, detect_format

    if name:
        if name == PLAIN.name:
            return PLAIN
        try:
            return get_format(name)
        except UnknownFormatError as exc:  # names the known formats
            raise APIError(500, str(exc), type_="server_error") from None
    detected = detect_format(template)
    if detected is None:
        print(f"gateway: {NO_FORMAT_HINT}", file=sys.stderr, flush=True)
        return PLAIN
    return get_format(detected)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


__all__ = ["RESERVED_TEMPLATE_KWARGS", "Plan", "ServedModel", "gbnf_literal", "plan_chat", "resolve_format"]
