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
from typing import Any

from ._format import IdFactory, ToolCallFormat, ToolParser
from ._grammar import CallGrammar, GrammarBuilder, GrammarTool
from ._reasoning import ReasoningSpec
from ._schema import Schema, ToolSet, allowed_types, coerce_text, coerce_value, loads_json
from ._xml_flat import INVOKE, PARAM, TEXT, WRAP, WrappedCallParser

DSML = "｜DSML｜"
OPEN, CLOSE = "<" + DSML, "</" + DSML
WRAPPERS = ("function_calls", "tool_calls")
WRAP_OPENS = tuple(f"{OPEN}{w}>" for w in WRAPPERS)
WRAP_CLOSES = tuple(f"{CLOSE}{w}>" for w in WRAPPERS)
INVOKE_PREFIX = OPEN + "invoke"
INVOKE_CLOSE = CLOSE + "invoke>"
PARAM_PREFIX = OPEN + "parameter"
PARAM_CLOSE = CLOSE + "parameter>"
_FOLLOWS = (PARAM_PREFIX, INVOKE_CLOSE, *WRAP_CLOSES, INVOKE_PREFIX)
_HEADER_LIMIT = 512
_QUOTE_OR_GT = re.compile(r"[\"'>]")
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


def _tag_end(text: str, start: int, limit: int) -> int:
    """Index of the first ``>`` outside quotes in ``text[start:limit]``; -1 if none yet."""
    quote = ""
    for m in _QUOTE_OR_GT.finditer(text, start, limit):
        ch = m.group()
        if quote:
            if ch == quote:
                quote = ""
        elif ch == ">":
            return m.start()
        else:
            quote = ch
    return -1


class DsmlParser(WrappedCallParser):
    """The incremental parser for DSML output (after reasoning is split off)."""

    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        super().__init__(tools, id_factory)
        self._value: list[str] = []
        self._typed: str | None = None  # the open parameter's string attribute

    # -- headers ---------------------------------------------------------------------------
    def _header(self, prefix: str, start: int = 0) -> tuple[str, int, dict[str, str]]:
        """Read a tag header at ``start`` in the buffer: ("need"|"no"|"ok", its end, its
        attributes)."""
        text = self.buf.text
        inside = start + len(prefix)
        after = text[inside:inside + 1]
        if after and not after.isspace():  # <｜DSML｜invokes...: not this tag
            return "no", 0, {}
        end = _tag_end(text, inside, min(len(text), start + _HEADER_LIMIT))  # bounded
        if end < 0:
            if not self.buf.eof and len(text) - start < _HEADER_LIMIT:
                return "need", 0, {}
            return "no", 0, {}
        attrs = _attributes(text[inside:end])
        if attrs is None or not attrs.get("name", "").strip():
            return "no", 0, {}
        return "ok", end + 1, attrs

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

    # -- the state machine -----------------------------------------------------------------
    def _step(self) -> bool:
        if self._state == TEXT:
            return self._step_text()
        if self._state == WRAP:
            return self._step_implied() if self._implicit else self._step_wrap()
        if self._state == INVOKE:
            return self._step_invoke()
        return self._step_param()

    def _step_text(self) -> bool:
        before, marker = self.buf.scan((*WRAP_OPENS, INVOKE_PREFIX))
        self.content(before)
        if marker is None:
            return False
        if marker != INVOKE_PREFIX:
            self.buf.take(len(marker))
            self._open_wrap(marker, implicit=False)
            return True
        status, length, attrs = self._header(INVOKE_PREFIX)
        if status == "need":
            return False
        if status == "no":
            self.content(self.buf.take(len(marker)))
            return True
        self._open_wrap("", implicit=True)
        self._start(attrs["name"].strip(), self.buf.take(length))
        return True

    def _step_wrap(self) -> bool:
        before, marker = self.buf.scan((INVOKE_PREFIX, *WRAP_CLOSES))
        self._wrap_raw.append(before)
        self._garbage.append(before)
        if marker is None:
            return False
        if marker != INVOKE_PREFIX:
            self.buf.take(len(marker))
            self._close_wrap(marker)
            return True
        status, length, attrs = self._header(INVOKE_PREFIX)
        if status == "need":
            return False
        if status == "no":
            junk = self.buf.take(len(marker))
            self._wrap_raw.append(junk)
            self._garbage.append(junk)
            return True
        self._start(attrs["name"].strip(), self.buf.take(length))
        return True

    def _step_implied(self) -> bool:
        """After a call of an implied wrapper: whitespace, then another invoke or a wrapper's
        closer continue the block; anything else ends it (and is content)."""
        text = self.buf.text
        rest = text.lstrip()
        ws = len(text) - len(rest)
        closer = next((c for c in WRAP_CLOSES if rest.startswith(c)), None)
        if closer is not None:
            self._close_wrap(self.buf.take(ws + len(closer)))
            return True
        if rest.startswith(INVOKE_PREFIX):
            status, end, attrs = self._header(INVOKE_PREFIX, ws)
            if status == "need":
                return False
            if status == "ok":
                self._wrap_raw.append(self.buf.take(ws))
                self._start(attrs["name"].strip(), self.buf.take(end - ws))
                return True
        elif not self.buf.eof and any(m.startswith(rest) for m in (*WRAP_CLOSES, INVOKE_PREFIX)):
            return False  # only whitespace, or the start of a marker, so far
        self._close_wrap("")  # the whitespace and what follows are content
        return True

    def _step_invoke(self) -> bool:
        before, marker = self.buf.scan((PARAM_PREFIX, INVOKE_CLOSE, *WRAP_CLOSES,
                                        INVOKE_PREFIX))
        self._call_raw.append(before)
        self._garbage.append(before)  # whitespace too: chunking must not matter
        if marker is None:
            return False
        if marker == PARAM_PREFIX:
            status, length, attrs = self._header(PARAM_PREFIX)
            if status == "need":
                return False
            if status == "no":
                junk = self.buf.take(len(marker))
                self._call_raw.append(junk)
                self._garbage.append(junk)
                return True
            self._call_raw.append(self.buf.take(length))
            self._open_param(attrs["name"].strip(), attrs.get("string"))
            return True
        if marker == INVOKE_CLOSE:
            self.buf.take(len(marker))
        self._end_call()  # its closer, a wrapper's closer or a new invoke ends the invoke
        return True

    def _open_param(self, key: str, typed: str | None) -> None:
        assert self._call is not None
        self._typed = typed.strip().lower() if typed is not None else None
        mode = self._call.open(key, lazy=True)
        if mode == "stream":
            if self._typed == "false":
                self._call.demote()  # JSON under a string schema: read whole
            else:
                self._call.begin_stream()
        self._value = []
        self._state = PARAM

    def _piece(self, text: str) -> None:
        if not text:
            return
        assert self._call is not None
        self._call_raw.append(text)
        if self._call.mode == "stream":
            self._call.stream(text)
        else:
            self._value.append(text)

    def _step_param(self) -> bool:
        before, marker = self.buf.scan((PARAM_CLOSE,))
        self._piece(before)
        if marker is None:
            return False
        rest = self.buf.text[len(marker):].lstrip()
        if not rest:
            if not self.buf.eof:
                return False
        elif not rest.startswith(_FOLLOWS):
            if not self.buf.eof and any(f.startswith(rest) for f in _FOLLOWS):
                return False
            self._piece(self.buf.take(len(marker)))  # a closer inside the value: data
            return True
        self._call_raw.append(self.buf.take(len(marker)))
        assert self._call is not None
        self._call.close((self._typed, "".join(self._value)))
        self._value = []
        self._state = INVOKE
        return True


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
    return (DSML in template and f"{wrapper}>" in template and "invoke name=" in template
            and "parameter name=" in template)


