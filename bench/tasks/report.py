"""The table of ``compare.sh``: reads each contender's JSON line from the run's
work directory, prints a Markdown table with ratios against BullMQ and
Celery and the targets met or missed, and writes ``results.json`` (with the
commit, every peer's version, the machine and the date).

    python3 report.py WORKDIR OUT.json --n N --rtt RTT --quick 0|1 \
        --versions k=v ... --commit SHA --load-start "L1 L5 L15" --seconds S
    python3 report.py --table [results.json]   # the README's table, from results.json

Ratios: a rate's is ours ÷ the peer's (higher is better); a latency's is
the peer's ÷ ours (how many times quicker ours is).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from typing import Any

# Headline rows run headway at its defaults; the tuned rows are separate and
# say so.
ROWS = [
    ("headway-py", "headway Python, own layout (defaults)"),
    ("headway-js", "headway Node, own layout (defaults)"),
    ("bullmq", "BullMQ {bullmq} (Node, concurrency 8)"),
    ("celery", "Celery {celery} (prefork -c 2)"),
    ("headway-py-celery", "headway Python worker, Celery layout (defaults)"),
    ("headway-js-celery", "headway Node worker, Celery layout (defaults)"),
    ("headway-py-tuned", "headway Python, own layout, TUNED (-c 8, prefetch 512)"),
    ("headway-js-tuned", "headway Node, own layout, TUNED (-c 8, prefetch 512)"),
]


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
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
    try:
        with open("/proc/loadavg") as f:
            info["load_at_end"] = " ".join(f.read().split()[:3])
    except OSError:
        pass
    return info


def table(res: dict[str, Any], versions: dict[str, str]) -> list[str]:
    """The Markdown table: one row per contender, ratios against the peers."""
    bull, cel = res.get("bullmq", {}), res.get("celery", {})
    head = (
        "| contender | enqueue/s | bulk enqueue/s | drain/s | p50 ms | p99 ms "
        "| drain ×BullMQ | drain ×Celery | enqueue ×BullMQ | enqueue ×Celery "
        "| p50 ×BullMQ | p50 ×Celery |"
    )
    lines = [head, "|" + "---|" * 12]
    for key, label in ROWS:
        if key not in res:
            continue
        r = res[key]
        name = label.format_map({**versions, "bullmq": versions.get("bullmq", "?"), "celery": versions.get("celery", "?")})
        if "error" in r:
            lines.append(f"| {name} | FAILED ({r['error']}) |" + " |" * 10)
            continue
        r["ratios"] = {
            "drain_vs_bullmq": ratio(r.get("drain"), bull.get("drain")),
            "drain_vs_celery": ratio(r.get("drain"), cel.get("drain")),
            "enqueue_vs_bullmq": ratio(r.get("enqueue"), bull.get("enqueue")),
            "enqueue_vs_celery": ratio(r.get("enqueue"), cel.get("enqueue")),
            "p50_vs_bullmq": ratio(r.get("p50"), bull.get("p50"), invert=True),
            "p50_vs_celery": ratio(r.get("p50"), cel.get("p50"), invert=True),
        }
        q = r["ratios"]
        lines.append(
            f"| {name} | {rate(r.get('enqueue'))} | {rate(r.get('enqueue_bulk'))} "
            f"| {rate(r.get('drain'))} | {ms(r.get('p50'))} | {ms(r.get('p99'))} "
            f"| {times(q['drain_vs_bullmq'])} | {times(q['drain_vs_celery'])} "
            f"| {times(q['enqueue_vs_bullmq'])} | {times(q['enqueue_vs_celery'])} "
            f"| {times(q['p50_vs_bullmq'])} | {times(q['p50_vs_celery'])} |"
        )
    return lines


def readme_table(path: str) -> None:
    """The README's table and its caption, from a results.json."""
    with open(path) as f:
        got = json.load(f)
    v = got.get("versions", {})
    m = got.get("machine", {})
    if isinstance(m, str):
        m = {"description": m}
    print("\n".join(table(got["contenders"], v)))
    print()
    print(
        f"`{got.get('command', 'bash bench/tasks/compare.sh')}` at commit `{str(got.get('commit', '?'))[:12]}` "
        f"on {got.get('when', '?')}: N = {got.get('n')} no-op tasks per drain, results stored, "
        f"{got.get('round_trips')} sequential round trips, one redis-server {v.get('redis', '?')}; "
        f"{m.get('nproc', '?')} × {m.get('cpu', '?')}, {m.get('memory_gib', '?')} GiB, Linux {m.get('kernel', '?')}, "
        f"load {m.get('load_at_start', '?')} at the start; BullMQ {v.get('bullmq', '?')} (ioredis "
        f"{v.get('ioredis', '?')}), Celery {v.get('celery', '?')} (kombu {v.get('kombu', '?')}, redis-py "
        f"{v.get('redis-py', '?')}), Node {v.get('node', '?')}, Python {v.get('python', '?')}. Headline rows run "
        f"headway at its defaults: {got['contenders'].get('headway-py', {}).get('settings', '?')}; TUNED rows are "
        "labelled. Ratios: a rate's is ours ÷ the peer's, a latency's the peer's ÷ ours."
    )


