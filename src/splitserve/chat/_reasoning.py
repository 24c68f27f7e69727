"""Reasoning splitters: ``<think>...</think>`` and ``<mm:think>...</mm:think>``.

One splitter runs in front of every tool-call parser. It handles, pinned:

- an opener at the start of the output (leading whitespace allowed): reasoning until the closer;
- a pre-filled opener (the generation prompt ended with it, ``prefilled=True``): the output
  starts mid-reasoning; a repeated opener right at the start is dropped;
- a stray leading closer (a non-thinking turn that begins with ``</mm:think>``): dropped;
- output that ends inside reasoning: all of it is reasoning, nothing is lost;
- whitespace right after the opener, right before the closer and right after the closer is
  dropped (templates write ``<think>\\n...\\n</think>\\n\\n``);
- after the closer the splitter is transparent: a marker later in the output (inside a tool
  argument, say) is data for the tool-call parser, never reasoning.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._scan import hold_len

_START, _REASONING, _AFTER, _CONTENT = range(4)


@dataclass(frozen=True)
class ReasoningSpec:
    """The reasoning markers of a format, and whether its prompts usually pre-fill the opener."""

    open: str
    close: str
    prefilled_default: bool = False


class ReasoningSplitter:
    """Splits raw output into ("reasoning" | "content", text) pieces; ``feed``/``finish``."""

    def __init__(self, spec: ReasoningSpec, prefilled: bool) -> None:
        self.spec = spec
        self._buf = ""
        self._state = _REASONING if prefilled else _START
        self._lead = 0  # 0: may drop an opener, 1: whitespace only, 2: in the text
        self._pending_ws = ""

    def feed(self, text: str) -> list[tuple[str, str]]:
        self._buf += text
        return self._run(eof=False)

    def finish(self) -> list[tuple[str, str]]:
        out = self._run(eof=True)
        if self._state == _REASONING and self._pending_ws:
            self._pending_ws = ""  # trailing whitespace of cut-off reasoning: dropped as at a closer
        return out

    def _run(self, eof: bool) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        while True:
            if self._state == _CONTENT:
                if self._buf:
                    out.append(("content", self._buf))
                    self._buf = ""
                return out
            if self._state == _START:
                lead = self._buf.lstrip()
                if not lead and not eof:
                    return out
                for marker, nxt in ((self.spec.open, _REASONING), (self.spec.close, _AFTER)):
                    if lead.startswith(marker):
                        self._buf = lead[len(marker):]
                        self._state = nxt
                        break
                else:
                    if not eof and (self.spec.open.startswith(lead) or
                                    self.spec.close.startswith(lead)):
                        return out
                    self._state = _CONTENT
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
                    if not eof and self.spec.open.startswith(lead):
                        self._buf = lead
                        return out
                    self._lead = 1
                    if lead.startswith(self.spec.open):
                        lead = lead[len(self.spec.open):].lstrip()
                self._buf = lead
                if not lead and not eof:
                    return out
                self._lead = 2
            i = self._buf.find(self.spec.close)
            if i >= 0:
                text = self._buf[:i].rstrip()
                if text:
                    out.append(("reasoning", self._pending_ws + text))
                self._pending_ws = ""
                self._buf = self._buf[i + len(self.spec.close):]
                self._state = _AFTER
                continue
            keep = 0 if eof else hold_len(self._buf, (self.spec.close,))
            text, self._buf = self._buf[:len(self._buf) - keep], self._buf[len(self._buf) - keep:]
            body = text.rstrip()
            if body:
                out.append(("reasoning", self._pending_ws + body))
                self._pending_ws = text[len(body):]
            else:
                self._pending_ws += text
            return out
