"""``splitserve tune``'s logic against fake measurements: the search reaches the grid's best in at
most a third of its runs, noise does not move it, ruled-out points are never measured, the
written spec keeps the user's keys; the driver writes the run, the report and the plot."""

from __future__ import annotations

import random
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from splitserve._errors import UsageError
from splitserve.bench import SpeedOptions, Target, load_run
from splitserve.bench._tune import (
    KV,
    METRICS,
    Axis,
    Measurement,
    PlannerCheck,
    TuneOptions,
    beats,
    compare,
    coordinate_search,
    default_axes,
    default_budget,
    dump_toml,
    grid_points,
    grid_search,
    order_axes,
    parse_axes,
    run_tune,
    spec_changes,
    start_point,
    tuned_spec_text,
    write_best_spec,
    write_tune_report,
)
from splitserve.cluster import load_spec, parse_spec

from .fakes import FakeServer

DECODE = METRICS["decode"]
PNG = b"\x89PNG\r\n\x1a\n"

# -- a known landscape ---------------------------------------------------------------------------

SPEC_F = {"none": 1.0, "ngram-simple": 1.3, "ngram-map-k": 1.1, "ngram-mod": 1.25}
THREADS_F = {1: 0.4, 2: 0.7, 4: 0.9, 8: 1.0, 16: 0.85}
KV_F = {"f16": 1.0, "q8_0": 1.06}
UB_F = {128: 0.85, 256: 0.95, 512: 1.0, 1024: 1.08, 2048: 0.97}
B_F = {512: 0.9, 1024: 1.0, 2048: 1.05, 4096: 1.02}

AXES = [
    Axis("speculation", tuple(SPEC_F)),
    Axis("threads", tuple(THREADS_F)),
    Axis(KV, tuple(KV_F)),
    Axis("ubatch", tuple(UB_F)),
    Axis("batch", tuple(B_F)),
]
START = {"speculation": "none", "threads": 2, KV: "f16", "ubatch": 512, "batch": 2048}


def true_score(p: dict[str, Any]) -> float:
    spec = SPEC_F[p["speculation"]]
    if p["speculation"] == "ngram-mod" and p["threads"] >= 8:
        spec = 1.6  # an interaction: only with enough threads does ngram-mod beat ngram-simple
    return 20.0 * spec * THREADS_F[p["threads"]] * KV_F[p[KV]] * UB_F[p["ubatch"]] * B_F[p["batch"]]


def planner(p: dict[str, Any]) -> str | None:
    if p["ubatch"] > p["batch"]:
        return "ubatch > batch"
    if p["ubatch"] == 2048 and p[KV] == "f16":
        return "does not fit"
    return None


class Counter:
    def __init__(
        self, noise: float = 0.0, seed: int = 1, score: Callable[[dict[str, Any]], float] = true_score
    ) -> None:
        self.calls: list[dict[str, Any]] = []
        self.rng = random.Random(seed)
        self.noise = noise
        self.score = score

    def __call__(self, p: dict[str, Any]) -> Measurement:
        self.calls.append(dict(p))
        s = self.score(p)
        return Measurement(samples=[s * (1 + self.rng.uniform(-self.noise, self.noise)) for _ in range(2)])


def grid_best(axes: list[Axis]) -> float:
    return max(true_score(p) for p in grid_points(axes) if not planner(p))


def test_the_search_reaches_the_grids_best_in_a_third_of_its_runs() -> None:
    measure = Counter()
    axes = order_axes(AXES, DECODE)
    res = coordinate_search(axes, START, measure, DECODE, planner, budget=default_budget(axes), min_gain=0.0)
    allowed = [p for p in grid_points(axes) if not planner(p)]
    assert res.best is not None and res.best_measurement is not None
    assert res.best_measurement.score == pytest.approx(grid_best(axes))
    assert res.best == {"speculation": "ngram-mod", "threads": 8, KV: "q8_0", "ubatch": 1024, "batch": 2048}
    assert res.stopped == "converged" and res.passes >= 2  # the interaction needed a second pass
    assert res.runs == len(measure.calls) <= len(allowed) / 3
    # a point is measured again only to confirm a win: once, and then it is the new best
    again = [c for i, c in enumerate(measure.calls) if c in measure.calls[:i]]
    assert all(measure.calls.count(c) == 2 for c in again)
    confirmed = [s.point for s in res.steps if s.verdict == "new best (confirmed)"]
    assert confirmed and confirmed[-1] == res.best
    assert res.steps[0].verdict == "start" and res.steps[0].point == START
    # without the confirmation runs, the same answer in fewer runs
    quick = coordinate_search(axes, START, Counter(), DECODE, planner, min_gain=0.0, confirm=False)
    assert quick.best == res.best and quick.runs < res.runs


