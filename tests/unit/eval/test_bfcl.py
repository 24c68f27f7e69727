"""BFCL as a suite: loading, the ground truth as answers, the null answer, and agreement with
bfcl-eval's checkers called directly on a few hundred perturbed answers.

Needs the bfcl-eval package (scripts/setup.sh installs it with --no-deps).
"""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from typing import Any

import pytest

from splitserve._errors import UsageError
from splitserve.eval import load_suite
from splitserve.eval._bfcl import CATEGORIES, CONTRADICTORY, DEFAULT, UNPASSABLE, bfcl_item, categories_of, parse_call
from splitserve.eval._bfcl_api import api
from splitserve.eval._bfcl_grade import BfclTrace, decode_ast, grade_bfcl
from splitserve.eval._scenario import Scenario
from splitserve.eval._trace import ToolCall

pytest.importorskip("bfcl_eval")

ALL = "bfcl:" + ",".join(CATEGORIES)


@pytest.fixture(scope="module")
def suite() -> list[Scenario]:
    return load_suite(ALL).scenarios


def fc(calls: list[Any]) -> list[dict[str, str]]:
    return [{c.name: json.dumps(c.arguments)} for c in calls]


def answer_trace(scenario: Scenario, answer: list[Any] | str) -> BfclTrace:
    """A single-turn trace whose model output is ``answer`` (FC calls or text)."""
    trace = BfclTrace()
    trace.model_result = answer
    if isinstance(answer, list):
        trace.calls = [ToolCall(0, n, json.loads(a)) for call in answer for n, a in call.items()]
    else:
        trace.response = answer
    return trace


def oracle_trace(scenario: Scenario) -> BfclTrace:
    """What play_bfcl records when the endpoint replays the scenario's oracle."""
    item = bfcl_item(scenario)
    assert item is not None
    if CATEGORIES[item["category"]].kind != "multi_turn":
        first = scenario.oracle[0]
        return answer_trace(scenario, fc(first.tool_calls) if first.tool_calls else (first.content or ""))
    result: list[list[Any]] = []
    turns = iter(scenario.oracle)
    for turn in turns:
        if turn.tool_calls:
            done = next(turns)  # the short answer that ends the turn
            result.append([fc(turn.tool_calls), done.content])
        else:
            result.append([turn.content])
    trace = BfclTrace()
    trace.model_result = result
    return trace


def test_categories_of_expands_aliases_and_globs() -> None:
    assert categories_of("bfcl") == list(DEFAULT)
    assert "multi_turn_base" in DEFAULT and "multi_turn_miss_param" not in DEFAULT
    assert categories_of("bfcl:simple,live_*") == [
        "simple_python",
        "live_simple",
        "live_multiple",
        "live_parallel",
        "live_parallel_multiple",
        "live_irrelevance",
        "live_relevance",
    ]
    with pytest.raises(UsageError, match="no BFCL category 'nope'"):
        categories_of("bfcl:simple,nope")


def test_every_category_loads_with_bfcls_counts(suite: list[Scenario]) -> None:
    got = Counter(s.category for s in suite)
    b = api()
    for category in CATEGORIES:
        lines = (b.data_dir / f"BFCL_v4_{category}.json").read_text().splitlines()
        assert got[category] == len([line for line in lines if line.strip()]), category
    assert len({s.id for s in suite}) == len(suite)
    sample = next(s for s in suite if s.id == "parallel_multiple_0")
    assert sample.tools == ["math_toolkit_sum_of_multiples", "math_toolkit_product_of_primes"]
    params = sample.tool_schemas["math_toolkit_sum_of_multiples"]["function"]["parameters"]
    assert params["type"] == "object"  # BFCL's "dict" as OpenAI's "object"


def test_ground_truth_scores_100_percent_except_bfcls_own_defects(suite: list[Scenario]) -> None:
    failed: dict[str, list[str]] = {}
    for scenario in suite:
        graded = grade_bfcl(scenario, oracle_trace(scenario))
        if graded.verdict != "pass":
            failed.setdefault(scenario.category, []).append(scenario.id)
    assert sorted(i for ids in failed.values() for i in ids) == sorted(UNPASSABLE)


def test_contradictory_pairs_have_the_same_input_and_opposite_truths(suite: list[Scenario]) -> None:
    by_id = {s.id: s for s in suite}
    for a, b in CONTRADICTORY:
        ea, eb = bfcl_item(by_id[a])["entry"], bfcl_item(by_id[b])["entry"]  # type: ignore[index]
        assert ea["question"] == eb["question"] and ea["function"] == eb["function"]
        assert by_id[a].oracle[0].tool_calls and not by_id[b].oracle[0].tool_calls


