"""BFCL as a suite: ``bfcl`` / ``bfcl:simple,multiple,live_*,multi_turn_base``.

The items are the ones the ``bfcl-eval`` package ships (``_bfcl_api``), loaded with its own
loader, so the function docs carry BFCL's language hints. Each item becomes a
:class:`~splitserve.eval.Scenario` whose tools are BFCL's functions converted to OpenAI
tools by BFCL's own ``convert_to_tool`` (its "FC" mode: dots in names become ``_``), so the
endpoint's chat template and tool-call parser are what gets measured. The item itself
rides along under the scenario's ``bfcl`` key; ``_bfcl_play`` plays it and
``_bfcl_grade`` grades it with BFCL's checkers.

Tiers group the categories for our per-tier tables: non-live → ``easy``, live →
``medium``, multi-turn → ``hard`` (BFCL's own groups, not a difficulty claim).

Each scenario's ``oracle`` is BFCL's ground truth as tool calls (the first accepted value
of every parameter, those that may be left out left out; for multi-turn the ground-truth calls of each
turn, then a short answer), which the scripted test agent replays.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import inspect
from dataclasses import dataclass
from functools import cache
from typing import Any

from .._errors import UsageError
from ._bfcl_api import api
from ._scenario import Budget, OracleCall, OracleTurn, Scenario

PREFIX = "bfcl"


@dataclass(frozen=True)
class Category:
    name: str
    group: str  # non_live | live | multi_turn
    kind: str  # ast | irrelevance | relevance | multi_turn

    @property
    def tier(self) -> str:
        return {"non_live": "easy", "live": "medium", "multi_turn": "hard"}[self.group]


CATEGORIES: dict[str, Category] = {
    c.name: c
    for c in (
        Category("simple_python", "non_live", "ast"),
        Category("multiple", "non_live", "ast"),
        Category("parallel", "non_live", "ast"),
        Category("parallel_multiple", "non_live", "ast"),
        Category("irrelevance", "non_live", "irrelevance"),
        Category("live_simple", "live", "ast"),
        Category("live_multiple", "live", "ast"),
        Category("live_parallel", "live", "ast"),
        Category("live_parallel_multiple", "live", "ast"),
        Category("live_irrelevance", "live", "irrelevance"),
        Category("live_relevance", "live", "relevance"),
        Category("multi_turn_base", "multi_turn", "multi_turn"),
        Category("multi_turn_miss_param", "multi_turn", "multi_turn"),
        Category("multi_turn_long_context", "multi_turn", "multi_turn"),
    )
}
ALIASES = {"simple": "simple_python"}  # BFCL v3's name for the Python simple category
#: ``bfcl`` alone: non-live + live + multi_turn_base
DEFAULT = tuple(n for n, c in CATEGORIES.items() if c.group != "multi_turn") + ("multi_turn_base",)
#: Items whose ground truth BFCL's own checker rejects for every answer (its data, bfcl-eval
#: 2026.3.23): the oracle fails exactly these, and no model can pass them.
UNPASSABLE = {
    "live_simple_106-63-0": "required parameter auto_loan_payment_start accepts no value (ground truth [])",
    "live_simple_112-68-0": "required parameter acc_routing_start accepts no value (ground truth [])",
    "live_multiple_964-207-0": "the ground truth omits statement, which transfer_to_human_agent requires",
    "live_multiple_862-181-3": "the ground truth passes journey_start_time, which Trains_1_FindTrains does not have",
}
#: Pairs with the same messages and functions and opposite ground truths (a call vs no call):
#: whatever a model answers, it fails one of each pair.
CONTRADICTORY = (
    ("live_simple_29-7-2", "live_irrelevance_118-7-8"),
    ("live_simple_176-102-0", "live_irrelevance_567-175-0"),
    ("live_multiple_262-125-1", "live_irrelevance_565-173-0"),
)
IRRELEVANT_ANSWER = "None of the functions I have can do this."
TURN_DONE = "Done."


def is_bfcl(name: str) -> bool:
    return name == PREFIX or name.startswith(PREFIX + ":")


def categories_of(name: str) -> list[str]:
    """``bfcl[:a,b,live_*]`` -> BFCL category names, in our order; UsageError naming a bad one."""
    if name == PREFIX:
        return list(DEFAULT)
    wanted: list[str] = []
    for part in (p.strip() for p in name.split(":", 1)[1].split(",")):
        if not part:
            continue
        part = ALIASES.get(part, part)
        hits = [c for c in CATEGORIES if fnmatch.fnmatchcase(c, part)]
        if not hits:
            raise UsageError(f"suite {name!r}: no BFCL category {part!r} (known: {', '.join(CATEGORIES)})")
        wanted += [h for h in hits if h not in wanted]
    if not wanted:
        raise UsageError(f"suite {name!r}: name at least one BFCL category after 'bfcl:'")
    return [c for c in CATEGORIES if c in wanted]


def bfcl_item(scenario: Scenario) -> dict[str, Any] | None:
    """The BFCL item a scenario carries ({category, entry, answer}), or None for other scenarios."""
    extra = scenario.model_extra or {}
    item = extra.get("bfcl")
    return item if isinstance(item, dict) else None


@cache
def _entries(category: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    b = api()
    entries = b.load_dataset_entry(category)
    answers: dict[str, Any] = {}
    if CATEGORIES[category].kind in ("ast", "multi_turn"):
        answers = {a["id"]: a["ground_truth"] for a in b.load_ground_truth_entry(category)}
    return entries, answers


def counts(names: list[str] | None = None) -> dict[str, int]:
    """Items per category (all known categories by default)."""
    return {c: len(_entries(c)[0]) for c in (names or list(CATEGORIES))}


def bfcl_categories(name: str = PREFIX) -> list[dict[str, Any]]:
    """What ``eval list bfcl[:categories]`` shows: each category, its group, tier, item count."""
    checker = {
        "ast": "ast_checker",
        "irrelevance": "no call (irrelevance)",
        "relevance": "a call (relevance)",
        "multi_turn": "multi_turn_checker",
    }
    version = api().version
    return [
        {
            "category": c,
            "group": CATEGORIES[c].group,
            "tier": CATEGORIES[c].tier,
            "items": n,
            "checker": checker[CATEGORIES[c].kind],
            "version": version,
        }
        for c, n in counts(categories_of(name)).items()
    ]


def _first_user_text(question: list[list[dict[str, Any]]]) -> str:
    for turn in question:
        for message in turn:
            if message.get("role") == "user" and isinstance(message.get("content"), str):
                return str(message["content"])
    return ""


_OMIT = object()


def _pick(possible: list[Any], required: bool = False) -> Any:
    """The first accepted value of a parameter; left out where it may be ("" among the
    accepted values, and the function doc does not require it)."""
    if "" in possible and not required:
        return _OMIT
    for value in possible:
        if value != "":
            return _pick_value(value)
    return "" if possible else _OMIT  # required, and "" its only accepted value: send ""


def _pick_value(value: Any) -> Any:
    if isinstance(value, dict):  # a dict parameter: each key lists its accepted values
        out = {}
        for key, inner in value.items():
            chosen = _pick(inner) if isinstance(inner, list) else inner
            if chosen is not _OMIT:
                out[key] = chosen
        return out
    if isinstance(value, list):
        return [_pick_value(v) if isinstance(v, dict) else v for v in value]
    return value


def _tool_name(name: str) -> str:
    return name.replace(".", "_")  # BFCL's convert_to_tool does the same for OpenAI tools


def _ast_oracle(answer: list[dict[str, Any]], functions: list[dict[str, Any]]) -> list[OracleTurn]:
    required = {f["name"]: set(f.get("parameters", {}).get("required") or ()) for f in functions}
    calls = []
    for call in answer:
        (name, params), *_ = call.items()
        needed = required.get(name, set())
        picked = ((k, _pick(p, k in needed)) for k, p in params.items())
        calls.append(OracleCall(name=_tool_name(name), arguments={k: v for k, v in picked if v is not _OMIT}))
    return [OracleTurn(tool_calls=calls), OracleTurn(content=TURN_DONE)]


def parse_call(text: str, classes: list[str]) -> OracleCall:
    """A ground-truth call string (``mv(source='a', destination='b')``, positional args too)."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain call: {text!r}")
    name = node.func.id
    args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
    if node.args:
        params = _method_params(name, tuple(classes))
        for pname, value in zip(params, node.args, strict=False):
            args[pname] = ast.literal_eval(value)
    return OracleCall(name=name, arguments=args)


