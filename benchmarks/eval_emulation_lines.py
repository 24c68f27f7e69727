"""Lines of the hand-written emulation (shell, git, test rules, SQL) that the real sandbox
replaced, counted in ``eval/_sandbox.py`` as it was before, and the file's diff since.

    .venv/bin/python benchmarks/eval_emulation_lines.py --out benchmarks/results/eval-emulation-lines.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

BEFORE = "5d6d81f"  # the last commit with the emulation
PATH = "src/splitserve/eval/_sandbox.py"
SECTIONS = {  # (first line marker, marker of the line after)
    "shell interpreter (ls, cat, grep, find, pipes, ...)": ("    # --- shell ---", "def make_sandbox("),
    "git emulation": ("    # --- git ---", "    # --- tests ---"),
    "test rules over file text": ("    # --- tests ---", "    # --- database ---"),
    "SQL subset parser": ("# --- SQL ---", "# --- the sandbox ---"),
    "SQL subset execution": ("    # --- database ---", "    # --- web ---"),
    "test rule spec (MockTest, _test_rules)": ("@dataclass(frozen=True)\nclass MockTest", "def _url_key("),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    old = subprocess.run(["git", "show", f"{BEFORE}:{PATH}"], capture_output=True, text=True, check=True).stdout
    counts = {}
    for name, (start, end) in SECTIONS.items():
        a, b = old.index(start), old.index(end)
        counts[name] = old[a:b].count("\n")
    numstat = subprocess.run(
        ["git", "diff", "--numstat", BEFORE, "HEAD", "--", PATH], capture_output=True, text=True, check=True
    ).stdout.split()
    result = {
        "file": PATH,
        "lines_before": old.count("\n"),
        "lines_now": Path(PATH).read_text().count("\n"),
        "emulation_lines_removed": sum(counts.values()),
        "by_part": counts,
        "diff_since": {"added": int(numstat[0]), "deleted": int(numstat[1])},
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
