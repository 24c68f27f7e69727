"""Incremental scanning helpers shared by the parsers (no I/O, no state beyond a buffer).

The parsers keep their unread text short: whatever is certainly not the start of a marker
is consumed at once, and only a suffix that could still grow into a marker is held back.
Each character is therefore looked at a bounded number of times, and the total cost of
parsing stays linear in the output length however the output is chunked.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_IN_STRING = re.compile(r'["\\\\]')
_OUTSIDE = re.compile(r'["{}\[\]]')
_QUOTE_OR_GT = re.compile(r"[\"'>]")


def hold_len(buf: str, markers: Sequence[str]) -> int:
    """Length of the longest suffix of ``buf`` that is a proper prefix of one of ``markers``."""
    best = 0
    n = len(buf)
    for marker in markers:
        first = marker[0]
        i = buf.find(first, max(0, n - len(marker) + 1))
        while i != -1 and n - i > best:
            if marker.startswith(buf[i:]):
                best = n - i  # the leftmost candidate is the longest
                break
            i = buf.find(first, i + 1)
    return best


def find_first(buf: str, markers: Sequence[str], start: int = 0) -> tuple[int, str | None]:
    """Position and identity of the earliest complete marker in ``buf`` (longest on a tie)."""
    best, found = -1, None
    for marker in markers:
        i = buf.find(marker, start)
        if i >= 0 and (best < 0 or i < best or (i == best and len(marker) > len(found or ""))):
            best, found = i, marker
    return best, found


def quoted_end(text: str, start: int, limit: int) -> int:
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


class TextBuffer:
    """Unread text plus the end-of-output flag; the parsers' only state about input."""

    __slots__ = ("eof", "text")

    def __init__(self) -> None:
        self.text = ""
        self.eof = False

    def scan(self, markers: Sequence[str]) -> tuple[str, str | None]:
        """Consume text up to the earliest marker.

        Returns ``(before, marker)`` with the marker left unread, or, when no marker is
        complete yet, ``(safe_text, None)`` where ``safe_text`` cannot be part of a marker
        (at end of output: all remaining text).
        """
        i, marker = find_first(self.text, markers)
        if marker is not None:
            before, self.text = self.text[:i], self.text[i:]
            return before, marker
        keep = 0 if self.eof else hold_len(self.text, markers)
        cut = len(self.text) - keep
        before, self.text = self.text[:cut], self.text[cut:]
        return before, None

    def skip_ws(self) -> str:
        """Consume leading whitespace and return it."""
        rest = self.text.lstrip()
        ws = self.text[: len(self.text) - len(rest)]
        self.text = rest
        return ws

    def take(self, n: int) -> str:
        head, self.text = self.text[:n], self.text[n:]
        return head


class JsonScanner:
    """Finds where one JSON value ends, fed incrementally (strings, escapes, nesting)."""

    __slots__ = ("depth", "done", "escape", "in_string", "started")

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.escape = False
        self.started = False
        self.done = False

    def feed(self, text: str) -> int:
        """Read ``text``; return how many characters belong to the value (all, if not done)."""
        pos, end = 0, len(text)
        while pos < end:
            if self.done:
                return pos
            if self.in_string:
                if self.escape:
                    self.escape = False
                    pos += 1
                    continue
                m = _IN_STRING.search(text, pos)
                if m is None:
                    return end
                pos = m.start()
                if text[pos] == "\\":
                    self.escape = True
                else:
                    self.in_string = False
                    if self.depth == 0:
                        self.done = True
                pos += 1
                continue
            m = _OUTSIDE.search(text, pos)
            if m is None:
                if text[pos:].strip():
                    self.started = True
                return end
            if text[pos : m.start()].strip():
                self.started = True
            pos = m.start()
            ch = text[pos]
            if ch == '"':
                self.in_string = True
                self.started = True
            elif ch in "{[":
                self.depth += 1
                self.started = True
            else:
                self.depth -= 1
                if self.depth <= 0:
                    self.done = True
            pos += 1
        return end