def test_null_answer_passes_exactly_the_irrelevance_categories(suite: list[Scenario]) -> None:
    passed: Counter[str] = Counter()
    total: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    for scenario in suite:
        item = bfcl_item(scenario)
        assert item is not None
        if CATEGORIES[item["category"]].kind == "multi_turn":
            trace = BfclTrace()
            trace.model_result = [["I don't know."] for _ in item["entry"]["question"]]
            trace.response = "I don't know."
        else:
            trace = answer_trace(scenario, "I don't know.")
        graded = grade_bfcl(scenario, trace)
        total[scenario.category] += 1
        passed[scenario.category] += graded.verdict == "pass"
        causes[graded.cause or "pass"] += 1
    for category in CATEGORIES:
        expected = total[category] if "irrelevance" in category else 0
        assert passed[category] == expected, category
    assert set(causes) == {"pass", "missing_call"}


def test_multi_turn_ground_truth_parses_positional_arguments() -> None:
    call = parse_call("sort('final_report.pdf')", ["GorillaFileSystem"])
    assert (call.name, call.arguments) == ("sort", {"file_name": "final_report.pdf"})
    call = parse_call("mv(source='a',destination='b')", ["GorillaFileSystem"])
    assert call.arguments == {"source": "a", "destination": "b"}


def _perturb(rng: random.Random, calls: list[dict[str, Any]], tools: list[str]) -> list[dict[str, Any]] | str:
    calls = copy.deepcopy(calls)
    how = rng.choice(
        ["drop_arg", "change_value", "rename", "extra_call", "drop_call", "add_arg", "type", "text", "same"]
    )
    _name, args = next(iter(calls[0].items()))
    if how == "drop_arg" and args:
        args.pop(rng.choice(sorted(args)))
    elif how == "change_value" and args:
        key = rng.choice(sorted(args))
        value = args[key]
        args[key] = (value + 1) if isinstance(value, int) and not isinstance(value, bool) else f"{value}x"
    elif how == "rename":
        calls[0] = {rng.choice(tools + ["not_a_function"]): args}
    elif how == "extra_call":
        calls.append(copy.deepcopy(calls[0]))
    elif how == "drop_call":
        calls = calls[1:]
    elif how == "add_arg":
        args["unexpected_arg"] = 1
    elif how == "type" and args:
        key = rng.choice(sorted(args))
        args[key] = str(args[key])
    elif how == "text":
        return "Here is the answer."
    return calls


def test_verdicts_agree_with_bfcls_checker_called_directly(suite: list[Scenario]) -> None:
    rng = random.Random(30)
    b = api()
    ast_items = [s for s in suite if CATEGORIES[s.category].kind == "ast"]
    chosen = rng.sample(ast_items, 400)
    verdicts: Counter[bool] = Counter()
    for scenario in chosen:
        item = bfcl_item(scenario)
        assert item is not None
        truth = [{c.name: dict(c.arguments)} for c in scenario.oracle[0].tool_calls]
        perturbed = _perturb(rng, truth, scenario.tools)
        answer = (
            perturbed if isinstance(perturbed, str) else [{n: json.dumps(a)} for c in perturbed for n, a in c.items()]
        )
        ours = grade_bfcl(scenario, answer_trace(scenario, answer)).verdict == "pass"
        # bfcl-eval directly: its decode, its format check, its checker
        try:
            decoded = decode_ast(answer)
            direct = b.is_function_calling_format_output(decoded) and bool(
                b.ast_checker(
                    item["entry"]["function"], decoded, item["answer"], b.language.PYTHON, item["category"], "x"
                )["valid"]
            )
        except Exception:  # noqa: BLE001 - BFCL: a decode failure is a fail
            direct = False
        assert ours == direct, (scenario.id, answer)
        verdicts[ours] += 1
    assert verdicts[True] >= 20 and verdicts[False] >= 200  # both verdicts are exercised


def test_a_call_bfcl_must_not_eval_is_an_execution_error_not_code(suite: list[Scenario]) -> None:
    scenario = next(s for s in suite if s.id == "multi_turn_base_0")
    item = bfcl_item(scenario)
    assert item is not None
    bad = [{"__import__('os').system('touch /tmp/pwned')#": "{}"}, {"ls": json.dumps({"a=1) or print('x'": 1})}]
    trace = BfclTrace()
    trace.model_result = [[bad, "done"]] + [["done"] for _ in item["entry"]["question"][1:]]
    trace.calls = [ToolCall(0, next(iter(c)), {}) for c in bad]
    graded = grade_bfcl(scenario, trace)
    assert graded.verdict == "fail" and graded.cause == "hallucinated_tool"