def test_ruled_out_points_are_never_measured_and_are_listed() -> None:
    measure = Counter(score=lambda p: true_score(p | {"threads": 2, KV: "f16"}))
    axes = [Axis("speculation", tuple(SPEC_F)), Axis("ubatch", tuple(UB_F)), Axis("batch", tuple(B_F))]
    start = {"speculation": "none", "ubatch": 512, "batch": 512}
    res = coordinate_search(axes, start, measure, DECODE, lambda p: planner(p | {KV: "f16"}), min_gain=0.0)
    assert not any(planner(c | {KV: "f16"}) for c in measure.calls)
    assert res.excluded and all(planner(p | {KV: "f16"}) == why for p, why in res.excluded)
    assert {"speculation": "ngram-simple", "ubatch": 1024, "batch": 512} in [p for p, _ in res.excluded]
    assert res.best == {"speculation": "ngram-simple", "ubatch": 1024, "batch": 2048}


def test_the_walk_looks_past_a_ruled_out_value() -> None:
    measure = Counter(score=lambda p: float(p["ubatch"]))
    axes = [Axis("ubatch", (128, 256, 512, 1024, 2048, 4096))]
    res = coordinate_search(
        axes, {"ubatch": 512}, measure, DECODE, lambda p: "no" if p["ubatch"] == 2048 else None, confirm=False
    )
    assert [c["ubatch"] for c in measure.calls] == [512, 1024, 4096]
    assert res.best == {"ubatch": 4096} and res.excluded == [({"ubatch": 2048}, "no")]


def test_an_ordered_axis_stops_at_the_first_step_that_does_not_win() -> None:
    values = tuple(range(10))
    peak = 6
    measure = Counter(score=lambda p: 100.0 - (p["x"] - peak) ** 2)
    res = coordinate_search([Axis("x", values)], {"x": 2}, measure, DECODE, min_gain=0.0, confirm=False)
    assert [c["x"] for c in measure.calls] == [2, 3, 4, 5, 6, 7]  # up while winning; 7 loses: stop; no way down
    assert res.best == {"x": peak} and res.stopped == "converged"


def test_a_lucky_restart_is_not_confirmed() -> None:
    seen: list[int] = []

    def measure(p: dict[str, Any]) -> Measurement:
        seen.append(p["x"])
        if p["x"] == 1 and seen.count(1) == 1:
            return Measurement(samples=[15.0, 15.2])  # one lucky start of x=1
        return Measurement(samples=[10.0 + 0.1 * p["x"], 10.1 + 0.1 * p["x"]])

    res = coordinate_search([Axis("x", (0, 1, 2))], {"x": 0}, measure, DECODE)
    assert seen[:4] == [0, 0, 1, 1]  # the start twice (the noise floor), x=1 won: measured again
    verdicts = [s.verdict for s in res.steps]
    assert verdicts[:4] == ["start", "start re-measured", "ahead: confirming", "not confirmed"]
    assert res.best == {"x": 0}
    assert res.steps[3].merged == pytest.approx(12.6)  # both runs of x=1 together


def test_two_restarts_of_the_start_set_the_noise_floor() -> None:
    runs: list[int] = []

    def measure(p: dict[str, Any]) -> Measurement:
        runs.append(p["x"])
        if p["x"] == 0:  # the same settings, 2 t/s apart from one restart to the next
            return Measurement(samples=[10.0, 10.0] if runs.count(0) == 1 else [12.0, 12.0])
        return Measurement(samples=[12.9, 12.9])  # +1.9 over the start's 11: inside the restart noise

    res = coordinate_search([Axis("x", (0, 1))], {"x": 0}, measure, DECODE, min_gain=0.0)
    assert res.best == {"x": 0} and res.steps[-1].verdict == "within noise"
    quick = coordinate_search([Axis("x", (0, 1))], {"x": 0}, measure, DECODE, min_gain=0.0, confirm=False)
    assert quick.best == {"x": 1}  # without the second start, the per-request spread (0) lets it win


