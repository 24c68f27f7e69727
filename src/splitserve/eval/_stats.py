"""Pass rates, intervals and paired comparisons of eval runs (pure: the report renders them).

The scenario is the unit of analysis (research round2.md §1.9): the trials of one scenario
are correlated, so a pass rate's interval is clustered by scenario and a comparison of two
runs pairs scenarios by id and resamples scenarios, never trials. Verdicts "pass" and
"fail" are scored; "timeout" and "error" (and a fail whose cause is in
:data:`NOT_QUALITY`) are not the model's answer: they are left out of every pass rate and
counted apart.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from ._records import CAUSES, NOT_QUALITY
from ._scenario import TIERS

Z95 = 1.959964  # two-sided alpha .05
Z_POWER80 = 0.841621  # power .8
MDE_Z = Z95 + Z_POWER80  # 2.801585: (z_alpha/2 + z_beta) of every minimum detectable difference
APART = ("timeout", "error")
_TIER_RANK = {t: i for i, t in enumerate(TIERS)}


def _tier_rank(tier: Any) -> int:
    return _TIER_RANK.get(str(tier), len(_TIER_RANK))


@dataclass(frozen=True)
class PassRate:
    """A pass rate over scenarios: fractions (0-1), ``None`` where nothing was scored."""

    estimate: float | None
    n_scenarios: int
    n_trials: int
    passes: int
    se: float | None  # clustered by scenario
    se_binomial: float | None  # the same estimator with every trial its own cluster
    deff: float | None  # design effect: max(1, se**2 / se_binomial**2)
    n_eff: float | None  # n_trials / deff
    low: float | None  # 95% Wilson score interval on n_eff
    high: float | None


@dataclass(frozen=True)
class Flip:
    """A scenario whose majority verdict differs between the runs: (passes, scored) of each."""

    scenario: str
    a: tuple[int, int]
    b: tuple[int, int]


@dataclass(frozen=True)
class Comparison:
    """Run B against run A over the scenarios scored in both; rates and deltas in percent / pp.

    ``significant``: the 95% paired-bootstrap interval of the delta excludes 0 AND the exact
    McNemar test on per-scenario majority verdicts gives p < .05 (both must agree, which keeps
    the false-positive rate at or under 5% even where the bootstrap is a little optimistic).
    """

    n_scenarios: int
    a_pct: float | None  # mean per-scenario pass fraction of A, x100
    b_pct: float | None
    delta_pp: float | None  # mean(frac_B - frac_A), x100
    ci_low_pp: float | None
    ci_high_pp: float | None
    p_mcnemar: float
    a_pass_b_fail: int
    a_fail_b_pass: int
    undecided: int  # scenarios at exactly 0.5 in either run: not in the discordant counts
    mde_pp: float | None
    significant: bool
    flips_down: tuple[Flip, ...]  # A pass -> B fail
    flips_up: tuple[Flip, ...]  # A fail -> B pass


def wilson(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``p`` observed on ``n`` (possibly effective) trials."""
    if n <= 0:
        raise ValueError(f"wilson: n must be positive, got {n}")
    z2n = z * z / n
    center = (p + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * math.sqrt(p * (1 - p) / n + z2n / (4 * n))
    return max(0.0, center - half), min(1.0, center + half)


def pass_rate(groups: Iterable[tuple[int, int]]) -> PassRate:
    """Pass rate over per-scenario (passes, scored_trials), clustered by scenario.

    estimate = Σpasses / Σscored. SE is the cluster-robust ratio estimator
    sqrt(n/(n-1) · Σ(y_i − p·m_i)²) / Σm_i over the n scenarios; the binomial SE is the same
    formula with each trial as a cluster, sqrt(p(1−p)/(N−1)), so the two agree exactly at one
    trial per scenario. The interval is Wilson's on n_eff = N / deff, deff = max(1, SE²/SE_b²)
    (1 when either is 0 or undefined), so p = 0 or 1 still gets a non-degenerate interval.
    Scenarios with no scored trial are left out.
    """
    pairs = []
    for y, m in groups:
        if not 0 <= y <= m:
            raise ValueError(f"pass_rate: need 0 <= passes <= scored, got ({y}, {m})")
        if m:
            pairs.append((y, m))
    if not pairs:
        return PassRate(None, 0, 0, 0, None, None, None, None, None, None)
    ys = np.array([p[0] for p in pairs], dtype=float)
    ms = np.array([p[1] for p in pairs], dtype=float)
    n, total, passes = len(pairs), float(ms.sum()), int(ys.sum())
    p = passes / total
    se = math.sqrt(n / (n - 1) * float(((ys - p * ms) ** 2).sum())) / total if n > 1 else None
    se_b = math.sqrt(p * (1 - p) / (total - 1)) if total > 1 else None
    deff = max(1.0, se * se / (se_b * se_b)) if se is not None and se_b else 1.0
    n_eff = total / deff
    low, high = wilson(p, n_eff)
    return PassRate(p, n, int(total), passes, se, se_b, deff, n_eff, low, high)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p on discordant counts: min(1, 2·Σ_{k≤min(b,c)} C(b+c,k) / 2^(b+c))."""
    if b < 0 or c < 0:
        raise ValueError(f"mcnemar_exact: counts must be >= 0, got ({b}, {c})")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1))
    whole: int = 2**n  # n >= 0, so an int (typeshed types int ** int as Any)
    return min(1.0, 2 * tail / whole)


def planning_mde(n_scenarios: int, trials: float, discordant: float = 0.15, within_flip: float = 0.20) -> float:
    """The a-priori minimum detectable difference, in percentage points (α .05 two-sided, power .8).

    Model of the per-scenario difference d_i = frac_B − frac_A: a share ``discordant`` of the
    scenarios really differ between the two models (|d| = 1, variance ≈ discordant), and each
    fraction carries trial noise that averages down with the trials (variance within_flip /
    trials). So sd_diff² = discordant + within_flip / trials and MDE = 2.8016·sd_diff / √n.
    """
    if n_scenarios < 1 or trials <= 0:
        raise ValueError(f"planning_mde: need n_scenarios >= 1 and trials > 0, got {n_scenarios}, {trials}")
    sd = math.sqrt(discordant + within_flip / trials)
    return 100.0 * MDE_Z * sd / math.sqrt(n_scenarios)


def scenarios_needed(target_pp: float, trials: float, discordant: float = 0.15, within_flip: float = 0.20) -> int:
    """How many scenarios a paired comparison needs for its MDE to reach ``target_pp``
    (the inverse of :func:`planning_mde`, same model and defaults)."""
    if target_pp <= 0 or trials <= 0:
        raise ValueError(f"scenarios_needed: need target_pp > 0 and trials > 0, got {target_pp}, {trials}")
    sd = math.sqrt(discordant + within_flip / trials)
    return math.ceil((100.0 * MDE_Z * sd / target_pp) ** 2)


def _majority(frac: float) -> bool | None:
    return True if frac > 0.5 else False if frac < 0.5 else None


def paired_compare(
    a: Mapping[str, tuple[int, int]], b: Mapping[str, tuple[int, int]], seed: int = 0, resamples: int = 10000
) -> Comparison:
    """Run B against run A, scenario by scenario (ids in both with a scored trial in each).

    delta = mean over scenarios of (frac_B − frac_A); its 95% interval is the percentile
    interval of a paired bootstrap that resamples scenario ids with replacement. McNemar is
    exact on the per-scenario majority verdicts (> 0.5 pass, < 0.5 fail, 0.5 left out).
    MDE = 2.8016·sd(d)/√n; where sd is 0 or undefined, :func:`planning_mde` with the observed
    discordant rate and the mean number of scored trials. Pairing is by id, so the order of
    the inputs does not matter.
    """
    ids = sorted(k for k in a.keys() & b.keys() if a[k][1] > 0 and b[k][1] > 0)
    n = len(ids)
    if n == 0:
        return Comparison(0, None, None, None, None, None, 1.0, 0, 0, 0, None, False, (), ())
    fa = np.array([a[k][0] / a[k][1] for k in ids])
    fb = np.array([b[k][0] / b[k][1] for k in ids])
    d = fb - fa
    down, up, undecided = [], [], 0
    for k, x, y in zip(ids, fa, fb):
        va, vb = _majority(float(x)), _majority(float(y))
        if va is None or vb is None:
            undecided += 1
        elif va and not vb:
            down.append(Flip(k, (a[k][0], a[k][1]), (b[k][0], b[k][1])))
        elif vb and not va:
            up.append(Flip(k, (a[k][0], a[k][1]), (b[k][0], b[k][1])))
    p = mcnemar_exact(len(down), len(up))
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 2_000_000 // n)
    for start in range(0, resamples, chunk):
        size = min(chunk, resamples - start)
        means[start : start + size] = d[rng.integers(0, n, size=(size, n))].mean(axis=1)
    low, high = (float(v) for v in np.percentile(means, [2.5, 97.5]))
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    if sd > 0:
        mde = 100.0 * MDE_Z * sd / math.sqrt(n)
    else:
        trials = float(np.mean([a[k][1] for k in ids] + [b[k][1] for k in ids]))
        mde = planning_mde(n, trials, discordant=(len(down) + len(up)) / n)
    return Comparison(
        n_scenarios=n,
        a_pct=100.0 * float(fa.mean()),
        b_pct=100.0 * float(fb.mean()),
        delta_pp=100.0 * float(d.mean()),
        ci_low_pp=100.0 * low,
        ci_high_pp=100.0 * high,
        p_mcnemar=p,
        a_pass_b_fail=len(down),
        a_fail_b_pass=len(up),
        undecided=undecided,
        mde_pp=mde,
        significant=(low > 0 or high < 0) and p < 0.05,
        flips_down=tuple(down),
        flips_up=tuple(up),
    )


def outcome(rec: Mapping[str, Any]) -> str:
    """A trial's outcome: "pass", "fail" (both scored), or "timeout" / "error" (counted apart)."""
    verdict, cause = rec.get("verdict"), rec.get("cause")
    if verdict == "timeout" or (verdict == "fail" and cause == "timeout"):
        return "timeout"
    if verdict == "error" or (verdict == "fail" and cause in NOT_QUALITY):
        return "error"
    return "pass" if verdict == "pass" else "fail"


def _ts(value: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return None


def _order(values: Iterable[str], first: tuple[str, ...]) -> list[str]:
    seen = set(values)
    return [v for v in first if v in seen] + sorted(seen - set(first))


def _wall_s(headers: list[dict[str, Any]], trials: list[dict[str, Any]]) -> float | None:
    """Seconds the run was running: per session (a run line), from its start to its last trial's end."""
    starts = sorted(t for t in (_ts(h.get("started_at")) for h in headers) if t is not None)
    if not starts:
        return None
    last: dict[float, float] = {}
    for rec in trials:
        begin = _ts(rec.get("started_at"))
        if begin is None:
            continue
        session = max((s for s in starts if s <= begin), default=starts[0])
        end = begin + float(rec.get("duration_s") or 0.0)
        last[session] = max(last.get(session, session), end)
    return sum(end - start for start, end in last.items()) if last else None


def summarize(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A run's figures from its records (``read_records``): rates, causes, timings.

    Keys: header (first run line), sessions (run lines), complete (an end line), trials,
    total / tiers / categories (:class:`PassRate` plus timeouts and errors per group),
    causes ({cause: trials, scenarios, example} of the scored failures, in :data:`CAUSES`
    order), apart ({"timeout"|"error": trials, scenarios, example}), scenarios ({id: tier,
    category, passes, scored, timeouts, errors, causes, evidence, apart_evidence, budget_s},
    in tier order), wall_s (summed over sessions), trial_sum_s, generation_tps
    (Σcompletion_tokens / Σgen_s: per request), throughput_tps (Σcompletion_tokens / wall),
    decode_tps (header), scenarios_per_s. A (scenario, trial) seen twice keeps the last.
    """
    headers: list[dict[str, Any]] = []
    end: dict[str, Any] | None = None
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    for rec in records:
        kind = rec.get("type")
        if kind == "run":
            headers.append(dict(rec))
        elif kind == "end":
            end = dict(rec)
        elif kind == "trial":
            latest[(str(rec.get("scenario")), int(rec.get("trial") or 0))] = dict(rec)
    trials = [latest[k] for k in sorted(latest)]

    scen: dict[str, dict[str, Any]] = {}
    causes: dict[str, dict[str, Any]] = {}
    apart: dict[str, dict[str, Any]] = {}
    for rec in trials:
        sid = str(rec.get("scenario"))
        s = scen.setdefault(
            sid,
            {
                "tier": rec.get("tier"),
                "category": rec.get("category"),
                "passes": 0,
                "scored": 0,
                "timeouts": 0,
                "errors": 0,
                "causes": Counter(),
                "evidence": None,
                "apart_evidence": None,
                "budget_s": rec.get("time_budget_s"),
            },
        )
        out = outcome(rec)
        evidence = " ".join(str(rec.get("evidence") or rec.get("error") or "").split())
        if out in APART:
            s["timeouts" if out == "timeout" else "errors"] += 1
            s["apart_evidence"] = s["apart_evidence"] or evidence or None
            bucket = apart.setdefault(out, {"trials": 0, "scenarios": set(), "example": None})
        else:
            s["scored"] += 1
            if out == "pass":
                s["passes"] += 1
                continue
            cause = str(rec.get("cause") or "unclassified")
            s["causes"][cause] += 1
            s["evidence"] = s["evidence"] or evidence or None
            bucket = causes.setdefault(cause, {"trials": 0, "scenarios": set(), "example": None})
        bucket["trials"] += 1
        bucket["scenarios"].add(sid)
        if bucket["example"] is None and evidence:
            bucket["example"] = {"scenario": sid, "trial": rec.get("trial"), "evidence": evidence}

    def group(ids: Iterable[str]) -> dict[str, Any]:
        chosen = [scen[i] for i in ids]
        return {
            "rate": pass_rate((s["passes"], s["scored"]) for s in chosen),
            "scenarios": len(chosen),
            "timeouts": sum(s["timeouts"] for s in chosen),
            "errors": sum(s["errors"] for s in chosen),
        }

    def by(key: str, first: tuple[str, ...] = ()) -> dict[str, Any]:
        names = _order((str(s[key]) for s in scen.values()), first)
        return {name: group(i for i, s in scen.items() if str(s[key]) == name) for name in names}

    def counted(table: dict[str, dict[str, Any]], first: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        return {c: {**table[c], "scenarios": len(table[c]["scenarios"])} for c in _order(table, first)}

    tokens = sum(int(r.get("completion_tokens") or 0) for r in trials if r.get("gen_s"))
    gen_s = sum(float(r.get("gen_s") or 0.0) for r in trials)
    wall = _wall_s(headers, trials)
    if wall is None and end is not None and end.get("duration_s"):
        wall = float(end["duration_s"])
    all_tokens = sum(int(r.get("completion_tokens") or 0) for r in trials)
    for s in scen.values():
        s["causes"] = dict(s["causes"].most_common())
    scen = dict(sorted(scen.items(), key=lambda kv: (_tier_rank(kv[1]["tier"]), kv[0])))
    return {
        "header": headers[0] if headers else {},
        "sessions": len(headers),
        "complete": end is not None,
        "trials": len(trials),
        "total": group(scen),
        "tiers": by("tier", TIERS),
        "categories": by("category"),
        "causes": counted(causes, CAUSES),
        "apart": counted(apart, APART),
        "scenarios": scen,
        "wall_s": wall,
        "trial_sum_s": sum(float(r.get("duration_s") or 0.0) for r in trials),
        "generation_tps": tokens / gen_s if gen_s > 0 else None,
        "throughput_tps": all_tokens / wall if wall else None,
        "decode_tps": headers[0].get("decode_tps") if headers else None,
        "scenarios_per_s": len(scen) / wall if wall else None,
    }


def tier_sorted(flips: Iterable[Flip], tier_of: Mapping[str, str]) -> list[Flip]:
    """Flips in tier order (easy … very_hard), then by scenario id."""
    return sorted(flips, key=lambda f: (_tier_rank(tier_of.get(f.scenario)), f.scenario))


def compare_summaries(
    a: Mapping[str, Any], b: Mapping[str, Any], seed: int = 0, resamples: int = 10000
) -> dict[str, Any]:
    """Two :func:`summarize` results side by side: {"tiers": {tier: Comparison}, "total": Comparison,
    "only_a", "only_b" (ids scored in one run only), "causes": {cause: (A trials, B trials)},
    "tier_of": {id: tier}}.

    Tiers are A's (B's for a scenario A never ran)."""

    def scored(s: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
        return {k: (v["passes"], v["scored"]) for k, v in s["scenarios"].items() if v["scored"]}

    sa, sb = scored(a), scored(b)
    tier_of = {k: str(v["tier"]) for src in (b, a) for k, v in src["scenarios"].items()}
    tiers = _order((tier_of[k] for k in sa.keys() & sb.keys()), TIERS)
    causes = _order(list(a["causes"]) + list(b["causes"]), CAUSES)
    return {
        "tiers": {
            t: paired_compare(
                {k: v for k, v in sa.items() if tier_of[k] == t},
                {k: v for k, v in sb.items() if tier_of[k] == t},
                seed,
                resamples,
            )
            for t in tiers
        },
        "total": paired_compare(sa, sb, seed, resamples),
        "only_a": sorted(sa.keys() - sb.keys()),
        "only_b": sorted(sb.keys() - sa.keys()),
        "causes": {
            c: (a["causes"].get(c, {}).get("trials", 0), b["causes"].get(c, {}).get("trials", 0)) for c in causes
        },
        "tier_of": tier_of,
    }
