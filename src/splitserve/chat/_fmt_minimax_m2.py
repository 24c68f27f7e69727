"""``minimax-m2``: MiniMax-M2's XML tool calls and ``<think>`` reasoning.

    <think>
    reasoning
    </think>

    Let me look.
    <minimax:tool_call>
    <invoke name="search_web">
    <parameter name="query">weather in Paris</parameter>
    <parameter name="days">3</parameter>
    </invoke>
    </minimax:tool_call>

Strings are written raw, other values as JSON (the template's ``tojson``). Tags may carry
other attributes, the name anywhere among them (``<invoke name="f" description="...">``,
``<parameter name="k" type="string">``, vLLM issue #32827). The template's
generation prompt ends with ``<think>\\n``, so output starts mid-reasoning by default; a call
there (the model may answer with one straight away) ends that reasoning (see _reasoning).
The ``minimax-m3-hybrid`` format (MiniMax-M3 with the recipe of the same name) is this
tool-call syntax with M3's ``<mm:think>`` reasoning.
"""

from __future__ import annotations

import re
from dataclasses import replace

from ._format import IdFactory, ToolCallFormat
from ._grammar import GrammarBuilder, GrammarTool
from ._reasoning import ReasoningSpec
from ._schema import ToolSet
from ._xml_flat import Dialect, FlatXmlParser

_VALUE = r"""(?:"[^"]*"|'[^']*'|[^\s"'>]+)"""
_ATTR = rf"""\s+[^\s=<>"'/]+(?:\s*=\s*{_VALUE})?"""
_NAME = r"""\s+name\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))"""


def _header(tag: str) -> re.Pattern[str]:
    """``<tag ...>`` with a ``name`` attribute anywhere among its attributes (the first
    group that matched is the name); also the lenient ``<tag name="x>`` of older parsers."""
    return re.compile(
        rf"""<{tag}(?=(?:{_ATTR})*?{_NAME})(?:{_ATTR})*\s*>"""
        rf"""|<{tag}\s+name\s*=\s*["']?([^"'>]*?)["']?\s*>"""
    )


DIALECT = Dialect(
    wrap_open="<minimax:tool_call>",
    wrap_close="</minimax:tool_call>",
    invoke_prefix="<invoke",
    invoke_header=_header("invoke"),
    invoke_close="</invoke>",
    param_prefix="<parameter",
    param_header=_header("parameter"),
    param_close="</parameter>",
    quoted_attrs=True,
)


def _parser(tools: ToolSet, id_factory: IdFactory) -> FlatXmlParser:
    return FlatXmlParser(tools, id_factory, DIALECT)


def _grammar(g: GrammarBuilder, tools: list[GrammarTool], parallel: bool) -> str:
    r"""Every call's invoke in one wrapper, as the template writes it::

    <minimax:tool_call>\n<invoke name="f">\n<parameter name="k">v</parameter>\n
    </invoke>\n</minimax:tool_call>
    """
    close = g.lit(DIALECT.param_close + "\n")

    def param(key: str, value: str) -> str:
        opener = g.lit(f'<parameter name="{key}">')
        return f"{opener} {value} {close}"

    def valid(key: str) -> bool:
        return bool(key) and key == key.strip() and not set(key) & set("\"'>")

    calls = g.xml_calls(
        tools, lambda name: f'<invoke name="{name}">\n', param, valid, "</invoke>\n", DIALECT.param_close, parallel
    )
    wrap_open = g.lit(DIALECT.wrap_open + "\n")
    return f"{wrap_open} {calls} {g.lit(DIALECT.wrap_close)}"


def detects(template: str) -> bool:
    """M2's template: the ``<minimax:tool_call>`` wrapper with ``<think>`` reasoning."""
    return "<minimax:tool_call>" in template and "<mm:think>" not in template and "]<]minimax[>[" not in template


def detects_hybrid(template: str) -> bool:
    """M2's tool-call wrapper in an M3 template (the minimax-m3-hybrid recipe's output)."""
    return "<minimax:tool_call>" in template and ("<mm:think>" in template or "]<]minimax[>[" in template)


EXAMPLE = (
    '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="location">Paris'
    '</parameter>\n<parameter name="days">3</parameter>\n</invoke>\n</minimax:tool_call>'
)

FORMAT = ToolCallFormat(
    name="minimax-m2",
    description="MiniMax-M2/M2.5/M2.7: <minimax:tool_call><invoke><parameter name=...>, <think>",
    make_tool_parser=_parser,
    reasoning=ReasoningSpec("<think>", "</think>", prefilled_default=True),
    end_markers=("[e~[",),
    example=EXAMPLE,
    call_grammar=_grammar,
    detect=detects,
    aliases=("minimax_m2",),
    call_openers=(DIALECT.wrap_open, DIALECT.invoke_prefix + " name="),
)

HYBRID = replace(
    FORMAT,
    name="minimax-m3-hybrid",
    description="MiniMax-M3 with the minimax-m3-hybrid template: M2 tool calls, <mm:think>",
    reasoning=ReasoningSpec("<mm:think>", "</mm:think>", prefilled_default=False),
    detect=detects_hybrid,
    aliases=(),
)