def test_noise_does_not_move_the_search() -> None:
    flat = Counter(noise=0.03, score=lambda p: 10.0)
    res = coordinate_search(AXES, START, flat, DECODE, planner, min_gain=0.02)
    assert res.best == START
    assert res.steps[1].verdict == "start re-measured"
    assert {s.verdict for s in res.steps[2:]} <= {"within noise", "worse"}
    assert res.stopped == "converged" and res.passes == 1


def test_a_real_gain_wins_through_the_noise() -> None:
    noisy = Counter(noise=0.02, seed=7)
    res = coordinate_search(order_axes(AXES, DECODE), START, noisy, DECODE, planner, min_gain=0.02)
    assert res.best is not None
    # the big effects are found; gains below the noise (a few %) may be left on the table
    assert res.best["speculation"] == "ngram-mod" and res.best["threads"] == 8
    assert true_score(res.best) >= 0.9 * grid_best(AXES)


def test_beats_needs_more_than_the_spread_and_the_least_gain() -> None:
    inc = Measurement(samples=[10.0, 10.2])
    assert not beats(Measurement(samples=[10.0, 11.0]), inc, DECODE)  # +0.4 inside a spread of 1.0
    assert beats(Measurement(samples=[12.0, 12.2]), inc, DECODE)
    assert not beats(Measurement(samples=[10.2, 10.2]), Measurement(samples=[10.0, 10.0]), DECODE, 0.05)
    assert not beats(Measurement(error="did not start"), inc, DECODE)
    # different items (files, turns) are not noise: only the runs of one request are
    items = Measurement(samples=[10.0, 20.0, 11.0, 19.0], ids=["a", "b", "a", "b"], alike=False)
    assert items.spread == pytest.approx(1.0) and Measurement(samples=[10.0, 20.0]).spread == 10.0
    assert beats(Measurement(samples=[12.0, 23.0], ids=["a", "b"], alike=False), items, DECODE)
    ttft = METRICS["ttft"]  # lower is better
    assert beats(Measurement(samples=[50.0, 51.0]), Measurement(samples=[80.0, 82.0]), ttft)


def test_the_budget_stops_the_search() -> None:
    measure = Counter()
    res = coordinate_search(AXES, START, measure, DECODE, planner, budget=3, min_gain=0.0)
    assert res.stopped == "budget" and res.runs == 3 == len(measure.calls)


def test_a_ruled_out_start_moves_to_the_first_allowed_point() -> None:
    start = START | {"ubatch": 2048, "batch": 512}
    res = coordinate_search(AXES, start, Counter(), DECODE, planner, min_gain=0.0)
    assert res.start != start and planner(res.start) is None
    assert any("ruled out" in n for n in res.notes)


def test_a_start_that_fails_ends_the_search() -> None:
    res = coordinate_search(AXES, START, lambda p: Measurement(error="did not start: boom"), DECODE)
    assert res.stopped == "failed" and res.best is None and "boom" in res.notes[-1]


def test_the_grid_measures_every_allowed_point() -> None:
    axes = [Axis("speculation", ("none", "ngram-mod")), Axis("threads", (1, 2, 4)), Axis("ubatch", (512, 2048))]
    start = {"speculation": "none", "threads": 2, "ubatch": 512}
    feasible = lambda p: "no" if p["ubatch"] == 2048 and p["threads"] == 4 else None  # noqa: E731

    def score(p: dict[str, Any]) -> float:
        return {1: 1.0, 2: 2.0, 4: 3.0}[p["threads"]] * (2 if p["speculation"] == "ngram-mod" else 1)

    measure = Counter(score=score)
    res = grid_search(axes, start, measure, DECODE, feasible)
    assert res.runs == 10 and len(res.excluded) == 2 and res.stopped == "grid"
    assert res.best == {"speculation": "ngram-mod", "threads": 4, "ubatch": 512}


