"""``qwen3-coder``: Qwen3-Coder / Qwen3.5 XML tool calls (and optional ``<think>``).

    <tool_call>
    <function=get_weather>
    <parameter=location>
    Paris
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

The template writes one newline after each parameter opener and one before its closer;
the parser strips exactly those. Objects and arrays are JSON; other values are Python's
``str()`` of the value, so ``True``/``False`` (any case) are booleans for this format.
Values are read leniently (``Dialect.lenient_values``, see _xml_flat): an unclosed
parameter ends at the next declared one or at a closing ``</function>``/``</tool_call>``;
with the tool's schema, parameter markup the tool does not declare is data, and so is, inside
a string value, markup of a parameter the call has already given (a file being written that
holds such lines); tool-call markup inside a value nests (a coding agent writing a file that
holds a tool call).
"""

from __future__ import annotations

import re

from ._format import IdFactory, ToolCallFormat
from ._grammar import GrammarBuilder, GrammarTool
from ._reasoning import ReasoningSpec
from ._schema import ToolSet
from ._xml_flat import Dialect, FlatXmlParser


def function_dialect(wrap_open: str, wrap_close: str, **rules: bool) -> Dialect:
    """``<function=f>`` and ``<parameter=k>`` tags inside a wrapper (``<tool_call>`` here, Seed-OSS's
    ``<seed:tool_call>``); ``rules``: the dialect's flags."""
    return Dialect(
        wrap_open=wrap_open,
        wrap_close=wrap_close,
        invoke_prefix="<function=",
        invoke_header=re.compile(r"<function=([^>\n]+)>"),
        invoke_close="</function>",
        param_prefix="<parameter=",
        param_header=re.compile(r"<parameter=([^>\n]+)>"),
        param_close="</parameter>",
        **rules,
    )


DIALECT = function_dialect("<tool_call>", "</tool_call>", strip_newlines=True, bool_words=True, lenient_values=True)


def _parser(tools: ToolSet, id_factory: IdFactory) -> FlatXmlParser:
    return FlatXmlParser(tools, id_factory, DIALECT)


def _grammar(g: GrammarBuilder, tools: list[GrammarTool], parallel: bool) -> str:
    r"""One block per call, as the template writes it, blocks back to back (a newline
    between them would be content)::

        <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>
    """
    return function_grammar(g, tools, parallel, DIALECT, "\n")


def function_grammar(g: GrammarBuilder, tools: list[GrammarTool], parallel: bool, dialect: Dialect, around: str) -> str:
    """The calls of a :func:`function_dialect`, one block per call, a line each tag, ``around``
    between each value and its tags."""
    close = g.lit(around + dialect.param_close + "\n")

    def param(key: str, value: str) -> str:
        opener = g.lit(f"<parameter={key}>{around}")
        return f"{opener} {value} {close}"

    def valid(key: str) -> bool:
        return bool(key) and key == key.strip() and ">" not in key and "\n" not in key

    return g.xml_calls(
        tools,
        lambda name: f"{dialect.wrap_open}\n<function={name}>\n",
        param,
        valid,
        f"</function>\n{dialect.wrap_close}",
        dialect.param_close,
        parallel,
        kind="call",
    )


def detects(template: str) -> bool:
    """Qwen3-Coder / Qwen3.5: ``<function=`` and ``<parameter=`` inside ``<tool_call>``."""
    return "<function=" in template and "<parameter=" in template and "<tool_call>" in template


FORMAT = ToolCallFormat(
    name="qwen3-coder",
    description="Qwen3-Coder, Qwen3.5: <tool_call><function=f><parameter=k>, optional <think>",
    make_tool_parser=_parser,
    reasoning=ReasoningSpec("<think>", "</think>", prefilled_default=False),
    end_markers=("<|im_end|>",),
    call_grammar=_grammar,
    example=(
        "<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
    ),
    detect=detects,
    aliases=("qwen3_coder", "qwen3_xml", "step3p5", "step-3.5"),  # Step-3.5 writes the same
    call_openers=(DIALECT.wrap_open, DIALECT.invoke_prefix),
)
