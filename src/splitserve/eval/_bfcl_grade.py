"""A BFCL trial's verdict from BFCL's own checkers, and our failure cause mapped from its error type.

The model's output is kept in BFCL's FC-mode shape (``BfclTrace.model_result``): for a
single-turn item a list of ``{name: arguments-JSON}`` (or the text, when it called no
tool), for a multi-turn item one such value per step, per turn. :func:`bfcl_verdict`
does what BFCL's ``eval_runner`` does for one entry (its ``_evaluate_single_*_entry``:
decode as the OpenAI FC handler does, check the format, then call ``ast_checker`` /
``multi_turn_checker``) and returns BFCL's result dict. Those wrappers live in a module
that imports every model handler, so their few lines of glue are repeated here; the
checking is BFCL's.

Failure causes (one per failed trial, evidence = BFCL's error type and message):

==========================================  =====================================
BFCL error type                             cause
==========================================  =====================================
``ast_decoder:*`` with a call whose          ``parse_error``
arguments were not JSON, or tool-call
markup left in the text
``ast_decoder:*`` without any call           ``missing_call`` (``over_refusal`` when
                                            the text refuses)
a called name BFCL's functions lack          ``hallucinated_tool``
``*:wrong_count``                            ``extra_call`` (more calls than the
                                            answer) / ``missing_call`` (fewer)
``simple_function_checker:wrong_func_name``  ``wrong_tool``
``*missing_required``, ``*unexpected_param``,  ``bad_arguments``
``type_error:*``, ``value_error:*``,
``*cannot_find_match``, ``*:unclear``
``irrelevance_error:decoder_success``,       ``extra_call`` (a call where none fits)
``multi_turn:irrelevance_error:*``
``relevance_error:decoder_failed``           ``missing_call``
``multi_turn:empty_turn_model_response``     ``missing_call``
``multi_turn:instance_state_mismatch``       ``bad_arguments`` (the calls left the
                                            wrong state)
``multi_turn:execution_response_mismatch``   ``missing_call`` (a needed call's result
                                            is not among the model's)
``multi_turn:force_terminated``              ``loop`` (one call 3+ times) / ``budget``
==========================================  =====================================
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ._bfcl import bfcl_item
from ._bfcl_api import api
from ._grade import REFUSAL, Grade
from ._scenario import Scenario
from ._trace import Trace

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class BfclTrace(Trace):
    """A trace plus what BFCL grades: the model's output in its FC shape."""

    model_result: Any = None
    force_quit: bool = False
    # BFCL keeps the state of multi-turn function classes in module globals keyed by a
    # model name; ours is unique per trial so concurrent trials never share an instance
    state_key: str = field(default_factory=lambda: f"splitserve_{uuid.uuid4().hex[:12]}")


def decode_ast(result: Any) -> list[dict[str, Any]]:
    """BFCL's OpenAI FC handler's ``decode_ast`` (raises on text or on arguments that are not JSON)."""
    decoded = []
    for invoked_function in result:
        name = next(iter(invoked_function.keys()))
        params = json.loads(invoked_function[name])
        decoded.append({name: params})
    return decoded


def vet_calls(result: Any, offered: set[str]) -> list[tuple[str, str | None]]:
    """BFCL's ``decode_execute`` (``convert_to_function_call``), each call string paired with
    None, or with the execution error that stands in for it when BFCL must not ``eval`` it:
    BFCL executes each call string with Python's ``eval``, and both the function name and
    the argument names come from the model. A call to a function not offered, or with an
    argument name that is not an identifier, gets an error instead (where BFCL would have
    got a NameError or a SyntaxError, for all but crafted names). Raises where BFCL's
    decode raises."""
    strings = api().convert_to_function_call(result)
    out: list[tuple[str, str | None]] = []
    for call, text in zip(result, strings, strict=True):
        (name, raw), *_ = call.items()
        args = json.loads(raw) if isinstance(raw, str) else raw
        if name not in offered or not _IDENT.match(name):
            out.append((text, f"Error during execution: name '{name}' is not defined"))
        elif not all(isinstance(k, str) and _IDENT.match(k) for k in args):
            out.append((text, f"Error during execution: invalid argument name in a call of {name}"))
        else:
            out.append((text, None))
    return out


def _ast_verdict(item: dict[str, Any], result: Any) -> dict[str, Any]:
    b = api()
    category, entry = item["category"], item["entry"]
    try:
        decoded = decode_ast(result)
    except Exception as exc:  # noqa: BLE001 - BFCL: any decode failure is this error type
        return {
            "valid": False,
            "error": [f"Invalid syntax. Failed to decode AST. {exc}"],
            "error_type": "ast_decoder:decoder_failed",
        }
    if not b.is_function_calling_format_output(decoded):
        return {
            "valid": False,
            "error": ["Did not output in the specified format."],
            "error_type": "ast_decoder:decoder_wrong_output_format",
        }
    return dict(b.ast_checker(entry["function"], decoded, item["answer"], b.language.PYTHON, category, "splitserve"))


def _relevance_verdict(item: dict[str, Any], result: Any) -> dict[str, Any]:
    b = api()
    try:
        decoded = decode_ast(result)
        contain_func_call = not b.is_empty_output(decoded)
    except Exception:  # noqa: BLE001 - BFCL: a decode failure means no function call
        contain_func_call = False
    if "irrelevance" in item["category"]:
        if contain_func_call:
            return {
                "valid": False,
                "error": ["Valid syntax. Successfully decode AST when it should not."],
                "error_type": "irrelevance_error:decoder_success",
            }
    elif not contain_func_call:
        return {
            "valid": False,
            "error": ["Invalid syntax. Failed to decode AST when it should have."],
            "error_type": "relevance_error:decoder_failed",
        }
    return {"valid": True}


