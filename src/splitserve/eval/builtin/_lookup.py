"""Templates over scripted lookups: tool_selection, parallel_fanout, error_recovery, json_output."""

from __future__ import annotations

import json
import re
from random import Random
from typing import Any

from .._sandbox import UNAVAILABLE
from ._common import (
    CITIES,
    COMPANIES,
    DEPARTMENTS,
    PRODUCTS,
    budget,
    calls,
    check,
    distractor_rules,
    offer,
    person,
    say,
    scenario,
)
from ._facts import (
    KINDS,
    Fact,
    air_quality,
    exchange,
    inventory,
    local_time,
    order,
    stock,
    two_hop,
    weather,
)

DISTRACTORS = {"easy": 1, "medium": 3, "hard": 5, "very_hard": 8}


def _rules(facts: list[Fact], tools: list[str], rng: Random) -> dict[str, list[dict[str, Any]]]:
    """Each fact's rule on its tool, a "not found" rule after them; canned answers for the rest."""
    own = {f.tool for f in facts}
    rules = distractor_rules([t for t in tools if t not in own], rng)
    for f in facts:
        rules.setdefault(f.tool, []).append(f.rule())
    for t in own:
        rules[t].append({"match": "any", "returns": {"error": f"{t}: no record for these arguments"}})
    return rules


def _answer_checks(facts: list[Fact]) -> list[dict[str, Any]]:
    return [c for f in facts for c in f.checks] + [f.arg_check() for f in facts]


def _hop_checks(first: Fact, second: Fact) -> list[dict[str, Any]]:
    """Both hops' arguments; the answer is the second's."""
    return [first.arg_check(), second.arg_check(), *second.checks]


def tool_selection(rng: Random, tier: str, k: int) -> dict[str, Any]:
    if tier == "very_hard":
        first, second, question = two_hop(rng, k)
        facts, near = (
            [first, second],
            [t for t in (first.near, second.near) if t and t not in (first.tool, second.tool)],
        )
        tools = offer(rng, [first.tool, second.tool], near, DISTRACTORS[tier])
        oracle = [calls(first.call()), calls(second.call()), say(second.answer)]
        required = [
            check("tool_called_in_order", sequence=[first.tool, second.tool]),
            *_hop_checks(first, second),
        ]
        title = f"Two lookups, the second keyed by the first, among {len(tools)} tools"
    else:
        fact = KINDS[(k + rng.randrange(3)) % len(KINDS)](rng)
        facts, question = [fact], fact.ask
        near = [fact.near] if tier != "easy" and fact.near else []
        tools = offer(rng, [fact.tool], near, DISTRACTORS[tier])
        oracle = [calls(fact.call()), say(fact.answer)]
        required = [check("tool_called", tool=fact.tool), *_answer_checks(facts)]
        title = f"Pick {fact.tool} among {len(tools)} tools"
    return scenario(
        tier=tier,
        category="tool_selection",
        template="tool_selection",
        title=title,
        description="One right tool answers the question; the others (some with confusable names) do not.",
        prompt=question,
        tools=tools,
        oracle=oracle,
        required=required,
        forbidden=[check("tool_called", tool=t) for t in near],
        rules=_rules(facts, tools, rng),
        budget_=budget(tier, oracle, max_calls=len(facts) + (2 if tier == "easy" else 1)),
    )


FANOUT = {
    "easy": (2, 0, 2),
    "medium": (4, 1, 2),
    "hard": (6, 3, 1),
    "very_hard": (8, 5, 1),
}  # calls, distractors, turns


def _fanout_facts(rng: Random, n: int, variant: int) -> list[Fact]:
    """``n`` lookups with distinct keys (so each rule answers one question)."""
    while True:
        facts = _fanout_draw(rng, n, variant)
        if len({(f.tool, f.entity) for f in facts}) == len(facts):
            return facts


