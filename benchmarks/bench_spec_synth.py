"""What speculation buys over RPC at a given acceptance: decode t/s against the mean accepted
length, for draft lengths 4/8/16, beside the no-speculation baseline and the planner's bound.

Each point is a real cluster (`splitserve up`: the head plus the spec's RPC workers) whose
llama-server drafts ``K`` tokens a step with a small draft model (``draft-simple``) and accepts
them by llama.cpp's benchmarking-only synthetic acceptance (``--spec-synth-len L``: a mean of
``L`` tokens per step, the target's own token included: the spec's ``speculation``,
``draft_model``, ``spec_draft_n_max``/``_n_min`` and ``spec_synth_len`` keys), so the figure
depends on the topology
and the draft length, not on how well a draft predicts a meaningless synthetic model. Each
point is measured by greedy requests to the head's /completion with the same prompt size and
token count (llama-server's own timings); the baseline is the same cluster without speculation.

    python benchmarks/bench_spec_synth.py --spec cluster.toml --draft draft.gguf --out DIR \\
        [--draft-lengths 4,8,16] [--accept 0,0.25,0.5,0.75,1] [--gen 256] [--prompt 256] \\
        [--repeat 2] [--decode-bound TPS]

``--accept`` is the fraction of the drafted tokens accepted on average: L = 1 + f * K.
Writes DIR/spec-synth.json, DIR/spec-synth.md and DIR/spec-synth.png;
``bench_spec_synth.py merge DIR A.json B.json ...`` joins several runs' JSON into one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

SS = [sys.executable, "-m", "splitserve"]


def run(*args: str) -> None:
    res = subprocess.run([*SS, *args], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"splitserve {' '.join(args)} failed ({res.returncode}):\n"
                         + "\n".join((res.stderr or res.stdout).splitlines()[-15:]))


def toml_value(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def write_spec(base: dict[str, Any], path: Path, server_keys: dict[str, Any]) -> None:
    """The base spec with ``server_keys`` set in ``[server]`` (a flat TOML writer: the specs
    splitserve reads are tables of scalars and lists)."""
    spec = json.loads(json.dumps(base))
    spec.setdefault("server", {}).update(server_keys)
    lines = [f"{k} = {toml_value(v)}" for k, v in spec.items() if not isinstance(v, (dict, list))
             or (isinstance(v, list) and not all(isinstance(x, dict) for x in v))]
    for k, v in spec.items():
        if isinstance(v, dict):
            lines.append(f"\n[{k}]")
            lines += [f"{kk} = {toml_value(vv)}" for kk, vv in v.items()]
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for item in v:
                lines.append(f"\n[[{k}]]")
                lines += [f"{kk} = {toml_value(vv)}" for kk, vv in item.items()]
    path.write_text("\n".join(lines) + "\n")


def measure(spec: Path, out: Path, args: argparse.Namespace, label: str) -> dict[str, Any]:
    """`up`, then ``--repeat`` greedy requests straight to llama-server's /completion (its own
    timings: decode t/s, drafted and accepted tokens), then `down`; records go to ``out``."""
    import httpx

    server = tomllib.loads(spec.read_text()).get("server", {})
    url = f"http://{server.get('host', '127.0.0.1')}:{server.get('port', 8080)}"
    run("up", "-c", str(spec))
    recs = []
    try:
        for i in range(args.repeat):
            words = " ".join(f"word{(i * 7919 + j) % 1000}" for j in range(args.prompt))
            r = httpx.post(f"{url}/completion", timeout=600, json={
                "prompt": f"[{label} {i}] {words}", "n_predict": args.gen, "temperature": 0,
                "ignore_eos": True, "cache_prompt": False, "seed": 1})
            r.raise_for_status()
            body = r.json()
            recs.append({"timings": body.get("timings") or {},
                         "completion_tokens": body.get("tokens_predicted")})
    finally:
        run("down", "-c", str(spec))
    out.write_text(json.dumps({"label": label, "records": recs}, indent=1))
    tps = [float(r["timings"]["predicted_per_second"]) for r in recs
           if r["timings"].get("predicted_per_second")]
    drafted = sum(int(r["timings"].get("draft_n") or 0) for r in recs)
    accepted = sum(int(r["timings"].get("draft_n_accepted") or 0) for r in recs)
    return {"label": label, "decode_tps": max(tps) if tps else None,
            "decode_tps_all": tps, "draft_n": drafted, "draft_n_accepted": accepted,
            "acceptance": accepted / drafted if drafted else None,
            "tokens": sum(int(r.get("completion_tokens") or 0) for r in recs)}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    for k in result["draft_lengths"]:
        pts = [p for p in result["points"] if p["k"] == k and p["decode_tps"]]
        ax.plot([p["mean_len"] for p in pts], [p["decode_tps"] for p in pts], marker="o",
                label=f"draft length {k}")
    base = result["baseline"]["decode_tps"]
    if base:
        ax.axhline(base, color="grey", ls="--", label=f"no speculation ({base:.0f} t/s)")
    bound = result.get("decode_bound")
    if bound:
        ax.axhline(bound, color="red", ls=":", label=f"planner's bandwidth bound ({bound:.0f} t/s)")
    ax.set(xlabel="mean tokens per step (synthetic acceptance, target token included)",
           ylabel="decode tokens/s (one request)", title=result["title"])
    ax.set_yscale("log")  # the bound is far above: a log axis keeps the points readable
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_outputs(result: dict[str, Any], out: Path) -> None:
    """spec-synth.json, .md (a table) and .png (decode t/s against mean tokens per step)."""
    result["points"].sort(key=lambda p: (p["k"], p["mean_len"]))
    (out / "spec-synth.json").write_text(json.dumps(result, indent=1))
    b = result["baseline"].get("decode_tps") or 0
    rows = ["| draft length | mean tokens/step | acceptance (measured) | decode t/s | vs baseline |",
            "|---|---|---|---|---|"]
    if b:
        rows.append(f"| none | 1 | - | {b:.1f} | 1.00x |")
    for p in result["points"]:
        acc = "-" if p["acceptance"] is None else f"{p['acceptance']:.2f}"
        tps = p["decode_tps"] or 0
        rows.append(f"| {p['k']} | {p['mean_len']} | {acc} | {tps:.1f} | "
                    + (f"{tps / b:.2f}x |" if b else "- |"))
    bound = result.get("decode_bound")
    tail = f"\nPlanner's decode bound: {bound:.1f} t/s.\n" if bound else ""
    (out / "spec-synth.md").write_text(f"# {result['title']}\n\n" + "\n".join(rows) + "\n" + tail)
    plot(result, out / "spec-synth.png")


def merge(files: list[Path], out: Path) -> None:
    """One result from several runs of this script (the baseline from the one that has it)."""
    parts = [json.loads(f.read_text()) for f in files]
    result = dict(parts[0])
    result["baseline"] = next((p["baseline"] for p in parts if p["baseline"].get("decode_tps")),
                              parts[0]["baseline"])
    result["points"] = [pt for p in parts for pt in p["points"]]
    result["draft_lengths"] = sorted({pt["k"] for pt in result["points"]})
    out.mkdir(parents=True, exist_ok=True)
    write_outputs(result, out)
    print((out / "spec-synth.md").read_text())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "merge":  # merge OUT A.json B.json ...
        merge([Path(a) for a in sys.argv[3:]], Path(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", type=Path, required=True, help="a cluster spec (TOML)")
    ap.add_argument("--draft", type=Path, required=True, help="draft GGUF (the target's vocabulary)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--draft-lengths", default="4,8,16")
    ap.add_argument("--accept", default="0,0.25,0.5,0.75,1")
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--decode-bound", type=float, default=None, help="the planner's bound, t/s")
    ap.add_argument("--title", default="Speculation over RPC: decode vs acceptance")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the run without speculation (another run of this script has it)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    base = tomllib.loads(args.spec.read_text())
    ks = [int(x) for x in args.draft_lengths.split(",")]
    fractions = [float(x) for x in args.accept.split(",")]
    spec = args.out / "point.toml"
    write_spec(base, spec, {})
    result: dict[str, Any] = {"title": args.title, "draft_lengths": ks, "decode_bound": args.decode_bound,
                              "gen_tokens": args.gen, "prompt_tokens": args.prompt, "points": []}
    result["baseline"] = ({"decode_tps": None} if args.no_baseline
                          else measure(spec, args.out / "baseline.json", args, "none"))
    if result["baseline"]["decode_tps"]:
        print(f"baseline: {result['baseline']['decode_tps']:.1f} t/s", flush=True)
    for k in ks:
        for f in fractions:
            mean_len = round(1 + f * k, 3)
            write_spec(base, spec, {"speculation": "draft-simple", "draft_model": str(args.draft.resolve()),
                                    "spec_draft_n_max": k, "spec_draft_n_min": k,
                                    "spec_synth_len": mean_len})
            point = measure(spec, args.out / f"k{k}-L{mean_len}.json", args, f"k{k} L{mean_len}")
            point.update(k=k, accept_fraction=f, mean_len=mean_len)
            result["points"].append(point)
            print(f"k={k} L={mean_len}: {point['decode_tps']:.1f} t/s, acceptance "
                  f"{point['acceptance']}", flush=True)
            (args.out / "spec-synth.json").write_text(json.dumps(result, indent=1))
    write_outputs(result, args.out)
    print((args.out / "spec-synth.md").read_text())


if __name__ == "__main__":
    main()