# -- axes ------------------------------------------------------------------------------------


def test_axes_from_set_take_the_bench_names() -> None:
    axes = parse_axes(
        ["ub=128,512", "speculation=none,ngram-mod,ngram-simple+ngram-mod", "kv=f16,q8_0", "threads=auto,2"]
    )
    assert [(a.name, a.values) for a in axes] == [
        ("ubatch", (128, 512)),
        ("speculation", ("none", "ngram-mod", "ngram-simple+ngram-mod")),
        (KV, ("f16", "q8_0")),
        ("threads", (None, 2)),
    ]
    assert axes[0].ordered and not axes[1].ordered and not axes[3].ordered
    assert [a.name for a in order_axes(axes, DECODE)] == ["speculation", "threads", KV, "ubatch"]
    assert next(a.name for a in order_axes(axes, METRICS["prefill"])) == "ubatch"
    with pytest.raises(UsageError, match="given twice"):
        parse_axes(["ubatch=128", "ub=256"])
    with pytest.raises(UsageError, match="unknown server option"):
        parse_axes(["colour=red"])
    with pytest.raises(UsageError, match="unknown speculation type 'bogus'"):
        parse_axes(["speculation=none,bogus"])


def test_default_axes_start_from_the_spec() -> None:
    spec = parse_spec(
        {
            "model": "/m.gguf",
            "workers": [{"name": "w1"}],
            "server": {"ubatch": 384, "cache_type_k": "q8_0", "cache_type_v": "q8_0"},
        }
    )
    axes = default_axes(spec.server, supported=["ngram-mod", "draft-mtp"], cores=(8, 16))
    by = {a.name: a.values for a in axes}
    assert by["speculation"] == ("none", "ngram-simple", "ngram-map-k", "ngram-mod", "draft-mtp")
    assert by["threads"] == (2, 4, 8, 16) and 384 in by["ubatch"] and by[KV] == ("f16", "q8_0")
    start, notes = start_point(spec.server, axes, cores=(8, 16))
    assert start == {"speculation": "none", "threads": 8, KV: "q8_0", "ubatch": 384, "batch": 2048}
    assert not notes
    start, notes = start_point(spec.server, [Axis("ubatch", (128, 256))])
    assert start == {"ubatch": 128} and "not on the axis" in notes[0]


def test_the_planner_rules_out_what_does_not_fit(tmp_path: Path) -> None:
    from gguf_factory import dense_llama

    model = dense_llama(tmp_path / "m.gguf", n_layer=4, n_embd=256, n_vocab=2048)[0]
    spec = parse_spec(
        {
            "model": str(model),
            "workers": [{"name": "w1", "memory_gib": 0.05}],
            "server": {"ctx_size": 2048, "flash_attn": "off"},
        }
    )
    check = PlannerCheck(spec)
    assert check({"ubatch": 128}) is None
    assert "will not fit" in (check({"ubatch": 4096, "batch": 4096}) or "")
    assert "caps ubatch at batch" in (check({"ubatch": 1024, "batch": 512}) or "")
    assert "needs flash attention" in (check({KV: "q8_0"}) or "")
    assert "draft-mtp cannot run" in (check({"speculation": "draft-mtp"}) or "")
    assert "ngram-mod" in check.supported_types() and "draft-mtp" not in check.supported_types()


# -- the best spec ---------------------------------------------------------------------------

USER_SPEC = """\
# my cluster: keep this comment
name = "mine"
model = "models/m.gguf"   # relative to this file

[[workers]]
name = "w1"
port = 50052

[server]
port = 8080
ctx_size = 4096   # enough for agents
ubatch = 512      # the default
threads = 4
speculation = [
  "ngram-simple",
]
extra_args = ["--jinja"]

# the gateway
[gateway]
port = 8000
"""