@cache
def _method_params(name: str, classes: tuple[str, ...]) -> list[str]:
    paths = api().class_paths
    for class_name in classes:
        cls = getattr(importlib.import_module(paths[class_name]), class_name)
        if (method := getattr(cls, name, None)) is not None:
            return [p for p in inspect.signature(method).parameters if p != "self"]
    raise ValueError(f"{name}: no such method in {', '.join(classes)}")


def _multi_turn_oracle(answer: list[list[str]], classes: list[str]) -> list[OracleTurn]:
    turns: list[OracleTurn] = []
    for calls in answer:
        if calls:
            turns.append(OracleTurn(tool_calls=[parse_call(c, classes) for c in calls]))
            turns.append(OracleTurn(content=TURN_DONE))
        else:
            turns.append(OracleTurn(content=IRRELEVANT_ANSWER))
    return turns


def _scenario(category: Category, entry: dict[str, Any], answer: Any, version: str) -> Scenario:
    b = api()
    tools = b.convert_to_tool(entry["function"], b.gorilla_to_openapi, b.openai_style)
    schemas = {t["function"]["name"]: t for t in tools}
    if category.kind == "ast":
        oracle = _ast_oracle(answer, entry["function"])
    elif category.kind == "multi_turn":
        oracle = _multi_turn_oracle(answer, entry["involved_classes"])
    elif category.kind == "relevance":
        oracle = [
            OracleTurn(tool_calls=[OracleCall(name=next(iter(schemas)), arguments={})]),
            OracleTurn(content=TURN_DONE),
        ]
    else:
        oracle = [OracleTurn(content=IRRELEVANT_ANSWER)]
    multi = category.kind == "multi_turn"
    return Scenario.model_validate(
        {
            "id": entry["id"],
            "title": f"BFCL {category.name} {entry['id']}",
            "tier": category.tier,
            "category": category.name,
            "domain": "bfcl",
            "prompt": _first_user_text(entry["question"]),
            "tools": list(schemas),
            "tool_schemas": schemas,
            "budget": Budget(max_tool_calls=10_000, max_turns=b.max_steps + 1, timeout_seconds=600 if multi else 120),
            "oracle": oracle,
            "source": f"bfcl-eval {version}: {category.name}",
            "bfcl": {"category": category.name, "entry": entry, "answer": answer},
        }
    )


def load_bfcl(name: str) -> list[Scenario]:
    """The scenarios of ``bfcl[:categories]``, in category order then BFCL's item order."""
    chosen = categories_of(name)
    version = api().version
    out = []
    for cat in chosen:
        entries, answers = _entries(cat)
        category = CATEGORIES[cat]
        for entry in entries:
            out.append(_scenario(category, entry, answers.get(entry["id"]), version))
    return out
