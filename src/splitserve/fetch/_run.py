"""``fetch_repo()``: the one call behind ``splitserve fetch REPO`` (plan, then transfer unless a dry run).

The command parses its flags into :class:`~._fetch.FetchOptions`, calls :func:`fetch_repo` with a
:class:`FetchEvents` for progress, and renders the :class:`FetchRun` it gets back (a table, the
summary lines, or :meth:`FetchRun.as_dict` as JSON).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._fetch import FetchOptions, FetchPlan, FetchResult, FileOutcome, fetch, plan_fetch
from ._hub import HfHub, Hub
from ._transfer import Events


class FetchEvents(Events):
    """Progress of :func:`fetch_repo`: the transfer's callbacks, and the plan once it is known."""

    def planned(self, plan: FetchPlan, dry_run: bool) -> None:
        """Called once, after listing and selecting and before any byte moves."""


@dataclass
class FetchRun:
    """What :func:`fetch_repo` did: the plan, and the transfer's result unless it was a dry run."""

    plan: FetchPlan
    result: FetchResult | None = None  #: None for a dry run

    def as_dict(self) -> dict[str, Any]:
        """What ``fetch --json`` prints: the result's figures, or the plan for a dry run."""
        return self.result.as_dict() if self.result is not None else self.plan.as_dict()

    def summary(self) -> str:
        """The closing line: files, folder, bytes fetched, seconds and speed (a dry run: the plan's line)."""
        r = self.result
        if r is None:
            return plan_line(self.plan)
        speed = r.fetched_bytes / r.seconds if r.seconds else 0.0
        return (
            f"done: {len(r.outcomes)} files in {r.plan.root} "
            f"({size_label(r.fetched_bytes)} fetched in {r.seconds:.1f}s, {size_label(int(speed))}/s)"
        )

    @property
    def refetched(self) -> list[FileOutcome]:
        """Files fetched again after a bad hash (worth a note to the user)."""
        return [] if self.result is None else [o for o in self.result.outcomes if o.status == "refetched"]

    @property
    def spec_lines(self) -> list[str]:
        """A cluster spec's ``model = "…"`` line for each shard set fetched."""
        return [] if self.result is None else [spec_model_line(m) for m in self.result.models]


def fetch_repo(
    options: FetchOptions, *, dry_run: bool = False, on_event: FetchEvents | None = None, hub: Hub | None = None
) -> FetchRun:
    """Plan the fetch (``on_event.planned``), then, unless ``dry_run``, transfer and verify.

    Raises :class:`~._errors.FetchError` (``FetchFailed`` with the partial result when some files failed)."""
    hub = hub or HfHub(token=options.token)
    events = on_event or FetchEvents()
    plan = plan_fetch(options, hub)
    events.planned(plan, dry_run)
    if dry_run:
        return FetchRun(plan)
    return FetchRun(plan, fetch(options, hub, events, plan))


def plan_line(plan: FetchPlan) -> str:
    """``org/NAME @ COMMIT: N files, SIZE; SIZE to fetch into DIR``."""
    return (
        f"{plan.repo_id} @ {plan.commit[:12]}: {len(plan.files)} files, "
        f"{size_label(plan.total)}; {size_label(plan.todo)} to fetch into {plan.root}"
    )


def size_label(n: int) -> str:
    """``1.5 GiB``, ``12.0 MiB``, ``3.0 KiB`` or ``17 B``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def spec_model_line(model: Path) -> str:
    """The spec line naming a fetched model: ``model = "~/models/…-00001-of-0000N.gguf"``
    (``~`` for the home folder, as a spec may write it)."""
    path = model.expanduser().absolute()
    try:
        shown = "~/" + path.relative_to(Path.home()).as_posix()
    except ValueError:
        shown = path.as_posix()
    return f"model = {json.dumps(shown)}"


__all__ = ["FetchEvents", "FetchRun", "fetch_repo", "plan_line", "size_label", "spec_model_line"]