def test_eval_list_bfcl_shows_categories_and_counts() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "splitserve", "eval", "list", "bfcl:simple,live_*", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = {r["category"]: r["items"] for r in json.loads(done.stdout)["categories"]}
    assert rows["simple_python"] == 400 and rows["live_multiple"] == 1053 and len(rows) == 7
    bad = subprocess.run(
        [sys.executable, "-m", "splitserve", "eval", "list", "bfcl:simple,nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and "no BFCL category 'nope'" in bad.stderr


def test_multi_turn_verdicts_agree_with_bfcls_checker_called_directly(suite: list[Scenario]) -> None:
    from splitserve.eval._bfcl_grade import forget_state

    rng = random.Random(31)
    b = api()
    items = rng.sample([s for s in suite if s.category == "multi_turn_base"], 60)
    verdicts: Counter[bool] = Counter()
    for k, scenario in enumerate(items):
        item = bfcl_item(scenario)
        assert item is not None
        result = oracle_trace(scenario).model_result
        turn = rng.randrange(len(result))
        steps = result[turn]
        if isinstance(steps[0], list) and steps[0]:
            calls = [dict(c) for c in steps[0]]
            how = rng.choice(["drop", "swap_arg", "same"])
            if how == "drop":
                calls.pop(rng.randrange(len(calls)))
            elif how == "swap_arg":
                i = rng.randrange(len(calls))
                (name, raw), *_ = calls[i].items()
                args = json.loads(raw)
                if args:
                    key = rng.choice(sorted(args))
                    args[key] = f"{args[key]}_x" if isinstance(args[key], str) else 999
                calls[i] = {name: json.dumps(args)}
            result[turn] = [calls, *steps[1:]] if calls else steps[1:]
        trace = BfclTrace()
        trace.model_result = result
        ours = grade_bfcl(scenario, trace).verdict == "pass"
        # bfcl-eval directly: its decode (convert_to_function_call) and its checker
        decoded = []
        for turn_steps in result:
            kept = []
            for step in turn_steps:
                try:
                    calls_text = b.convert_to_function_call(step)
                except Exception:  # noqa: BLE001 - BFCL skips a step it cannot decode
                    continue
                if not b.is_empty_execute_response(calls_text):
                    kept.append(calls_text)
            decoded.append(kept)
        entry = {k2: v for k2, v in item["entry"].items() if k2 != "function"}
        key = f"direct_{k}"
        try:
            direct = bool(b.multi_turn_checker(decoded, item["answer"], entry, item["category"], key)["valid"])
        finally:
            forget_state(key)
        assert ours == direct, scenario.id
        verdicts[ours] += 1
    assert verdicts[True] >= 10 and verdicts[False] >= 10


def _single(scenario_id: str, suite: list[Scenario]) -> Scenario:
    return next(s for s in suite if s.id == scenario_id)


@pytest.mark.parametrize(
    ("sid", "answer", "cause"),
    [
        ("simple_python_0", [{"calculate_triangle_area": "{'base': 10"}], "parse_error"),
        ("simple_python_0", [{"triangle_area": json.dumps({"base": 10, "height": 5})}], "hallucinated_tool"),
        ("simple_python_0", [{"calculate_triangle_area": json.dumps({"base": 10, "height": 6})}], "bad_arguments"),
        ("simple_python_0", [{"calculate_triangle_area": json.dumps({"base": 10, "height": 5})}] * 2, "extra_call"),
        ("parallel_0", [], "missing_call"),
        ("irrelevance_0", None, "extra_call"),
        ("simple_python_0", "I cannot help with that.", "over_refusal"),
    ],
)
def test_bfcl_error_types_map_to_our_causes(suite: list[Scenario], sid: str, answer: Any, cause: str) -> None:
    scenario = _single(sid, suite)
    if answer is None:  # a call where none fits: the item's first function
        answer = [{scenario.tools[0]: "{}"}]
    trace = BfclTrace()
    trace.model_result = answer
    if isinstance(answer, str):
        trace.response = answer
    else:
        for call in answer:
            (name, raw), *_ = call.items()
            try:
                args = json.loads(raw)
            except json.JSONDecodeError:
                args = {"_raw": raw}
            trace.calls.append(ToolCall(0, name, args))
    graded = grade_bfcl(scenario, trace)
    assert (graded.verdict, graded.cause) == ("fail", cause), graded.evidence
    assert graded.evidence.startswith("BFCL ") or cause in ("parse_error", "hallucinated_tool")