def load(work: str, key: str) -> dict[str, Any]:
    try:
        with open(os.path.join(work, f"{key}.json")) as f:
            got: dict[str, Any] = json.loads(f.read())
    except (OSError, ValueError):
        return {"error": "no result"}
    fill = os.path.join(work, f"{key}.fill")
    if os.path.exists(fill):
        with open(fill) as f:
            lines = f.read().strip().splitlines()
        try:
            got["filled_by_celery_at"] = json.loads(lines[-1])["enqueue"]
        except (IndexError, KeyError, ValueError):
            pass
    return got


def rate(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f}"


def ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def times(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.1f}×" if v < 100 else f"{v:,.0f}×"


def ratio(a: float | None, b: float | None, invert: bool = False) -> float | None:
    if a is None or b is None or a <= 0 or b <= 0:
        return None
    return b / a if invert else a / b


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "--table":
        readme_table(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "results.json"))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("out")
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--rtt", type=int, required=True)
    ap.add_argument("--quick", type=int, default=0)
    ap.add_argument("--versions", nargs="*", default=[])
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--load-start", default="")
    ap.add_argument("--seconds", type=int, default=None)
    a = ap.parse_args()
    versions = dict(v.split("=", 1) for v in a.versions)
    res = {key: load(a.work, key) for key, _ in ROWS}
    host = machine()
    host["load_at_start"] = a.load_start
    lines = table(res, versions)

    targets: list[dict[str, Any]] = []

    def target(what: str, got: float | None, goal: float, unit: str, lower: bool = False) -> None:
        if got is None:
            ok = None
        else:
            ok = got <= goal if lower else got >= goal
        targets.append({"target": what, "measured": got, "goal": goal, "unit": unit, "met": ok})

    py, js = res["headway-py"], res["headway-js"]
    for key, who in (("headway-py", "Python"), ("headway-js", "Node")):
        target(f"{who} drain ≥ 4× BullMQ", res[key].get("ratios", {}).get("drain_vs_bullmq"), 4, "×")
        target(f"{who} drain ≥ 40× Celery", res[key].get("ratios", {}).get("drain_vs_celery"), 40, "×")
    for key, who in (("headway-py-celery", "Python"), ("headway-js-celery", "Node")):
        target(
            f"{who} worker on Celery's layout ≥ 20× the Celery worker",
            res[key].get("ratios", {}).get("drain_vs_celery"), 20, "×",
        )
    best = max((v for v in (py.get("enqueue"), py.get("enqueue_bulk")) if v), default=None)
    target("enqueue ≥ 50k/s from one Python process (best of delay loop, group sends)", best, 50_000, "/s")
    target(
        "enqueue ≥ 50k/s from one Python process, delay() from many threads, each send confirmed",
        py.get("enqueue_threads"), 50_000, "/s",
    )
    target("enqueue ≥ 50k/s from one Python process, one delay() at a time", py.get("enqueue"), 50_000, "/s")
    target("Python p50 ≤ 0.5 ms", py.get("p50"), 0.5, "ms", lower=True)
    target("Node p50 ≤ 0.5 ms", js.get("p50"), 0.5, "ms", lower=True)

    print()
    print(
        f"N = {a.n} no-op tasks per drain, results stored; {a.rtt} sequential round trips; "
        f"one redis-server; {host.get('nproc')} × {host.get('cpu', '?')}, {host.get('memory_gib', '?')} GiB, "
        f"Linux {host.get('kernel')}; load {a.load_start} at the start, {host.get('load_at_end')} at the end"
    )
    print()
    print("\n".join(lines))
    print()
    for key, _ in ROWS:
        r = res[key]
        bits = [f"{k}: {r[k]}" for k in ("enqueue_how", "enqueue_bulk_how", "drain_how", "settings") if k in r]
        if "verified_success" in r:
            bits.append(f"{r['verified_success']} SUCCESS results counted after the drain")
        if "enqueue_threads" in r:
            bits.append(f"{r['enqueue_threads_how']}: {r['enqueue_threads']:,.0f}/s")
        if "drain_cpu_us" in r:
            c = r["drain_cpu_us"]
            bits.append(f"drain CPU per task: worker side {c['worker']:.0f} µs, redis-server {c['redis']:.0f} µs")
        if "get_stored_p50" in r:
            bits.append(f"get() of an already stored result p50 {r['get_stored_p50']:.3f} ms")
        if "filled_by_celery_at" in r:
            bits.append(f"queue filled by a Celery producer at {r['filled_by_celery_at']:,.0f}/s")
        if bits:
            print(f"- {key}: " + "; ".join(bits))
    ping = load(a.work, "redis-ping")
    if "p50" in ping:
        print(
            f"- floor: one Redis PING round trip from Python (redis-py), p50 {ping['p50']:.3f} ms, "
            f"p99 {ping['p99']:.3f} ms"
        )
    print()
    for t in targets:
        mark = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        got = "—" if t["measured"] is None else f"{t['measured']:,.2f}{t['unit']}"
        print(f"target {t['target']}: {got} — {mark}")

    out = {
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": a.commit,
        "seconds": a.seconds,
        "command": "bash bench/tasks/compare.sh" + (" --quick" if a.quick and a.n == 5000 else "")
        + (f" --n {a.n} --rtt {a.rtt}" if a.n not in (5000, 20000) else ""),
        "n": a.n,
        "round_trips": a.rtt,
        "versions": versions,
        "machine": host,
        "contenders": res,
        "redis_ping_ms": ping,
        "targets": targets,
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
