"""The eval plots as a person sees them: a long run label wraps inside the image instead of running
off it (the pass-rate and failure-cause titles), and the two plots share one width, so that side by
side (report, live page) neither is shrunk into a corner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from splitserve.eval import _plots
from splitserve.eval._report import load_summary

from .test_report import write_run

LABEL = "SmolLM2-135M-Instruct Q4_1 on 2 RPC workers, builtin suite, 3 trials per scenario"


@pytest.fixture()
def figures(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    real = _plots._save

    def save(plt: Any, fig: Any, path: Path) -> Path:
        fig.tight_layout()
        fig.canvas.draw()
        title = fig.axes[0].title.get_window_extent()
        seen.append(
            {
                "name": path.name,
                "size": tuple(fig.get_size_inches()),
                "title": title,
                "fig": fig.bbox,
                "text": fig.axes[0].get_title(),
            }
        )
        return real(plt, fig, path)

    monkeypatch.setattr(_plots, "_save", save)
    return seen


@pytest.mark.parametrize("plays", [{"e1": "ppw"}, {"e1": "ppw", "m1": "waa", "h1": "tpp", "v1": "pxw"}])
def test_titles_stay_inside_and_the_two_plots_share_a_width(
    plays: dict[str, str], figures: list[dict[str, Any]], tmp_path: Path
) -> None:
    summary = load_summary(write_run(tmp_path / "run", plays))
    assert _plots.plot_tiers(summary, LABEL, tmp_path / "tiers.png") is not None
    assert _plots.plot_causes(summary, LABEL, tmp_path / "causes.png") is not None
    tiers, causes = figures
    for fig in figures:
        assert fig["title"].x0 >= 0 and fig["title"].x1 <= fig["fig"].x1, (fig["name"], fig["text"])
        assert "builtin suite" in fig["text"].replace("\n", " ")
    assert tiers["size"][0] == causes["size"][0] == _plots.WIDTH
    assert causes["size"][1] >= 0.5 * causes["size"][0], "not a thin strip beside the tier plot"
