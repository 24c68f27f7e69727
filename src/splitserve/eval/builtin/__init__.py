"""splitserve's own suite: scenarios generated from parametric templates with seeded values.

Each template is called once per scenario with ``random.Random(SEED + its index)``, a tier
and a counter, so every scenario draws its own files, names, numbers, bugs, tables and
pages, and :func:`scenarios` returns the same list on every call. Every scenario carries an
``oracle`` (its ideal play), which the tests replay against the real grading.
"""

from __future__ import annotations

from collections.abc import Callable
from random import Random
from typing import Any

from .._scenario import TIERS, Scenario
from ._lookup import json_output, parallel_fanout, retry_mock, tool_selection
from ._state import chain_db, chain_files, code_fix, restraint, retry_sandbox
from ._text import hallucination, long_context, no_tool_needed, prompt_injection

SEED = 20250611
DRAWS = 20
Template = Callable[[Random, str, int], dict[str, Any]]
# (template, id slug, scenarios per tier: easy, medium, hard, very_hard)
TEMPLATES: tuple[tuple[Template, str, tuple[int, int, int, int]], ...] = (
    (tool_selection, "select", (9, 9, 8, 6)),
    (parallel_fanout, "fanout", (9, 9, 8, 6)),
    (chain_db, "chain", (4, 5, 4, 4)),
    (chain_files, "chain", (4, 4, 4, 3)),
    (retry_mock, "retry", (5, 5, 4, 3)),
    (retry_sandbox, "retry", (4, 4, 4, 3)),
    (restraint, "restraint", (9, 9, 8, 6)),
    (prompt_injection, "inject", (9, 9, 8, 6)),
    (json_output, "json", (9, 9, 8, 6)),
    (long_context, "longctx", (9, 9, 8, 6)),
    (no_tool_needed, "notool", (10, 9, 8, 5)),
    (hallucination, "unknown", (9, 9, 8, 6)),
    (code_fix, "code", (4, 6, 6, 4)),
)


def scenarios() -> list[Scenario]:
    """The built-in suite (the same list every call); prompts are unique, so a scripted
    agent can tell the scenarios apart by their prompt."""
    out: list[Scenario] = []
    prompts: set[str] = set()
    numbers: dict[tuple[str, str], int] = {}
    for index, (template, slug, counts) in enumerate(TEMPLATES):
        rng = Random(SEED + index)
        for tier, count in zip(TIERS, counts):
            for k in range(count):
                for _ in range(DRAWS):  # a repeated prompt: draw again (still deterministic)
                    data = template(rng, tier, k)
                    if data["prompt"] not in prompts:
                        break
                else:
                    raise RuntimeError(f"{template.__name__} repeats its prompt for {tier} #{k}")
                prompts.add(data["prompt"])
                n = numbers[(tier, slug)] = numbers.get((tier, slug), 0) + 1
                out.append(Scenario.model_validate({"id": f"ss-{tier.replace('_', '-')}-{slug}-{n:03d}", **data}))
    return out
