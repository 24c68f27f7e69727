"""``gpt-oss``: OpenAI gpt-oss's harmony messages: channels, recipients, reasoning.

The generation prompt ends with ``<|start|>assistant``, so the output begins with the rest
of a message header; every further message starts with ``<|start|>assistant``::

    <|channel|>analysis<|message|>The user wants the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location": "Paris"}<|call|>

    <|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>4.<|return|>

A header holds the role (after ``<|start|>``), ``<|channel|>`` and the channel, a
recipient ``to=...`` (before the channel, as the template writes it, or after it, as the
model usually does) and a content type (``json``, ``<|constrain|>json``). The analysis
channel is reasoning: this parser emits the reasoning itself (the format has no
:class:`ReasoningSpec`; analysis messages may come between other messages). Rules, pinned:

- a message to ``functions.NAME`` is a call to NAME (dots in NAME kept); its body is the
  JSON arguments object, which ends the call (``<|call|>`` is an end-of-generation token the
  engine may not return); the call starts when the body opens with ``{`` and its string
  arguments stream (see _json_args);
- the final channel, and commentary without a recipient (a preamble), are content; a
  message to another recipient (a built-in tool: ``python``, ``browser.search``) is dropped
  with a warning; ``to=assistant`` is no recipient;
- output that does not start with a header is content (a model that ignores harmony);
  whitespace between messages and around reasoning is dropped, content is kept as written;
  a message's text after an earlier one of its kind (reasoning, content) starts a new
  paragraph (``\\n\\n``);
- a header that is not one (another role, over 512 characters, a marker inside) is content,
  with a warning; a body that is not a JSON object: the message is content, with a warning;
  the end of output in a header or in a call's arguments drops it, with a warning.
"""

from __future__ import annotations

from ._events import ReasoningDelta
from ._format import IdFactory, ToolCallFormat, ToolParser
from ._grammar import GrammarBuilder, GrammarTool
from ._json_args import JsonArgsStreamer, start_json_call
from ._schema import ToolSet

START = "<|start|>"
CHANNEL = "<|channel|>"
MESSAGE = "<|message|>"
CONSTRAIN = "<|constrain|>"
END = "<|end|>"
CALL = "<|call|>"
RETURN = "<|return|>"
_TERMINATORS = (END, CALL, RETURN)
_STOPS = (*_TERMINATORS, START, CHANNEL)  # what ends a message body
_HEADER_LIMIT = 512
_BEGIN, _HEADER, _BODY, _PRE, _ARGS, _AFTER, _SKIP = range(7)


def parse_header(header: str, role_expected: bool) -> tuple[str, str | None, str | None] | None:
    """A header's (channel, recipient, role) parts, or None when it is not a header.

    ``header`` is the text before ``<|message|>`` (after ``<|start|>`` when
    ``role_expected``). The last channel wins (``<|channel|>commentary to=assistant
    <|channel|>analysis`` is analysis); ``to=assistant`` is no recipient.
    """
    role_part, *channel_parts = header.replace(CONSTRAIN, " ").split(CHANNEL)
    recipient: str | None = None
    words = role_part.split()
    role = None
    if role_expected and words and not words[0].startswith("to="):
        role = words.pop(0)
        if role != "assistant":
            return None
    for word in words:
        if not word.startswith("to="):
            return None
        recipient = word[3:]
    channel = ""
    for part in channel_parts:
        words = part.split()
        if not words:
            continue
        channel = words[0]
        for word in words[1:]:
            if word.startswith("to="):
                recipient = word[3:]
    if recipient in ("assistant", ""):
        recipient = None
    return channel, recipient, role


