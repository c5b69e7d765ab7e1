"""One line per ``ngb measure --json`` result: what a reader of a GPU check needs at a glance.

    python scripts/trial_summary.py results/*.json        # or a .jsonl, one result a line

Throughput mean and its 95 % interval, verdict and reason, precision that ran, and per worker
process its mean, repetitions, warm-up seconds, why it stopped and whether it was disturbed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def results(paths: list[str]) -> list[tuple[str, dict]]:
    out = []
    for path in paths:
        text = Path(path).read_text().strip()
        if not text:
            out.append((path, {}))
            continue
        lines = text.splitlines() if path.endswith(".jsonl") else [text]
        out.extend((path, json.loads(line)) for line in lines if line.strip())
    return out


def describe(name: str, r: dict) -> str:
    if not r:
        return f"{name}: no result"
    if r.get("status") != "ok":
        return f"{name}: {r.get('status')} {r.get('error_kind')}: {r.get('error')}"
    spec = r.get("spec", {})
    asked = spec.get("measure", {}).get("precision", "default")
    name = f"{spec.get('model')} {spec.get('compiler')} b{spec.get('batch')} {asked} ({name})"
    t = r["throughput"]
    half = r.get("ci_half_width") or 0.0
    lines = [
        f"{name}: {t['mean']:,.1f}/s ±{100 * half / t['mean']:.1f}% (n={t['n']}, CoV "
        f"{100 * t['cov']:.1f}%) {r['verdict']} {r.get('verdict_reason') or ''}; precision "
        f"{r.get('precision')}; compile {r.get('compile_s') or 0:.1f} s"
    ]
    for w in r.get("extra", {}).get("workers", []):
        lines.append(
            f"    worker {w['worker']}: {w['mean']:,.1f}/s x{w['repetitions']}, warm-up "
            f"{w.get('warmup_s', 0) or 0:.1f} s, timed {w.get('measure_s', 0):.1f} s, "
            f"{w.get('stopped')}; disturbed: {w.get('disturbed')}"
        )
    return "\n".join(lines)


def main() -> None:
    for path, r in results(sys.argv[1:]):
        print(describe(Path(path).stem, r))


if __name__ == "__main__":
    main()
