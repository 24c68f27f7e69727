"""The format registry: formats by name, detection from a chat template, one-shot parsing.

Detection lives with the formats: each declares ``detect(template)``, true when the template
writes its call markers for an assistant tool call (not merely mentions them). The registry
asks them in registration order and the first that claims a template wins; ``inspect``,
``template check``, ``doctor`` and the gateway all ask :func:`detect_format`. It returns
None when no format claims the template; pass ``--format`` / ``--model-format`` to choose.
"""

from __future__ import annotations

from typing import Any

from .._errors import SplitserveError
from ._events import MessageAssembler, ParsedMessage
from ._fmt_deepseek_dsml import V4 as DEEPSEEK_V4
from ._fmt_deepseek_dsml import V32 as DEEPSEEK_V32
from ._fmt_deepseek_v3 import FORMAT as DEEPSEEK_V3
from ._fmt_glm import GLM45, GLM47
from ._fmt_gpt_oss import FORMAT as GPT_OSS
from ._fmt_hermes import FORMAT as HERMES
from ._fmt_kimi_k2 import FORMAT as KIMI_K2
from ._fmt_kimi_k3 import FORMAT as KIMI_K3
from ._fmt_llama3_json import FORMAT as LLAMA3_JSON
from ._fmt_minimax_m1 import FORMAT as MINIMAX_M1
from ._fmt_minimax_m2 import FORMAT as MINIMAX_M2
from ._fmt_minimax_m2 import HYBRID as MINIMAX_M3_HYBRID
from ._fmt_minimax_m3 import FORMAT as MINIMAX_M3
from ._fmt_mistral import FORMAT as MISTRAL
from ._fmt_qwen3_coder import FORMAT as QWEN3_CODER
from ._fmt_seed_oss import FORMAT as SEED_OSS
from ._format import IdFactory, ToolCallFormat


class UnknownFormatError(SplitserveError):
    """A tool-call format name that is not registered."""

    exit_code = 2


_FORMATS: dict[str, ToolCallFormat] = {}


def register_format(fmt: ToolCallFormat) -> None:
    """Add (or replace) a format under its name."""
    _FORMATS[fmt.name] = fmt


# Registration order is detection order: a format whose templates also carry another's
# markers goes first (the hybrid before M3 and M2, Qwen3-Coder before Hermes; GLM-4.7,
# whose compact tags are a special case of GLM-4.5's, before it, both before Hermes).
# DeepSeek's DSML formats go before V3, MiniMax-M1 before Hermes (no shared markers yet).
# Kimi K3, Kimi K2, gpt-oss and Mistral share no markers with any other (nor each other).
for _fmt in (
    MINIMAX_M3_HYBRID,
    MINIMAX_M3,
    MINIMAX_M2,
    SEED_OSS,
    QWEN3_CODER,
    DEEPSEEK_V32,
    DEEPSEEK_V4,
    DEEPSEEK_V3,
    MINIMAX_M1,
    KIMI_K3,
    KIMI_K2,
    GPT_OSS,
    MISTRAL,
    GLM47,
    GLM45,
    HERMES,
    LLAMA3_JSON,
):
    register_format(_fmt)


def list_formats() -> list[ToolCallFormat]:
    """Every registered format, in registration order."""
    return list(_FORMATS.values())


def get_format(name: str) -> ToolCallFormat:
    """The format called ``name`` (or aliased so); :class:`UnknownFormatError` names the known ones."""
    if name in _FORMATS:
        return _FORMATS[name]
    for fmt in _FORMATS.values():  # other tools' names for it (vLLM's parser names, say)
        if name in fmt.aliases:
            return fmt
    known = ", ".join(_FORMATS)
    raise UnknownFormatError(f"unknown tool-call format {name!r}; known: {known}") from None


def detect_format(chat_template: str) -> str | None:
    """The name of the format a chat template renders tool calls in, or None.

    Every registered format that declares ``detect`` is asked in registration order; the
    first that claims the template wins. ``inspect``, ``template check``, ``doctor`` and the
    gateway all ask here.
    """
    for fmt in _FORMATS.values():
        if fmt.detect is not None and fmt.detect(chat_template):
            return fmt.name
    return None


NO_FORMAT_HINT = (
    "no known tool-call format claims this chat template; tool calls are not "
    "parsed from it: name one with --model-format NAME (the spec's "
    "gateway.model_format; `splitserve template formats` lists them)"
)
"""The one line every command prints for a template no format claims."""


def parse_complete(
    fmt: str | ToolCallFormat,
    text: str,
    tools: list[dict[str, Any]] | None = None,
    *,
    prefilled: bool | None = None,
    id_factory: IdFactory | None = None,
) -> ParsedMessage:
    """Parse one whole model output into content, reasoning and OpenAI tool calls."""
    f = get_format(fmt) if isinstance(fmt, str) else fmt
    parser = f.parser(tools, prefilled=prefilled, id_factory=id_factory)
    assembler = MessageAssembler()
    assembler.add(parser.feed(text))
    assembler.add(parser.finish())
    return assembler.result()