def test_the_written_spec_keeps_the_users_keys_and_comments(tmp_path: Path) -> None:
    src = tmp_path / "spec" / "cluster.toml"
    src.parent.mkdir()
    src.write_text(USER_SPEC)
    spec = load_spec(src)
    best = {"speculation": "ngram-mod", "threads": None, KV: "q8_0", "ubatch": 256, "batch": 2048}
    changes = spec_changes(spec.server, best)
    assert changes == {
        "speculation": "ngram-mod",
        "threads": None,
        "cache_type_k": "q8_0",
        "cache_type_v": "q8_0",
        "ubatch": 256,
    }  # batch 2048 is llama.cpp's default already
    out = tmp_path / "out" / "best.toml"
    text = tuned_spec_text(src.read_text(), changes, ["tuned"], src.parent, out.parent)
    assert text.startswith("# tuned\n# my cluster: keep this comment\n")
    assert "ctx_size = 4096   # enough for agents" in text and "# the gateway" in text
    assert "ubatch = 256  # the default" in text and "# threads = 4" in text
    data = tomllib.loads(text)
    assert data["server"] == {
        "port": 8080,
        "ctx_size": 4096,
        "ubatch": 256,
        "speculation": "ngram-mod",
        "extra_args": ["--jinja"],
        "cache_type_k": "q8_0",
        "cache_type_v": "q8_0",
    }
    assert data["model"] == str((src.parent / "models/m.gguf").resolve())  # moved: made absolute
    assert data["gateway"] == {"port": 8000} and data["workers"] == [{"name": "w1", "port": 50052}]
    out.parent.mkdir()
    out.write_text(text)
    again = load_spec(out)
    assert again.server.ubatch == 256 and again.server.threads is None
    assert again.server.speculation == ["ngram-mod"]
    assert again.model == spec.model


def test_specs_the_text_editor_cannot_handle_are_written_anew() -> None:
    inline = 'model = "/m.gguf"\nworkers = [{name = "w1"}]\nserver = {port = 9000}\n'
    text = tuned_spec_text(inline, {"ubatch": 128})
    assert tomllib.loads(text) == {
        "model": "/m.gguf",
        "workers": [{"name": "w1"}],
        "server": {"port": 9000, "ubatch": 128},
    }
    bare = 'model = "/m.gguf"\n\n[[workers]]\nname = "w1"\n'
    text = tuned_spec_text(bare, {"speculation": ["ngram-simple", "ngram-mod"]})
    assert text.startswith('model = "/m.gguf"\n') and "[server]" in text
    assert tomllib.loads(text)["server"] == {"speculation": ["ngram-simple", "ngram-mod"]}
    doc = {"a": 1, "t": {"b": "x", "sub": {"c": [1, 2]}}, "arr": [{"n": 1}, {"n": 2}]}
    assert tomllib.loads(dump_toml(doc)) == doc


# -- the driver ------------------------------------------------------------------------------


class LandscapeServer(FakeServer):
    """The bench fake with a decode time per request set by the point the cluster was started with."""

    def __init__(self) -> None:
        super().__init__()
        self.predicted_ms = 20.0

    def handler(self, request: httpx.Request) -> httpx.Response:
        resp = super().handler(request)
        if request.url.path.endswith("/completions"):
            body = resp.content.replace(b'"predicted_ms": 20.0', f'"predicted_ms": {self.predicted_ms}'.encode())
            return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
        return resp


class FakeRestarter:
    def __init__(
        self,
        server: LandscapeServer,
        score: Callable[[dict[str, Any]], float],
        fail_on: dict[str, Any] | None = None,
        interrupt_at: int | None = None,
    ) -> None:
        self.server = server
        self.score = score
        self.started: list[dict[str, Any]] = []
        self.finished = 0
        self.fail_on = fail_on
        self.interrupt_at = interrupt_at

    def start(self, values: dict[str, Any]) -> tuple[Target, dict[str, Any]]:
        self.started.append(values)
        if self.interrupt_at is not None and len(self.started) == self.interrupt_at:
            raise KeyboardInterrupt
        if self.fail_on and all(values.get(k) == v for k, v in self.fail_on.items()):
            raise RuntimeError("llama-server exited during load")
        self.server.predicted_ms = 4000.0 / self.score(values)  # 4 tokens: decode t/s = score
        return Target(url="http://fake:1"), {"server": values}

    def finish(self) -> str:
        self.finished += 1
        return "fake: the cluster is down"


