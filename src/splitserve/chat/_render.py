"""Rendering chat templates with jinja2, in an environment compatible with Hugging Face's.

Like ``transformers``' ``_compile_jinja_template``: a sandbox with ``trim_blocks`` and
``lstrip_blocks``, the ``loopcontrols`` extension and a no-op
``{% generation %}`` block; ``tojson`` is ``json.dumps`` with its ``ensure_ascii``,
``indent``, ``separators`` and ``sort_keys`` options (no HTML escaping);
``raise_exception(msg)`` and ``strftime_now(fmt)`` are globals. One difference, llama.cpp's
own template engine's: lists and dicts the template builds may be changed (``ids.append(x)``,
as Kimi-K2's templates do; ``transformers``' immutable sandbox refuses it). The messages a
template sees are copies, so nothing it changes reaches the caller.

Messages go in as OpenAI dicts. A null ``content`` is given to the template as ``""``
(templates print None as "None" or fail on ``'</think>' in content``). An assistant tool call whose ``function.arguments`` is a
JSON string is handed to the template as a mapping (templates iterate ``arguments.items()``
or apply ``tojson``) that also joins a string as its JSON text (``'...' + arguments``);
other values are left as they are.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import SandboxedEnvironment

from ._errors import TemplateError


class _TemplateRaised(Exception):
    """A template called raise_exception()."""


class _GenerationBlock(Extension):
    """``{% generation %}...{% endgeneration %}``: HF marks assistant text with it; a no-op here."""

    tags = {"generation"}  # noqa: RUF012 (jinja2's Extension API)

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _json_default(value: Any) -> Any:
    # jinja filters such as map() hand over generators; HF would fail, llama.cpp's minja
    # serialises them as lists. Follow minja here: it is what the templates were tested on.
    if isinstance(value, Iterator):
        return list(value)
    if isinstance(value, jinja2.Undefined):
        return None
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
        default=_json_default,
    )


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def make_environment() -> jinja2.Environment:
    """A jinja2 environment configured the way Hugging Face renders chat templates."""
    env = SandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, "jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@lru_cache(maxsize=64)
def _compile(template: str) -> jinja2.Template:
    try:
        return make_environment().from_string(template)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(
            f"chat template line {exc.lineno}: {exc.message}; fix the template or pick another"
        ) from None


class Arguments(dict[str, Any]):
    """A tool call's arguments as templates get them: a mapping (``.items()``, ``tojson``)
    that also joins a string as its JSON text (``'...' + arguments``: the templates written
    for arguments as a string, Functionary's and the original DeepSeek-R1-Distill's)."""

    def _text(self) -> str:
        return json.dumps(self, ensure_ascii=False)

    def __add__(self, other: Any) -> Any:
        if isinstance(other, str):
            return self._text() + other
        return NotImplemented

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, str):
            return other + self._text()
        return NotImplemented


def _prepare(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(messages)
    for message in out:
        if isinstance(message, dict) and "content" in message and message["content"] is None:
            message["content"] = ""  # templates test `'x' in content` or print "None"
        for call in message.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                try:
                    parsed = json.loads(fn["arguments"]) if fn["arguments"].strip() else {}
                except ValueError:
                    continue
                if isinstance(parsed, dict):
                    fn["arguments"] = Arguments(parsed)
    return out


def render_chat(
    template: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    **kwargs: Any,
) -> str:
    """Render ``messages`` (and ``tools``) with a chat template; returns the prompt text.

    ``kwargs`` become template variables (``bos_token``, ``enable_thinking``,
    ``thinking_mode``, ...). Errors (syntax, ``raise_exception``, bad data) become one-line
    :class:`TemplateError` messages.
    """
    compiled = _compile(template)
    context = dict(kwargs)
    context.setdefault("bos_token", "")
    context.setdefault("eos_token", "")
    context["messages"] = _prepare(messages)
    context["add_generation_prompt"] = add_generation_prompt
    if tools is not None:
        context["tools"] = tools
    try:
        return compiled.render(**context)
    except _TemplateRaised as exc:
        raise TemplateError(f"the chat template refused these messages: {exc}") from None
    except jinja2.TemplateError as exc:
        raise TemplateError(f"chat template failed to render: {exc}") from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        raise TemplateError(f"chat template failed to render: {type(exc).__name__}: {exc}") from None


def assistant_turn(
    template: str,
    history: list[dict[str, Any]],
    message: dict[str, Any],
    end_markers: tuple[str, ...] = (),
    reasoning_open: str | None = None,
    tools: list[dict[str, Any]] | None = None,
    **kwargs: Any,
) -> tuple[str, bool]:
    """The text a template writes for ``message`` (an assistant turn) after ``history``.

    Renders the history with the generation prompt, then history + message without it; the
    difference is what the model would have generated. Returns ``(text, prefilled)`` where
    ``prefilled`` says whether the generation prompt ended inside reasoning (its trailing
    reasoning opener is part of the prompt, not of the text). The first end marker found
    after the last non-marker text ends the turn.
    """
    prompt = render_chat(template, history, tools, add_generation_prompt=True, **kwargs)
    full = render_chat(template, history + [message], tools, add_generation_prompt=False, **kwargs)
    tail, prefilled = _after_header(prompt, full, end_markers, reasoning_open)
    if tail is None:
        tail, prefilled = _after_common_prefix(prompt, full, reasoning_open)
    for marker in end_markers:
        cut = tail.find(marker)
        if cut >= 0:
            tail = tail[:cut]
            break
    return tail, prefilled


def _after_header(
    prompt: str, full: str, end_markers: tuple[str, ...], reasoning_open: str | None
) -> tuple[str | None, bool]:
    """The text after the generation header (the prompt after its last end marker)."""
    cuts = [prompt.rfind(m) + len(m) for m in end_markers if m in prompt]
    if not cuts:
        return None, False
    header = prompt[max(cuts) :]
    candidates = [(header, False)]
    if reasoning_open and header.rstrip().endswith(reasoning_open):
        candidates = [(header, True), (header.rstrip()[: -len(reasoning_open)], False)]
    for text, prefilled in candidates:
        if text.strip() and text in full:
            return full[full.rfind(text) + len(text) :], prefilled
    return None, False


def _after_common_prefix(prompt: str, full: str, reasoning_open: str | None) -> tuple[str, bool]:
    common = 0
    limit = min(len(prompt), len(full))
    while common < limit and prompt[common] == full[common]:
        common += 1
    if common < len(prompt):  # do not split a marker such as <|...|> between the two
        k = prompt.rfind("<", 0, common)
        if k >= 0 and ">" not in prompt[k:common]:
            common = k
    # Pre-filled: the whole prompt is a prefix of the full rendering and ends with the
    # opener, so the turn's text starts inside reasoning.
    prefilled = common == len(prompt) and reasoning_open is not None and prompt.rstrip().endswith(reasoning_open)
    return full[common:], prefilled
