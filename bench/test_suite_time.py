"""`make test`'s budget: each stage's wall time and the 20 slowest Python tests, recorded into
bench/README.md (the section between its `test-suite-time` markers), so a change that makes
the suite slower shows where.

    .venv/bin/python bench/test_suite_time.py            # the whole of `make test` (~30 min)
    .venv/bin/python bench/test_suite_time.py --stages test-python

It runs scripts/test-stages.sh (what `make test` runs) with pytest's `--durations=20`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "bench" / "README.md"
BEGIN, END = "<!-- test-suite-time: begin -->", "<!-- test-suite-time: end -->"
STAGES = ["setup", "test-python", "test-ts", "test-webview", "test-e2e"]
# pytest's --durations line: "12.34s call     tests/test_x.py::test_y"
DURATION = re.compile(r"^(\d+\.\d+)s (call|setup|teardown)\s+(\S+)")


def run_stages(stages: list[str]) -> tuple[list[tuple[str, int]], list[tuple[float, str, str]], int]:
    with tempfile.TemporaryDirectory() as tmp:
        times_file = Path(tmp) / "times"
        env = {**os.environ, "MEMLENS_STAGE_TIMES": str(times_file),
               "PYTEST_ADDOPTS": (os.environ.get("PYTEST_ADDOPTS", "") + " --durations=20")}
        proc = subprocess.Popen([str(REPO / "scripts" / "test-stages.sh"), *stages], cwd=REPO,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        slowest = []
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            m = DURATION.match(line.strip())
            if m:
                slowest.append((float(m.group(1)), m.group(2), m.group(3)))
        status = proc.wait()
        times = [(name, int(sec)) for name, sec in
                 (ln.split() for ln in times_file.read_text().splitlines())] \
            if times_file.exists() else []
    return times, sorted(slowest, reverse=True)[:20], status


def section(times, slowest, status: int) -> str:
    load = os.getloadavg()[0]
    total = sum(sec for _, sec in times)
    rows = [BEGIN, "",
            f"Recorded {datetime.date.today()} on {os.cpu_count()} CPUs (load average {load:.1f} "
            f"at the end), exit status {status}: total {total // 60} min {total % 60} s.", "",
            "| stage | wall time |", "|---|---:|"]
    rows += [f"| {name} | {sec // 60} min {sec % 60:02d} s |" for name, sec in times]
    rows += ["", "The 20 slowest Python test phases (a module's shared trace is the setup of its "
             "first test):", "", "| seconds | phase | test |", "|---:|---|---|"]
    rows += [f"| {sec:.1f} | {phase} | `{name}` |" for sec, phase, name in slowest]
    return "\n".join(rows + ["", END])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", nargs="+", default=STAGES, choices=STAGES)
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args()
    times, slowest, status = run_stages(args.stages)
    text = section(times, slowest, status)
    print(text)
    if not args.no_record:
        readme = README.read_text()
        start, end = readme.index(BEGIN), readme.index(END) + len(END)
        README.write_text(readme[:start] + text + readme[end:])
    sys.exit(status)


if __name__ == "__main__":
    main()
