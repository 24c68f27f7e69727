"""Incremental scanning helpers shared by the parsers (no I/O, no state beyond a buffer).

The parsers keep their unread text short: whatever is certainly not the start of a marker
is consumed at once, and only a suffix that could still grow into a marker is held back.
Each character is therefore looked at a bounded number of times, and the total cost of
parsing stays linear in the output length however the output is chunked.
"""

from __future__ import annotations

from collections.abc import Sequence


def hold_len(buf: str, markers: Sequence[str]) -> int:
    """Length of the longest suffix of ``buf`` that is a proper prefix of one of ``markers``."""
    best = 0
    for marker in markers:
        top = min(len(marker) - 1, len(buf))
        for k in range(top, best, -1):
            if buf.endswith(marker[:k]):
                best = k
                break
    return best


def find_first(buf: str, markers: Sequence[str], start: int = 0) -> tuple[int, str | None]:
    """Position and identity of the earliest complete marker in ``buf`` (longest on a tie)."""
    best, found = -1, None
    for marker in markers:
        i = buf.find(marker, start)
        if i >= 0 and (best < 0 or i < best or (i == best and len(marker) > len(found or ""))):
            best, found = i, marker
    return best, found


class TextBuffer:
    """Unread text plus the end-of-output flag; the parsers' only state about input."""

    __slots__ = ("text", "eof")

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
        ws = self.text[:len(self.text) - len(rest)]
        self.text = rest
        return ws

    def take(self, n: int) -> str:
        head, self.text = self.text[:n], self.text[n:]
        return head


class JsonScanner:
    """Finds where one JSON value ends, fed incrementally (strings, escapes, nesting)."""

    __slots__ = ("depth", "in_string", "escape", "started", "done")

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.escape = False
        self.started = False
        self.done = False

    def feed(self, text: str) -> int:
        """Read ``text``; return how many characters belong to the value (all, if not done)."""
        for pos, ch in enumerate(text):
            if self.done:
                return pos
            if self.in_string:
                if self.escape:
                    self.escape = False
                elif ch == "\\":
                    self.escape = True
                elif ch == '"':
                    self.in_string = False
                    if self.depth == 0:
                        self.done = True
                continue
            if ch == '"':
                self.in_string = True
                self.started = True
            elif ch in "{[":
                self.depth += 1
                self.started = True
            elif ch in "}]":
                self.depth -= 1
                if self.depth <= 0:
                    self.done = True
            elif not ch.isspace():
                self.started = True
        return len(text)
