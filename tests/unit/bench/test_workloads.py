"""Workloads: what each sends, agreement with a reference, per-turn agent records, the
speculation sweep's baseline, and the report and plots of all that (against fake endpoints)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from splitserve._errors import UsageError
from splitserve.bench import SpeedOptions, Target, load_run, run_speed, run_sweep
from splitserve.bench._records import RequestRecord
from splitserve.bench._report import render_markdown, write_report
from splitserve.bench._tables import agent_turn_rows, sweep_workload_rows, workload_rows
from splitserve.bench._workloads import (
    agreement,
    apply_edit,
    apply_reference,
    baseline_of,
    build_plan,
    comparable,
    copy_items,
    edit_items,
    edits_for,
    json_items,
    load_recording,
    parse_workloads,
    read_source,
    shipped_sources,
    tagged,
    with_baseline,
)

from .fakes import PREFIX, WorkloadFake

PNG = b"\x89PNG\r\n\x1a\n"


# -- construction --------------------------------------------------------------------------


def test_parse_workloads() -> None:
    assert parse_workloads("chat") == ["chat"]
    assert parse_workloads(" copy, edit ,copy,agent") == ["copy", "edit", "agent"]
    with pytest.raises(UsageError, match="--workload 'poem': unknown workload; use one of chat, copy"):
        parse_workloads("copy,poem")
    with pytest.raises(UsageError, match="give one of"):
        parse_workloads(" , ")


def test_shipped_sources_are_real_looking_files_of_one_to_two_kb() -> None:
    sources = shipped_sources()
    assert {s.name for s in sources} == {"config_loader.go", "rate_limiter.py", "retry.ts"}
    for s in sources:
        assert 1000 <= len(s.text.encode()) <= 2200, s.name
        assert s.lang in ("go", "python", "typescript")


def test_copy_prompt_holds_the_whole_file_and_expects_it_back() -> None:
    items = copy_items(shipped_sources())
    assert len(items) == 3
    for item, src in zip(items, shipped_sources()):
        (msg,) = item.messages
        assert msg["role"] == "user" and src.text in msg["content"] and "Copy this file back exactly" in msg["content"]
        assert item.expected == src.text and item.tools is None and item.turns() == [item.messages]


def test_edit_items_make_one_small_change_each() -> None:
    items = edit_items(shipped_sources())
    assert len(items) == 6  # a rename and a constant per file
    by_name = {i.name: i for i in items}
    src = {s.name: s.text for s in shipped_sources()}
    renamed = by_name["rate_limiter.py#rename0"].expected or ""
    assert "bucket." not in renamed and "entry.refill(now)" in renamed
    assert "self._buckets" in renamed and "class Bucket" in renamed  # other names untouched
    const = by_name["rate_limiter.py#replace1"].expected or ""
    assert const == src["rate_limiter.py"].replace("burst: int = 10", "burst: int = 20")
    for item in items:
        file = item.name.split("#")[0]
        assert item.expected != src[file]
        # a small change: most lines stay as they were
        old, new = src[file].splitlines(), (item.expected or "").splitlines()
        assert len(old) == len(new) and sum(a != b for a, b in zip(old, new)) <= 12
        assert "Change nothing else" in item.messages[0]["content"]


def test_user_file_gets_an_automatic_rename_and_number_change(tmp_path: Path) -> None:
    f = tmp_path / "thing.py"
    f.write_text("def area(width, height):\n    scale = 25\n    return width * height * scale\n\nprint(area(3, 4))\n")
    src = read_source(f)
    assert src.lang == "python"
    edits = edits_for(src)
    assert [e[0] for e in edits] == ["rename", "number"]
    _kind, old, new, instruction = edits[0]
    assert old in ("area", "height", "scale", "width") and new == old + "_v2"
    assert f"`{old}`" in instruction
    changed = apply_edit(src.text, *edits[1][:3])
    assert "scale = 50" in changed and "area(3, 4)" in changed
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(UsageError, match="empty"):
        read_source(tmp_path / "empty.txt")
    with pytest.raises(UsageError, match="no such file"):
        read_source(tmp_path / "missing.py")
    (tmp_path / "big.txt").write_text("x" * 70_000)
    with pytest.raises(UsageError, match="up to 64 KiB"):
        read_source(tmp_path / "big.txt")


def test_json_items_change_only_the_named_fields() -> None:
    items = json_items()
    assert len(items) == 3
    for item in items:
        content = item.messages[0]["content"]
        shown = json.loads(content.split("```json\n", 1)[1].split("\n```", 1)[0])
        expected = json.loads(item.expected or "")
        changed = {k for k in shown if shown[k] != expected[k]}
        assert 1 <= len(changed) <= 3 and set(shown) == set(expected)
        assert "Reply with the JSON only" in content
    ticket = json.loads(items[0].expected or "")
    assert ticket["priority"] == "high" and ticket["assignee"] == {"team": "payments", "user": None}


def test_agent_recording_replays_the_recorded_history_turn_by_turn() -> None:
    item = load_recording()
    assert item.tools and {t["function"]["name"] for t in item.tools} >= {"read_file", "run_tests", "edit_file"}
    turns = item.turns()
    assert 5 <= len(turns) <= 8
    assert [m["role"] for m in turns[0]] == ["system", "user"]
    for a, b in itertools.pairwise(turns):
        assert b[: len(a)] == a  # each turn extends the previous one...
        assert b[len(a)]["role"] == "assistant"  # ...with the recorded assistant turn
        assert b[-1]["role"] == "tool" and b[-1]["tool_call_id"] == b[len(a)]["tool_calls"][0]["id"]
    assert any("reasoning_content" in m for m in turns[-1])
    dropped = item.turns(drop_reasoning=True)
    assert not any("reasoning_content" in m for t in dropped for m in t)
    assert [len(t) for t in dropped] == [len(t) for t in turns]


def test_tag_leads_the_first_message_only() -> None:
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    out = tagged(msgs, "agent-c1r0i0")
    assert out[0]["content"] == "Job agent-c1r0i0.\n\nsys" and out[1] == msgs[1]
    assert msgs[0]["content"] == "sys"  # the recording is not changed


def test_bad_recordings_are_one_line_errors(tmp_path: Path) -> None:
    f = tmp_path / "r.json"
    f.write_text("{")
    with pytest.raises(UsageError, match="not a JSON file"):
        load_recording(f)
    f.write_text(json.dumps({"messages": [{"role": "user", "content": "x"}]}))
    with pytest.raises(UsageError, match="no assistant turn"):
        load_recording(f)
    f.write_text(json.dumps([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]))
    assert len(load_recording(f).turns()) == 1  # a bare message list is a recording too


# -- agreement -----------------------------------------------------------------------------


def test_agreement_is_the_common_prefix_over_the_reference() -> None:
    assert agreement("abcdef", "abcdef") == (1.0, True)
    assert agreement("abcXef", "abcdef") == (0.5, False)
    assert agreement("abcdefgh", "abcdef") == (1.0, False)  # all of the reference, then more
    assert agreement("abc", "abcdef") == (0.5, False)
    assert agreement("", "") == (1.0, True)
    assert agreement("x", "") == (0.0, False)


def test_comparable_text_holds_reasoning_content_and_tool_calls() -> None:
    rec = RequestRecord(
        id="a",
        kind="agent",
        reasoning="think",
        text="hi",
        tool_calls=[{"id": "1", "name": "read_file", "arguments": '{"path": "a"}'}],
    )
    assert comparable(rec) == 'thinkhi\nread_file({"path": "a"})'


def test_apply_reference_matches_by_id() -> None:
    ref = [
        RequestRecord(id="copy-1", kind="copy", text="hello world"),
        RequestRecord(id="cal", kind="calibration", text="x"),
    ]
    recs = [
        RequestRecord(id="copy-1", kind="copy", text="hello there"),
        RequestRecord(id="copy-2", kind="copy", text="nothing to compare"),
        RequestRecord(id="cal", kind="calibration", text="x"),
    ]
    assert apply_reference(recs, ref, "base") == 1
    assert recs[0].agreement == pytest.approx(6 / 11) and recs[0].exact_match is False and recs[0].reference == "base"
    assert recs[1].agreement is None and recs[2].agreement is None


# -- runs against a fake endpoint ------------------------------------------------------------


def workload_run(tmp_path: Path, name: str, fake: WorkloadFake, **kw: Any) -> Any:
    opts = SpeedOptions(
        **{"concurrency": [1], "repeat": 1, "workloads": ["copy", "edit", "json", "agent"], "max_tokens": 600, **kw}
    )
    run, _ = run_speed(
        Target(url="http://fake:1"), opts, tmp_path / f"{name}.json", label=name, transport=fake.transport()
    )
    return run


def test_each_workload_sends_fixed_greedy_prompts_and_records_everything(tmp_path: Path) -> None:
    fake = WorkloadFake(calls=True)
    run = workload_run(tmp_path, "base", fake)
    kinds = [r.kind for r in run.records if r.kind != "calibration"]
    turns = len(load_recording().turns())
    assert kinds == ["copy", "edit", "json"] + ["agent"] * turns
    bodies = fake.bodies[3:]  # after the calibration probes
    for body in bodies:
        assert body["temperature"] == 0 and body["seed"] == 0 and "ignore_eos" not in body
        assert body["max_tokens"] == 600
        assert body["messages"][0]["content"].startswith("Job ")
    agent_bodies = [b for b in bodies if b.get("tools")]
    assert len(agent_bodies) == turns
    assert [len(b["messages"]) for b in agent_bodies] == [len(t) for t in load_recording().turns()]
    assert {h.get("x-session-id") for h in fake.headers[-turns:]} == {"agent-c1r0i0"}
    copy = next(r for r in run.records if r.kind == "copy")
    assert copy.id == "copy-c1r0i0" and copy.cell["item"] == "config_loader.go"
    assert copy.text.startswith("```go\npackage config") and copy.finish_reason == "stop"
    assert copy.extra["fidelity"] == 1.0  # the fake copies perfectly
    assert copy.draft_n is None and copy.agreement is None  # no speculation, no reference
    agent = [r for r in run.records if r.kind == "agent"]
    assert [r.cell["turn"] for r in agent] == list(range(1, turns + 1))
    assert all(r.tool_calls == [{"id": "c1", "name": "read_file", "arguments": '{"path": "a.py"}'}] for r in agent)
    # per turn: the prompt grows and, from turn 2 on, all but the new messages come from the cache
    assert [r.prompt_tokens for r in agent] == sorted(r.prompt_tokens or 0 for r in agent)
    assert agent[0].cached_tokens == PREFIX and not agent[0].cache_hit
    for prev, cur in itertools.pairwise(agent):
        assert (cur.cached_tokens or 0) >= (prev.prompt_tokens or 0) - 1 and not cur.cache_hit
    rows = agent_turn_rows(run.records)
    assert [r["turn"] for r in rows] == list(range(1, turns + 1))
    assert rows[0]["cached_fraction"] < 0.2
    assert all(b["cached_tokens"] > a["cached_tokens"] for a, b in itertools.pairwise(rows))
    summary = load_run(tmp_path / "base.json").summary
    assert [w["workload"] for w in summary["workloads"]] == ["copy", "edit", "json", "agent"]
    assert len(summary["agent_turns"]) == turns
    assert summary["headline"]["agent_cached_fraction_turn2plus"] > 0.5
    assert run.settings["workload_items"]["copy"] == ["config_loader.go", "rate_limiter.py", "retry.ts"]


def test_repeats_and_concurrency_pick_different_items_and_ids(tmp_path: Path) -> None:
    run = workload_run(tmp_path, "c", WorkloadFake(), workloads=["copy"], concurrency=[1, 2], repeat=2)
    recs = [r for r in run.records if r.kind == "copy"]
    assert len(recs) == 2 + 4 and len({r.id for r in recs}) == 6
    assert {r.cell["item"] for r in recs if r.cell["concurrency"] == 1} == {"config_loader.go", "rate_limiter.py"}
    two = [r for r in recs if r.cell["concurrency"] == 2]
    assert len({r.batch for r in two}) == 2  # two batches of two in flight together


def test_reference_run_gives_agreement_and_acceptance(tmp_path: Path) -> None:
    workload_run(tmp_path, "base", WorkloadFake())
    same = workload_run(tmp_path, "spec", WorkloadFake(draft=(40, 30)), reference=str(tmp_path / "base.json"))
    off = workload_run(
        tmp_path, "bad", WorkloadFake(draft=(40, 10), diverge_after=3), reference=str(tmp_path / "base.json")
    )
    for r in same.records:
        if r.kind != "calibration":
            assert r.agreement == 1.0 and r.exact_match is True and r.reference == "base"
            assert r.draft_n == 40 and r.draft_accepted == 30
    assert any("agreement: 10 output(s) compared with base" in n for n in same.notes)
    copy = next(r for r in off.records if r.kind == "copy")
    assert 0 < (copy.agreement or 0) < 0.1 and copy.exact_match is False
    rows = {r["workload"]: r for r in workload_rows(off.records)}
    assert rows["copy"]["acceptance"] == pytest.approx(0.25) and rows["copy"]["exact_matches"] == 0
    # a reference of other prompts matches nothing and says so
    other = workload_run(
        tmp_path, "other", WorkloadFake(), workloads=["json"], concurrency=[2], reference=str(tmp_path / "base.json")
    )
    assert all(r.agreement is None for r in other.records)
    assert any("no request matches" in n for n in other.notes)


def test_workloads_need_the_chat_api(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--workload copy sends chat messages"):
        run_speed(
            Target(url="http://fake:1", api="completions"),
            SpeedOptions(workloads=["chat", "copy"]),
            tmp_path / "x.json",
            transport=WorkloadFake().transport(),
        )


def test_plan_reads_user_files_and_recording(tmp_path: Path) -> None:
    f = tmp_path / "mine.py"
    f.write_text("value = 10\nvalue = value * 20\n")
    rec = tmp_path / "loop.json"
    rec.write_text(
        json.dumps(
            {
                "name": "loop",
                "messages": [
                    {"role": "user", "content": "go"},
                    {"role": "assistant", "content": "a"},
                    {"role": "user", "content": "again"},
                    {"role": "assistant", "content": "b"},
                ],
            }
        )
    )
    plan = build_plan(["copy", "edit", "agent"], [f], rec)
    assert [i.name for i in plan.items["copy"]] == ["mine.py"]
    assert [i.name for i in plan.items["edit"]] == ["mine.py#rename0", "mine.py#number1"]
    assert plan.turns_per_item("agent") == 2
    opts = SpeedOptions(workloads=["chat", "copy", "agent"], prompt_tokens=[10, 20], concurrency=[1, 2], repeat=2)
    assert opts.total_requests(plan) == 2 * 2 * 3 + 2 * 3 + 2 * 3 * 2


# -- speculation sweep ---------------------------------------------------------------------


def test_with_baseline_puts_a_none_point_first_per_combination() -> None:
    assert with_baseline([{"ubatch": 32}]) == [{"ubatch": 32}]
    assert with_baseline([{"speculation": "ngram-simple"}, {"speculation": "ngram-mod"}]) == [
        {"speculation": "none"},
        {"speculation": "ngram-simple"},
        {"speculation": "ngram-mod"},
    ]
    assert with_baseline([{"speculation": "ngram-mod"}, {"speculation": "none"}]) == [
        {"speculation": "none"},
        {"speculation": "ngram-mod"},
    ]
    grid = [{"spec": s, "ub": u} for s in ("none", "ngram-mod") for u in (32, 64)]
    assert with_baseline(grid) == grid


class FakeRestarter:
    """Per point, the fake behaves like a server with that speculation type."""

    def __init__(self, fake: WorkloadFake) -> None:
        self.fake = fake
        self.started: list[dict[str, Any]] = []

    def start(self, values: dict[str, Any]) -> tuple[Target, dict[str, Any]]:
        self.started.append(values)
        spec = values["speculation"]
        self.fake.prompts.clear()  # a restart empties the prompt cache
        self.fake.draft = None if spec == "none" else {"ngram-simple": (50, 20), "ngram-mod": (60, 54)}[spec]
        self.fake.diverge_after = 4 if spec == "ngram-simple" else None
        return Target(url="http://fake:1"), {"server": {"speculation": [] if spec == "none" else [spec]}}

    def finish(self) -> str:
        return "fake: done"


def speculation_sweep(tmp_path: Path) -> Any:
    fake = WorkloadFake(calls=True)
    restarter = FakeRestarter(fake)
    opts = SpeedOptions(
        prompt_tokens=[20], gen_tokens=4, concurrency=[1], repeat=1, workloads=["chat", "copy", "agent"], max_tokens=400
    )
    run, _ = run_sweep(
        restarter,
        [{"speculation": "ngram-simple"}, {"speculation": "ngram-mod"}],
        opts,
        tmp_path / "sweep.json",
        label="spec",
        transport=fake.transport(),
    )
    return run, restarter


def test_speculation_sweep_runs_the_baseline_first_and_compares_with_it(tmp_path: Path) -> None:
    run, restarter = speculation_sweep(tmp_path)
    assert [v["speculation"] for v in restarter.started] == ["none", "ngram-simple", "ngram-mod"]
    base, simple, mod = run.points
    assert baseline_of(run, base) is None and baseline_of(run, mod) is base
    assert base is not None and simple is not None and mod is not None
    # every point sent the same prompts (chat included: one nonce for the sweep)
    ids = [[r.id for r in p.records] for p in run.points]
    assert ids[0] == ids[1] == ids[2]
    assert all(r.agreement is None for r in base.records)
    assert all(r.agreement == 1.0 and r.exact_match for r in mod.records if r.kind != "calibration")
    copy = next(r for r in simple.records if r.kind == "copy")
    assert copy.exact_match is False and (copy.agreement or 0) < 0.2
    rows = {(str(r["values"]["speculation"]), r["workload"]): r for r in sweep_workload_rows(run)}
    assert set(rows) == {(s, w) for s in ("none", "ngram-simple", "ngram-mod") for w in ("chat", "copy", "agent")}
    assert rows[("none", "copy")]["baseline"] and rows[("none", "copy")]["speedup"] is None
    assert rows[("ngram-mod", "copy")]["speedup"] == pytest.approx(20 / 8)
    assert rows[("ngram-mod", "copy")]["acceptance"] == pytest.approx(0.9)
    assert run.summary["headline"]["best_speculation_speedup"] == pytest.approx(2.5)
    assert any(n == "fake: done" for n in run.notes)


def test_sweep_report_has_the_speculation_table_and_plots(tmp_path: Path) -> None:
    run, _ = speculation_sweep(tmp_path)
    md, plots = write_report([run], tmp_path / "rep")
    text = md.read_text()
    assert "### Decode per workload and setting" in text
    assert "| none | copy | 1 | 1 | 0 | " in text and "| baseline | – |" in text
    assert "| ngram-mod | copy | 1 | 1 | 0 | " in text and "2.50×" in text and "90%" in text and "40%" in text
    assert "reference" in text
    names = {p.name for p in plots}
    assert {"sweep-workloads-spec.png", "sweep-agent-spec.png"} <= names
    for p in plots:
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 5000


def test_speed_report_has_workload_and_agent_turn_tables_and_plots(tmp_path: Path) -> None:
    workload_run(tmp_path, "base", WorkloadFake(calls=True))
    spec = workload_run(
        tmp_path, "ngram-mod", WorkloadFake(draft=(40, 30), calls=True), reference=str(tmp_path / "base.json")
    )
    md, plots = write_report([spec], tmp_path / "rep")
    text = md.read_text()
    assert "### Workloads" in text and "### Agent turns" in text and "_no speed records_" not in text
    assert "| copy | 1 | 1 | 1 | 0 |" in text and "75%" in text and "| 1/1 |" in text
    assert "throughput-vs-concurrency" not in text  # no chat cells, no throughput plot
    assert {p.name for p in plots} == {"decode-per-workload.png", "agent-cached-per-turn.png"}
    for p in plots:
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 5000
    both = render_markdown([load_run(tmp_path / "base.json"), spec])
    assert "### workloads (workload, concurrency)" in both and "### agent turns (concurrency, turn)" in both
    _md2, plots2 = write_report([load_run(tmp_path / "base.json"), spec], tmp_path / "rep2")
    assert {p.name for p in plots2} == {"decode-per-workload.png", "agent-cached-per-turn.png"}


# -- the CLI's checks ----------------------------------------------------------------------


def _spec_file(tmp_path: Path) -> Path:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    path = tmp_path / "c.toml"
    path.write_text(
        f'name = "c"\nmodel = "{model}"\n\n[[workers]]\nname = "w1"\nport = 50052\n\n[server]\nport = 8081\n'
    )
    return path


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["speed", "--url", "http://127.0.0.1:1", "--workload", "poem"], "--workload 'poem': unknown workload"),
        (["speed", "--url", "http://127.0.0.1:1", "--workload-file", "x.py"], "--workload-file is for the copy"),
        (
            ["speed", "--url", "http://127.0.0.1:1", "--workload", "copy", "--workload-file", "nope.py"],
            "--workload-file nope.py: no such file",
        ),
        (["speed", "--url", "http://127.0.0.1:1", "--recording", "r.json"], "--recording is for the agent"),
        (
            ["speed", "--url", "http://127.0.0.1:1", "--workload", "agent", "--recording", "nope.json"],
            "--recording nope.json: no such file",
        ),
        (
            ["speed", "--url", "http://127.0.0.1:1", "--workload", "copy", "--reference", "nope.json"],
            "--reference nope.json: no such run file",
        ),
        (
            ["speed", "--url", "http://127.0.0.1:1", "--workload", "copy", "--api", "completions"],
            "--workload copy sends chat messages",
        ),
        (["sweep", "-c", "SPEC", "--set", "speculation=ngram-mod,bogus"], "unknown speculation type 'bogus'"),
        (["sweep", "-c", "SPEC", "--set", "speculation=draft-simple"], "draft_model"),
        (["sweep", "-c", "SPEC", "--set", "spec_ngram_mod_n_max=big"], "--set spec_ngram_mod_n_max"),
        (["sweep", "-c", "SPEC", "--set", "port=1,2"], "--set port: unknown server option"),
    ],
)
def test_bad_workload_input_is_one_line(
    args: list[str], needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    import splitserve.cli._bench  # noqa: F401  (registers bench)
    from splitserve.cli._app import app

    monkeypatch.chdir(tmp_path)
    args = [str(_spec_file(tmp_path)) if a == "SPEC" else a for a in args]
    r = CliRunner().invoke(app, ["bench", *args])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.lstrip().startswith("bench ")]
    assert r.exit_code != 0
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert len(lines) == 1 and lines[0].startswith("splitserve: error:") and needle in lines[0], r.stderr
    assert not (tmp_path / "bench-runs").exists() or not list((tmp_path / "bench-runs").glob("*.json"))


def test_set_speculation_maps_to_the_server_spec(tmp_path: Path) -> None:
    from splitserve.bench._cluster import server_field, with_server
    from splitserve.cluster import load_spec

    spec = load_spec(_spec_file(tmp_path))
    assert server_field("speculation") == server_field("spec") == server_field("spec-type") == "speculation"
    assert server_field("spec_ngram_mod_n_max") == "spec_ngram_mod_n_max"
    assert with_server(spec, {"speculation": "ngram-mod"}).server.speculation == ["ngram-mod"]
    assert with_server(spec, {"speculation": "none"}).server.speculation == []
    both = with_server(spec, {"speculation": "ngram-simple+ngram-mod", "spec_ngram_mod_n_max": 32}).server
    assert both.speculation == ["ngram-simple", "ngram-mod"] and both.spec_ngram_mod_n_max == 32
    assert spec.server.speculation == []  # the spec itself is not changed


def test_stream_timer_builds_tool_calls_from_deltas() -> None:
    from splitserve.bench._stream import StreamTimer

    t = StreamTimer()
    t.feed(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "a", "type": "function", "function": {"name": "read_", "arguments": ""}}
                        ]
                    },
                }
            ]
        },
        0.1,
    )
    t.feed(
        {
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "file", "arguments": '{"p'}}]}}
            ]
        },
        0.2,
    )
    t.feed(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "function": {"arguments": 'ath": 1}'}},
                            {"index": 1, "id": "b", "function": {"name": "run_tests", "arguments": "{}"}},
                        ]
                    },
                }
            ]
        },
        0.3,
    )
    tr = t.finish(0.4)
    assert tr.tool_calls == [
        {"id": "a", "name": "read_file", "arguments": '{"path": 1}'},
        {"id": "b", "name": "run_tests", "arguments": "{}"},
    ]
    assert tr.tool_call_chunks == 3 and tr.first_token == 0.1


def test_one_generated_token_has_no_decode_speed() -> None:
    from splitserve.bench._stats import request_metrics

    rec = RequestRecord(
        id="a", kind="agent", timings={"predicted_n": 1, "predicted_ms": 0.001, "prompt_n": 10, "prompt_ms": 5.0}
    )
    assert request_metrics(rec)["decode_tps_server"] is None
    rec.timings = {"predicted_n": 3, "predicted_ms": 30.0}
    assert request_metrics(rec)["decode_tps_server"] == pytest.approx(100.0)
