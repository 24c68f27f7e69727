"""``deepseek-v3.2`` and ``deepseek-v4``: DeepSeek's DSML tool calls and ``<think>`` reasoning.

V3.2 (the wrapper is ``function_calls``)::

    Let me check.

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="location" string="true">Paris</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

V4 and V4-Flash write the same with the wrapper ``tool_calls`` (and one blank line inside an
invoke without parameters). The bars are U+FF5C (fullwidth). ``string="true"``: the value is
a string, written raw; ``string="false"``: the value is JSON. Reasoning is ``<think>``: with
``thinking`` (or ``enable_thinking``) on, the generation prompt ends with ``<think>`` (pre-filled);
off, with ``<think></think>`` (V3.2) or ``</think>`` (V4). Rules, pinned:

- both wrappers are read by both formats (the grammar and the example write the format's own);
- a ``string="true"`` value is a JSON string of the raw text: kept exactly wherever the
  schema allows a string (or there is no schema); under a schema that allows no string it is
  coerced as text where that is lossless (``42`` under integer is 42), else kept, with a
  warning;
- a ``string="false"`` value is parsed as JSON and coerced by the schema; text that is not
  JSON is typed by the schema as text (as a value without the attribute is);
- a parameter's closer only ends the value when what follows it (after whitespace) is the
  next parameter, the invoke's closer, a wrapper's closer, another invoke or the end of
  output; otherwise it is data;
- an invoke outside a wrapper is accepted as if wrapped; the implied wrapper lasts while
  whitespace, further invokes or a wrapper's closer follow (that closer is its own and is
  dropped); an invoke left open when the wrapper closes or the next invoke starts is closed
  there; a quoted attribute value may hold ``>``; a wrapper with no invoke is content
  (with a warning), an empty one is dropped; the end of output inside an invoke drops it.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ._format import IdFactory, ToolCallFormat, ToolParser
from ._grammar import CallGrammar, GrammarBuilder, GrammarTool
from ._reasoning import ReasoningSpec
from ._scan import quoted_end
from ._schema import Schema, ToolSet, allowed_types, coerce_text, coerce_value, loads_json
from ._xml_calls import PARAM, TaggedCallParser, Tags

DSML = "｜DSML｜"
OPEN, CLOSE = "<" + DSML, "</" + DSML
WRAPPERS = ("function_calls", "tool_calls")
WRAP_OPENS = tuple(f"{OPEN}{w}>" for w in WRAPPERS)
WRAP_CLOSES = tuple(f"{CLOSE}{w}>" for w in WRAPPERS)
INVOKE_PREFIX = OPEN + "invoke"
INVOKE_CLOSE = CLOSE + "invoke>"
PARAM_PREFIX = OPEN + "parameter"
PARAM_CLOSE = CLOSE + "parameter>"
_TAGS = Tags.of(WRAP_OPENS, WRAP_CLOSES, INVOKE_PREFIX, INVOKE_CLOSE, PARAM_PREFIX, PARAM_CLOSE)
_HEADER_LIMIT = 512
_ATTR = re.compile(r"""\s+([A-Za-z_][\w.-]*)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""")


def _attributes(text: str) -> dict[str, str] | None:
    """The attributes of a tag's inside (after its name, before ``>``), or None if malformed."""
    out: dict[str, str] = {}
    pos = 0
    while True:
        m = _ATTR.match(text, pos)
        if m is None:
            break
        value = next(g for g in m.groups()[1:] if g is not None)
        out.setdefault(m.group(1), value)
        pos = m.end()
    return out if not text[pos:].strip() else None


class DsmlParser(TaggedCallParser):
    """The incremental parser for DSML output (after reasoning is split off)."""

    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        super().__init__(tools, id_factory, _TAGS)
        self._typed: str | None = None  # the open parameter's string attribute

    # -- headers ---------------------------------------------------------------------------
    def _header(self, prefix: str, start: int = 0) -> tuple[str, int, dict[str, str]]:
        """Read a tag header at ``start`` in the buffer: ("need"|"no"|"ok", its length, its
        attributes)."""
        text = self.buf.text
        inside = start + len(prefix)
        after = text[inside : inside + 1]
        if after and not after.isspace():  # <｜DSML｜invokes...: not this tag
            return "no", 0, {}
        end = quoted_end(text, inside, min(len(text), start + _HEADER_LIMIT))  # bounded
        if end < 0:
            if not self.buf.eof and len(text) - start < _HEADER_LIMIT:
                return "need", 0, {}
            return "no", 0, {}
        attrs = _attributes(text[inside:end])
        if attrs is None or not attrs.get("name", "").strip():
            return "no", 0, {}
        return "ok", end + 1 - start, attrs

    def _invoke_header(self, start: int) -> tuple[str, int, str]:
        status, length, attrs = self._header(INVOKE_PREFIX, start)
        return status, length, attrs.get("name", "").strip()

    def _param_header(self) -> tuple[str, int, dict[str, str]]:
        return self._header(PARAM_PREFIX)

    def _coerce(self, raw: Any, schema: Schema | None) -> Any:
        typed, text = raw
        if typed == "true":
            return coerce_value(text, schema)
        if typed == "false":
            try:
                value = loads_json(text.strip(), strict=False)
            except ValueError:
                return coerce_text(text, schema)
            return coerce_value(value, schema)
        return coerce_text(text, schema)

    # -- values ----------------------------------------------------------------------------
    def _open_param(self, attrs: dict[str, str]) -> None:
        assert self._call is not None
        typed = attrs.get("string")
        self._typed = typed.strip().lower() if typed is not None else None
        mode = self._call.open(attrs["name"].strip(), lazy=True)
        if mode == "stream":
            if self._typed == "false":
                self._call.demote()  # JSON under a string schema: read whole
            else:
                self._call.begin_stream()
        self._value = []
        self._state = PARAM

    def _param_raw(self) -> tuple[str | None, str]:
        return self._typed, "".join(self._value)


