"""Request bodies as pydantic models, and their validation errors as 400s naming the field.

Only what the gateway reads is modelled; unknown top-level fields are kept (``extra``) so
llama.cpp's own sampling and constraint fields (:data:`ENGINE_FIELDS`) reach the engine.
Malformed history (a tool result without ``tool_call_id``, tool-call arguments that are
not a JSON object) is a 400, never a 500.

Hostile JSON is a 400 naming the field before anything reads it (:func:`safe_json_loads`):
nesting deeper than :data:`MAX_DEPTH`, a number that is not finite (``NaN``, ``Infinity``,
``1e999``) or an integer beyond 64 bits, a string (or key) with a lone UTF-16 surrogate
(``"\\ud800"``, which cannot be encoded to send on). Every route that forwards a body
should read it with :func:`safe_json_loads` (``parse_body`` does).
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ._errors import APIError, bad_request

# llama-server /completion fields a client may send as they are (llama-server users expect
# them on the chat endpoint too).
ENGINE_FIELDS = frozenset(
    {
        "top_k",
        "min_p",
        "typical_p",
        "top_n_sigma",
        "repeat_penalty",
        "repeat_last_n",
        "presence_penalty",
        "frequency_penalty",
        "dry_multiplier",
        "dry_base",
        "dry_allowed_length",
        "dry_penalty_last_n",
        "dry_sequence_breakers",
        "xtc_probability",
        "xtc_threshold",
        "mirostat",
        "mirostat_tau",
        "mirostat_eta",
        "dynatemp_range",
        "dynatemp_exponent",
        "grammar",
        "json_schema",
        "grammar_lazy",
        "grammar_triggers",
        "preserved_tokens",
        "n_probs",
        "min_keep",
        "ignore_eos",
        "logit_bias",
        "samplers",
        "id_slot",
        "n_keep",
        "cache_prompt",
        "t_max_predict_ms",
        "t_max_prompt_ms",
        "n_cache_reuse",
        "adaptive_target",
        "adaptive_decay",
        "post_sampling_probs",
        "lora",
        "backend_sampling",
        "n_indent",
        "reasoning_budget_tokens",
        "reasoning_budget_message",
        "reasoning_budget_start_tag",
        "reasoning_budget_end_tags",
        "timings_per_token",
        "return_progress",
    }
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCall(_Model):
    name: str
    arguments: str | dict[str, Any] = "{}"

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(value, str):
            try:
                parsed = json.loads(value) if value.strip() else {}
            except ValueError:
                raise ValueError("must be a JSON object text; got invalid JSON") from None
            if not isinstance(parsed, dict):
                raise ValueError("must be a JSON object text")
        return value


class ToolCall(_Model):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ContentPart(_Model):
    type: str
    text: str | None = None

    @field_validator("type")
    @classmethod
    def _text_only(cls, value: str) -> str:
        if value not in ("text", "input_text"):
            raise ValueError(f"content part type {value!r} is not supported (text only)")
        return value


class Message(_Model):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    def to_template(self) -> dict[str, Any]:
        """The message as the chat template expects it (text parts joined)."""
        data: dict[str, Any] = self.model_dump(exclude_none=True)
        if isinstance(self.content, list):
            data["content"] = "".join(p.text or "" for p in self.content)
        elif self.content is None:
            data["content"] = None
        if self.role == "developer":
            data["role"] = "system"
        return data


def _check_schema(schema: Any) -> None:
    """The parts of a tool's JSON Schema the gateway reads must have their JSON Schema types:
    ``required`` a list of strings, ``properties`` an object (at any depth)."""
    stack: list[tuple[Any, str]] = [(schema, "")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, list):
            stack.extend((v, f"{where}.{i}") for i, v in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        req = node.get("required")
        if (
            req is not None
            and not isinstance(req, bool)
            and (not isinstance(req, list) or not all(isinstance(r, str) for r in req))
        ):
            raise ValueError(f"{(where + '.required').lstrip('.')}: must be a list of property names (strings)")
        props = node.get("properties")
        if props is not None and not isinstance(props, dict):
            raise ValueError(f"{(where + '.properties').lstrip('.')}: must be an object")
        stack.extend((v, f"{where}.{k}") for k, v in node.items() if isinstance(v, (dict, list)))


class FunctionDef(_Model):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _schema_shape(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            _check_schema(value)
        return value


class Tool(_Model):
    type: Literal["function"] = "function"
    function: FunctionDef


class ResponseFormat(_Model):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class StreamOptions(_Model):
    include_usage: bool = False


class ChatRequest(_Model):
    model: str | None = None  # optional, as with llama-server and vLLM: the served model
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    seed: int | None = None
    n: int = 1
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    force_output: str | None = None  # test-only hook, see docs/gateway.md

    @field_validator("n")
    @classmethod
    def _one(cls, value: int) -> int:
        if value != 1:
            raise ValueError("only n=1 is supported")
        return value


class CompletionRequest(_Model):
    model: str | None = None
    prompt: Any = None
    stream: bool = False


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})


def _loc(err: Any) -> str:
    """The error's field path without pydantic's union-branch tags (``str``, ``list[...]``)."""
    parts = [
        str(p)
        for p in err.get("loc", ())
        if isinstance(p, int) or (p not in _TYPE_TAGS and not any(c in p for c in "[]()'"))
    ]
    return ".".join(parts)


MAX_DEPTH = 64
"""The deepest nesting of arrays and objects a request body may have."""
_INT_LIMIT = 2**64


def _surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _bad(path: list[str | int], what: str) -> APIError:
    where = ".".join(str(p) for p in path)
    return APIError(400, f"{where}: {what}" if where else what, param=where or None)


def check_json(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """A 400 naming the field for what cannot be forwarded or read safely: nesting deeper than
    ``max_depth``, a non-finite number, an integer beyond 64 bits, a lone surrogate in a
    string or key. Iterative: any depth Python could parse is checked without recursion."""
    stack: list[tuple[Any, list[str | int]]] = [(value, [])]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if _surrogate(node):
                raise _bad(path, "a string with a lone UTF-16 surrogate (such as \\ud800) is not valid Unicode text")
        elif isinstance(node, bool) or node is None:
            continue
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise _bad(
                    path,
                    f"{node!r} is not a finite number (NaN, Infinity and numbers "
                    "beyond the double range are not JSON numbers)",
                )
        elif isinstance(node, int):
            if not -_INT_LIMIT < node < _INT_LIMIT:
                raise _bad(path, "an integer out of range (beyond 64 bits)")
        elif isinstance(node, (dict, list)):
            if len(path) >= max_depth:
                raise _bad(path, f"nested deeper than {max_depth} levels")
            if isinstance(node, dict):
                for key, item in node.items():
                    if _surrogate(key):
                        raise _bad(path, f"a key with a lone UTF-16 surrogate ({key!r}) is not valid Unicode text")
                    stack.append((item, [*path, key]))
            else:
                stack.extend((item, [*path, i]) for i, item in enumerate(node))


def safe_json_loads(raw: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` for a request body: malformed or hostile JSON is a 400 (never a 5xx):
    invalid JSON or UTF-8, nesting too deep for the parser, and what :func:`check_json`
    refuses (the offending field named in ``param``)."""
    try:
        data = json.loads(raw)
    except RecursionError:
        raise bad_request(f"the request body is nested deeper than {max_depth} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}") from None
    check_json(data, max_depth)
    return data


