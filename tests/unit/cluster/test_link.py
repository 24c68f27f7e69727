"""The link check's parsers and trap rules, on outputs recorded from real commands.

tests/fixtures/link/ holds what ``iperf3 --json`` printed (one and two streams through a veth
shaped to 1 Gbit/s with tbf, and a refused connection) and what :func:`facts_script` printed in
two network namespaces: a head with ``mgmt0`` (192.168.77.10/24, MTU 1500, default route via
192.168.77.1) and ``fast0`` (10.10.0.1/24, MTU 9000), and a worker with ``gm0`` 192.168.77.20 and
``gf0`` 10.10.0.2 (both MTU 1500). ``head_facts_wrong_dev`` was recorded after adding
``10.10.0.2/32 dev mgmt0``; ``head_facts_noroute`` after deleting the default route.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from splitserve import ClusterError
from splitserve.cluster._link import (
    EndFacts,
    Interface,
    Route,
    Transfer,
    choose_tool,
    facts_script,
    jumbo_mtu,
    mtu_row,
    parse_end_facts,
    parse_ip_addr,
    parse_ip_route_get,
    parse_iperf3_json,
    parse_speeds,
    rate_row,
    route_row,
    streams_for,
)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "link"
WORKER = "10.10.0.2"


def facts(name: str) -> EndFacts:
    return parse_end_facts((FIX / f"{name}.txt").read_text())


def with_mtu(f: EndFacts, ifname: str, mtu: int) -> EndFacts:
    return replace(f, interfaces=[replace(i, mtu=mtu) if i.name == ifname else i for i in f.interfaces])


# -- parsers -------------------------------------------------------------------------------------


def test_iperf3_one_stream() -> None:
    raw = (FIX / "iperf3_1stream_1gbit.json").read_text()
    t = parse_iperf3_json(raw)
    end = json.loads(raw)["end"]
    assert t.tool == "iperf3" and t.streams == 1
    assert t.bits_per_second == end["sum_received"]["bits_per_second"]
    assert t.bytes == end["sum_received"]["bytes"]
    assert t.min_rtt_ms == end["streams"][0]["sender"]["min_rtt"] / 1000
    assert t.retransmits == end["sum_sent"]["retransmits"]
    assert 0.9 < t.gbps < 1.0  # shaped to 1 Gbit/s


def test_iperf3_two_streams_sum_and_lowest_rtt() -> None:
    raw = (FIX / "iperf3_2streams_1gbit.json").read_text()
    t = parse_iperf3_json(raw)
    end = json.loads(raw)["end"]
    assert t.streams == 2
    assert t.bits_per_second == end["sum_received"]["bits_per_second"]
    assert t.min_rtt_ms == min(s["sender"]["min_rtt"] for s in end["streams"]) / 1000


def test_iperf3_error_and_garbage_are_one_line_errors() -> None:
    with pytest.raises(ClusterError, match="iperf3: unable to connect to server: Connection refused"):
        parse_iperf3_json((FIX / "iperf3_refused.json").read_text())
    with pytest.raises(ClusterError, match="iperf3 printed no JSON: iperf3: error - bad"):
        parse_iperf3_json("iperf3: error - bad option\n")
    with pytest.raises(ClusterError, match=r"no end\.sum_received"):
        parse_iperf3_json('{"start": {}, "end": {}}')


def test_head_facts_from_ip_json_and_sysfs() -> None:
    f = facts("head_facts_direct")
    by = {i.name: i for i in f.interfaces}
    assert set(by) == {"lo", "mgmt0", "fast0"}
    assert by["fast0"].mtu == 9000 and by["mgmt0"].mtu == 1500 and by["fast0"].up
    assert [str(a) for a in by["fast0"].addresses if a.version == 4] == ["10.10.0.1/24"]
    assert f.route == Route("fast0", "10.10.0.1", None, "unicast")
    assert f.speeds == {"fast0": 10000, "mgmt0": 10000}  # veth's; lo has none
    assert f.tools == {"iperf3", "python3"}
    assert f.holding("10.10.0.1") is by["fast0"]
    hit = f.on_subnet(WORKER)
    assert hit is not None and hit[0].name == "fast0"


def test_routed_and_missing_routes() -> None:
    assert facts("head_facts_routed").route == Route("mgmt0", "192.168.77.10", "192.168.77.1", "unicast")
    assert facts("head_facts_noroute").route is None
    assert parse_ip_route_get("") is None and parse_ip_route_get("not json") is None


def test_small_parsers_tolerate_odd_input() -> None:
    assert parse_speeds("eth0 -1\nlo \nenp1s0f0np0 200000\nib0 x\n") == {"enp1s0f0np0": 200000}
    assert parse_ip_addr("") == [] and parse_ip_addr("{") == []
    assert parse_end_facts("@@noip\n@@speed\n@@tools\n").ip_missing


def test_facts_script_asks_for_the_route_only_on_the_head() -> None:
    assert "ip -j route get 10.10.0.2" in facts_script(WORKER)
    assert "route get" not in facts_script()
    assert "'10.0.0.1;" in facts_script("10.0.0.1; rm")  # quoted for the shell


# -- rules ---------------------------------------------------------------------------------------


def test_route_on_the_interface_holding_the_subnet_passes() -> None:
    row = route_row("w1", WORKER, facts("head_facts_direct"))
    assert row.status == "pass" and "leaves by fast0, the interface holding 10.10.0.1/24, mtu 9000" in row.message


def test_route_leaving_by_another_interface_warns() -> None:
    row = route_row("w1", WORKER, facts("head_facts_wrong_dev"))
    assert row.status == "warn"
    assert "leaves by mgmt0" in row.message and "10.10.0.1/24 on that subnet is on fast0" in row.message
    assert "ip route show match 10.10.0.2" in row.fix


def test_routed_path_warns_and_no_route_fails() -> None:
    row = route_row("w1", "10.99.0.5", facts("head_facts_routed"))
    assert row.status == "warn" and "routed via 192.168.77.1 over mgmt0" in row.message
    row = route_row("w1", "10.99.0.5", facts("head_facts_noroute"))
    assert row.status == "fail" and "no route to 10.99.0.5" in row.message


def test_management_nic_while_a_much_faster_one_is_up_warns() -> None:
    f = facts("head_facts_direct")
    f = replace(f, route=Route("mgmt0", "192.168.77.10"), speeds={"mgmt0": 1000, "fast0": 200000})
    row = route_row("w1", "192.168.77.20", f)
    assert row.status == "warn" and "mgmt0 (1 Gb/s) while fast0 (200 Gb/s) is up" in row.message
    # The same speeds on both: nothing to say.
    f = replace(f, speeds={"mgmt0": 10000, "fast0": 10000})
    assert route_row("w1", "192.168.77.20", f).status == "pass"


def test_jumbo_frames_on_one_side_only() -> None:
    row = mtu_row("w1", WORKER, facts("head_facts_direct"), facts("worker_facts_mtu1500"))
    assert row.status == "warn" and "jumbo frames on one side only" in row.message
    assert "head fast0 mtu 9000, worker gf0 mtu 1500" in row.message
    assert "on the worker: sudo ip link set dev gf0 mtu 9000" in row.fix


def test_mtu_mismatch_between_two_jumbo_sizes_and_a_match() -> None:
    head = facts("head_facts_direct")
    row = mtu_row("w1", WORKER, head, with_mtu(facts("worker_facts_mtu1500"), "gf0", 4200))
    assert row.status == "warn" and row.message.startswith("MTU mismatch (head fast0 mtu 9000, worker gf0 mtu 4200")
    row = mtu_row("w1", WORKER, head, with_mtu(facts("worker_facts_mtu1500"), "gf0", 9000))
    assert row.status == "pass" and row.message == "mtu 9000 on both ends (fast0, gf0)"
    row = mtu_row("w1", "10.1.2.3", head, facts("worker_facts_mtu1500"))
    assert row.status == "skip"


def _transfer(gbps: float, tool: str = "iperf3", rtt: float | None = 0.05) -> Transfer:
    return Transfer(tool, gbps * 1e9, 2.0, int(gbps * 1e9 / 4), 1, rtt)


def _rated(mbps: int) -> tuple[EndFacts, EndFacts]:
    head, worker = facts("head_facts_direct"), facts("worker_facts_mtu1500")
    return replace(head, speeds={"fast0": mbps}), replace(worker, speeds={"gf0": mbps})


def test_rate_near_the_rated_speed_passes_with_the_figures() -> None:
    row = rate_row("w1", WORKER, *_rated(10000), _transfer(9.1))
    assert row.status == "pass"
    assert row.message.startswith("9.10 Gb/s to 10.10.0.2 (iperf3, 2.0 s, 1 stream)")
    assert "lowest smoothed RTT under load 0.050 ms" in row.message
    assert "rated 10 Gb/s (head fast0 10 Gb/s, worker gf0 10 Gb/s): 91%" in row.message


def test_rate_far_below_the_rated_speed_warns() -> None:
    row = rate_row("w1", WORKER, *_rated(10000), _transfer(1.0, "built-in"))
    assert row.status == "warn" and "10%, under 50%" in row.message and "ethtool fast0" in row.fix
    assert "; lowest RTT 0.050 ms" in row.message


def test_connectx7_cap_is_named() -> None:
    row = rate_row("w1", WORKER, *_rated(200000), _transfer(12.9))
    assert row.status == "warn" and "ConnectX-7" in row.fix and "mlxfwreset" in row.fix


def test_builtin_on_a_fast_link_points_to_iperf3() -> None:
    row = rate_row("w1", WORKER, *_rated(100000), _transfer(20.0, "built-in"))
    assert row.status == "warn" and "install iperf3" in row.fix


def test_rated_speed_is_the_slower_end_and_may_be_unknown() -> None:
    head, worker = _rated(10000)
    worker = replace(worker, speeds={"gf0": 1000})
    assert "rated 1 Gb/s" in rate_row("w1", WORKER, head, worker, _transfer(0.9)).message
    none = rate_row("w1", WORKER, replace(head, speeds={}), replace(worker, speeds={}), _transfer(0.9, rtt=None))
    assert none.status == "pass" and "rated speed unknown" in none.message and "RTT" not in none.message


def test_tool_choice_and_streams() -> None:
    head, worker = facts("head_facts_direct"), facts("worker_facts_mtu1500")
    assert choose_tool(head, worker) == "iperf3"
    assert choose_tool(head, replace(worker, tools={"python3"})) == "builtin"
    assert choose_tool(head, replace(worker, tools=set())) is None
    assert choose_tool(head, replace(worker, tools=set()), "builtin") == "builtin"
    assert streams_for(*_rated(10000), WORKER) == 1
    assert streams_for(*_rated(200000), WORKER) == 4


def test_interface_holding_an_ipv6_address() -> None:
    f = EndFacts(
        interfaces=parse_ip_addr(
            json.dumps(
                [{"ifname": "e", "mtu": 9000, "flags": ["UP"], "addr_info": [{"local": "fd00::2", "prefixlen": 64}]}]
            )
        )
    )
    assert f.holding("fd00::2") == Interface("e", 9000, True, f.interfaces[0].addresses)
    hit = f.on_subnet("fd00::9")
    assert hit is not None and hit[0].name == "e"


def test_a_fallback_note_is_shown_in_the_rate_row() -> None:
    t = replace(_transfer(0.95, "built-in"), note="iperf3 failed (Address already in use)")
    row = rate_row("w1", WORKER, *_rated(1000), t)
    assert row.status == "pass"
    assert "(built-in, 2.0 s, 1 stream; iperf3 failed (Address already in use))" in row.message


def test_jumbo_frames_that_do_not_cross_the_path_warn() -> None:
    head = facts("head_facts_direct")
    worker = with_mtu(facts("worker_facts_mtu1500"), "gf0", 9000)
    assert jumbo_mtu(head, worker, WORKER) == 9000
    assert jumbo_mtu(head, facts("worker_facts_mtu1500"), WORKER) is None
    row = mtu_row("w1", WORKER, head, worker, path_ok=False)
    assert row.status == "warn" and "a 9000-byte datagram with don't-fragment did not reach 10.10.0.2" in row.message
    assert "every switch / bridge port" in row.fix
    assert mtu_row("w1", WORKER, head, worker, path_ok=True).message.endswith("a full-size frame crossed the path")
    assert mtu_row("w1", WORKER, head, worker, path_ok=None).status == "pass"