SMALL = [Axis("speculation", ("none", "ngram-mod")), Axis("threads", (1, 2, 4)), Axis("ubatch", (128, 512, 2048))]
SMALL_START = {"speculation": "none", "threads": 2, "ubatch": 512}


def small_score(values: dict[str, Any]) -> float:
    spec = 1.5 if values["speculation"] == "ngram-mod" else 1.0
    threads = {1: 0.5, 2: 0.8, 4: 1.0}[values["threads"]]
    return 10.0 * spec * threads * {128: 0.9, 512: 1.0, 2048: 0.95}[values["ubatch"]]


def small_planner(p: dict[str, Any]) -> str | None:
    return "the planner: will not fit" if p["ubatch"] == 2048 and p["threads"] == 4 else None


def spec_file(tmp_path: Path) -> Any:
    path = tmp_path / "cluster.toml"
    path.write_text('name = "fake"\nmodel = "/m.gguf"\n\n[[workers]]\nname = "w1"\n\n[server]\nport = 8080\n')
    return load_spec(path)


def tune(tmp_path: Path, name: str, grid: bool = False, **kw: Any) -> tuple[Any, Any, Any, FakeRestarter]:
    server = LandscapeServer()
    restarter = FakeRestarter(server, small_score, **kw)
    opts = SpeedOptions(prompt_tokens=[20], gen_tokens=4, concurrency=[1], repeat=2)
    run, path, res = run_tune(
        restarter,
        spec_file(tmp_path),
        SMALL,
        SMALL_START,
        opts,
        TuneOptions(grid=grid, min_gain=0.02),
        small_planner,
        tmp_path / f"{name}.json",
        transport=server.transport(),
    )
    return run, path, res, restarter


def test_tune_writes_the_run_the_best_spec_and_a_report_of_every_point(tmp_path: Path) -> None:
    _run, path, res, restarter = tune(tmp_path, "tune")
    assert restarter.finished == 1
    assert res.best == {"speculation": "ngram-mod", "threads": 4, "ubatch": 512}
    assert res.best_measurement.score == pytest.approx(15.0)
    saved = load_run(path)
    assert saved.kind == "sweep" and saved.complete and len(saved.points) == res.runs == len(restarter.started)
    assert [p.values for p in saved.points] == restarter.started
    assert saved.summary["tune"]["best"] == res.best and saved.settings["tune"]["mode"] == "tune"
    assert all(len([r for r in p.records if r.kind == "speed"]) == 2 for p in saved.points)
    assert not any(small_planner(p) for p in restarter.started)
    spec = spec_file(tmp_path)
    best, changes = write_best_spec(spec, res, path.with_suffix(".toml"), path)
    assert changes == {"speculation": "ngram-mod", "threads": 4}
    again = load_spec(best)
    assert again.server.speculation == ["ngram-mod"] and again.server.threads == 4 and again.server.port == 8080

    _grun, gpath, gres, _grest = tune(tmp_path, "grid", grid=True)
    assert gres.runs == 16 and len(gres.excluded) == 2 and gres.best == res.best
    assert res.runs < gres.runs
    c = compare(saved, load_run(gpath))
    assert c["same_point"] and c["gap"] == pytest.approx(0.0) and c["rank_in_grid"] == 1
    assert c["tune_runs"] == res.runs and c["grid_runs"] == 16

    md, pngs = write_tune_report(saved, path.with_suffix(""), load_run(gpath), best)
    text = md.read_text()
    for step in res.steps:  # every point measured is in the report
        assert (
            f"| {step.run} | {step.axis or '–'} | {step.point['speculation']} | {step.point['threads']} | "
            f"{step.point['ubatch']} |" in text
        )
    assert "## Against the full grid" in text and "ranks #1 of 16" in text and str(best) in text
    assert pngs and pngs[0].read_bytes().startswith(PNG)


def test_a_point_that_does_not_start_loses_and_the_search_goes_on(tmp_path: Path) -> None:
    _run, path, res, _restarter = tune(tmp_path, "fail", fail_on={"speculation": "ngram-mod"})
    failed = [s for s in res.steps if s.verdict == "failed"]
    assert failed and all(s.point["speculation"] == "ngram-mod" for s in failed)
    assert res.best is not None and res.best["speculation"] == "none"
    assert any(p.error for p in load_run(path).points)


