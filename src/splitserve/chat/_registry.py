"""The format registry: formats by name, detection from a chat template, one-shot parsing.

Detection looks for the markers a template writes when it renders an assistant tool call
(not merely mentions): MiniMax's namespace token, ``<minimax:tool_call>``, Qwen3-Coder's
``<function=``, DeepSeek's ``<｜tool▁call▁begin｜>``, Hermes' ``<tool_call>`` followed by a
JSON ``name``, Llama 3's ``"parameters": `` after its header tokens. It returns None when
no known format matches; pass ``--format`` / ``format=`` to choose explicitly.
"""

from __future__ import annotations

import re
from typing import Any

from .._errors import SplitserveError
from ._events import MessageAssembler, ParsedMessage
from ._fmt_deepseek_v3 import FORMAT as DEEPSEEK_V3
from ._fmt_hermes import FORMAT as HERMES
from ._fmt_llama3_json import FORMAT as LLAMA3_JSON
from ._fmt_minimax_m2 import FORMAT as MINIMAX_M2
from ._fmt_minimax_m2 import HYBRID as MINIMAX_M3_HYBRID
from ._fmt_minimax_m3 import FORMAT as MINIMAX_M3
from ._fmt_qwen3_coder import FORMAT as QWEN3_CODER
from ._format import IdFactory, ToolCallFormat


class UnknownFormatError(SplitserveError):
    """A tool-call format name that is not registered."""

    exit_code = 2


_FORMATS: dict[str, ToolCallFormat] = {}


def register_format(fmt: ToolCallFormat) -> None:
    """Add (or replace) a format under its name."""
    _FORMATS[fmt.name] = fmt


for _fmt in (MINIMAX_M3, MINIMAX_M3_HYBRID, MINIMAX_M2, HERMES, QWEN3_CODER, LLAMA3_JSON,
             DEEPSEEK_V3):
    register_format(_fmt)


def list_formats() -> list[ToolCallFormat]:
    """Every registered format, in registration order."""
    return list(_FORMATS.values())


def get_format(name: str) -> ToolCallFormat:
    """The format called ``name``; :class:`UnknownFormatError` names the known ones."""
    try:
        return _FORMATS[name]
    except KeyError:
        known = ", ".join(_FORMATS)
        raise UnknownFormatError(f"unknown tool-call format {name!r}; known: {known}") from None


_HERMES_CALL = re.compile(r"<tool_call>(?:\\n|\n|\s|'|\"|\+|~|\{\{-?)*\{\s*\\?\"name\\?\"")
_LLAMA3_CALL = re.compile(r"\{\"name\": \"'\s*\+\s*tool_call\.name\s*\+\s*'\", '\s*\}\}\s*"
                          r"\{\{-?\s*'\"parameters\": '")


def detect_format(chat_template: str) -> str | None:
    """The name of the format a chat template renders tool calls in, or None."""
    t = chat_template
    if "]<]minimax[>[" in t and "<invoke" in t:
        return "minimax-m3-hybrid" if "<minimax:tool_call>" in t else "minimax-m3"
    if "<minimax:tool_call>" in t:
        return "minimax-m3-hybrid" if "<mm:think>" in t else "minimax-m2"
    if "<function=" in t and "<parameter=" in t and "<tool_call>" in t:
        return "qwen3-coder"
    if "tool▁call▁begin" in t and "tool▁sep" in t:
        return "deepseek-v3"
    if _HERMES_CALL.search(t) or ("<tool_call>" in t and '"arguments": ' in t
                                  and "<arg_key>" not in t):
        return "hermes"
    if "<|start_header_id|>" in t and ('"parameters": ' in t or _LLAMA3_CALL.search(t)):
        return "llama3-json"
    return None


def parse_complete(fmt: str | ToolCallFormat, text: str,
                   tools: list[dict[str, Any]] | None = None, *,
                   prefilled: bool | None = None,
                   id_factory: IdFactory | None = None) -> ParsedMessage:
    """Parse one whole model output into content, reasoning and OpenAI tool calls."""
    f = get_format(fmt) if isinstance(fmt, str) else fmt
    parser = f.parser(tools, prefilled=prefilled, id_factory=id_factory)
    assembler = MessageAssembler()
    assembler.add(parser.feed(text))
    assembler.add(parser.finish())
    return assembler.result()