def detects_v32(template: str) -> bool:
    """DeepSeek V3.2: the DSML token with the ``function_calls`` wrapper."""
    return _writes(template, "function_calls")


def detects_v4(template: str) -> bool:
    """DeepSeek V4 / V4-Flash: the DSML token with the ``tool_calls`` wrapper."""
    return _writes(template, "tool_calls") and not _writes(template, "function_calls")


def _example(wrapper: str) -> str:
    return (f'{OPEN}{wrapper}>\n{INVOKE_PREFIX} name="get_weather">\n'
            f'{PARAM_PREFIX} name="location" string="true">Paris{PARAM_CLOSE}\n'
            f'{PARAM_PREFIX} name="days" string="false">3{PARAM_CLOSE}\n'
            f"{INVOKE_CLOSE}\n{CLOSE}{wrapper}>")


_THINK = ReasoningSpec("<think>", "</think>", prefilled_default=False)
_OPENERS = (*WRAP_OPENS, INVOKE_PREFIX + " name=")

V32 = ToolCallFormat(
    name="deepseek-v3.2",
    description="DeepSeek V3.2: <｜DSML｜function_calls><｜DSML｜invoke name=...>"
                "<｜DSML｜parameter name=... string=\"true|false\">, <think>",
    make_tool_parser=_parser,
    reasoning=_THINK,
    end_markers=("<｜end▁of▁sentence｜>",),
    example=_example("function_calls"),
    call_grammar=_make_grammar("function_calls", empty_line=False),
    detect=detects_v32,
    aliases=("deepseek_v32", "deepseek-v32"),
    call_openers=_OPENERS,
)

V4 = ToolCallFormat(
    name="deepseek-v4",
    description="DeepSeek V4 / V4-Flash: <｜DSML｜tool_calls><｜DSML｜invoke name=...>"
                "<｜DSML｜parameter name=... string=\"true|false\">, <think>",
    make_tool_parser=_parser,
    reasoning=_THINK,
    end_markers=("<｜end▁of▁sentence｜>",),
    example=_example("tool_calls"),
    call_grammar=_make_grammar("tool_calls", empty_line=True),
    detect=detects_v4,
    aliases=("deepseek_v4",),
    call_openers=_OPENERS,
)
