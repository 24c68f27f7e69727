"""A scenario file whose ``sandbox`` spec is wrong (the emulation's old rule list under ``tests``)
is a load problem that ``eval list`` shows, not a sample that errors when its workspace is made."""

from __future__ import annotations

from pathlib import Path

from splitserve.eval import load_suite

FIXTURE = Path(__file__).parents[2] / "fixtures/eval/toolery/easy/fx-easy-01-parallel-weather.yaml"


def test_an_old_format_sandbox_spec_is_a_load_problem(tmp_path: Path) -> None:
    good = FIXTURE.read_text().replace("id: fx-easy-01-parallel-weather", "id: sbx-new")
    (tmp_path / "good.yaml").write_text(
        good + 'sandbox:\n  files: {"a.py": "x = 1\\n"}\n  tests: {"test_a.py": "def test_x(): pass\\n"}\n'
    )
    old = FIXTURE.read_text().replace("id: fx-easy-01-parallel-weather", "id: sbx-old")
    (tmp_path / "old.yaml").write_text(
        old + 'sandbox:\n  files: {"a.py": "x = 1\\n"}\n  tests:\n    - {cmd: pytest, must_contain: "x = 2"}\n'
    )
    suite = load_suite(str(tmp_path))
    assert [s.id for s in suite.scenarios] == ["sbx-new"]
    [problem] = suite.problems
    assert problem.path.endswith("old.yaml") and "sandbox: sandbox tests must map paths to text" in problem.reason
