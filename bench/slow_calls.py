#!/usr/bin/env python3
"""slow_calls.py - which step of the background thread each slow call of a
dynamic program overlapped (docs/DYNAMIC.md, "Session 9").

Reads logs of `dynamic_bench sweep` run with SWEEP_SLOW_CALLS=1 and
FUSEC_LOG=spec, stdout and stderr in one file (bench/run-miss.sh writes
them so). A slow call is a variant call, made while a specialization was
being built, that took over 1.5x the median of its T; it is printed with
its start (fc_now_ms) and length. The background thread's steps carry
their start and end on the same clock. Prints, per step name, how many
slow calls overlapped it and their summed time over the median, and the
slow calls that overlapped nothing.

usage: bench/slow_calls.py LOG [LOG...]
"""
import re
import sys
from collections import defaultdict

SLOW = re.compile(r"slow_call T=(\d+) at_ms=([\d.]+) ms=([\d.]+) host_ms=([\d.]+) median_ms=([\d.]+)")
STEP = re.compile(r"fusec\[spec\]: ([\d.]+)\.\.([\d.]+) (.*)")


def step_name(text):
    # "[gpt2_block] module loaded" -> "module loaded"; keys and sizes dropped
    text = re.sub(r"^\[[^]]*\] ", "", text)
    text = re.sub(r"specialization \S+ made", "specialization made (whole)", text)
    text = re.sub(r"to \d+ bytes", "", text)
    return text.strip()


def main(paths):
    for path in paths:
        slow, steps = [], []
        with open(path, errors="replace") as f:
            for line in f:
                m = SLOW.search(line)
                if m:
                    t, at, ms, host, med = m.groups()
                    slow.append((int(t), float(at), float(ms), float(host), float(med)))
                    continue
                m = STEP.search(line)
                if m:
                    steps.append((float(m.group(1)), float(m.group(2)), step_name(m.group(3))))
        by = defaultdict(lambda: [0, 0.0])
        alone, host_bound = [], 0
        for t, at, ms, host, med in slow:
            over = [name for a, b, name in steps if a < at + ms and b > at and "(whole)" not in name]
            host_bound += host > 0.5 * ms
            if not over:
                alone.append((t, at, ms))
            for name in set(over):
                by[name][0] += 1
                by[name][1] += (ms - med) * 1e3
        print(f"== {path}: {len(slow)} slow calls ({host_bound} with most of their time on the host), "
              f"{len(steps)} background steps")
        for name, (n, extra) in sorted(by.items(), key=lambda kv: -kv[1][1]):
            print(f"  {n:4d} calls, {extra:8.0f} us over their median: {name}")
        print(f"  {len(alone):4d} calls overlapped no step" + (": " + ", ".join(
            f"T={t} at {at:.1f} ({ms * 1e3:.0f} us)" for t, at, ms in alone[:8]) if alone else ""))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
