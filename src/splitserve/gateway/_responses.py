"""``POST /v1/responses`` in: an OpenAI Responses request -> the gateway's one chat request.

Pure translation, no I/O (the route is in :mod:`._responses_http`, the output side in
:mod:`._responses_out`):

- ``input`` as a string or items: ``message`` (any role; ``developer``/``system`` before the
  first other item fold into one system message, later ones become user turns so a template
  that allows a system message only first never refuses them), ``function_call``,
  ``function_call_output``, ``custom_tool_call`` and its output, ``reasoning`` (its
  ``content`` text, else its summary, goes back as the turn's ``reasoning_content``, so a
  template that renders earlier thinking sees what the model wrote). The items of one
  assistant turn (reasoning, message, calls) become one assistant message.
- ``instructions`` is the system message, before any ``developer`` text.
- ``tools``: ``function`` (flat), ``custom`` (free-form text input, with a grammar or none:
  Codex's ``apply_patch``) offered to the model as a function of one string parameter
  ``input`` and answered as a ``custom_tool_call``, and ``namespace`` (its functions offered
  as ``NAMESPACE.NAME``, answered with ``namespace`` set). Hosted tools (``web_search``,
  ``file_search``, ...) cannot run here: skipped, with a warning in the response.
- ``tool_choice`` (``none``/``auto``/``required``, a named function or custom tool,
  ``allowed_tools``), ``parallel_tool_calls``, ``max_output_tokens``, ``temperature``,
  ``top_p``, ``reasoning.effort`` (the template's ``reasoning_effort``, and
  ``enable_thinking`` false for ``none``, where the template has them) and ``text.format``
  (``json_schema``/``json_object``: grammar-forced, as chat's ``response_format``).
- ``previous_response_id``: the items of that response (its input and output) from
  :class:`ResponseStore`, a bounded in-memory store per API key; a 400 naming the store's
  size when it is not there. Responses are stored unless ``store`` is false (Codex sends
  false and the whole history every turn).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, ValidationError

from ._errors import APIError, bad_request
from ._schemas import ENGINE_FIELDS, ChatRequest, _Model

NAMESPACE_SEP = "."
"""Between a namespace and the name of one of its functions, in the name the model sees."""


class ResponsesRequest(_Model):
    """The fields of a Responses request the gateway reads (others are kept and ignored)."""

    model: str | None = None
    input: str | list[dict[str, Any]] = Field(default_factory=list)
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    reasoning: dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    stream: bool = False
    store: bool | None = None
    previous_response_id: str | None = None
    prompt_cache_key: str | None = None
    user: str | None = None
    force_output: str | None = None  # test-only hook, as on chat


@dataclass(frozen=True)
class ToolRef:
    """What a name the model calls stands for."""

    kind: Literal["function", "custom"]
    name: str
    namespace: str | None = None


@dataclass
class ChatPlan:
    """A Responses request as the gateway's chat request, with what the output side needs."""

    chat: ChatRequest
    tools: dict[str, ToolRef]
    """The model's function names -> the client's tools."""
    items: list[dict[str, Any]]
    """The whole input as items (the stored history first), for the response store."""
    warnings: list[str] = field(default_factory=list)