def parse_body(model: type[_Model], raw: bytes) -> Any:
    """Decode and validate a JSON body; a 400 naming the first bad field otherwise."""
    data = safe_json_loads(raw)
    if not isinstance(data, dict):
        raise bad_request("the request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        # in a union, the branch that got furthest names the real problem
        first = max(exc.errors(), key=lambda e: len(e.get("loc", ())))
        where = _loc(first)
        msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        raise APIError(400, f"{where}: {msg}" if where else msg, param=where or None) from None


def check_history(req: ChatRequest) -> None:
    """Semantic checks pydantic cannot express: tool results answer declared calls."""
    known: set[str] = set()
    for i, msg in enumerate(req.messages):
        if msg.role == "assistant" and msg.tool_calls:
            known.update(c.id for c in msg.tool_calls)
        if msg.role == "tool":
            if not msg.tool_call_id:
                raise bad_request("a tool message needs tool_call_id", f"messages.{i}.tool_call_id")
            if known and msg.tool_call_id not in known:
                raise bad_request(
                    f"tool_call_id {msg.tool_call_id!r} answers no earlier assistant tool call",
                    f"messages.{i}.tool_call_id",
                )
    choice = req.tool_choice
    if isinstance(choice, dict):
        fn = choice.get("function") if isinstance(choice.get("function"), dict) else None
        name = fn.get("name") if fn else None
        if choice.get("type") != "function" or not isinstance(name, str):
            raise bad_request(
                'tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}',
                "tool_choice",
            )
        if name not in {t.function.name for t in req.tools or []}:
            raise bad_request(f"tool_choice names {name!r}, which is not in tools", "tool_choice")
    elif choice in ("required",) and not req.tools:
        raise bad_request('tool_choice "required" needs tools', "tool_choice")


__all__ = [
    "ENGINE_FIELDS",
    "MAX_DEPTH",
    "ChatRequest",
    "CompletionRequest",
    "Message",
    "check_history",
    "check_json",
    "parse_body",
    "safe_json_loads",
]