def decode_multi_turn(result: list[list[Any]], offered: set[str]) -> list[list[list[str]]]:
    """BFCL's decode of a multi-turn result: per turn, the decodable non-empty steps."""
    b = api()
    turns = []
    for steps in result:
        decoded_steps = []
        for step in steps:
            try:
                calls = [text for text, error in vet_calls(step, offered) if error is None]
            except Exception:  # noqa: BLE001 - BFCL skips a step it cannot decode
                continue
            if b.is_empty_execute_response(calls):
                continue
            decoded_steps.append(calls)
        turns.append(decoded_steps)
    return turns


def forget_state(state_key: str) -> None:
    """Drop the function-class instances BFCL kept for one trial (inference and grading)."""
    module_globals = api().multi_turn_utils.__dict__
    for name in [n for n in module_globals if n.startswith(state_key)]:
        del module_globals[name]


def _multi_turn_verdict(item: dict[str, Any], trace: BfclTrace, offered: set[str]) -> dict[str, Any]:
    b = api()
    result, answer = trace.model_result, item["answer"]
    if not isinstance(result, list):
        return {"valid": False, "error_message": "no model responses", "error_type": "multi_turn:inference_error"}
    if trace.force_quit or len(result) != len(answer):
        return {
            "valid": False,
            "error_message": f"Model was force-terminated during inference: {len(result)} of {len(answer)} turns.",
            "error_type": "multi_turn:force_terminated",
        }
    decoded = decode_multi_turn(result, offered)
    entry = {k: v for k, v in item["entry"].items() if k != "function"}
    try:
        checked = b.multi_turn_checker(decoded, answer, entry, item["category"], trace.state_key)
    finally:
        forget_state(trace.state_key)
    return dict(checked)


def bfcl_verdict(scenario: Scenario, trace: BfclTrace) -> dict[str, Any]:
    """BFCL's result for this trial: {"valid": bool, "error_type": ..., ...}."""
    item = bfcl_item(scenario)
    if item is None:
        raise ValueError(f"{scenario.id}: not a BFCL scenario")
    from ._bfcl import CATEGORIES

    kind = CATEGORIES[item["category"]].kind
    if kind == "multi_turn":
        return _multi_turn_verdict(item, trace, set(scenario.tools))
    if kind == "ast":
        return _ast_verdict(item, trace.model_result)
    return _relevance_verdict(item, trace.model_result)


def _message(verdict: dict[str, Any]) -> str:
    text = verdict.get("error_message") or verdict.get("error") or ""
    if isinstance(text, list):
        text = " ".join(str(t) for t in text)
    return str(text)[:300]


def bfcl_cause(scenario: Scenario, trace: BfclTrace, verdict: dict[str, Any]) -> tuple[str, str]:
    """Our cause for a failed BFCL trial, with BFCL's error type and message as evidence."""
    error_type = str(verdict.get("error_type", "unknown"))
    evidence = f"BFCL {error_type}: {_message(verdict)}".strip()
    calls = trace.calls
    offered = set(scenario.tools)
    if trace.error_kind == "parse_error" or any("_raw" in c.args for c in calls):
        return "parse_error", f"{trace.error or 'arguments that are not JSON'} ({evidence})"
    if (bad := next((c for c in calls if c.name not in offered), None)) is not None:
        return "hallucinated_tool", f"called {bad.name}, which is not among the item's functions ({evidence})"
    if error_type.startswith("ast_decoder") or error_type == "relevance_error:decoder_failed":
        if not calls and REFUSAL.search(trace.response or ""):
            return "over_refusal", evidence
        return "missing_call", evidence
    if error_type.endswith("wrong_count"):
        expected = len(bfcl_item(scenario)["answer"] or [])  # type: ignore[index]
        return ("extra_call" if len(calls) > expected else "missing_call"), evidence
    if error_type.endswith("wrong_func_name"):
        return "wrong_tool", evidence
    if "irrelevance_error" in error_type:
        return "extra_call", evidence
    if error_type in ("multi_turn:empty_turn_model_response", "multi_turn:execution_response_mismatch"):
        return "missing_call", evidence
    if error_type == "multi_turn:force_terminated":
        repeats = Counter(c.name + json.dumps(c.args, sort_keys=True, default=str) for c in calls)
        return ("loop" if repeats and max(repeats.values()) >= 3 else "budget"), evidence
    return "bad_arguments", evidence


def grade_bfcl(scenario: Scenario, trace: Trace) -> Grade:
    """Verdict by BFCL's checker; ``timeout`` / ``error`` (HTTP) stay apart as for every scenario."""
    if not isinstance(trace, BfclTrace):
        raise TypeError("grade_bfcl needs the BfclTrace that play_bfcl returns")
    if trace.error_kind in ("timeout", "http_error"):
        forget_state(trace.state_key)
        verdict = "timeout" if trace.error_kind == "timeout" else "error"
        return Grade(verdict, 0.0, trace.error_kind, trace.error or trace.error_kind)
    result = bfcl_verdict(scenario, trace)
    forget_state(trace.state_key)
    if result.get("valid"):
        return Grade("pass", 1.0)
    cause, evidence = bfcl_cause(scenario, trace, result)
    return Grade("fail", 0.0, cause, evidence)