def _fanout_draw(rng: Random, n: int, variant: int) -> list[Fact]:
    if variant == 0:  # cities × kinds
        kinds = [weather, air_quality, local_time]
        per = 2 if n % 2 == 0 else 1
        chosen = rng.sample(kinds, per) if n > 1 else kinds[:1]
        cities = rng.sample(CITIES, (n + per - 1) // per)
        return [kind(rng, c) for c in cities for kind in chosen][:n]
    if variant == 1:  # finance
        companies = rng.sample(COMPANIES, n - n // 3)
        facts = [stock(rng, c) for c in companies]
        return facts + [exchange(rng) for _ in range(n - len(facts))]
    mixed = [order, inventory, weather, stock]
    return [mixed[i % len(mixed)](rng) for i in range(n)]


def _token(f: Fact) -> str:
    """A literal that shows the fact's value in a table cell."""
    pats = f.checks[0].get("patterns")
    return pats[0] if pats else str(f.checks[0]["equals"])


def parallel_fanout(rng: Random, tier: str, k: int) -> dict[str, Any]:
    n, n_distract, turns = FANOUT[tier]
    if tier == "medium" and k % 3 == 2:
        n = 3
    facts = _fanout_facts(rng, n, k % 3)
    needed = list(dict.fromkeys(f.tool for f in facts))
    tools = offer(rng, needed, [], n_distract)
    questions = "\n".join(f"{i}. {f.ask}" for i, f in enumerate(facts, 1))
    intro = rng.choice(
        [
            "I need a few things checked at once:",
            "Quick status round, please:",
            "Please look these up for me:",
            "Answer all of these:",
        ]
    )
    required = [
        check("tool_called_in_parallel", tools=[f.tool for f in facts]),
        *_answer_checks(facts),
    ]
    if tier == "very_hard":
        prompt = (
            f"{intro}\n{questions}\nThe lookups are independent: do them all in one batch. Answer "
            "with a "
            "markdown table with the columns | # | Answer |, one row per question in this order."
        )
        table = "| # | Answer |\n|---|---|\n" + "\n".join(
            f"| {i} | {f.answer.rstrip('.')} |" for i, f in enumerate(facts, 1)
        )
        oracle = [calls(*(f.call() for f in facts)), say(table)]
        required.append(
            check(
                "response_markdown_table",
                row_count=len(facts),
                contains_rows=[[str(i), _token(f)] for i, f in enumerate(facts, 1)],
            )
        )
    else:
        prompt = f"{intro}\n{questions}"
        oracle = [calls(*(f.call() for f in facts)), say(" ".join(f.answer for f in facts))]
    return scenario(
        tier=tier,
        category="parallel_fanout",
        template="parallel_fanout",
        title=f"{len(facts)} independent lookups in one batch",
        description="Independent lookups must go out together in one assistant turn, then one answer.",
        prompt=prompt,
        tools=tools,
        oracle=oracle,
        required=required,
        rules=_rules(facts, tools, rng),
        budget_=budget(
            tier,
            oracle,
            turns=turns,
            max_calls=len(facts) + (1 if tier in ("easy", "medium") else 0),
        ),
    )


RATE_LIMITED = {"error": "429 too many requests: rate limited, retry"}
FLAKY = {"error": UNAVAILABLE.removeprefix("error: ")}


def _flaky(rules: dict[str, list[dict[str, Any]]], tool: str, errors: list[dict[str, Any]]) -> None:
    """The tool's first calls fail with ``errors``, in order; then its rules answer."""
    rules[tool] = [{"match": "any", "call_index": i, "returns": e} for i, e in enumerate(errors)] + rules[tool]


def retry_mock(rng: Random, tier: str, k: int) -> dict[str, Any]:
    """A scripted tool fails (503, 429) and must be called again; harder: two hops, two failures."""
    if tier in ("easy", "medium"):
        facts = [KINDS[(k * 3 + i) % len(KINDS)](rng) for i in range(1 if tier == "easy" else 2)]
        if len({f.tool for f in facts}) < len(facts):
            facts = facts[:1]
        broken = facts[-1]  # last in the batch: its error is the last thing the model reads
        tools = offer(rng, [f.tool for f in facts], [], DISTRACTORS[tier] - 1)
        rules = _rules(facts, tools, rng)
        _flaky(rules, broken.tool, [FLAKY])
        question = " Also: ".join(f.ask for f in facts)
        oracle = [
            calls(*(f.call() for f in facts)),
            calls(broken.call()),
            say(" ".join(f.answer for f in facts)),
        ]
        sequence = [broken.tool, broken.tool]
    else:
        first, second, question = two_hop(rng, k)
        facts = [first, second]
        tools = offer(rng, [first.tool, second.tool], [], DISTRACTORS[tier] - 2)
        rules = _rules(facts, tools, rng)
        if tier == "hard":
            _flaky(rules, second.tool, [FLAKY])
            oracle = [
                calls(first.call()),
                calls(second.call()),
                calls(second.call()),
                say(second.answer),
            ]
            sequence = [first.tool, second.tool, second.tool]
        else:
            _flaky(rules, first.tool, [FLAKY])
            _flaky(rules, second.tool, [FLAKY, RATE_LIMITED])
            oracle = [
                calls(first.call()),
                calls(first.call()),
                calls(second.call()),
                calls(second.call()),
                calls(second.call()),
                say(second.answer),
            ]
            sequence = [first.tool, first.tool, second.tool, second.tool, second.tool]
    return scenario(
        tier=tier,
        category="error_recovery",
        template="retry_mock",
        title=f"Retry after a transient failure ({len(sequence)} calls of {len(set(sequence))} tools)",
        description="A tool answers its first call(s) with a transient error (503 / 429); calling it again works.",
        prompt=question,
        tools=tools,
        oracle=oracle,
        required=[
            check("tool_called_in_order", sequence=sequence),
            *(_answer_checks(facts) if tier in ("easy", "medium") else _hop_checks(*facts)),
        ],
        rules=rules,
        budget_=budget(tier, oracle),
    )


def _schema_for(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"type": "boolean", "const": value}
    if isinstance(value, int):
        return {"type": "integer", "const": value}
    if isinstance(value, float):
        return {"type": "number", "minimum": value - 0.0001, "maximum": value + 0.0001}
    return {"type": "string", "pattern": rf"(?i)^\s*{re.escape(str(value))}\s*$"}


def _object_schema(obj: dict[str, Any], closed: bool) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {k: _schema_for(v) for k, v in obj.items()},
        "required": list(obj),
    }
    if closed:
        schema["additionalProperties"] = False
    return schema


def _keys(obj: dict[str, Any]) -> str:
    kinds = {bool: "boolean", int: "integer", float: "number", str: "string"}
    return ", ".join(f"{k} ({kinds[type(v)]})" for k, v in obj.items())


DRAFT = "https://json-schema.org/draft/2020-12/schema"
JSON_START = r"\A\s*(?:```(?:json)?\s*)?[\[{]"
BARE_OBJECT, BARE_ARRAY = (r"\A\s*\{", r"\}\s*\Z"), (r"\A\s*\[", r"\]\s*\Z")


def _record(rng: Random, k: int) -> tuple[str, dict[str, Any]]:
    """A sentence holding a small record, and the record."""
    variant = k % 3
    if variant == 0:
        name, age, city = person(rng), rng.randint(19, 77), rng.choice(CITIES)
        dept = rng.choice(DEPARTMENTS)
        return (
            f"{name} is {age} years old, lives in {city} and works in {dept}.",
            {"name": name, "age": age, "city": city, "department": dept},
        )
    if variant == 1:
        product = rng.choice(PRODUCTS)
        price, stock_ = (
            round(rng.randint(9, 480) + rng.choice([0.49, 0.95, 0.99, 0.25]), 2),
            rng.random() < 0.5,
        )
        return (
            f"The {product} costs {price} EUR and is {'in stock' if stock_ else 'sold out'} right now.",
            {"product": product, "price_eur": price, "in_stock": stock_},
        )
    title = rng.choice(["design review", "budget sync", "onboarding session", "incident retro", "vendor call"])
    people, room = (
        rng.randint(3, 18),
        f"{rng.choice(['North', 'South', 'East', 'West'])}-{rng.randint(1, 9)}",
    )
    day = rng.choice(["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"])
    return (
        f"The {title} is on {day} in room {room} with {people} attendees.",
        {"title": title, "day": day, "room": room, "attendees": people},
    )


def _distinct(rng: Random, k: int) -> list[Fact]:
    """Three inventory or weather lookups with distinct keys and distinct values (one maximum)."""
    while True:
        facts = [inventory(rng) for _ in range(3)] if k % 2 == 0 else [weather(rng, c) for c in rng.sample(CITIES, 3)]
        if (
            len({f.entity for f in facts}) == 3
            and len({json.dumps(f.fields) for f in facts}) == 3
            and len({next(iter(f.fields.values())) for f in facts}) == 3
        ):
            return facts


def json_output(rng: Random, tier: str, k: int) -> dict[str, Any]:
    required: list[dict[str, Any]] = []
    if tier == "easy":
        sentence, obj = _record(rng, k)
        prompt = (
            f'Convert this into a JSON object with the keys {_keys(obj)}: "{sentence}" '
            "Reply with the JSON only, no explanation."
        )
        tools, facts, rules = [], [], {}
        data: Any = obj
        schema = _object_schema(obj, closed=False)
        oracle = [say(json.dumps(data))]
        required = [check("response_matches_regex", all_of=[JSON_START])]
        budget_ = budget(tier, oracle, turns=1, max_calls=0)
    else:
        if tier == "medium":
            facts = [KINDS[k % len(KINDS)](rng)]
        elif tier == "hard":
            facts = [kind(rng) for kind in rng.sample(list(KINDS), 2 + k % 2)]
        else:
            facts = _distinct(rng, k)
        tools = offer(rng, list(dict.fromkeys(f.tool for f in facts)), [], DISTRACTORS[tier] - 1)
        rules = _rules(facts, tools, rng)
        objs = [{**f.args, **f.fields} for f in facts]
        if tier == "medium":
            data = objs[0]
            schema = _object_schema(data, closed=False)
            shape = f"a JSON object with the keys {_keys(data)}"
            required = [check("response_matches_regex", all_of=[JSON_START])]
        elif tier == "hard":
            data = objs
            schema = {
                "type": "array",
                "minItems": len(objs),
                "maxItems": len(objs),
                "prefixItems": [_object_schema(o, closed=True) for o in objs],
                "items": False,
            }
            shape = (
                "a JSON array with one object per question, in order; the objects have exactly "
                "these keys: " + "; ".join(f"#{i}: {_keys(o)}" for i, o in enumerate(objs, 1))
            )
            required = [check("response_matches_regex", all_of=list(BARE_ARRAY))]
        else:
            key, total_key = ("sku", "in_stock") if k % 2 == 0 else ("location", "temp_c")
            rows = [{key: o[key], total_key: o[total_key]} for o in objs]
            best = max(rows, key=lambda r: r[total_key])[key]
            summary = "total_in_stock" if k % 2 == 0 else "max_temp_c"
            agg = sum(r[total_key] for r in rows) if k % 2 == 0 else max(r[total_key] for r in rows)
            data = {"items": rows, summary: agg, "top": best}
            schema = {
                "type": "object",
                "additionalProperties": False,
                "required": ["items", summary, "top"],
                "properties": {
                    "items": {
                        "type": "array",
                        "minItems": 3,
                        "maxItems": 3,
                        "prefixItems": [_object_schema(r, closed=True) for r in rows],
                        "items": False,
                    },
                    summary: _schema_for(agg),
                    "top": _schema_for(best),
                },
            }
            what = "the sum of in_stock" if k % 2 == 0 else "the highest temp_c"
            shape = (
                "a JSON object "
                f'{{"items": [{{"{key}": ..., "{total_key}": ...}}, ...] (one per item, in '
                f'the order asked), "{summary}": {what}, "top": the {key} with the highest '
                f"{total_key}}}"
            )
            required = [check("response_matches_regex", all_of=list(BARE_OBJECT))]
        asks = " ".join(f.ask for f in facts)
        strict = (
            " Output raw JSON only: no code fence, no text before or after."
            if tier != "medium"
            else " Reply with the JSON only, no explanation."
        )
        prompt = f"{asks}\nReply with {shape}.{strict}"
        oracle = [calls(*(f.call() for f in facts)), say(json.dumps(data))]
        budget_ = budget(tier, oracle)
        required += [f.arg_check() for f in facts]
    required.insert(0, check("response_matches_schema", schema={"$schema": DRAFT, **schema}))
    return scenario(
        tier=tier,
        category="json_output",
        template="json_output",
        title=f"Answer as JSON only ({'no tools' if not facts else f'{len(facts)} lookups'})",
        description="The final answer must be JSON that matches a schema (the values included), with no prose.",
        prompt=prompt,
        tools=tools,
        oracle=oracle,
        required=required,
        rules=rules,
        budget_=budget_,
    )
