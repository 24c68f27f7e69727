"""Pass rates clustered by scenario, exact McNemar, paired bootstrap, MDE and run summaries."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from splitserve.eval._stats import (
    mcnemar_exact,
    outcome,
    paired_compare,
    pass_rate,
    planning_mde,
    summarize,
    wilson,
)


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        (0, 5, 0.0625),
        (5, 0, 0.0625),
        (1, 9, 0.021484375),
        (3, 7, 0.34375),
        (4, 4, 1.0),
        (0, 0, 1.0),
        (0, 1, 1.0),
        (0, 20, 2 / 2**20),
    ],
)
def test_mcnemar_exact_matches_hand_computed(b: int, c: int, p: float) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(p, rel=1e-12)


def test_wilson_known_value_and_single_scenario_rate() -> None:
    assert wilson(0.8, 10) == pytest.approx((0.4902, 0.9433), abs=5e-5)
    r = pass_rate([(8, 10)])  # one scenario: no between-scenario variance to estimate
    assert (r.estimate, r.n_scenarios, r.n_trials, r.deff) == (0.8, 1, 10, 1.0)
    assert (r.low, r.high) == pytest.approx((0.4902, 0.9433), abs=5e-5)


def test_one_trial_per_scenario_is_the_plain_binomial_case() -> None:
    rng = random.Random(3)
    groups = [(int(rng.random() < 0.7), 1) for _ in range(57)]
    r = pass_rate(groups)
    assert r.se == pytest.approx(r.se_binomial, rel=1e-12)
    assert r.deff == pytest.approx(1.0)
    assert r.estimate is not None
    assert (r.low, r.high) == pytest.approx(wilson(r.estimate, 57), rel=1e-9)
    r10 = pass_rate([(1, 1)] * 8 + [(0, 1)] * 2)
    assert (r10.low, r10.high) == pytest.approx((0.4902, 0.9433), abs=5e-5)


def test_correlated_trials_widen_the_interval() -> None:
    # every scenario all-pass or all-fail: 5 trials are worth about one
    r = pass_rate([(5, 5)] * 16 + [(0, 5)] * 4)
    naive = wilson(0.8, 100)
    assert r.deff is not None and r.low is not None and r.high is not None
    assert r.estimate == 0.8 and r.deff > 4
    assert r.high - r.low > 1.8 * (naive[1] - naive[0])
    # independent-looking trials: no inflation
    assert pass_rate([(4, 5)] * 20).deff == 1.0


def test_extreme_rates_get_a_real_interval_and_unscored_groups_are_dropped() -> None:
    zero = pass_rate([(0, 5)] * 8 + [(0, 0)])
    assert (zero.estimate, zero.n_scenarios, zero.n_trials, zero.low) == (0.0, 8, 40, 0.0)
    assert zero.high is not None
    assert 0.05 < zero.high < 0.15
    one = pass_rate([(3, 3)] * 10)
    assert one.low is not None
    assert one.high == 1.0 and 0.85 < one.low < 0.95
    empty = pass_rate([(0, 0)])
    assert empty.estimate is None and empty.low is None and empty.n_scenarios == 0
    with pytest.raises(ValueError, match="passes <= scored"):
        pass_rate([(3, 2)])


def _simulate(rng: np.random.Generator, pa: np.ndarray, pb: np.ndarray, trials: int, seed: int) -> Any:
    ya, yb = rng.binomial(trials, pa), rng.binomial(trials, pb)
    a = {f"s{i}": (int(ya[i]), trials) for i in range(len(pa))}
    b = {f"s{i}": (int(yb[i]), trials) for i in range(len(pb))}
    return paired_compare(a, b, seed=seed, resamples=2000)


def test_bootstrap_interval_covers_the_true_difference() -> None:
    rng = np.random.default_rng(11)
    pa = rng.beta(2, 1, 100)
    pb = np.clip(pa + rng.normal(-0.06, 0.15, 100), 0, 1)
    true = 100 * float((pb - pa).mean())
    hits = 0
    for rep in range(200):
        c = _simulate(rng, pa, pb, 5, rep)
        hits += c.ci_low_pp <= true <= c.ci_high_pp
    assert hits / 200 >= 0.90


def test_significance_rule_rarely_fires_under_the_null() -> None:
    rng = np.random.default_rng(12)
    p = rng.beta(2, 1, 100)
    fired = sum(_simulate(rng, p, p, 5, rep).significant for rep in range(200))
    assert fired / 200 <= 0.10


def test_a_large_real_difference_is_significant() -> None:
    a = {f"s{i}": (5, 5) for i in range(60)}
    b = {f"s{i}": (5, 5) if i < 30 else (0, 5) for i in range(60)}
    c = paired_compare(a, b)
    assert c.delta_pp == pytest.approx(-50.0)
    assert c.ci_high_pp is not None
    assert c.ci_high_pp < 0 and c.p_mcnemar < 1e-6 and c.significant
    assert (c.a_pass_b_fail, c.a_fail_b_pass) == (30, 0)
    assert [f.scenario for f in c.flips_down][:2] == ["s30", "s31"]


def test_pairing_is_by_scenario_id_not_by_order() -> None:
    rng = random.Random(5)
    ids = [f"sc-{i:03d}" for i in range(40)]
    a = {k: (rng.randint(0, 5), 5) for k in ids}
    b = {k: (rng.randint(0, 5), 5) for k in ids}
    base = paired_compare(a, b, seed=3, resamples=500)
    shuffled = ids[:]
    rng.shuffle(shuffled)
    again = paired_compare({k: a[k] for k in shuffled}, {k: b[k] for k in reversed(shuffled)}, seed=3, resamples=500)
    assert again == base
    # a scenario missing from one run, or without a scored trial, does not count
    extra = paired_compare(
        {**a, "only-a": (5, 5), "unscored": (0, 0)}, {**b, "unscored": (3, 5)}, seed=3, resamples=500
    )
    assert extra == base


def test_majority_verdicts_flips_and_ties() -> None:
    a = {"up": (0, 3), "down": (3, 3), "tie": (2, 4), "same": (2, 3)}
    b = {"up": (3, 3), "down": (1, 3), "tie": (0, 4), "same": (3, 3)}
    c = paired_compare(a, b, resamples=200)
    assert [f.scenario for f in c.flips_up] == ["up"]
    assert [(f.scenario, f.a, f.b) for f in c.flips_down] == [("down", (3, 3), (1, 3))]
    assert c.undecided == 1 and c.p_mcnemar == 1.0 and not c.significant
    d = [1.0, -2 / 3, -0.5, 1 / 3]  # same, up, down, tie: B - A fractions
    assert c.delta_pp == pytest.approx(100 * np.mean(d))
    assert c.mde_pp == pytest.approx(100 * 2.801585 * np.std(d, ddof=1) / 2)
    assert c.a_pct is not None and c.b_pct is not None and c.delta_pp is not None
    assert c.a_pct - c.b_pct == pytest.approx(-c.delta_pp)


def test_zero_spread_falls_back_to_the_planning_formula() -> None:
    a = {f"s{i}": (3, 3) for i in range(25)}
    c = paired_compare(a, dict(a), resamples=200)
    assert c.delta_pp == 0 and (c.ci_low_pp, c.ci_high_pp) == (0, 0) and not c.significant
    assert c.mde_pp == pytest.approx(planning_mde(25, 3, discordant=0.0))
    assert paired_compare({}, a).n_scenarios == 0


def test_planning_mde_model_and_monotonicity() -> None:
    assert planning_mde(143, 5) == pytest.approx(100 * 2.8016 * math.sqrt(0.15 + 0.2 / 5) / math.sqrt(143), rel=1e-4)
    assert planning_mde(143, 1) == pytest.approx(13.86, abs=0.01)
    assert planning_mde(143, 5) == pytest.approx(10.21, abs=0.01)
    by_trials = [planning_mde(143, k) for k in (1, 2, 3, 5, 10)]
    by_n = [planning_mde(n, 5) for n in (20, 50, 143, 500, 2000)]
    assert by_trials == sorted(by_trials, reverse=True) and len(set(by_trials)) == 5
    assert by_n == sorted(by_n, reverse=True) and len(set(by_n)) == 5
    with pytest.raises(ValueError, match="n_scenarios >= 1"):
        planning_mde(0, 5)


def trial(sid: str, k: int, tier: str, verdict: str, cause: str | None = None, **kw: Any) -> dict[str, Any]:
    return {
        "type": "trial",
        "scenario": sid,
        "trial": k,
        "tier": tier,
        "category": kw.pop("category", "files"),
        "verdict": verdict,
        "cause": cause,
        "evidence": kw.pop("evidence", None),
        **kw,
    }


def test_outcome_keeps_not_quality_causes_apart() -> None:
    assert outcome({"verdict": "pass"}) == "pass"
    assert outcome({"verdict": "fail", "cause": "wrong_tool"}) == "fail"
    assert outcome({"verdict": "fail", "cause": "parse_error"}) == "fail"
    assert outcome({"verdict": "timeout", "cause": "timeout"}) == "timeout"
    assert outcome({"verdict": "fail", "cause": "http_error"}) == "error"
    assert outcome({"verdict": "error", "cause": "http_error"}) == "error"


def test_summarize_groups_causes_and_timings() -> None:
    recs = [
        {
            "type": "run",
            "suite": "builtin",
            "model": "m",
            "trials": 2,
            "decode_tps": 25.0,
            "started_at": "2026-06-01T10:00:00+00:00",
        },
        trial(
            "h1",
            0,
            "hard",
            "fail",
            "wrong_tool",
            evidence="called ls, expected   cat",
            started_at="2026-06-01T10:00:00+00:00",
            duration_s=10.0,
            gen_s=8.0,
            completion_tokens=80,
        ),
        trial(
            "h1",
            1,
            "hard",
            "pass",
            started_at="2026-06-01T10:00:10+00:00",
            duration_s=10.0,
            gen_s=2.0,
            completion_tokens=20,
        ),
        trial(
            "e1",
            0,
            "easy",
            "fail",
            "wrong_tool",
            evidence="called rm",
            category="shell",
            started_at="2026-06-01T10:00:20+00:00",
            duration_s=5.0,
        ),
        trial(
            "e1",
            0,
            "easy",
            "pass",
            category="shell",  # the same trial again: the last wins
            started_at="2026-06-01T10:00:20+00:00",
            duration_s=5.0,
        ),
        trial(
            "e1",
            1,
            "easy",
            "timeout",
            "timeout",
            category="shell",
            error="no answer in 60 s",
            started_at="2026-06-01T10:00:25+00:00",
            duration_s=60.0,
        ),
        trial("z1", 0, "odd", "fail", "bad_arguments", started_at="2026-06-01T10:00:30+00:00", duration_s=1.0),
        # a resumed session after a long pause: the gap is not run time
        {"type": "run", "resumed": True, "started_at": "2026-06-01T12:00:00+00:00", "decode_tps": 24.0},
        trial(
            "z1",
            1,
            "odd",
            "error",
            "http_error",
            error="HTTP 500",
            started_at="2026-06-01T12:00:00+00:00",
            duration_s=4.0,
        ),
        {"type": "end", "duration_s": 4.0},
    ]
    s = summarize(recs)
    assert s["sessions"] == 2 and s["complete"] and s["decode_tps"] == 25.0 and s["trials"] == 6
    assert list(s["tiers"]) == ["easy", "hard", "odd"]
    assert (s["tiers"]["easy"]["rate"].estimate, s["tiers"]["easy"]["timeouts"]) == (1.0, 1)
    assert s["tiers"]["hard"]["rate"].estimate == 0.5
    assert (s["tiers"]["odd"]["rate"].n_trials, s["tiers"]["odd"]["errors"]) == (1, 1)
    assert (s["total"]["rate"].passes, s["total"]["rate"].n_trials, s["total"]["scenarios"]) == (2, 4, 3)
    assert list(s["categories"]) == ["files", "shell"]
    assert list(s["causes"]) == ["wrong_tool", "bad_arguments"]
    assert s["causes"]["wrong_tool"] == {
        "trials": 1,
        "scenarios": 1,
        "example": {"scenario": "h1", "trial": 0, "evidence": "called ls, expected cat"},
    }
    assert s["apart"]["timeout"]["trials"] == 1 and s["apart"]["error"]["scenarios"] == 1
    assert s["apart"]["timeout"]["example"]["evidence"] == "no answer in 60 s"
    assert list(s["scenarios"]) == ["e1", "h1", "z1"]
    assert s["scenarios"]["e1"] | {"causes": None} == {
        "tier": "easy",
        "category": "shell",
        "passes": 1,
        "scored": 1,
        "timeouts": 1,
        "errors": 0,
        "causes": None,
        "evidence": None,
        "apart_evidence": "no answer in 60 s",
        "budget_s": None,
    }
    assert s["wall_s"] == pytest.approx(85.0 + 4.0)  # 10:00:00 → 10:01:25, then 4 s after the resume
    assert s["trial_sum_s"] == pytest.approx(90.0)
    assert s["generation_tps"] == pytest.approx(100 / 10)
    assert s["scenarios_per_s"] == pytest.approx(3 / 89)


def test_summarize_of_nothing() -> None:
    s = summarize([])
    assert s["header"] == {} and s["total"]["rate"].estimate is None and s["wall_s"] is None
    assert s["generation_tps"] is None and s["causes"] == {} and not s["complete"]
