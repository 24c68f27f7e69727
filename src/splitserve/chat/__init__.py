"""The chat layer: chat templates and model-output parsing, in pure Python.

- :func:`render_chat` renders a Hugging Face chat template (jinja2, HF-compatible env);
- :func:`get_format` / :func:`detect_format`: tool-call formats; ``fmt.parser(tools=...)``
  gives an incremental parser with ``feed(text) -> events`` and ``finish() -> events``;
- :func:`parse_complete` parses a whole output into a :class:`ParsedMessage`;
- :func:`transplant` builds a hybrid template from two templates and a recipe;
- :func:`check_template` renders canonical conversations and checks they parse back;
- :func:`tool_call_grammar` builds the GBNF that forces a tool call in a format's syntax.
"""

import typing

from ._check import check_template
from ._errors import TemplateError, TransplantError
from ._events import (
    ContentDelta,
    Event,
    ParseWarning,
    ReasoningDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    coalesce,
)
from ._forced import tool_call_grammar
from ._format import ChatParser, IdFactory, ToolCallFormat, ToolParser
from ._grammar import GrammarError
from ._registry import NO_FORMAT_HINT, UnknownFormatError, detect_format, get_format, list_formats, parse_complete
from ._render import assistant_turn, render_chat
from ._scan import find_first, hold_len
from ._schema import ToolSet, json_type
from ._transplant import load_recipe, transplant

if typing.TYPE_CHECKING:  # at run time __getattr__ below imports it on first use
    from ._gguf import read_chat_templates

__all__ = [
    "NO_FORMAT_HINT",
    "ChatParser",
    "ContentDelta",
    "Event",
    "GrammarError",
    "IdFactory",
    "ParseWarning",
    "ReasoningDelta",
    "TemplateError",
    "ToolCallArgsDelta",
    "ToolCallEnd",
    "ToolCallFormat",
    "ToolCallStart",
    "ToolParser",
    "ToolSet",
    "TransplantError",
    "UnknownFormatError",
    "assistant_turn",
    "check_template",
    "coalesce",
    "detect_format",
    "find_first",
    "get_format",
    "hold_len",
    "json_type",
    "list_formats",
    "load_recipe",
    "parse_complete",
    "read_chat_templates",
    "render_chat",
    "tool_call_grammar",
    "transplant",
]


def __getattr__(name: str) -> object:
    # The GGUF reader needs the gguf package (and numpy): imported on first use only, so the
    # gateway, which takes its template from the engine, starts without them.
    if name == "read_chat_templates":
        from ._gguf import read_chat_templates

        return read_chat_templates
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