def test_an_interrupted_tune_keeps_what_it_measured_and_brings_the_cluster_back(tmp_path: Path) -> None:
    _run, path, res, restarter = tune(tmp_path, "stop", interrupt_at=3)
    assert res.stopped == "interrupted" and restarter.finished == 1
    saved = load_run(path)
    assert saved.interrupted and len([p for p in saved.points if p.records]) == 2


# -- the command line --------------------------------------------------------------------------


def cli_spec(tmp_path: Path, model: str = "/no/such/m.gguf", memory: float | None = None) -> Path:
    path = tmp_path / "c.toml"
    mem = f"memory_gib = {memory}\n" if memory else ""
    path.write_text(f'name = "c"\nmodel = "{model}"\n\n[[workers]]\nname = "w1"\n{mem}\n[server]\nctx_size = 2048\n')
    return path


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--metric", "speed"], "--metric 'speed'"),
        (["--workload", "copy,edit"], "tune optimizes for one workload"),
        (["--workload", "bogus"], "--workload 'bogus'"),
        (["--set", "colour=red"], "--set colour: unknown server option"),
        (["--set", "ubatch=12x"], "--set ubatch"),
        (["--set", "speculation=none,bogus"], "unknown speculation type 'bogus'"),
        (["--set", "ubatch=128", "--set", "ub=256"], "given twice"),
        (["--set", "ubatch"], "expected NAME=V1,V2"),
        (["--compare", "no-such-run.json"], "no-such-run.json: no such run file"),
    ],
)
def test_bad_input_is_one_line_and_starts_nothing(
    args: list[str], needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import splitserve.cli._tune  # noqa: F401  (registers tune)
    from splitserve.cli._app import app

    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["tune", "-c", str(cli_spec(tmp_path)), *args])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("note:")]
    assert r.exit_code != 0
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert len(lines) == 1 and lines[0].startswith("splitserve: error:") and needle in lines[0], r.stderr
    assert not (tmp_path / "tune-runs").exists()


def test_a_missing_spec_is_one_line(tmp_path: Path) -> None:
    import splitserve.cli._tune  # noqa: F401
    from splitserve.cli._app import app

    r = CliRunner().invoke(app, ["tune", "-c", str(tmp_path / "nope.toml")])
    assert r.exit_code == 2 and "no such cluster spec file" in r.stderr


def test_dry_run_lists_the_points_and_what_the_planner_rules_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import splitserve.cli._tune  # noqa: F401
    from gguf_factory import dense_llama
    from splitserve.cli._app import app

    model = dense_llama(tmp_path / "m.gguf", n_layer=4, n_embd=256, n_vocab=2048)[0]
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(
        app,
        [
            "tune",
            "-c",
            str(cli_spec(tmp_path, str(model), 0.05)),
            "--dry-run",
            "--set",
            "ubatch=128,4096",
            "--set",
            "batch=4096",
            "--set",
            "threads=1,2",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "grid: 4 points, 2 allowed by the planner, 2 ruled out" in r.stdout
    assert "try        threads=" in r.stdout and "ruled out  " in r.stdout and "will not fit" in r.stdout
    assert not (tmp_path / "tune-runs").exists()


def test_report_rewrites_a_tune_runs_report_against_a_later_grid(tmp_path: Path) -> None:
    import splitserve.cli._tune  # noqa: F401
    from splitserve.cli._app import app

    _run, path, _res, _r = tune(tmp_path, "tune")
    _grun, gpath, _gres, _g = tune(tmp_path, "grid", grid=True)
    r = CliRunner().invoke(app, ["tune", "--report", str(path), "--compare", str(gpath)])
    assert r.exit_code == 0, r.output
    text = (path.with_suffix("") / "report.md").read_text()
    assert "## Against the full grid" in text and "The tune's start scored 8.00 t/s in the grid" in text
    r = CliRunner().invoke(app, ["tune", "--report", str(gpath.with_suffix(".md"))])
    assert r.exit_code == 2 and "no such run file" in r.stderr
    r = CliRunner().invoke(app, ["tune"])
    assert r.exit_code == 2 and "give -c cluster.toml" in r.stderr
