"""Keeping an agent loop in the engine's prompt cache: reasoning put back, one slot per session.

Two things break the cache between the turns of a tool loop served through the gateway:

- the client drops ``reasoning_content`` from the assistant turns it sends back (the OpenAI
  SDK does), while the template renders reasoning for those turns (MiniMax-M3 for every
  turn; Qwen3, GLM, M2 and others for the turns after the last user message): the history
  then differs from what the model generated, and the engine re-reads it from there.
  :class:`ReasoningMemory` keeps what the model reasoned before each tool call it made, by
  the tool-call ids the gateway issued, per API key, and puts it back into a later request's
  assistant turn that carries those ids and no reasoning.
- concurrent conversations land on whichever slot llama-server picks, evicting each other.
  :class:`SlotAffinity` maps a session key (the ``X-Session-Id`` header, else the request's
  ``user`` field) to one engine slot (``id_slot``), the least recently used slot for a new key.

Both are bounded (least recently used entries go first) and hold nothing on disk.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

SESSION_HEADER = "x-session-id"


class ReasoningMemory:
    """Reasoning the model wrote before its tool calls, by (key, tool-call id)."""

    def __init__(self, max_entries: int = 4096, max_chars: int = 64 * 1024 * 1024) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._items: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._chars = 0

    def __len__(self) -> int:
        return len(self._items)

    def remember(self, key: str, message: dict[str, Any]) -> None:
        """Keep ``message``'s reasoning under the ids of its tool calls (nothing without both)."""
        reasoning = message.get("reasoning_content")
        calls = message.get("tool_calls") or []
        if not reasoning or not calls:
            return
        for call in calls:
            cid = call.get("id")
            if isinstance(cid, str) and cid:
                self._put((key, cid), reasoning)

    def restore(self, key: str, messages: list[dict[str, Any]]) -> int:
        """Fill in ``reasoning_content`` of assistant turns that lost it; returns how many."""
        restored = 0
        for m in messages:
            if m.get("role") != "assistant" or m.get("reasoning_content"):
                continue
            for call in m.get("tool_calls") or []:
                found = self._items.get((key, str(call.get("id"))))
                if found is not None:
                    self._items.move_to_end((key, str(call.get("id"))))
                    m["reasoning_content"] = found
                    restored += 1
                    break
        return restored

    def _put(self, item: tuple[str, str], text: str) -> None:
        old = self._items.pop(item, None)
        if old is not None:
            self._chars -= len(old)
        self._items[item] = text
        self._chars += len(text)
        while self._items and (len(self._items) > self.max_entries or self._chars > self.max_chars):
            _, dropped = self._items.popitem(last=False)
            self._chars -= len(dropped)


class SlotAffinity:
    """Session key -> engine slot: a key keeps its slot; a new key takes the least recently used."""

    def __init__(self, n_slots: int, max_keys: int = 4096) -> None:
        self.n_slots = max(1, n_slots)
        self.max_keys = max_keys
        self._keys: OrderedDict[str, int] = OrderedDict()
        self._used: OrderedDict[int, None] = OrderedDict((s, None) for s in range(self.n_slots))

    def slot_for(self, key: str) -> int:
        slot = self._keys.get(key)
        if slot is None:
            slot = next(iter(self._used))  # least recently used
            self._keys[key] = slot
            while len(self._keys) > self.max_keys:
                self._keys.popitem(last=False)
        self._keys.move_to_end(key)
        self._used.move_to_end(slot)
        return slot


def session_key(headers: Any, extra: dict[str, Any]) -> str | None:
    """The request's session key: the ``X-Session-Id`` header, else a string ``user`` field."""
    value = headers.get(SESSION_HEADER)
    if value:
        return str(value)[:256]
    user = extra.get("user")
    return user[:256] if isinstance(user, str) and user else None


__all__ = ["SESSION_HEADER", "ReasoningMemory", "SlotAffinity", "session_key"]
