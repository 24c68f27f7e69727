"""``bench context``: long-prompt prefill speed and needle retrieval in the same pass.

Each cell is one prompt of a target length: a unique haystack of filler
sentences with one needle sentence ("The secret number of the copper key is
4827193.") at a relative depth, and a question after it.  The answer is graded
by string match on the digits, never by a judge model; a miss says why: the
request failed, the answer was cut by ``max_tokens``, the reasoning never
ended, or the number is simply not in the answer.  A ``control`` depth asks
for a number that was never inserted: it must be a miss, which shows that the
grader does not pass answers by accident.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from .._errors import UsageError
from ._records import RequestRecord
from ._speed import Emit, Session

CONTROL = "control"

_KEYS = ("copper", "violet", "harbor", "lantern", "orchard", "glacier", "falcon", "meadow")


@dataclass
class ContextOptions:
    lengths: list[int] = field(default_factory=lambda: [8192])
    depths: list[float] = field(default_factory=lambda: [0.1, 0.5, 0.9])
    needle: bool = True
    control: bool = False
    max_tokens: int = 32
    repeat: int = 1

    def cells(self) -> list[tuple[int, float | str | None]]:
        depths: list[float | str | None] = list(self.depths) if self.needle else [None]
        if self.needle and self.control:
            depths.append(CONTROL)
        return [(n, d) for n in self.lengths for d in depths for _ in range(self.repeat)]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_lengths(text: str) -> list[int]:
    """``8k,64k,131072`` -> token counts (k = 1024)."""
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        mult = 1
        if part.endswith("k"):
            mult, part = 1024, part[:-1]
        try:
            value = int(float(part) * mult)
        except ValueError:
            raise UsageError(f"--lengths: {part!r} is not a token count (use e.g. 8k,64k,128k)") from None
        if value < 64:
            raise UsageError(f"--lengths: {value} tokens is too short for a needle test (64 at least)")
        out.append(value)
    if not out:
        raise UsageError("--lengths: give at least one length, e.g. 8k")
    return out


def parse_depths(text: str) -> list[float]:
    out = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise UsageError(f"--depths: {part!r} is not a number between 0 and 1") from None
        if not 0.0 <= value <= 1.0:
            raise UsageError(f"--depths: {value} is outside 0..1")
        out.append(value)
    return out


@dataclass
class Haystack:
    text: str
    expected: str
    key: str


def build_haystack(session: Session, tag: str, length: int, depth: float | str | None, rng: random.Random) -> Haystack:
    """A prompt of about ``length`` server tokens with the needle at ``depth``."""
    key = rng.choice(_KEYS)
    number = str(rng.randint(1_000_000, 9_999_999))
    head = f"[{tag}/{session.nonce}] Read the text below, then answer the question after it."
    if depth is None:
        question = "Question: what is this text about? Answer in one word."
    else:
        question = f"Question: what is the secret number of the {key} key? Answer with the number only."
    needle = f"The secret number of the {key} key is {number}."
    fixed_words = len(head.split()) + len(question.split()) + (len(needle.split()) if isinstance(depth, float) else 0)
    words = max(8, session.calibration.fit.words_for(length) - fixed_words)
    sentences = session.maker.sentences(words)
    if isinstance(depth, float):
        sentences.insert(round(depth * len(sentences)), needle)
    elif depth == CONTROL:
        number = str(rng.randint(1_000_000, 9_999_999))  # asked for, never inserted
    return Haystack(head + "\n\n" + " ".join(sentences) + "\n\n" + question, number, key)


_NUMBER = re.compile(r"\d[\d,.\s]*\d|\d")


def grade(expected: str | None, rec: RequestRecord, reasoning_tail: str = "") -> tuple[str, str]:
    """(verdict, reason): ``found`` / ``miss`` / ``skipped`` / ``n/a`` by digit-string match."""
    if rec.error is not None:
        if rec.error.startswith("skipped"):
            return "skipped", rec.error
        return "miss", f"request failed: {rec.error}"
    if expected is None:
        return "n/a", "no needle"
    numbers = {re.sub(r"\D", "", m) for m in _NUMBER.findall(rec.text)}
    if expected in numbers:
        return "found", ""
    cut = rec.finish_reason == "length"
    if not rec.text.strip() and rec.reasoning_chars and cut:
        return "miss", "reasoning never ended (cut by max tokens)"
    if cut and not numbers:
        return "miss", f"answer cut by max tokens ({rec.text.strip()[:40]!r})"
    said = rec.text.strip().replace("\n", " ")[:40]
    return "miss", f"not found (answered {said!r})"


async def context_cells(
    session: Session, opts: ContextOptions, n_ctx: int | None, extra_cell: dict[str, Any] | None = None
) -> None:
    rng = random.Random(session.nonce)
    for length, depth in opts.cells():
        tag = session.tag()
        cell = {"kind": "context", "length": length, "depth": depth, **(extra_cell or {})}
        if n_ctx and length + opts.max_tokens > n_ctx:
            rec = RequestRecord(
                id=tag,
                kind="context",
                cell=cell,
                error=f"skipped: {length} + {opts.max_tokens} tokens exceed the server's "
                f"n_ctx {n_ctx} (raise --ctx-size)",
            )
            rec.extra.update(verdict="skipped", reason=rec.error)
            session.emit(rec)
            continue
        hay = build_haystack(session, tag, length, depth, rng)
        expected = hay.expected if depth is not None else None

        def make(
            i: int, tag: str = tag, cell: dict[str, Any] = cell, text: str = hay.text
        ) -> tuple[str, dict[str, Any], str]:
            return tag, cell, text

        # The emit inside batch() writes the record; grade it first so the file has the verdict.
        original = session.emit

        def emit_graded(rec: RequestRecord, expected: str | None = expected, original: Emit = original) -> None:
            verdict, reason = grade(expected, rec)
            rec.extra.update(expected=expected, verdict=verdict, reason=reason)
            original(rec)

        session.emit = emit_graded
        try:
            await session.batch(make, 1, opts.max_tokens, ignore_eos=False, keep_text=2000)
        finally:
            session.emit = original