def _text_of(content: Any, where: str, *, allow_images: bool = False) -> str:
    """The text of message content: a string or parts (``input_text``, ``output_text``,
    ``refusal``, ``text``, ``reasoning_text``, ``summary_text``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{where}: must be a string or a list of content parts", where)
    out = []
    for i, part in enumerate(content):
        if isinstance(part, str):
            out.append(part)
            continue
        if not isinstance(part, dict):
            raise bad_request(f"{where}.{i}: a content part must be an object", f"{where}.{i}")
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text", "reasoning_text", "summary_text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise bad_request(f"{where}.{i}.text: must be a string", f"{where}.{i}.text")
            out.append(text)
        elif kind == "refusal":
            out.append(str(part.get("refusal") or ""))
        elif kind in ("input_image", "input_file", "input_audio"):
            raise bad_request(
                f"{where}.{i}: {kind} is not supported: the served model reads text only", f"{where}.{i}.type"
            )
        else:
            raise bad_request(f"{where}.{i}.type: content part type {kind!r} is not supported", f"{where}.{i}.type")
    return "".join(out)


def _output_text(output: Any, where: str) -> str:
    """A tool output: a string, or parts as content."""
    if isinstance(output, (dict, int, float, bool)):
        return json.dumps(output, ensure_ascii=False)
    return _text_of(output, where)


def _call_name(item: dict[str, Any], where: str) -> str:
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise bad_request(f"{where}.name: a non-empty string is required", f"{where}.name")
    ns = item.get("namespace")
    return f"{ns}{NAMESPACE_SEP}{name}" if isinstance(ns, str) and ns else name


def _call_id(item: dict[str, Any], where: str) -> str:
    cid = item.get("call_id")
    if not isinstance(cid, str) or not cid:
        raise bad_request(f"{where}.call_id: a non-empty string is required", f"{where}.call_id")
    return cid


class _History:
    """Chat messages built from items, one assistant message per assistant turn."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.system: list[str] = []
        self._open: dict[str, Any] | None = None  # the assistant turn being assembled
        self._started = False  # a non-system item came
        self.calls: set[str] = set()  # the call ids so far

    def system_text(self, text: str) -> None:
        if not self._started:
            self.system.append(text)
        else:
            self.user(text)

    def user(self, text: str) -> None:
        self._started = True
        self._open = None
        self.messages.append({"role": "user", "content": text})

    def tool(self, call_id: str, text: str, where: str) -> None:
        if self.calls and call_id not in self.calls:  # as chat's check_history, naming the item
            raise bad_request(f"{where}.call_id: {call_id!r} answers no earlier call", f"{where}.call_id")
        self._started = True
        self._open = None
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})

    def assistant(self) -> dict[str, Any]:
        """The open assistant turn (a new one after anything else)."""
        self._started = True
        if self._open is None:
            self._open = {"role": "assistant", "content": None}
            self.messages.append(self._open)
        return self._open

    def add_text(self, text: str) -> None:
        turn = self.assistant()
        if turn.get("tool_calls"):  # text after a call: a new turn
            self._open = None
            turn = self.assistant()
        turn["content"] = (turn["content"] or "") + text

    def add_reasoning(self, text: str) -> None:
        turn = self.assistant()
        if turn.get("tool_calls") or turn.get("content"):
            self._open = None
            turn = self.assistant()
        turn["reasoning_content"] = (turn.get("reasoning_content") or "") + text

    def add_call(self, call_id: str, name: str, arguments: str) -> None:
        self.calls.add(call_id)
        turn = self.assistant()
        turn.setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        )

    def result(self, instructions: str | None) -> list[dict[str, Any]]:
        system = [s for s in [instructions, *self.system] if s]
        head = [{"role": "system", "content": "\n\n".join(system)}] if system else []
        return head + self.messages


def items_to_messages(items: list[dict[str, Any]], instructions: str | None) -> list[dict[str, Any]]:
    """Responses input items -> chat messages (see the module); a 400 naming ``input.N`` for
    an item the gateway cannot read."""
    h = _History()
    for i, item in enumerate(items):
        where = f"input.{i}"
        if not isinstance(item, dict):
            raise bad_request(f"{where}: an input item must be an object", where)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            text = _text_of(item.get("content"), f"{where}.content")
            if role in ("system", "developer"):
                h.system_text(text)
            elif role == "user":
                h.user(text)
            elif role == "assistant":
                h.add_text(text)
            else:
                raise bad_request(
                    f"{where}.role: must be user, assistant, system or developer; got {role!r}", f"{where}.role"
                )
        elif kind == "reasoning":
            parts = item.get("content") or item.get("summary") or []
            text = _text_of(parts, f"{where}.content")
            if text:
                h.add_reasoning(text)
        elif kind == "function_call":
            args = item.get("arguments", "{}")
            if isinstance(args, dict):
                args = json.dumps(args, ensure_ascii=False)
            if not isinstance(args, str):
                raise bad_request(f"{where}.arguments: must be a JSON object text", f"{where}.arguments")
            try:
                parsed = json.loads(args) if args.strip() else {}
            except ValueError:
                raise bad_request(f"{where}.arguments: not valid JSON", f"{where}.arguments") from None
            if not isinstance(parsed, dict):
                raise bad_request(f"{where}.arguments: must be a JSON object text", f"{where}.arguments")
            h.add_call(_call_id(item, where), _call_name(item, where), args if args.strip() else "{}")
        elif kind == "custom_tool_call":
            text = item.get("input", "")
            if not isinstance(text, str):
                raise bad_request(f"{where}.input: must be a string", f"{where}.input")
            args = json.dumps({"input": text}, ensure_ascii=False)
            h.add_call(_call_id(item, where), _call_name(item, where), args)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            h.tool(_call_id(item, where), _output_text(item.get("output", ""), f"{where}.output"), where)
        elif kind == "additional_tools":
            continue  # tools declared in the input (Codex's "responses lite"): see to_chat
        elif kind == "item_reference":
            raise bad_request(
                f"{where}: item_reference is not supported (the gateway stores whole responses only: "
                "send the items, or previous_response_id)",
                f"{where}.type",
            )
        else:
            raise bad_request(f"{where}.type: input item type {kind!r} is not supported", f"{where}.type")
    return h.result(instructions)