class GptOssParser(ToolParser):
    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        super().__init__(tools, id_factory)
        self._state = _BEGIN
        self._first = True  # nothing read yet: the generation prompt's header continues
        self._role = False  # the header began with <|start|>: a role comes first
        self._head: list[str] = []
        self._raw: list[str] = []
        self._reasoning = False
        self._fresh = False  # a new message's body: separated from the last of its kind
        self._said = {False: False, True: False}  # content / reasoning written so far
        self._lead = True
        self._pending = ""
        self._name = ""
        self._recipient = ""
        self._index = -1
        self._streamer: JsonArgsStreamer | None = None
        self._tail: list[str] = []

    def _say(self, text: str) -> None:
        """Text of the open body; a message after another of its kind starts on a new
        paragraph (two analysis messages are two paragraphs of reasoning)."""
        if not text:
            return
        if self._fresh and self._said[self._reasoning]:
            text = "\n\n" + text
        self._fresh = False
        self._said[self._reasoning] = True
        if self._reasoning:
            self._events.append(ReasoningDelta(text))
        else:
            self.content(text)

    def _raw_content(self, text: str) -> None:
        """Raw text of what was not a message, as content; the body that follows goes on."""
        self._reasoning = False
        self._say(text)
        self._open_body(reasoning=False)
        self._fresh = False

    # -- the state machine -------------------------------------------------------------
    def _step(self) -> bool:
        state = self._state
        if state == _BEGIN:
            return self._step_begin()
        if state == _HEADER:
            return self._step_header()
        if state == _BODY:
            return self._step_body()
        if state == _PRE:
            return self._step_pre()
        if state == _ARGS:
            return self._step_args()
        return self._step_after() if state == _AFTER else self._step_skip()

    def _step_begin(self) -> bool:
        buf = self.buf
        lead = buf.text.lstrip()
        first = self._first
        if not lead:
            if not buf.eof:
                return False
            if first:
                self._reasoning = False
                self._say(buf.text)
            buf.text = ""
            return False
        openers = (START, CHANNEL, "to=") if first else (START, CHANNEL)
        for opener in openers:
            if lead.startswith(opener):
                self._first = False
                self._role = opener == START
                buf.text = lead[len(START) :] if self._role else lead
                self._raw = [START] if self._role else []
                self._head = []
                self._state = _HEADER
                return True
        if not buf.eof and any(o.startswith(lead) for o in openers):
            return False
        self._first = False
        if not first:
            buf.text = lead  # whitespace between messages is dropped
        self._open_body(reasoning=False)
        return True

    def _step_header(self) -> bool:
        buf = self.buf
        before, marker = buf.scan((MESSAGE, START, *_TERMINATORS))
        self._head.append(before)
        head = "".join(self._head)
        if len(head) > _HEADER_LIMIT:  # cut at the limit, so that chunking does not matter
            buf.text = head[_HEADER_LIMIT:] + buf.text
            self._raw.append(head[:_HEADER_LIMIT])
            self._not_a_header("a message header longer than 512 characters")
            return True
        if marker is None:
            return False
        self._raw.append(head)
        if marker != MESSAGE:
            self._not_a_header("a message header without <|message|>")
            return True
        parsed = parse_header(head, self._role)
        if parsed is None:
            self._raw.append(buf.take(len(MESSAGE)))
            self._not_a_header("a message header that is not the assistant's")
            return True
        self._raw.append(buf.take(len(MESSAGE)))
        channel, recipient, _ = parsed
        if recipient is None:
            self._open_body(reasoning=channel == "analysis")
        elif recipient.startswith("functions.") and recipient[len("functions.") :]:
            self._name = recipient[len("functions.") :]
            self._state = _PRE
        else:
            self._recipient = recipient
            self._state = _SKIP
        return True

    def _not_a_header(self, why: str) -> None:
        self._as_content(f"{why}; its text is kept as content")

    def _as_content(self, message: str) -> None:
        """What was read since the header began is content after all; ``message`` says why."""
        rawtext = "".join(self._raw)
        self.warn(message, rawtext)
        self._raw = []
        self._raw_content(rawtext)

    def _open_body(self, reasoning: bool) -> None:
        self._reasoning = reasoning
        self._fresh = True
        self._lead = True
        self._pending = ""
        self._state = _BODY

    def _step_body(self) -> bool:
        buf = self.buf
        before, marker = buf.scan(_STOPS)
        if not self._reasoning:
            self._say(before)
        else:
            if self._lead:
                before = before.lstrip()
                self._lead = not before
            text = self._pending + before
            body = text.rstrip()
            self._pending = text[len(body) :] if marker is None else ""
            self._say(body)
        if marker is None:
            return False
        if marker in _TERMINATORS:
            buf.take(len(marker))
        self._state = _BEGIN
        return True

    def _step_pre(self) -> bool:  # a call's body, before its first character
        buf = self.buf
        self._raw.append(buf.skip_ws())
        if not buf.text:
            return False
        if buf.text[0] != "{":
            self._as_content(f"a message to functions.{self._name} is not a JSON object; its text is kept as content")
            return True
        self._index, self._streamer = start_json_call(self, self._name)
        self._state = _ARGS
        return True

    def _step_args(self) -> bool:
        assert self._streamer is not None
        outcome = self._streamer.read(self.buf, _STOPS, self._raw)
        if outcome == "ok":
            self.end_call(self._index)
            self._raw, self._tail = [], []
            self._state = _AFTER
        elif outcome == "failed":
            self._as_content(
                f"tool call {self._index}: its arguments are not a JSON object; dropped, the text is kept as content"
            )
        return bool(outcome)

    def _step_after(self) -> bool:  # after a call's arguments: up to the message's end
        buf = self.buf
        before, marker = buf.scan(_STOPS)
        self._tail.append(before)  # whitespace too: chunking must not matter
        if marker is None:
            return False
        self._ignore_tail()
        if marker in _TERMINATORS:
            buf.take(len(marker))
        self._state = _BEGIN
        return True

    def _ignore_tail(self) -> None:
        tail = "".join(self._tail)
        if tail.strip():
            self.warn(f"tool call {self._index}: text after its arguments was ignored", tail)
        self._tail = []

    def _step_skip(self) -> bool:  # a message to a built-in tool
        buf = self.buf
        before, marker = buf.scan(_STOPS)
        self._raw.append(before)
        if marker is None:
            return False
        if marker in _TERMINATORS:
            self._raw.append(buf.take(len(marker)))
        self._drop_builtin()
        self._state = _BEGIN
        return True

    def _drop_builtin(self) -> None:
        self.warn(
            f"a message to {self._recipient!r} (not one of the request's functions) was dropped", "".join(self._raw)
        )
        self._raw = []

    def _at_eof(self) -> None:
        if self._state == _HEADER:
            self._raw.append("".join(self._head))
            if not self._role and CHANNEL not in self._raw[-1]:  # "to=..." prose, not a header
                self._not_a_header("text that starts like a message header")
            else:
                self.warn("a message header was cut off by the end of the output; dropped", "".join(self._raw))
        elif self._state == _PRE:
            self.warn(
                f"a call to {self._name} was cut off by the end of the output; dropped (earlier calls kept)",
                "".join(self._raw),
            )
        elif self._state == _ARGS:
            self.drop_call(self._index, "".join(self._raw))
        elif self._state == _AFTER:
            self._ignore_tail()
        elif self._state == _SKIP:
            self._drop_builtin()
        self._raw = []
        self._state = _BEGIN


