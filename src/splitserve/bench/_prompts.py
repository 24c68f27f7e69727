"""Prompts that no prompt cache can serve, sized in the server's own tokens.

Every prompt starts with a nonce unique to the run and the request, and its
filler words are drawn from a seeded generator, so two prompts share at most
the chat template's fixed prefix.  Sizes are hit through a calibration: two
short probe requests give the server's token count for two word counts, and a
line through them (template overhead + tokens per word) turns a target token
count into a word count.  The records keep the server's actual count.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

_WORDS = [
    "river",
    "stone",
    "garden",
    "window",
    "market",
    "lantern",
    "copper",
    "meadow",
    "harbor",
    "violet",
    "thunder",
    "pencil",
    "orchard",
    "silver",
    "candle",
    "ladder",
    "planet",
    "forest",
    "bridge",
    "mirror",
    "valley",
    "shadow",
    "engine",
    "basket",
    "cotton",
    "falcon",
    "glacier",
    "hammer",
    "island",
    "jacket",
    "kettle",
    "lemon",
    "marble",
    "needle",
    "ocean",
    "pepper",
    "quartz",
    "rabbit",
    "saddle",
    "timber",
    "umbrella",
    "velvet",
    "walnut",
    "yellow",
    "zephyr",
    "anchor",
    "blanket",
    "canyon",
    "desert",
    "ember",
    "feather",
    "ginger",
    "horizon",
    "ivory",
    "jungle",
    "kernel",
    "lagoon",
    "magnet",
    "nectar",
    "oyster",
    "pebble",
    "quiver",
    "ribbon",
    "summit",
    "tunnel",
    "urchin",
    "vessel",
    "willow",
    "almond",
    "beacon",
    "cactus",
    "dragon",
    "echo",
    "fabric",
    "galaxy",
    "hollow",
    "insect",
    "jasmine",
    "kayak",
    "lilac",
    "mosaic",
    "nickel",
    "olive",
    "parrot",
    "quill",
    "raven",
    "sponge",
    "tulip",
    "uplift",
    "vapor",
    "wander",
    "yonder",
    "zigzag",
    "amber",
    "breeze",
    "cobalt",
    "dune",
    "fern",
    "grove",
    "hazel",
    "indigo",
    "jewel",
    "koala",
    "lotus",
    "maple",
    "nutmeg",
    "onyx",
    "prism",
    "quasar",
    "reef",
    "spruce",
    "thistle",
    "unicorn",
    "vista",
    "wheat",
    "yarn",
    "zinc",
    "acorn",
    "bramble",
    "cinder",
    "drizzle",
    "elm",
    "flint",
    "gravel",
    "heron",
    "iris",
    "juniper",
    "kelp",
    "lichen",
    "moss",
    "nimbus",
    "opal",
    "pine",
    "quarry",
    "rust",
    "sage",
    "tide",
]


@dataclass(frozen=True)
class TokenFit:
    """server tokens ~= overhead + per_word * words (for one chat template and tokenizer)."""

    overhead: float = 30.0
    per_word: float = 1.5

    def words_for(self, tokens: int) -> int:
        return max(1, round((tokens - self.overhead) / self.per_word))

    @classmethod
    def from_probes(cls, w1: int, t1: int, w2: int, t2: int) -> TokenFit:
        if w2 == w1 or t2 <= t1:
            return cls()
        per_word = (t2 - t1) / (w2 - w1)
        return cls(overhead=max(0.0, t1 - per_word * w1), per_word=per_word)


class PromptMaker:
    """Unique filler text: ``nonce`` + seeded random words, sentence-cased."""

    def __init__(self, run_nonce: str, seed: int = 0) -> None:
        self.run_nonce = run_nonce
        self.rng = random.Random(f"{run_nonce}:{seed}")

    def words(self, n: int) -> list[str]:
        return [self.rng.choice(_WORDS) for _ in range(n)]

    def sentences(self, n_words: int) -> list[str]:
        """Filler as a list of sentences of 6-14 words."""
        out: list[str] = []
        left = n_words
        while left > 0:
            k = min(left, self.rng.randint(6, 14))
            words = self.words(k)
            out.append(" ".join(words).capitalize() + ".")
            left -= k
        return out

    def speed_prompt(self, request_id: str, n_words: int) -> str:
        """A prompt of about ``n_words`` words that starts with ``request_id``.

        The filler is sentences like the context bench's haystack, so that one
        calibration (tokens per word) fits both.
        """
        head = f"[{request_id}] Continue this text:"
        return head + " " + " ".join(self.sentences(max(1, n_words - 4)))