def custom_parameters(tool: dict[str, Any]) -> dict[str, Any]:
    """The function parameters a custom tool is offered with: one string, its raw input."""
    got = tool.get("format")
    fmt: dict[str, Any] = got if isinstance(got, dict) else {}
    about = "The raw input of the tool, as free-form text."
    if fmt.get("type") == "grammar" and isinstance(fmt.get("definition"), str):
        syntax = fmt.get("syntax") or "lark"
        about += f" It must follow this {syntax} grammar:\n{fmt['definition']}"
    return {"type": "object", "properties": {"input": {"type": "string", "description": about}}, "required": ["input"]}


def _function(name: str, tool: dict[str, Any], parameters: Any) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": name}
    if isinstance(tool.get("description"), str):
        fn["description"] = tool["description"]
    fn["parameters"] = parameters if isinstance(parameters, dict) else {"type": "object", "properties": {}}
    return {"type": "function", "function": fn}


def translate_tools(
    tools: list[dict[str, Any]], warnings: list[str]
) -> tuple[list[dict[str, Any]], dict[str, ToolRef]]:
    """Responses tools -> chat tools and the map back (see the module)."""
    out: list[dict[str, Any]] = []
    refs: dict[str, ToolRef] = {}

    def add(where: str, tool: dict[str, Any], namespace: str | None) -> None:
        kind = tool.get("type")
        name = tool.get("name")
        if kind not in ("function", "custom"):
            if kind == "namespace" and namespace is None:
                ns = tool.get("name")
                inner = tool.get("tools")
                if not isinstance(ns, str) or not ns or not isinstance(inner, list):
                    raise bad_request(f"{where}: a namespace needs a name and a list of tools", where)
                for j, t in enumerate(inner):
                    if not isinstance(t, dict):
                        raise bad_request(f"{where}.tools.{j}: a tool must be an object", f"{where}.tools.{j}")
                    add(f"{where}.tools.{j}", t, ns)
                return
            warnings.append(f"{where}: the {kind} tool is not served by this gateway; skipped")
            return
        if not isinstance(name, str) or not name:
            raise bad_request(f"{where}.name: a non-empty string is required", f"{where}.name")
        full = f"{namespace}{NAMESPACE_SEP}{name}" if namespace else name
        if full in refs:
            raise bad_request(f"{where}.name: two tools are named {full!r}", f"{where}.name")
        if kind == "function":
            params = tool.get("parameters")
            if params is not None and not isinstance(params, dict):
                raise bad_request(f"{where}.parameters: must be a JSON Schema object", f"{where}.parameters")
            out.append(_function(full, tool, params))
        else:
            out.append(_function(full, tool, custom_parameters(tool)))
        refs[full] = ToolRef(kind, name, namespace)

    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise bad_request(f"tools.{i}: a tool must be an object", f"tools.{i}")
        add(f"tools.{i}", tool, None)
    return out, refs


def _choice(
    choice: str | dict[str, Any] | None, tools: list[dict[str, Any]], refs: dict[str, ToolRef]
) -> tuple[str | dict[str, Any] | None, list[dict[str, Any]]]:
    """Responses ``tool_choice`` -> chat's, and the tools left to offer."""
    if choice is None or isinstance(choice, str):
        if choice == "required" and not tools:
            raise bad_request('tool_choice "required" needs tools', "tool_choice")
        return choice, tools
    kind = choice.get("type")
    if kind in ("function", "custom"):
        name = choice.get("name")
        ns = choice.get("namespace")
        full = f"{ns}{NAMESPACE_SEP}{name}" if isinstance(ns, str) and ns else name
        if not isinstance(full, str) or full not in refs or refs[full].kind != kind:
            raise bad_request(f"tool_choice names the {kind} tool {name!r}, which is not in tools", "tool_choice")
        return {"type": "function", "function": {"name": full}}, tools
    if kind == "allowed_tools":
        mode = choice.get("mode", "auto")
        listed = choice.get("tools")
        if mode not in ("auto", "required") or not isinstance(listed, list):
            raise bad_request(
                'tool_choice: allowed_tools needs mode "auto" or "required" and a list of tools', "tool_choice"
            )
        allowed = set()
        for t in listed:
            if isinstance(t, dict) and isinstance(t.get("name"), str):
                ns = t.get("namespace")
                allowed.add(f"{ns}{NAMESPACE_SEP}{t['name']}" if isinstance(ns, str) and ns else t["name"])
        kept = [t for t in tools if t["function"]["name"] in allowed]
        if mode == "required" and not kept:
            raise bad_request("tool_choice: allowed_tools names none of the request's tools", "tool_choice")
        return mode, kept
    raise bad_request(
        'tool_choice must be "none", "auto", "required", {"type": "function"|"custom", "name": ...} '
        f'or {{"type": "allowed_tools", ...}}; the {kind!r} choice is not served by this gateway',
        "tool_choice",
    )


