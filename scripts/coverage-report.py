#!/usr/bin/env python3
"""Per-file line and branch coverage table from gcovr's JSON summary.

Used by `make coverage`.  Files under 80% lines are marked "<80"; the
reason for each such file is kept in docs/contributing.md ("Coverage").
"""
import json
import sys


def pct(covered, total):
    return 100.0 * covered / total if total else 100.0


def main(path):
    with open(path) as f:
        data = json.load(f)
    rows = sorted(data["files"], key=lambda r: r["filename"])
    print("%-44s %15s %15s" % ("file", "lines", "branches"))
    for r in rows:
        lp = pct(r["line_covered"], r["line_total"])
        bp = pct(r["branch_covered"], r["branch_total"])
        print("%-44s %5.1f%% %4d/%-4d %5.1f%% %4d/%-4d%s" % (
            r["filename"], lp, r["line_covered"], r["line_total"],
            bp, r["branch_covered"], r["branch_total"],
            "  <80" if lp < 80.0 else ""))
    print("%-44s %5.1f%% %4d/%-4d %5.1f%% %4d/%-4d" % (
        "TOTAL", pct(data["line_covered"], data["line_total"]),
        data["line_covered"], data["line_total"],
        pct(data["branch_covered"], data["branch_total"]),
        data["branch_covered"], data["branch_total"]))


if __name__ == "__main__":
    main(sys.argv[1])
