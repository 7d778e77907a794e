#!/usr/bin/env python3
"""Rebuild kubefacts job-run windows from the parts of job-runs.v2.

Reads the JSON lines read_facts.py prints for a job-runs.v2 topic on stdin and prints one JSON line
per window: {"window_start", "window_length_ms", "revision", "stream_time", "is_final", "pages",
"runs": [every run of the window, sorted by finished_at, then run_uid]}.

A window is its latest summary (part 0: the highest revision) plus pages 1..summary.pages. A page is
written once and never rewritten; a run that appears in several pages (a newer version of it was
filed) is taken from the highest page. Pages above summary.pages belong to a revision whose summary
was not read yet and are left out. A window whose summary counts a page not read, or whose pages
hold another number of runs than the summary counts, is reported on stderr and the exit status is 1
(read again: the pages are on other partitions than the summary).

  python read_facts.py --bootstrap HOST:PORT --registry URL --topic prod.job-runs.v2 --until-idle \
      | python rebuild_windows.py
"""

import json
import sys


def rebuild(lines):
    """(windows, problems) from read_facts.py's records of a job-runs.v2 topic."""
    summaries, pages = {}, {}
    for line in lines:
        record = json.loads(line)
        value = record["value"]
        if value is None:
            continue  # a tombstone: kubefacts writes none here, a compactor may have
        window = (value["window_start"], value["window_length_ms"])
        if value["part"] == 0:
            best = summaries.get(window)
            if best is None or value["revision"] >= best["revision"]:
                summaries[window] = value
        else:
            pages[(window, value["part"])] = value["page"]["runs"]

    windows, problems = [], []
    for window, value in sorted(summaries.items()):
        summary = value["summary"]
        runs, missing = {}, None
        for n in range(1, summary["pages"] + 1):
            page = pages.get((window, n))
            if page is None:
                missing = n
                break
            runs.update((run["run_uid"], run) for run in page)  # a later page wins
        if missing is not None:
            problems.append(f"window {window[0]}: page {missing} of {summary['pages']} not read")
            continue
        if len(runs) != summary["runs"]:
            problems.append(f"window {window[0]}: the pages hold {len(runs)} runs, the summary counts {summary['runs']}")
            continue
        windows.append({
            "window_start": window[0],
            "window_length_ms": window[1],
            "revision": value["revision"],
            "stream_time": value["stream_time"],
            "is_final": summary["is_final"],
            "pages": summary["pages"],
            "runs": sorted(runs.values(), key=lambda r: (r["finished_at"], r["run_uid"])),
        })
    return windows, problems


def main():
    windows, problems = rebuild(sys.stdin)
    for w in windows:
        print(json.dumps(w, ensure_ascii=False, separators=(",", ":")))
    for p in problems:
        print(f"rebuild_windows: {p}", file=sys.stderr)
    print(f"rebuild_windows: {len(windows)} window(s) rebuilt", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
