"""``splitserve doctor tools``: canonical tool-calling probes against any OpenAI endpoint.

Each check sends one request (plain HTTP, so a malformed answer is seen as it is, not
hidden by a client library) and grades what came back: single call, multi-turn with tool
results, parallel calls, ``parallel_tool_calls: false``, ``tool_choice`` required and none,
reasoning separation, and the streamed shape (first tool-call delta carries id, type and
name; argument fragments concatenate to valid JSON; finish_reason agrees).

``force_template`` (a splitserve gateway started with ``--test-hooks`` only) renders the
expected reply with that chat template and forces the model to write exactly it, so the
parsing path is exercised with a model too small to call tools by itself.

``prefill_template`` does the same for llama-server's own endpoint, which refuses
``grammar`` together with ``tools``: the expected reply (reasoning split off into
``reasoning_content``) is sent as a final assistant message, which llama-server continues
(its ``continue_final_message``: the text becomes part of the generation prompt, is fed
to the tool-call grammar and is parsed together with the generated text), and a logit
bias on the end-of-sequence token ends the turn at once. llama-server's own parser then
reads exactly what that template writes for the correct answer. Limit: llama-server
re-writes the reasoning block around prefilled content (``<mm:think>`` + reasoning +
``</mm:think>``), so a reply that starts with a bare reasoning closer cannot be prefilled
as it is; it arrives with an empty reasoning block.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from .._errors import AuthError, SplitserveError

MARKERS = (
    "<tool_call>",
    "</tool_call>",
    "]<]minimax[>[",
    "<invoke",
    "<minimax:tool_call>",
    "<think>",
    "</think>",
    "<mm:think>",
    "</mm:think>",
    "<function=",
    "<|tool",
    "<｜tool",
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "city name"},
                "days": {"type": "integer", "description": "number of days"},
            },
            "required": ["location"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current local time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOLS = [WEATHER, TIME]


def _call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


@dataclass
class Check:
    name: str
    status: str = "fail"  # pass | fail | skip
    detail: str = ""
    http_status: int | None = None
    got: Any = None
    seconds: float = 0.0


MODES = {
    "live": "no",
    "force_output": "yes (splitserve's force_output test hook)",
    "prefill": "yes (expected reply prefilled as the final assistant message, "
    "end of sequence forced; llama-server's own parser reads it)",
}


@dataclass
class Report:
    url: str
    model: str
    forced: bool
    checks: list[Check] = field(default_factory=list)
    mode: str = "live"  # live | force_output | prefill

    @property
    def passed(self) -> int:
        return sum(c.status == "pass" for c in self.checks)

    @property
    def failed(self) -> int:
        return sum(c.status == "fail" for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "model": self.model,
            "forced": self.forced,
            "mode": self.mode,
            "passed": self.passed,
            "failed": self.failed,
            "checks": [asdict(c) for c in self.checks],
        }


@dataclass
class Case:
    name: str
    messages: list[dict[str, Any]]
    expected: dict[str, Any]  # the reply a correct model would give (for forcing)
    extra: dict[str, Any] = field(default_factory=dict)


USER_WEATHER = {
    "role": "user",
    "content": "What is the weather in Paris for the next 3 days? Use the get_weather tool.",
}
CASES = [
    Case(
        "single",
        [USER_WEATHER],
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("call_1", "get_weather", {"location": "Paris", "days": 3})],
        },
    ),
    Case(
        "multi_turn",
        [
            USER_WEATHER,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [_call("call_1", "get_weather", {"location": "Paris", "days": 3})],
            },
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": json.dumps({"forecast": ["sunny", "rain", "sunny"], "temp_c": 18}),
            },
        ],
        {"role": "assistant", "content": "Sunny, then rain, then sunny again; about 18 C."},
    ),
    Case(
        "parallel",
        [
            {
                "role": "user",
                "content": "What is the weather in Paris and in Tokyo? Call get_weather once for each city.",
            }
        ],
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                _call("call_1", "get_weather", {"location": "Paris"}),
                _call("call_2", "get_weather", {"location": "Tokyo"}),
            ],
        },
    ),
    Case(
        "no_parallel",
        [{"role": "user", "content": "What is the weather in Paris and in Tokyo? Call get_weather for each city."}],
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                _call("call_1", "get_weather", {"location": "Paris"}),
                _call("call_2", "get_weather", {"location": "Tokyo"}),
            ],
        },
        {"parallel_tool_calls": False},
    ),
    Case(
        "required",
        [{"role": "user", "content": "Hello! How are you today?"}],
        {"role": "assistant", "content": "", "tool_calls": [_call("call_1", "get_time", {"city": "Paris"})]},
        {"tool_choice": "required"},
    ),
    Case(
        "none",
        [USER_WEATHER],
        {"role": "assistant", "content": "I cannot look that up right now."},
        {"tool_choice": "none"},
    ),
    Case(
        "reasoning",
        [{"role": "user", "content": "Think step by step: what is 17 * 23?"}],
        {"role": "assistant", "reasoning_content": "17 * 23 = 17 * 20 + 17 * 3 = 340 + 51.", "content": "391"},
        {"chat_template_kwargs": {"enable_thinking": True}},
    ),
    Case(
        "streaming",
        [USER_WEATHER],
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("call_1", "get_weather", {"location": "Paris", "days": 3})],
        },
        {"stream": True},
    ),
]


def _leaks(text: str | None) -> list[str]:
    return [m for m in MARKERS if text and m in text]


def _valid_args(calls: list[dict[str, Any]]) -> str | None:
    for c in calls:
        fn = c.get("function") or {}
        try:
            args = json.loads(fn.get("arguments") or "")
        except ValueError:
            return f"arguments of {fn.get('name')!r} are not valid JSON: {fn.get('arguments')!r}"
        if not isinstance(args, dict):
            return f"arguments of {fn.get('name')!r} are not a JSON object"
    return None


def _grade(case: Case, msg: dict[str, Any], finish: str | None, check: Check) -> None:
    calls = msg.get("tool_calls") or []
    content = msg.get("content")
    names = [(c.get("function") or {}).get("name") for c in calls]
    leaks = _leaks(content) + _leaks(msg.get("reasoning_content"))
    check.got = {
        "content": content,
        "reasoning_content": msg.get("reasoning_content"),
        "tool_calls": calls,
        "finish_reason": finish,
    }
    problems: list[str] = []
    if leaks:
        problems.append(f"markers leaked into the text: {leaks}")
    bad = _valid_args(calls)
    if bad:
        problems.append(bad)
    if calls and finish != "tool_calls":
        problems.append(f"tool calls with finish_reason={finish!r}")
    if finish == "tool_calls" and not calls:
        problems.append("finish_reason=tool_calls with no call")
    if finish == "length":
        problems.append(
            "cut off at max_tokens (finish_reason=length), not a finished answer "
            "(raise --max-tokens if a correct answer is just long)"
        )
    n = case.name
    if n in ("single", "streaming"):
        if names != ["get_weather"]:
            problems.append(f"expected one get_weather call, got {names or 'none'}")
        elif "Paris" not in (calls[0]["function"].get("arguments") or ""):
            problems.append("the call's arguments do not name Paris")
    elif n == "multi_turn":
        if not content:
            problems.append("no text answer after the tool result")
    elif n == "parallel":
        ids = {c.get("id") for c in calls}
        if len(calls) < 2:
            problems.append(f"expected 2 parallel calls, got {len(calls)}")
        elif len(ids) != len(calls):
            problems.append("calls share an id")
    elif n == "no_parallel":
        if len(calls) != 1:
            problems.append(f"parallel_tool_calls=false: expected exactly 1 call, got {len(calls)}")
    elif n == "required":
        if not calls:
            problems.append("tool_choice=required but no tool call")
    elif n == "none":
        if calls:
            problems.append(f"tool_choice=none but the answer has calls {names}")
        if not content:
            problems.append("no text answer")
    elif n == "reasoning":
        if not msg.get("reasoning_content"):
            problems.append("no reasoning_content (the model may not reason)")
        if not content:
            problems.append("no content after the reasoning")
    check.status = "fail" if problems else "pass"
    summary = f"calls={names} finish={finish}"
    if content:
        summary += f" content={content[:60]!r}"
    check.detail = "; ".join(problems) + (f" ({summary})" if problems else "") or summary


def _read_stream(resp: httpx.Response, check: Check) -> tuple[dict[str, Any], str | None]:
    """Assemble a streamed answer, checking the delta shape on the way."""
    content, reasoning = [], []
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    problems: list[str] = []
    for line in resp.iter_lines():
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if "error" in chunk:
            problems.append(f"error event: {chunk['error']}")
            break
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                content.append(delta["content"])
            if delta.get("reasoning_content"):
                reasoning.append(delta["reasoning_content"])
            for tc in delta.get("tool_calls") or []:
                i = tc.get("index")
                fn = tc.get("function") or {}
                if i not in calls:
                    if not (tc.get("id") and tc.get("type") == "function" and fn.get("name")):
                        problems.append(f"the first delta of call {i} lacks id/type/name: {tc}")
                    calls[i] = {
                        "id": tc.get("id"),
                        "type": "function",
                        "function": {"name": fn.get("name"), "arguments": ""},
                    }
                elif tc.get("id") and tc["id"] != calls[i]["id"]:
                    problems.append(f"call {i} changed its id mid-stream")
                elif fn.get("name"):
                    problems.append(f"call {i}: name sent twice")
                calls[i]["function"]["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    msg = {
        "content": "".join(content) or None,
        "reasoning_content": "".join(reasoning) or None,
        "tool_calls": [calls[i] for i in sorted(calls)],
    }
    if problems:
        check.detail = "; ".join(problems)
    return msg, finish


def _forced_raw(template: str, case: Case) -> str:
    """What ``template`` writes for the case's expected reply (the turn's end marker cut off).

    A template of no known tool-call format gets every known format's end markers, so a
    ChatML template's ``<|im_end|>`` is not taken for reply text.
    """
    from ..chat import assistant_turn, detect_format, get_format, list_formats

    name = detect_format(template)
    fmt = get_format(name) if name else None
    ends = fmt.end_markers if fmt else tuple(dict.fromkeys(m for known in list_formats() for m in known.end_markers))
    text, _ = assistant_turn(
        template,
        case.messages,
        case.expected,
        end_markers=ends,
        reasoning_open=fmt.reasoning.open if fmt and fmt.reasoning else None,
        tools=TOOLS,
        **case.extra.get("chat_template_kwargs", {}),
    )
    return text


def prefill_case(case: Case) -> Case:
    """The case with the reply a correct model gives: one call under parallel_tool_calls=false.

    (``force_template`` keeps the two calls of ``no_parallel`` on purpose: it checks that the
    gateway drops the second one. llama-server's grammar never lets a model write it.)
    """
    calls = case.expected.get("tool_calls") or []
    if case.extra.get("parallel_tool_calls") is False and len(calls) > 1:
        return Case(case.name, case.messages, {**case.expected, "tool_calls": calls[:1]}, case.extra)
    return case


def prefill_message(template: str, case: Case) -> dict[str, Any]:
    """The final assistant message that makes llama-server continue from the expected reply."""
    from ..chat import detect_format, get_format

    raw = _forced_raw(template, prefill_case(case))
    name = detect_format(template)
    spec = get_format(name).reasoning if name else None
    message: dict[str, Any] = {"role": "assistant", "content": raw}
    if spec is not None and spec.close in raw:
        head, content = raw.split(spec.close, 1)
        head = head.lstrip().removeprefix(spec.open)
        message["content"] = content
        if head.strip():
            message["reasoning_content"] = head
    return message


def _eos_bias(http: httpx.Client, root: str) -> list[list[float]]:
    """A logit bias that makes llama-server's end-of-sequence token the only choice."""
    try:
        props = http.get(f"{root}/props")
        if props.status_code == 401:
            raise AuthError(f"{root}/props")
        eos = props.json()["eos_token"]
        tokens = http.post(f"{root}/tokenize", json={"content": eos}).json()["tokens"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise SplitserveError(
            f"{root}: no llama-server /props and /tokenize "
            f"({type(exc).__name__}); --force-prefill needs llama-server's own "
            "endpoint"
        ) from None
    if len(tokens) != 1:
        raise SplitserveError(
            f"{root}: the end-of-sequence token {eos!r} is {len(tokens)} tokens, "
            "not one; --force-prefill cannot force it"
        )
    return [[int(tokens[0]), 100.0]]


def _keep_raw(answer: dict[str, Any], check: Check) -> None:
    """Add llama-server's ``__verbose`` raw text and chat format (when present) to ``got``."""
    verbose = answer.get("__verbose")
    if not isinstance(verbose, dict) or not isinstance(check.got, dict):
        return
    check.got["raw"] = verbose.get("content")
    settings = verbose.get("generation_settings")
    if isinstance(settings, dict) and settings.get("chat_format"):
        check.got["chat_format"] = settings["chat_format"]


def _error_body(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text[:2000]


def probe_tools(
    url: str,
    model: str | None = None,
    api_key: str | None = None,
    force_template: str | None = None,
    timeout: float = 120.0,
    max_tokens: int = 256,
    prefill_template: str | None = None,
    raw: bool = False,
) -> Report:
    """Run every case against ``url`` (with or without ``/v1``); never raises on a bad answer.

    ``raw`` (llama-server only) asks for its ``verbose`` debug field and keeps, next to the
    parsed reply, the text the model generated and the chat format llama-server parsed it
    with, so a model's failure can be told from a parser's.
    """
    if force_template is not None and prefill_template is not None:
        raise SplitserveError(
            "force_template and prefill_template exclude each other; "
            "pick one (the gateway's test hook or llama-server's prefill)"
        )
    base = url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=base, headers=headers, timeout=timeout) as http:
        bias = _eos_bias(http, base[:-3]) if prefill_template is not None else None
        if model is None:
            try:
                listed = http.get("/models")
                if listed.status_code == 401:
                    raise AuthError(f"{base}/models")
                model = listed.json()["data"][0]["id"]
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
                raise SplitserveError(
                    f"{base}/models: cannot list models ({type(exc).__name__}); pass --model"
                ) from None
        mode = "force_output" if force_template is not None else "prefill" if prefill_template is not None else "live"
        report = Report(url=base, model=str(model), forced=mode != "live", mode=mode)
        for case in CASES:
            check = Check(case.name)
            body: dict[str, Any] = {
                "model": model,
                "messages": case.messages,
                "tools": TOOLS,
                "max_tokens": max_tokens,
                "temperature": 0,
                **case.extra,
            }
            if force_template is not None:
                body["force_output"] = _forced_raw(force_template, case)
            if prefill_template is not None:
                body["messages"] = [*case.messages, prefill_message(prefill_template, case)]
                body["logit_bias"] = bias
            if raw:
                body["verbose"] = True
            started = time.perf_counter()
            try:
                if body.get("stream"):
                    with http.stream("POST", "/chat/completions", json=body) as resp:
                        check.http_status = resp.status_code
                        if resp.status_code == 401:
                            raise AuthError(f"{base}/chat/completions")
                        if resp.status_code != 200:
                            text = resp.read().decode("utf-8", "replace")
                            check.detail = f"HTTP {resp.status_code}: {text[:300]}"
                            check.got = {"error": _error_body(text)}
                        else:
                            msg, finish = _read_stream(resp, check)
                            earlier = check.detail
                            _grade(case, msg, finish, check)
                            if earlier:
                                check.status = "fail"
                                check.detail = earlier + "; " + check.detail
                else:
                    resp = http.post("/chat/completions", json=body)
                    check.http_status = resp.status_code
                    if resp.status_code == 401:
                        raise AuthError(f"{base}/chat/completions")
                    if resp.status_code != 200:
                        check.detail = f"HTTP {resp.status_code}: {resp.text[:300]}"
                        check.got = {"error": _error_body(resp.text)}
                    else:
                        answer = resp.json()
                        choice = answer["choices"][0]
                        _grade(case, choice.get("message") or {}, choice.get("finish_reason"), check)
                        _keep_raw(answer, check)
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
                check.status = "fail"
                check.detail = f"{type(exc).__name__}: {exc}"
            check.seconds = round(time.perf_counter() - started, 3)
            report.checks.append(check)
    return report


def report_markdown(report: Report, title: str | None = None) -> str:
    lines = [
        f"# {title or 'doctor tools report'}",
        "",
        f"- endpoint: `{report.url}`",
        f"- model: `{report.model}`",
        f"- forced output: {MODES.get(report.mode, report.mode)}",
        f"- result: {report.passed}/{len(report.checks)} passed",
        "",
        "| check | result | HTTP | seconds | detail |",
        "|---|---|---|---|---|",
    ]
    for c in report.checks:
        detail = c.detail.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {c.name} | {c.status} | {c.http_status} | {c.seconds} | {detail} |")
    lines += ["", "## What came back", ""]
    for c in report.checks:
        lines += [f"### {c.name}", "", "```json", json.dumps(c.got, indent=2, ensure_ascii=False), "```", ""]
    return "\n".join(lines)


__all__ = ["CASES", "Check", "Report", "prefill_case", "prefill_message", "probe_tools", "report_markdown"]
