"""The keys that the page, docs/ui.md and the planner's note tell a spec user to set exist in
the spec (the page once said ``device``, which the spec rejects)."""

from __future__ import annotations

import re
from pathlib import Path

from splitserve.cluster._spec import HeadSpec, WorkerSpec
from splitserve.plan._plan import BANDWIDTH_HINT_SPEC

ROOT = Path(__file__).resolve().parents[2]


def _keys(text: str) -> set[str]:
    return set(re.findall(r"\b[a-z]+_[a-z_]+\b", text))


def test_the_pages_bandwidth_hint_names_worker_keys() -> None:
    js = (ROOT / "src/splitserve/gateway/ui/app.js").read_text()
    (hint,) = re.findall(r"no decode bound \(set ([^)]*) on the workers\)", js)
    named = set(re.split(r"\s+or\s+|,\s*", hint))
    assert named and named <= set(WorkerSpec.model_fields), named


def test_docs_ui_names_worker_keys() -> None:
    row = next(ln for ln in (ROOT / "docs/ui.md").read_text().splitlines() if "decode bound" in ln)
    named = set(re.findall(r"`([a-z_]+)`", row.split("|")[2]))
    assert {"device_kind", "bandwidth_gbps"} <= named <= set(WorkerSpec.model_fields)


def test_plan_note_names_worker_and_head_keys() -> None:
    named = _keys(BANDWIDTH_HINT_SPEC)
    assert named == {"device_kind", "bandwidth_gbps"}
    assert named <= set(WorkerSpec.model_fields) and named <= set(HeadSpec.model_fields)
