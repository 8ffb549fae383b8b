"""The tables of ``run.sh``: reads each contender's JSON line from the run's
work directory, writes ``results.json`` (every number, the commit, the
versions, the machine, the load) and prints the tables with the ratios and
the targets met or missed.

    python3 report.py WORKDIR OUT.json --meta k=v ... --versions k=v ...
    python3 report.py --table [results.json]   # the README's tables, from results.json
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))

# (key in results.json, file the contender wrote, label)
CPU = [
    ("headway-threads", "cpu-threads", "headway, threads pool, -c 2"),
    ("headway-process", "cpu-process", "headway, process pool, -c 2"),
    ("celery-prefork", "cpu-celery", "Celery {celery}, prefork -c 2"),
]
DRAIN = [
    ("headway-process", "drain-process", "headway, process pool, -c 2"),
    ("headway-process-celery-layout", "drain-process-celery", "headway, process pool, -c 2, on Celery's layout"),
    ("celery-prefork", "drain-celery", "Celery {celery}, prefork -c 2"),
    ("headway-threads", "drain-threads", "headway, threads pool, -c 2 (reference)"),
]
HOP = [("threads", "hop-threads", "threads pool, -c 1"), ("process", "hop-process", "process pool, -c 1")]
RSS = [("headway-process", "rss-process", "headway, process pool"), ("celery-prefork", "rss-celery", "Celery {celery}, prefork")]

TARGETS = {
    "cpu_process_vs_threads": 1.7,
    "cpu_process_vs_celery": 1.0,
    "drain_process_vs_celery": 10.0,
}


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"nproc": os.cpu_count(), "kernel": platform.release(), "arch": platform.machine()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["memory_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
                    break
    except OSError:
        pass
    return info


def ratio(a: Any, b: Any) -> float | None:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0:
        return a / b
    return None


def f(x: Any, fmt: str = "{:,.0f}") -> str:
    return fmt.format(x) if isinstance(x, (int, float)) else "—"


def times(x: Any) -> str:
    return f(x, "{:.2f}×")


def mark(x: Any, target: float) -> str:
    if not isinstance(x, (int, float)):
        return "not measured"
    return f"{x:.2f}× (target ≥ {target:g}×: {'met' if x >= target else 'MISSED'})"


def avg(xs: list[Any]) -> float | None:
    xs = [x for x in xs if isinstance(x, (int, float))]
    return sum(xs) / len(xs) if xs else None


def collect(work: str) -> dict[str, Any]:
    def read(name: str) -> dict[str, Any]:
        try:
            with open(os.path.join(work, name + ".json")) as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return {"error": "no result"}

    out: dict[str, Any] = {"calibration": read("calibrate")}
    out["cpu_bound"] = {k: read(n) for k, n, _ in CPU}
    def median_of(name: str) -> dict[str, Any]:
        """The run of median rate among `name@1`, `name@2`, ... (an error
        when any failed), with every rate in `rates`."""
        runs = [read(os.path.splitext(os.path.basename(p))[0]) for p in sorted(glob.glob(os.path.join(work, name + "@*.json")))]
        if not runs:
            return {"error": "no result"}
        bad = [r for r in runs if "error" in r or not isinstance(r.get("rate"), (int, float))]
        if bad:
            return bad[0] if "error" in bad[0] else {"error": "no rate"}
        runs.sort(key=lambda r: r["rate"])
        mid = dict(runs[len(runs) // 2])
        mid["rates"] = [r["rate"] for r in runs]
        return mid

    out["drain"] = {k: median_of(n) for k, n, _ in DRAIN}
    out["hop"] = {k: read(n) for k, n, _ in HOP}
    out["rss"] = {k: read(n) for k, n, _ in RSS}
    cpu, dr, hop = out["cpu_bound"], out["drain"], out["hop"]
    out["ratios"] = {
        "cpu_process_vs_threads": ratio(cpu["headway-process"].get("rate"), cpu["headway-threads"].get("rate")),
        "cpu_process_vs_celery": ratio(cpu["headway-process"].get("rate"), cpu["celery-prefork"].get("rate")),
        "drain_process_vs_celery": ratio(dr["headway-process"].get("rate"), dr["celery-prefork"].get("rate")),
        "drain_process_celery_layout_vs_celery": ratio(
            dr["headway-process-celery-layout"].get("rate"), dr["celery-prefork"].get("rate")
        ),
        "drain_threads_vs_celery": ratio(dr["headway-threads"].get("rate"), dr["celery-prefork"].get("rate")),
        "drain_process_vs_threads": ratio(dr["headway-process"].get("rate"), dr["headway-threads"].get("rate")),
    }
    p, t = hop["process"].get("p50_us"), hop["threads"].get("p50_us")
    out["hop_extra_us_p50"] = p - t if isinstance(p, (int, float)) and isinstance(t, (int, float)) else None
    out["targets"] = TARGETS
    return out


def tables(got: dict[str, Any]) -> list[str]:
    v = got.get("versions", {})
    names = {"celery": v.get("celery", "?")}
    cal = got.get("calibration", {})
    q = got.get("ratios", {})
    L: list[str] = []

    cpu = got["cpu_bound"]
    L.append(
        f"**CPU-bound**: {got.get('n_cpu')} runs of a pure-Python body of {f(cal.get('count'), '{:,}')} "
        f"loop rounds ({f(cal.get('body_ms'), '{:.1f}')} ms alone when calibrated), queued first, concurrency 2."
    )
    L.append("")
    L.append("| contender | runs/s | mean time in a body, ms | wall from launch, s | ×threads | ×Celery |")
    L.append("|---|---:|---:|---:|---:|---:|")
    for k, _, label in CPU:
        r = cpu[k]
        name = label.format_map(names)
        if "error" in r:
            L.append(f"| {name} | FAILED ({r['error']}) | | | | |")
            continue
        L.append(
            f"| {name} | {f(r.get('rate'), '{:,.1f}')} | {f(r.get('body_ms'), '{:.1f}')} | {f(r.get('wall'), '{:.2f}')} "
            f"| {times(ratio(r.get('rate'), cpu['headway-threads'].get('rate')))} "
            f"| {times(ratio(r.get('rate'), cpu['celery-prefork'].get('rate')))} |"
        )
    L.append("")
    dr = got["drain"]
    reps = got.get("drain_reps", "1")
    L.append(
        f"**No-op drain**: {got.get('n_drain')} no-op runs queued first, then the worker launched; results stored and counted. "
        f"Each contender {reps} times in turn; the median run, with every run's rate."
    )
    L.append("")
    L.append("| contender | runs/s (median) | drain, s | wall from launch, s | ×Celery | every run, runs/s |")
    L.append("|---|---:|---:|---:|---:|---|")
    for k, _, label in DRAIN:
        r = dr[k]
        name = label.format_map(names)
        if "error" in r:
            L.append(f"| {name} | FAILED ({r['error']}) | | | | |")
            continue
        every = ", ".join(f(x) for x in r.get("rates", []))
        L.append(
            f"| {name} | {f(r.get('rate'))} | {f(r.get('seconds'), '{:.2f}')} | {f(r.get('wall'), '{:.2f}')} "
            f"| {times(ratio(r.get('rate'), dr['celery-prefork'].get('rate')))} | {every} |"
        )
    L.append("")
    hop = got["hop"]
    L.append(f"**Hop cost**: {hop.get('process', {}).get('round_trips', '?')} no-op runs one at a time (send → get), concurrency 1.")
    L.append("")
    L.append("| headway worker | p50 µs | p99 µs | mean µs |")
    L.append("|---|---:|---:|---:|")
    for k, _, label in HOP:
        r = hop[k]
        if "error" in r:
            L.append(f"| {label} | FAILED ({r['error']}) | | |")
            continue
        L.append(f"| {label} | {f(r.get('p50_us'))} | {f(r.get('p99_us'))} | {f(r.get('mean_us'))} |")
    L.append(f"| the hop to the child (p50 difference) | {f(got.get('hop_extra_us_p50'))} | | |")
    L.append("")
    L.append("**Child memory**, KiB per child (mean of the two), at rest after start-up and 4 no-op runs; after the no-op drain.")
    L.append("")
    L.append("| contender | child VmRSS | child Pss | worker process VmRSS | child VmRSS after the drain |")
    L.append("|---|---:|---:|---:|---:|")
    for k, _, label in RSS:
        r = got["rss"][k]
        name = label.format_map(names)
        if "error" in r:
            L.append(f"| {name} | FAILED ({r['error']}) | | | |")
            continue
        kids = r.get("children", [])
        after = dr.get(k, {}).get("children_after", [])
        L.append(
            f"| {name} | {f(avg([c.get('rss') for c in kids]))} | {f(avg([c.get('pss') for c in kids]))} "
            f"| {f(r.get('parent', {}).get('rss'))} | {f(avg([c.get('rss') for c in after]))} |"
        )
    L.append("")
    L.append("Targets:")
    L.append(f"- CPU-bound, process pool ÷ threads pool: {mark(q.get('cpu_process_vs_threads'), TARGETS['cpu_process_vs_threads'])}")
    L.append(f"- CPU-bound, process pool ÷ Celery prefork: {mark(q.get('cpu_process_vs_celery'), TARGETS['cpu_process_vs_celery'])}")
    L.append(f"- no-op drain, process pool ÷ Celery prefork: {mark(q.get('drain_process_vs_celery'), TARGETS['drain_process_vs_celery'])}")
    m = got.get("machine", {})
    L.append("")
    L.append(
        f"`{got.get('command', 'bash bench/procs/run.sh')}` at commit `{str(got.get('commit', '?'))[:12]}` on "
        f"{got.get('when', '?')}, one redis-server {v.get('redis', '?')}; {m.get('nproc', '?')} × {m.get('cpu', '?')}, "
        f"Linux {m.get('kernel', '?')}, load {m.get('load_at_start', '?')} at the start and {m.get('load_at_end', '?')} "
        f"at the end; headway {v.get('headway', '?')}, Celery {v.get('celery', '?')} (kombu {v.get('kombu', '?')}, "
        f"redis-py {v.get('redis-py', '?')}), Python {v.get('python', '?')}."
    )
    return L


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--table":
        path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "results.json")
        with open(path) as fh:
            print("\n".join(tables(json.load(fh))))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("out")
    ap.add_argument("--meta", nargs="*", default=[])
    ap.add_argument("--versions", nargs="*", default=[])
    ap.add_argument("--load-start", default="?")
    a = ap.parse_args()
    got: dict[str, Any] = {"when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    for kv in a.meta:
        k, _, val = kv.partition("=")
        got[k] = int(val) if val.isdigit() else val
    got["versions"] = dict(kv.partition("=")[::2] for kv in a.versions)
    m = machine()
    m["load_at_start"] = a.load_start
    with open("/proc/loadavg") as fh:
        m["load_at_end"] = " ".join(fh.read().split()[:3])
    got["machine"] = m
    got.update(collect(a.work))
    with open(a.out, "w") as fh:
        json.dump(got, fh, indent=1)
        fh.write("\n")
    print("\n".join(tables(got)))


if __name__ == "__main__":
    main()