def _parser(tools: ToolSet, id_factory: IdFactory) -> ToolParser:
    return DsmlParser(tools, id_factory)


def _valid_key(key: str) -> bool:
    return bool(key) and key == key.strip() and not set(key) & set('"<>') and DSML not in key


def _param(g: GrammarBuilder, tool: GrammarTool, key: str, schema: Any) -> str:
    """One parameter: raw text under ``string="true"`` where the schema allows a string,
    JSON under ``string="false"`` where it allows anything else (both where it allows both)."""
    head = f'{PARAM_PREFIX} name="{key}" string='
    types = allowed_types(Schema(schema, tool.parameters))
    hint = f"{tool.name}-{key}"
    forms = []
    if types is None or "string" in types:
        raw = g.xml_value(schema, DSML, DSML, hint) if types == {"string"} else g.text(DSML)
        forms.append(g.lit(head + '"true">') + " " + raw)
    if types is None or types - {"string"}:
        forms.append(g.lit(head + '"false">') + " " + g.json_value(schema, DSML, hint))
    return g.rule(f"{hint}-param", g.choice(forms) + " " + g.lit(PARAM_CLOSE + "\n"))


def _make_grammar(wrapper: str, empty_line: bool) -> CallGrammar:
    def grammar(g: GrammarBuilder, tools: list[GrammarTool], parallel: bool) -> str:
        r"""Every call's invoke in one wrapper, as the template writes it::

            <｜DSML｜W>\n<｜DSML｜invoke name="f">\n
            <｜DSML｜parameter name="k" string="true">v</｜DSML｜parameter>\n ...
            </｜DSML｜invoke>\n</｜DSML｜W>

        Raw text and JSON strings hold no ``｜DSML｜``. V4 writes an empty line in an invoke
        without parameters (``empty_line``).
        """
        alts = []
        for t in tools:
            parts, required_any = [], False
            for key, schema, required in t.properties():
                if _valid_key(key):
                    one = _param(g, t, key, schema)
                    parts.append(one if required else f"{one}?")
                    required_any |= required
            if empty_line and not parts:
                parts = [g.lit("\n")]
            elif empty_line and not required_any:
                parts.append(g.lit("\n") + "?")
            opener = g.lit(f'{INVOKE_PREFIX} name="{t.name}">\n')
            body = " ".join([opener, *parts, g.lit(INVOKE_CLOSE + "\n")])
            alts.append(g.rule(f"{t.name}-invoke", body))
        calls = g.calls(g.choice(alts), parallel)
        return " ".join([g.lit(OPEN + wrapper + ">\n"), calls, g.lit(CLOSE + wrapper + ">")])

    return grammar


def _writes(template: str, wrapper: str) -> bool:
    return (
        DSML in template and f"{wrapper}>" in template and "invoke name=" in template and "parameter name=" in template
    )


def detects_v32(template: str) -> bool:
    """DeepSeek V3.2: the DSML token with the ``function_calls`` wrapper."""
    return _writes(template, "function_calls")


def detects_v4(template: str) -> bool:
    """DeepSeek V4 / V4-Flash: the DSML token with the ``tool_calls`` wrapper."""
    return _writes(template, "tool_calls") and not _writes(template, "function_calls")


def _example(wrapper: str) -> str:
    return (
        f'{OPEN}{wrapper}>\n{INVOKE_PREFIX} name="get_weather">\n'
        f'{PARAM_PREFIX} name="location" string="true">Paris{PARAM_CLOSE}\n'
        f'{PARAM_PREFIX} name="days" string="false">3{PARAM_CLOSE}\n'
        f"{INVOKE_CLOSE}\n{CLOSE}{wrapper}>"
    )


_THINK = ReasoningSpec("<think>", "</think>", prefilled_default=False)
_OPENERS = (*WRAP_OPENS, INVOKE_PREFIX + " name=")

V32 = ToolCallFormat(
    name="deepseek-v3.2",
    description="DeepSeek V3.2: <｜DSML｜function_calls><｜DSML｜invoke name=...>"
    '<｜DSML｜parameter name=... string="true|false">, <think>',
    make_tool_parser=_parser,
    reasoning=_THINK,
    end_markers=("<｜end▁of▁sentence｜>",),
    example=_example("function_calls"),
    call_grammar=_make_grammar("function_calls", empty_line=False),
    detect=detects_v32,
    aliases=("deepseek_v32", "deepseek-v32"),
    call_openers=_OPENERS,
)

# V3.2 with V4's ``tool_calls`` wrapper
V4 = replace(
    V32,
    name="deepseek-v4",
    description="DeepSeek V4 / V4-Flash: <｜DSML｜tool_calls><｜DSML｜invoke name=...>"
    '<｜DSML｜parameter name=... string="true|false">, <think>',
    example=_example("tool_calls"),
    call_grammar=_make_grammar("tool_calls", empty_line=True),
    detect=detects_v4,
    aliases=("deepseek_v4",),
)