def _response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise bad_request("text.format: must be an object", "text.format")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise bad_request("text.format.schema: a JSON Schema object is required", "text.format.schema")
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name") or "output", "schema": schema}}
    raise bad_request(f"text.format.type: must be text, json_object or json_schema; got {kind!r}", "text.format.type")


def _template_kwargs(req: ResponsesRequest, template: str) -> dict[str, Any]:
    effort = (req.reasoning or {}).get("effort")
    kwargs: dict[str, Any] = {}
    if isinstance(effort, str) and effort:
        if "reasoning_effort" in template:
            kwargs["reasoning_effort"] = effort
        if effort == "none" and "enable_thinking" in template:
            kwargs["enable_thinking"] = False
    return kwargs


def to_chat(req: ResponsesRequest, template: str, history: list[dict[str, Any]] | None = None) -> ChatPlan:
    """The chat request of a Responses request (``history``: the stored items of
    ``previous_response_id``); 400 naming the field for what cannot be served."""
    warnings: list[str] = []
    given = [{"type": "message", "role": "user", "content": req.input}] if isinstance(req.input, str) else req.input
    items = list(history or []) + list(given)
    messages = items_to_messages(items, req.instructions)
    if not any(m["role"] != "system" for m in messages):
        raise bad_request("input: at least one message or item is required", "input")
    declared = list(req.tools or [])
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            more = item.get("tools")
            if not isinstance(more, list):
                raise bad_request(f"input.{i}.tools: must be a list of tools", f"input.{i}.tools")
            declared += more
    tools, refs = translate_tools(declared, warnings)
    choice, offered = _choice(req.tool_choice, tools, refs)
    body: dict[str, Any] = {"model": req.model, "messages": messages}
    if offered:
        body["tools"] = offered
        if choice is not None:
            body["tool_choice"] = choice
    if req.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = req.parallel_tool_calls
    for key, value in (
        ("max_tokens", req.max_output_tokens),
        ("temperature", req.temperature),
        ("top_p", req.top_p),
        ("response_format", _response_format(req.text)),
        ("force_output", req.force_output),
    ):
        if value is not None:
            body[key] = value
    kwargs = _template_kwargs(req, template)
    if kwargs:
        body["chat_template_kwargs"] = kwargs
    for key, value in (req.model_extra or {}).items():
        if key in ENGINE_FIELDS or key == "chat_template_kwargs":
            body[key] = value
    try:
        chat = ChatRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise bad_request(f"the request cannot be served: {where}: {first.get('msg')}") from None
    return ChatPlan(chat=chat, tools=refs, items=items, warnings=warnings)


class ResponseStore:
    """Recent responses' items (their whole input and output) per API key, for
    ``previous_response_id``: at most ``per_key`` responses per key and ``max_chars`` of JSON
    in all, the least recently used first to go. Memory only: a restart forgets them."""

    def __init__(self, per_key: int = 64, max_chars: int = 64 * 1024 * 1024) -> None:
        self.per_key = per_key
        self.max_chars = max_chars
        self._items: OrderedDict[tuple[str, str], tuple[list[dict[str, Any]], int]] = OrderedDict()
        self._count: dict[str, int] = {}
        self._chars = 0

    def __len__(self) -> int:
        return len(self._items)

    def put(self, key: str, response_id: str, items: list[dict[str, Any]]) -> None:
        size = len(json.dumps(items, ensure_ascii=False))
        if size > self.max_chars:
            return
        self._items[(key, response_id)] = (items, size)
        self._count[key] = self._count.get(key, 0) + 1
        self._chars += size
        while self._chars > self.max_chars:
            self._drop(next(iter(self._items)))
        if self._count.get(key, 0) > self.per_key:
            oldest = next(k for k in self._items if k[0] == key)
            self._drop(oldest)

    def _drop(self, item: tuple[str, str]) -> None:
        _, size = self._items.pop(item)
        self._chars -= size
        self._count[item[0]] -= 1
        if not self._count[item[0]]:
            del self._count[item[0]]

    def get(self, key: str, response_id: str) -> list[dict[str, Any]]:
        """The items of that response; 400 when the store does not hold it."""
        found = self._items.get((key, response_id))
        if found is None:
            raise APIError(
                400,
                f"previous_response_id {response_id[:100]!r} is not in the gateway's store, which keeps "
                f"the last {self.per_key} responses per API key in memory (evicted, never stored with "
                "store: false, or lost in a restart): send the whole conversation as input instead",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        self._items.move_to_end((key, response_id))
        return list(found[0])


__all__ = [
    "NAMESPACE_SEP",
    "ChatPlan",
    "ResponseStore",
    "ResponsesRequest",
    "ToolRef",
    "custom_parameters",
    "items_to_messages",
    "to_chat",
    "translate_tools",
]
