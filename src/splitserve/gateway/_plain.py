"""The ``plain`` format: for a chat template that writes no tool calls the chat layer knows.

An adapter in the gateway's own area (the chat layer registers only real model formats):
all output is content; no tool calls, no reasoning split.
"""

from __future__ import annotations

from ..chat import IdFactory, ToolCallFormat, ToolParser, ToolSet


class _PlainParser(ToolParser):
    def _step(self) -> bool:
        if self.buf.text:
            self.content(self.buf.text)
            self.buf.text = ""
        return False

    def _at_eof(self) -> None:
        return None


def _make(tools: ToolSet, id_factory: IdFactory) -> ToolParser:
    return _PlainParser(tools, id_factory)


PLAIN = ToolCallFormat(name="plain", description="content only: no tool calls, no reasoning", make_tool_parser=_make)

__all__ = ["PLAIN"]
