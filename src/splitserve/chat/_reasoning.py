"""Reasoning splitters: ``<think>...</think>`` and ``<mm:think>...</mm:think>``.

One splitter runs in front of every tool-call parser. It handles, pinned:

- an opener at the start of the output (leading whitespace allowed): reasoning until the
  closer; markup inside it (a tool call the model thinks about) stays reasoning;
- a pre-filled opener (the generation prompt ended with it, ``prefilled=True``): the output
  starts mid-reasoning; a repeated opener right at the start is dropped (and then the
  reasoning is the model's own, as above). While the reasoning is only assumed open (no
  opener in the output), one of the format's call openers (``call_openers``) holds the
  output from that opener on until it decides: a closer later means the markup was the
  model thinking about a call (all of it up to the closer is reasoning, and only calls
  after the closer are calls); the end of the output (or more than ``UNKNOWN_LIMIT``
  characters without a closer) means the reasoning ended at the opener and the call is a
  call. Such a call streams only once decided, at the end of the output;
- no pre-fill flag (``prefilled=None``, for a format whose prompts do not usually pre-fill):
  unknown. An opener or a closer at the start decides as above; otherwise the text is held
  until it decides: a closer means what came before was pre-filled reasoning (a closer with
  no opener ends implicit reasoning), a call opener, the end of output or more than
  ``UNKNOWN_LIMIT`` characters without either mean it was content. Nothing of an undecided
  output is emitted, so this mode streams late; the gateway always passes the flag;
- a stray leading closer (a non-thinking turn that begins with ``</mm:think>``): dropped;
- output that ends inside reasoning: all of it is reasoning, nothing is lost;
- whitespace right after the opener, right before the closer and right after the closer is
  dropped (templates write ``<think>\\n...\\n</think>\\n\\n``);
- after the closer (or a call that ended assumed reasoning) the splitter is transparent: a
  marker later in the output (inside a tool argument, say) is data for the tool-call
  parser, never reasoning.

A marker split across pieces is held back (at most its length), so however the output is
chunked the pieces are the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ._scan import find_first, hold_len

_START, _UNKNOWN, _REASONING, _AFTER, _CONTENT, _CALL_HELD = range(6)

# How much undecided text an unknown start holds (characters, about 250k tokens): past it
# the output is content. Bounded so that a long reply never grows the buffer without end.
UNKNOWN_LIMIT = 1 << 20


@dataclass(frozen=True)
class ReasoningSpec:
    """The reasoning markers of a format, and whether its prompts usually pre-fill the opener."""

    open: str
    close: str
    prefilled_default: bool = False


class ReasoningSplitter:
    """Splits raw output into ("reasoning" | "content", text) pieces; ``feed``/``finish``.

    ``prefilled``: True, the output starts inside reasoning; False, it does not (reasoning
    only after an opener at the start); None, unknown (see the module rules).
    ``call_openers`` end reasoning that is only assumed open, and decide an unknown start.
    """

    def __init__(self, spec: ReasoningSpec, prefilled: bool | None, call_openers: Sequence[str] = ()) -> None:
        self.spec = spec
        self._openers = tuple(m for m in call_openers if m)
        self._buf = ""
        if prefilled is None:
            self._state = _UNKNOWN
        else:
            self._state = _REASONING if prefilled else _START
        self._assumed = prefilled is True  # reasoning open, but no opener in the output
        self._lead = 0  # 0: may drop an opener, 1: whitespace only, 2: in the text
        self._pending_ws = ""
        # an undecided unknown start: held pieces, their length, where the search resumes
        self._held: list[str] | None = None
        self._held_len = 0
        self._tail = ""
        self._overlap = max(len(m) for m in (spec.close, *self._openers)) - 1
        self._scan_from = 0  # a held call (_CALL_HELD): where the closer search resumes

    def feed(self, text: str) -> list[tuple[str, str]]:
        if self._held is not None:
            if not self._hold(text, eof=False):
                return []
        else:
            self._buf += text
        return self._run(eof=False)

    def finish(self) -> list[tuple[str, str]]:
        if self._held is not None:
            self._hold("", eof=True)
        out = self._run(eof=True)
        if self._state == _REASONING and self._pending_ws:
            self._pending_ws = ""  # cut-off reasoning: its trailing whitespace is dropped
        return out

    # -- an undecided unknown start ----------------------------------------------------
    def _hold(self, text: str, eof: bool) -> bool:
        """Hold ``text``; True once the held output decides (then it is in ``_buf``)."""
        held = self._held
        assert held is not None
        probe = self._tail + text
        i, marker = find_first(probe, (self.spec.close, *self._openers))
        start = self._held_len - len(self._tail)  # where probe starts in the held text
        if marker is None:
            held.append(text)
            self._held_len += len(text)
            self._tail = probe[-self._overlap :] if self._overlap else ""
            too_long = self._held_len - self._overlap > UNKNOWN_LIMIT
            if not (eof or too_long):
                return False
            decided_content = True
        else:
            decided_content = marker != self.spec.close or start + i > UNKNOWN_LIMIT
            held.append(text)
        self._buf = "".join(held)
        self._held = None
        if decided_content:
            self._state = _CONTENT
        else:  # the closer ends the reasoning the prompt opened
            self._state = _REASONING
            self._lead = 2
            self._buf = self._buf.lstrip()
        return True

    def _run(self, eof: bool) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        spec = self.spec
        while True:
            if self._state == _CONTENT:
                if self._buf:
                    out.append(("content", self._buf))
                    self._buf = ""
                return out
            if self._state in (_START, _UNKNOWN):
                lead = self._buf.lstrip()
                if not lead and not eof:
                    return out
                for tag, nxt in ((spec.open, _REASONING), (spec.close, _AFTER)):
                    if lead.startswith(tag):
                        self._buf = lead[len(tag) :]
                        self._state = nxt
                        self._assumed = False
                        break
                else:
                    if not eof and (spec.open.startswith(lead) or spec.close.startswith(lead)):
                        return out
                    if self._state == _START:
                        self._state = _CONTENT
                        continue
                    text, self._buf = self._buf, ""
                    self._held, self._held_len, self._tail = [], 0, ""
                    if self._hold(text, eof):
                        continue
                    return out
                continue
            if self._state == _CALL_HELD:
                if not self._decide_held_call(out, eof):
                    return out
                continue
            if self._state == _AFTER:
                lead = self._buf.lstrip()
                if not lead and not eof:
                    self._buf = ""
                    return out
                self._buf = lead
                self._state = _CONTENT
                continue
            # _REASONING
            if self._lead < 2:  # drop leading whitespace and one repeated opener
                lead = self._buf.lstrip()
                if self._lead == 0:
                    if not eof and spec.open.startswith(lead):
                        self._buf = lead
                        return out
                    self._lead = 1
                    if lead.startswith(spec.open):
                        lead = lead[len(spec.open) :].lstrip()
                        self._assumed = False  # the model opened its reasoning itself
                self._buf = lead
                if not lead and not eof:
                    return out
                self._lead = 2
            markers = (spec.close, *self._openers) if self._assumed else (spec.close,)
            i, marker = find_first(self._buf, markers)
            if marker is not None:
                text = self._buf[:i].rstrip()
                ws = self._pending_ws + self._buf[:i] if not text else self._buf[len(text) : i]
                if text:
                    out.append(("reasoning", self._pending_ws + text))
                self._pending_ws = ""
                if marker == spec.close:
                    self._buf = self._buf[i + len(marker) :]
                    self._state = _AFTER
                else:  # a call in reasoning only assumed open: held until it decides
                    self._pending_ws = ws  # kept if it turns out to be reasoning
                    self._buf = self._buf[i:]
                    self._state = _CALL_HELD
                    self._scan_from = 0
                continue
            keep = 0 if eof else hold_len(self._buf, markers)
            text, self._buf = self._buf[: len(self._buf) - keep], self._buf[len(self._buf) - keep :]
            body = text.rstrip()
            if body:
                out.append(("reasoning", self._pending_ws + body))
                self._pending_ws = text[len(body) :]
            else:
                self._pending_ws += text
            return out

    def _decide_held_call(self, out: list[tuple[str, str]], eof: bool) -> bool:
        """A call opener met in reasoning only assumed open, held in ``_buf`` (which starts
        with it): True once decided (reasoning up to a closer, or a call), False: hold on."""
        close = self.spec.close
        j = self._buf.find(close, self._scan_from)
        if 0 <= j <= UNKNOWN_LIMIT:  # the model was thinking about a call
            out.append(("reasoning", self._pending_ws + self._buf[:j].rstrip()))
            self._pending_ws = ""
            self._buf = self._buf[j + len(close) :]
            self._state = _AFTER
            return True
        # a closer found later would start at or past this point
        self._scan_from = max(0, len(self._buf) - len(close) + 1)
        if eof or j > UNKNOWN_LIMIT or self._scan_from > UNKNOWN_LIMIT:
            self._pending_ws = ""  # the reasoning ended at the opener: the call is a call
            self._state = _CONTENT
            return True
        return False
