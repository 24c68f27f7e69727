"""``seed-oss``: ByteDance Seed-OSS tool calls and ``<seed:think>`` reasoning.

    <seed:think>reasoning</seed:think>
    Let me check.

    <seed:tool_call>
    <function=get_weather>
    <parameter=location>Paris</parameter>
    <parameter=days>3</parameter>
    </function>
    </seed:tool_call>

Qwen3-Coder's tags in Seed's own wrapper, with the values written flush against their tags
(no newline is stripped). The template writes one block per call, and a value that is not
a string as Python's ``str()`` of it: ``True``/``False`` are booleans (any case), and an
object or array written as a Python literal (``{'a': [1, 'x']}``) is read as one where the
schema allows an object or array (or says nothing); JSON is read as JSON. The generation
prompt ends with the ``assistant`` header (a ``thinking_budget`` of 0 writes a closed
reasoning block), so the reasoning opener is not pre-filled. Rules as for the other flat XML
formats (see _xml_flat).
"""

from __future__ import annotations

import ast
import math
from typing import Any

from ._fmt_qwen3_coder import function_dialect, function_grammar
from ._format import IdFactory, ToolCallFormat
from ._grammar import GrammarBuilder, GrammarTool
from ._reasoning import ReasoningSpec
from ._schema import Schema, ToolSet, allowed_types, coerce_text, coerce_value, loads_json
from ._xml_flat import FlatXmlParser

DIALECT = function_dialect("<seed:tool_call>", "</seed:tool_call>", bool_words=True)
_LITERAL_LIMIT = 100_000


def _plain(value: Any) -> tuple[bool, Any]:
    """A Python literal's value as JSON data (tuples as lists); (False, None) if it has none."""
    if value is None or isinstance(value, (bool, int, str)):
        return True, value
    if isinstance(value, float):
        return math.isfinite(value), value
    if isinstance(value, (list, tuple)):
        out = []
        for item in value:
            ok, plain = _plain(item)
            if not ok:
                return False, None
            out.append(plain)
        return True, out
    if isinstance(value, dict):
        obj = {}
        for key, item in value.items():
            ok, plain = _plain(item)
            if not isinstance(key, str) or not ok:
                return False, None
            obj[key] = plain
        return True, obj
    return False, None


def python_literal(text: str) -> tuple[bool, Any]:
    """``str()`` of a dict or list (``{'a': [1, True, None]}``) back as JSON data."""
    s = text.strip()
    if not s or s[0] not in "[{" or len(s) > _LITERAL_LIMIT:
        return False, None
    try:
        value = ast.literal_eval(s)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None
    if not isinstance(value, (dict, list)):
        return False, None
    return _plain(value)


class SeedOssParser(FlatXmlParser):
    """The flat XML parser, with Python literals read where the schema wants a structure."""

    def _coerce(self, raw: Any, schema: Schema | None) -> Any:
        types = allowed_types(schema)
        text = str(raw)
        if (types is None or types & {"object", "array"}) and text.strip()[:1] in ("{", "["):
            try:
                loads_json(text.strip())
            except ValueError:  # not JSON: str() of a dict or list?
                ok, literal = python_literal(text)
                kind = "object" if isinstance(literal, dict) else "array"
                if ok and (types is None or kind in types):
                    return coerce_value(literal, schema, True)
        return coerce_text(text, schema, True)


def _parser(tools: ToolSet, id_factory: IdFactory) -> FlatXmlParser:
    return SeedOssParser(tools, id_factory, DIALECT)


def _grammar(g: GrammarBuilder, tools: list[GrammarTool], parallel: bool) -> str:
    r"""One block per call, as the template writes it, blocks back to back (a newline
    between them would be content)::

        <seed:tool_call>\n<function=f>\n<parameter=k>v</parameter>\n</function>\n</seed:tool_call>
    """
    return function_grammar(g, tools, parallel, DIALECT, "")


def detects(template: str) -> bool:
    """Seed-OSS: ``<function=`` and ``<parameter=`` inside ``<seed:tool_call>``."""
    return DIALECT.wrap_open in template and "<function=" in template and "<parameter=" in template


FORMAT = ToolCallFormat(
    name="seed-oss",
    description="ByteDance Seed-OSS: <seed:tool_call><function=f><parameter=k>v</parameter>, <seed:think>",
    make_tool_parser=_parser,
    reasoning=ReasoningSpec("<seed:think>", "</seed:think>", prefilled_default=False),
    end_markers=("<seed:eos>",),
    call_grammar=_grammar,
    example=(
        "<seed:tool_call>\n<function=get_weather>\n<parameter=location>Paris</parameter>\n"
        "<parameter=days>3</parameter>\n</function>\n</seed:tool_call>"
    ),
    detect=detects,
    aliases=("seed_oss",),
    call_openers=(DIALECT.wrap_open, DIALECT.invoke_prefix),
)
