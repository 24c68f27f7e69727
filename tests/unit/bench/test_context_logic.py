"""Needle placement, grading by string match, miss reasons, lengths and depths."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from splitserve._errors import UsageError
from splitserve.bench import ContextOptions, Target, parse_depths, parse_lengths
from splitserve.bench._context import CONTROL, build_haystack, grade
from splitserve.bench._records import RequestRecord
from splitserve.bench._run import run_context
from splitserve.bench._speed import Session

from .fakes import FakeServer


def rec(text: str = "", finish: str = "stop", **kw: object) -> RequestRecord:
    return RequestRecord(id="x", kind="context", text=text, finish_reason=finish, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["4827193", "The number is 4,827,193.", "it is 4827193\n"])
def test_found_by_digits(text: str) -> None:
    assert grade("4827193", rec(text)) == ("found", "")


def test_miss_reasons() -> None:
    assert grade("4827193", rec("I do not know")) == ("miss", "not found (answered 'I do not know')")
    assert grade("4827193", rec("It is 4827192"))[0] == "miss"
    assert grade("4827193", rec("The secret number of", finish="length"))[1].startswith("answer cut by max tokens")
    assert grade("4827193", rec("", finish="length", reasoning_chars=500)) == (
        "miss",
        "reasoning never ended (cut by max tokens)",
    )
    assert grade("4827193", rec(error="HTTP 400: the request exceeds the available context size")) == (
        "miss",
        "request failed: HTTP 400: the request exceeds the available context size",
    )
    assert grade("1", rec(error="skipped: too long"))[0] == "skipped"
    assert grade(None, rec("anything")) == ("n/a", "no needle")


def test_a_longer_number_containing_the_answer_is_not_a_match() -> None:
    assert grade("4827193", rec("14827193"))[0] == "miss"


def test_parse_lengths_and_depths() -> None:
    assert parse_lengths("8k, 64k,1000") == [8192, 65536, 1000]
    assert parse_depths("0,0.5,1") == [0.0, 0.5, 1.0]
    for bad in ("", "abc", "10"):
        with pytest.raises(UsageError):
            parse_lengths(bad)
    with pytest.raises(UsageError):
        parse_depths("1.5")


def test_cells_add_control_per_length() -> None:
    cells = ContextOptions(lengths=[100, 200], depths=[0.5], control=True).cells()
    assert cells == [(100, 0.5), (100, CONTROL), (200, 0.5), (200, CONTROL)]
    assert ContextOptions(lengths=[100], needle=False).cells() == [(100, None)]


class _Stub:
    pass


def test_haystack_holds_the_needle_at_its_depth_and_control_does_not() -> None:
    session = Session(_Stub(), lambda r: None)  # type: ignore[arg-type]
    rng = random.Random(1)
    early = build_haystack(session, "t1", 400, 0.1, rng)
    late = build_haystack(session, "t2", 400, 0.9, rng)
    for hay in (early, late):
        assert hay.text.count(hay.expected) == 1

    def pos(h):
        return h.text.index(h.expected) / len(h.text)

    assert pos(early) < 0.3 < 0.7 < pos(late)
    control = build_haystack(session, "t3", 400, CONTROL, rng)
    assert control.expected not in control.text and "secret number of the" in control.text


def test_fake_reasoning_model_and_wrong_answers_are_misses(tmp_path: Path) -> None:
    opts = ContextOptions(lengths=[100], depths=[0.5], max_tokens=4)
    run, _ = run_context(
        Target(url="http://fake:1"), opts, tmp_path / "a.json", transport=FakeServer(reasoning=True).transport()
    )
    cells = [r for r in run.records if r.kind == "context"]
    assert [c.extra["reason"] for c in cells] == ["reasoning never ended (cut by max tokens)"]
    fake = FakeServer(answer="no idea")
    run, _ = run_context(Target(url="http://fake:1"), opts, tmp_path / "b.json", transport=fake.transport())
    assert "ignore_eos" not in fake.bodies[-1]  # the model must be able to stop on its own
    assert run.records[-1].extra["verdict"] == "miss"
    assert run.records[-1].extra["reason"].startswith("not found")
    opts = ContextOptions(lengths=[5000], depths=[0.5])
    run, _ = run_context(Target(url="http://fake:1"), opts, tmp_path / "c.json", transport=FakeServer().transport())
    assert run.records[-1].extra["verdict"] == "skipped" and "n_ctx 4096" in (run.records[-1].error or "")
