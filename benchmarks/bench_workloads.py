"""Does speculation pay on the demo-shaped cluster? `bench sweep --set speculation=...` over the
agent-like workloads, SmolLM2 split over two local RPC workers on the CPU.

    .venv/bin/python benchmarks/bench_workloads.py [--out docs/benchmarks/cpu-smollm2-speculation] \\
        [--types ngram-simple,ngram-mod] [--workload copy,edit,json,agent] [--gen 400] [--repeat 1] \\
        [--workload-file FILE]

Writes a cluster spec (two workers, head, gateway on free loopback ports) to a temporary
folder, runs ``splitserve bench sweep -c SPEC --set speculation=none,TYPES --workload W
--report`` (the ``none`` point is the reference of the others' agreement) and leaves the run
file and its report (Markdown + PNGs) in ``--out``.  Needs the CPU engine in the cache.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import two_worker_spec  # noqa: E402

from splitserve._assets import smollm2_path  # noqa: E402
from splitserve.engine import BuildOptions, build_engine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("docs/benchmarks/cpu-smollm2-speculation"))
    ap.add_argument("--types", default="ngram-simple,ngram-mod")
    ap.add_argument("--workload", default="copy,edit,json,agent")
    ap.add_argument("--gen", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workload-file", action="append", default=[])
    ap.add_argument("--label", default="cpu-smollm2-2workers")
    args = ap.parse_args()

    engine, _ = build_engine(BuildOptions(backend="cpu"))
    with tempfile.TemporaryDirectory(prefix="bench-workloads-") as tmp:
        spec = two_worker_spec(Path(tmp), smollm2_path(), name="wlbench", ctx_size=4096)
        spec.write_text(f'engine = "{engine.root}"\n' + spec.read_text())
        args.out.mkdir(parents=True, exist_ok=True)
        run_file = args.out / "sweep.json"
        cmd = [sys.executable, "-m", "splitserve", "bench", "sweep", "-c", str(spec),
               "--set", f"speculation=none,{args.types}", "--workload", args.workload,
               "--gen-tokens", str(args.gen), "--repeat", str(args.repeat), "-o", str(run_file),
               "--label", args.label, "--report"]
        for f in args.workload_file:
            cmd += ["--workload-file", f]
        print("$", " ".join(cmd[2:]), flush=True)
        t0 = time.monotonic()
        res = subprocess.run(cmd, env={**__import__("os").environ, "SPLITSERVE_STATE": str(Path(tmp) / "state")})
        print(f"wall {time.monotonic() - t0:.0f} s", flush=True)
        if res.returncode != 0:
            raise SystemExit(res.returncode)
        (args.out / "machine.txt").write_text(subprocess.run(["lscpu"], capture_output=True, text=True).stdout
                                              if shutil.which("lscpu") else "")
    print(f"report: {args.out / 'sweep' / 'report.md'}")


if __name__ == "__main__":
    main()