def _parser(tools: ToolSet, id_factory: IdFactory) -> ToolParser:
    return GptOssParser(tools, id_factory)


_MARK = "<|"  # every harmony token starts so: kept out of reasoning and argument strings


def _grammar(g: GrammarBuilder, tools: list[GrammarTool], parallel: bool) -> str:
    """Optional analysis, then the calls as the model writes them (recipient after the
    channel); parallel calls are separate messages. The closing ``<|call|>`` is optional:
    it is an end-of-generation token, so the engine may stop on it rather than match it::

        <|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>commentary
        to=functions.f <|constrain|>json<|message|>{...}<|call|>
    """
    analysis = g.rule(
        "analysis", f"{g.lit(CHANNEL + 'analysis' + MESSAGE)} {g.text(_MARK)} {g.lit(END + START + 'assistant')}"
    )
    alts = []
    for t in tools:
        head = g.lit(f"{CHANNEL}commentary to=functions.{t.name} {CONSTRAIN}json{MESSAGE}")
        alts.append(g.rule(f"{t.name}-call", f"{head} {g.json_args(t, forbid=_MARK)}"))
    calls = g.calls(g.choice(alts), parallel, CALL + START + "assistant")
    return f"{analysis}? {calls} {g.lit(CALL)}?"


def detects(template: str) -> bool:
    """gpt-oss's harmony template: channels and ``to=functions.`` recipients (not LLM-jp's
    harmony dialect, whose tokenizer writes a space after every token)."""
    return CHANNEL in template and "to=" in template and CALL in template and "llm-jp-harmony" not in template


FORMAT = ToolCallFormat(
    name="gpt-oss",
    description="OpenAI gpt-oss (harmony): <|channel|>commentary to=functions.name "
    "<|constrain|>json<|message|>{json}<|call|>; the analysis channel is reasoning",
    make_tool_parser=_parser,
    end_markers=(RETURN, CALL),
    call_grammar=_grammar,
    example=(f'{CHANNEL}commentary to=functions.get_weather {CONSTRAIN}json{MESSAGE}{{"location": "Paris"}}{CALL}'),
    detect=detects,
    aliases=("harmony", "openai"),
    call_openers=(" to=functions.",),
)
