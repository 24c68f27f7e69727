"""The dashboard's state assembly from fake readings (no processes, no sockets)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from splitserve.cluster._state import ClusterState, ProcessRecord
from splitserve.gateway import GatewayConfig, KeyRing, create_app
from splitserve.gateway._ui import find_runs, parse_ss, samples_of
from splitserve.gateway._ui_state import History, Snapshot, assemble, histogram

MIB = 1024 * 1024


def _proc(node: str, role: str, port: int) -> ProcessRecord:
    return ProcessRecord(
        node=node,
        role=role,
        host="local",
        pid=100 + port % 100,
        start_ticks=1,
        bind="127.0.0.1",
        port=port,
        log=f"/x/{node}.log",
        argv=["bin", "--api-key", "sk-secret"],
    )


def _state(phase: str = "ready") -> ClusterState:
    return ClusterState(
        name="demo",
        spec_file="/x/demo.toml",
        model="/m/SmolLM2.gguf",
        endpoint="http://127.0.0.1:8000",
        engine="cpu",
        phase=phase,
        started_at=1000.0,
        ready_at=1002.0 if phase == "ready" else None,
        processes=[
            _proc("gateway", "gateway", 8000),
            _proc("w1", "rpc", 50052),
            _proc("w2", "rpc", 50053),
            _proc("head", "server", 8080),
        ],
    )


PLAN = {
    "nodes": [
        {
            "name": "w1",
            "layers": [0, 15],
            "n_layers": 16,
            "weights_bytes": 35 * MIB,
            "kv_bytes": 24 * MIB,
            "compute_bytes": 31 * MIB,
            "total_bytes": 90 * MIB,
            "memory_bytes": 1024 * MIB,
            "headroom_bytes": 934 * MIB,
            "output_layer": False,
        },
        {
            "name": "w2",
            "layers": [16, 29],
            "n_layers": 14,
            "weights_bytes": 58 * MIB,
            "kv_bytes": 21 * MIB,
            "compute_bytes": 20 * MIB,
            "total_bytes": 99 * MIB,
            "memory_bytes": 1024 * MIB,
            "headroom_bytes": 925 * MIB,
            "output_layer": True,
        },
    ],
    "host": {"weights_bytes": 28 * MIB, "compute_bytes": 15 * MIB},
    "decode_tps_upper_bound": 250.0,
    "settings": {"ctx": 2048, "parallel": 2},
    "warnings": [],
}
MEMORY = [
    {
        "device": "RPC0[127.0.0.1:50052]",
        "endpoint": "127.0.0.1:50052",
        "model_bytes": 34 * MIB,
        "kv_bytes": 24 * MIB,
        "compute_bytes": 31 * MIB,
        "output_bytes": 0,
        "other_bytes": 0,
        "total_bytes": 89 * MIB,
    },
    {
        "device": "RPC1[127.0.0.1:50053]",
        "endpoint": "127.0.0.1:50053",
        "model_bytes": 58 * MIB,
        "kv_bytes": 21 * MIB,
        "compute_bytes": 21 * MIB,
        "output_bytes": 0,
        "other_bytes": 0,
        "total_bytes": 100 * MIB,
    },
    {
        "device": "CPU",
        "endpoint": None,
        "model_bytes": 0,
        "kv_bytes": 0,
        "compute_bytes": 15 * MIB,
        "output_bytes": MIB,
        "other_bytes": 0,
        "total_bytes": 16 * MIB,
    },
]


def _slot(sid: int, task: int | None, decoded: int, busy: bool, prompt: int = 20, cached: int = 0) -> dict:
    s: dict[str, Any] = {"id": sid, "n_ctx": 1024, "is_processing": busy}
    if task is not None:
        s |= {
            "id_task": task,
            "n_prompt_tokens": prompt,
            "n_prompt_tokens_processed": prompt - cached,
            "n_prompt_tokens_cache": cached,
            "next_token": [{"n_decoded": decoded}],
        }
    return s


def _snap(now: float, **kw) -> Snapshot:  # type: ignore[no-untyped-def]
    base: dict[str, Any] = dict(
        state=_state(),
        alive={"gateway": True, "w1": True, "w2": True, "head": True},
        memory=MEMORY,
        plan=PLAN,
        links={"127.0.0.1:50052": {"rtt_ms": 0.05, "bytes_sent": 36e6}},
    )
    return Snapshot(now=now, **(base | kw))


def test_nodes_show_layers_planned_and_measured_memory_and_headroom() -> None:
    out = assemble(_snap(10.0), History())
    nodes = {n["node"]: n for n in out["nodes"]}
    assert [n["node"] for n in out["nodes"]] == ["w1", "w2", "head", "gateway"]
    assert nodes["w1"]["planned"]["layers"] == [0, 15] and nodes["w2"]["planned"]["layers"] == [16, 29]
    assert nodes["w2"]["planned"]["output_layer"] is True
    assert nodes["w1"]["measured"]["model_bytes"] == 34 * MIB
    assert nodes["w1"]["headroom_bytes"] == (1024 - 89) * MIB
    assert nodes["head"]["measured"]["compute_bytes"] == 15 * MIB  # the head's own CPU buffers
    assert nodes["head"]["planned"]["weights_bytes"] == 28 * MIB
    assert nodes["w1"]["link"]["rtt_ms"] == 0.05 and nodes["w2"]["link"] is None
    assert out["cluster"]["phase"] == "ready" and out["cluster"]["uptime_seconds"] == 10.0 - 1002.0


def test_a_dead_worker_makes_the_cluster_degraded() -> None:
    out = assemble(_snap(10.0, alive={"gateway": True, "w1": False, "w2": True, "head": True}), History())
    assert out["cluster"]["phase"] == "degraded"
    assert {n["node"]: n["alive"] for n in out["nodes"]}["w1"] is False


def test_the_state_never_holds_a_key_or_a_command_line() -> None:
    text = json.dumps(assemble(_snap(10.0), History()))
    assert "sk-secret" not in text and "argv" not in text


def test_slot_tokens_per_second_and_context_fill_from_two_readings() -> None:
    h = History()
    h.update(_snap(100.0, slots=[_slot(0, 7, 10, True), _slot(1, None, 0, False)]))
    snap = _snap(101.0, slots=[_slot(0, 7, 35, True), _slot(1, None, 0, False)])
    h.update(snap)
    out = assemble(snap, h)
    s0, s1 = out["slots"]
    assert s0["tokens_per_s"] == 25.0 and s0["context_used"] == 55 and abs(s0["context_fill"] - 55 / 1024) < 1e-9
    assert s1["tokens_per_s"] is None and s1["context_used"] == 0
    assert out["throughput"]["decode_tps"] == 25.0 and out["throughput"]["decode_bound_tps"] == 250.0
    assert out["throughput"]["series"][-1][0] == 0.0


def test_a_new_task_on_a_slot_starts_its_rate_afresh() -> None:
    h = History()
    h.update(_snap(100.0, slots=[_slot(0, 7, 500, True)]))
    snap = _snap(101.0, slots=[_slot(0, 8, 3, True)])
    h.update(snap)
    assert assemble(snap, h)["slots"][0]["tokens_per_s"] == 0.0


def test_history_keeps_the_last_minutes_only() -> None:
    h = History(seconds=60)
    for t in range(0, 200, 10):
        h.update(_snap(float(t), slots=[]))
    assert h.series[0][0] == 130.0 and len(h.series) == 7


def test_load_progress_and_eta_per_worker_while_starting() -> None:
    h = History()
    start = _snap(0.0, state=_state("starting"), memory=[], links={"127.0.0.1:50052": {"rtt_ms": 0.1, "bytes_sent": 0}})
    h.update(start)
    snap = _snap(
        2.0,
        state=_state("starting"),
        memory=[],
        load_stage="sending weights to the devices",
        links={"127.0.0.1:50052": {"rtt_ms": 0.1, "bytes_sent": 10 * MIB}},
    )
    h.update(snap)
    out = assemble(snap, h)
    w1 = out["nodes"][0]["load"]
    assert w1["expected_bytes"] == 35 * MIB and abs(w1["fraction"] - 10 / 35) < 1e-9
    assert w1["rate_bytes_per_s"] == 5 * MIB and abs(w1["eta_seconds"] - 5.0) < 1e-9
    assert out["cluster"]["load_stage"] == "sending weights to the devices"
    assert assemble(_snap(3.0), h)["nodes"][0]["load"] is None  # ready: no load bar


def test_warnings_gather_load_log_supervisor_and_parser() -> None:
    events = [
        {"time": 5.0, "kind": "ready", "node": "head", "message": "ready"},
        {"time": 6.0, "kind": "died", "node": "w1", "message": "ggml-rpc-server was killed by signal 9"},
        {"time": 7.0, "kind": "restarting", "node": "cluster", "message": "restart 1 in 1.0 s"},
    ]
    samples: list[tuple[str, dict[str, str], float]] = [("splitserve_parse_warnings_total", {}, 3.0)]
    load = [{"kind": "msa_dense_no_flash_attn", "text": "MSA requires it -> running DENSE attention", "fix": "fa on"}]
    out = assemble(_snap(10.0, events=events, samples=samples, load_warnings=load), History())
    kinds = [(w["source"], w["kind"]) for w in out["warnings"]]
    assert kinds == [
        ("llama-server", "msa_dense_no_flash_attn"),
        ("supervisor", "restarting"),
        ("supervisor", "died"),
        ("gateway", "parse_warnings"),
    ]
    assert out["cluster"]["restarts"] == 1


def test_gateway_metrics_from_a_real_registry() -> None:
    from splitserve.gateway._metrics import Metrics

    m = Metrics()
    m.requests.labels("chat", "200").inc(3)
    m.requests.labels("chat", "429").inc()
    m.requests.labels("models", "200").inc()
    for v in (0.05, 0.2, 0.3, 2.0):
        m.ttft.labels("m").observe(v)
    m.tokens.labels("prompt").inc(60)  # computed; the kinds do not overlap
    m.tokens.labels("cached").inc(40)
    m.on_limits(2, 5)
    g = assemble(Snapshot(now=1.0, samples=samples_of(m.registry)), History())["gateway"]
    assert g["requests_by_status"] == {"200": 4.0, "429": 1.0}
    assert g["requests_by_endpoint"] == {"chat": 4.0, "models": 1.0}
    assert g["queue_depth"] == 5.0 and g["running"] == 2.0 and g["prompt_cache_hit_ratio"] == 0.4
    assert g["ttft_seconds"]["count"] == 4 and 0.1 < g["ttft_seconds"]["p50"] <= 0.25


def test_histogram_quantiles_interpolate_within_buckets() -> None:
    s = [
        ("h_bucket", {"le": "1.0"}, 0.0),
        ("h_bucket", {"le": "2.0"}, 10.0),
        ("h_bucket", {"le": "+Inf"}, 10.0),
        ("h_count", {}, 10.0),
        ("h_sum", {}, 15.0),
    ]
    h = histogram(s, "h")
    assert h["p50"] == 1.5 and h["mean"] == 1.5
    assert histogram([], "h") == {"count": 0.0, "mean": None, "p50": None, "p90": None, "p99": None}


def test_without_a_cluster_the_view_is_the_gateway_alone() -> None:
    out = assemble(Snapshot(now=1.0, slots_error="the engine is not reachable"), History())
    assert out["cluster"] is None and out["nodes"] == [] and out["slots"] == []
    assert out["slots_error"] == "the engine is not reachable"


SS = """0      0          127.0.0.1:35876    127.0.0.1:50052
\t bbr wscale:10,10 rto:204 rtt:1.645/2.331 ato:40 bytes_sent:36044615 bytes_acked:36044300 bytes_received:11868 minrtt:0.011
0      0          127.0.0.1:35880    127.0.0.1:50052
\t bbr rtt:5.4/2.0 bytes_acked:100 minrtt:0.009 snd_wnd:65536
0      0          127.0.0.1:50052    127.0.0.1:35876
\t bbr rtt:0.038/0.03 bytes_sent:11868 bytes_acked:11868 bytes_received:36044299 minrtt:0.004
0      0          [::1]:40000    [::1]:50053
\t cubic rtt:0.2/0.1 bytes_acked:5 minrtt:1.7
"""


def test_parse_ss_reads_the_link_rtt_as_the_kernels_minrtt_of_the_heads_side() -> None:
    # the smoothed rtt (1.645, 5.4 ms on loopback) holds delayed ACKs and compute time: not the link
    links = parse_ss(SS, {"127.0.0.1:50052", "[::1]:50053", "127.0.0.1:9"})
    assert links == {
        "127.0.0.1:50052": {"rtt_ms": 0.009, "bytes_sent": 36044400.0},
        "[::1]:50053": {"rtt_ms": 1.7, "bytes_sent": 5.0},
    }


def test_the_page_warns_on_the_link_rtt_exactly_where_preflight_does(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from splitserve.cluster import LINK_RTT_MEANING, LINK_RTT_WARN_MS, _preflight
    from splitserve.cluster._spec import WorkerSpec

    def page(rtt: float) -> dict:
        out = assemble(_snap(10.0, links={"127.0.0.1:50052": {"rtt_ms": rtt, "bytes_sent": 0}}), History())
        return {n["node"]: n for n in out["nodes"]}["w1"]["link"]

    def preflight(rtt: float) -> str:
        monkeypatch.setattr(_preflight, "_connect_rtt_ms", lambda *a, **k: (rtt, ""))
        spec = type("S", (), {"workers": [WorkerSpec(name="w1", port=50052)]})()
        (row,) = _preflight._link_rows(spec, {"local": object()}, lambda w: "local")  # type: ignore[dict-item]
        return row.status

    for rtt in (0.009, 0.5, LINK_RTT_WARN_MS, LINK_RTT_WARN_MS + 0.001, 5.4):
        link = page(rtt)
        assert link["rtt_status"] == preflight(rtt), rtt
        assert link["rtt_warn_ms"] == LINK_RTT_WARN_MS and link["rtt_meaning"] == LINK_RTT_MEANING
    assert page(0.009)["rtt_status"] == "pass" and page(5.4)["rtt_status"] == "warn"
    assert "lowest TCP round trip" in LINK_RTT_MEANING


def test_find_runs_picks_the_newest_bench_and_eval_with_their_plots(tmp_path: Path) -> None:
    import os

    bench = tmp_path / "bench-runs"
    (bench / "speed-new").mkdir(parents=True)
    (bench / "speed-old.json").write_text(json.dumps({"kind": "speed"}))
    (bench / "speed-new.json").write_text(json.dumps({"kind": "speed", "summary": {"headline": {"decode": 40}}}))
    os.utime(bench / "speed-old.json", (1, 1))
    (bench / "speed-new" / "report.md").write_text("# Bench report\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    (bench / "speed-new" / "tps.png").write_bytes(b"\x89PNG")
    rep = tmp_path / "eval-runs" / "run1" / "report"
    rep.mkdir(parents=True)
    (rep / "report.md").write_text("# Eval\n")
    (rep / "summary.json").write_text(json.dumps({"label": "run1", "pass_rate": 0.8, "tiers": {}}))
    files: dict[str, Path] = {}
    runs = find_runs([tmp_path], files)
    assert runs["bench"]["name"] == "speed-new" and runs["bench"]["headline"] == {"decode": 40}
    assert runs["bench"]["images"] == [{"id": "bench-0", "name": "tps.png"}] and files["bench-0"].name == "tps.png"
    assert runs["bench"]["report"][1] == "| a | b |"
    assert runs["eval"]["name"] == "run1" and runs["eval"]["summary"] == {"label": "run1", "pass_rate": 0.8}
    assert find_runs([tmp_path / "nothing"], {})["bench"] is None


def test_routes_page_is_open_state_takes_the_key(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SPLITSERVE_STATE", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    app = create_app(GatewayConfig(engine_url="http://127.0.0.1:9", keys=KeyRing.build("sk-ui-unit")))
    with TestClient(app) as client:
        page = client.get("/ui")
        assert page.status_code == 200 and "sk-ui-unit" not in page.text and "/ui/static/app.js" in page.text
        assert "http" not in page.text.split("<body>", 1)[1].replace("http-equiv", "")  # no CDN, no data
        assert client.get("/ui/static/app.js").headers["content-type"].startswith("text/javascript")
        assert client.get("/ui/static/../_ui.py").status_code == 404
        assert client.get("/ui/state").status_code == 401
        assert client.get("/ui/file/bench-0").status_code == 401
        got = client.get("/ui/state", headers={"Authorization": "Bearer sk-ui-unit"})
        assert got.status_code == 200 and got.json()["cluster"] is None and got.json()["slots_error"]
        assert "sk-ui-unit" not in got.text
        assert client.get("/ui/file/bench-0", headers={"Authorization": "Bearer sk-ui-unit"}).status_code == 404


def test_a_runs_plots_come_in_its_reports_order(tmp_path: Path) -> None:
    rep = tmp_path / "eval-runs" / "run1" / "report"
    rep.mkdir(parents=True)
    (rep / "report.md").write_text("# Eval report\n![tiers](tiers.png)\n![causes](causes.png)\n")
    for name in ("causes.png", "tiers.png", "extra.png"):
        (rep / name).write_bytes(b"\x89PNG")
    files: dict[str, Path] = {}
    run = find_runs([tmp_path], files)["eval"]
    assert [i["name"] for i in run["images"]] == ["tiers.png", "causes.png", "extra.png"]
    assert [files[i["id"]].name for i in run["images"]] == ["tiers.png", "causes.png", "extra.png"]
