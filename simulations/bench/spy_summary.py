"""Summarise a ``py-spy record -f raw`` profile: share of samples by leaf frame (self) and by
any frame on the stack (inclusive), optionally only frames from files matching ``--only``.

    py-spy record -p PID -d 30 -r 50 -f raw -o actor.txt --nonblocking
    python simulations/bench/spy_summary.py actor.txt --top 20
"""

from __future__ import annotations

import argparse
from collections import Counter


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--only", default="", help="substring of the frames to count inclusively, e.g. fedapp")
    a = p.parse_args()
    own, incl, total = Counter(), Counter(), 0
    for line in open(a.path):
        stack, _, n = line.rstrip().rpartition(" ")
        frames, n = stack.split(";"), int(n)
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            if a.only in f:
                incl[f] += n
    print(f"{total} samples")
    for title, counter in (("self", own), ("inclusive", incl)):
        print(f"-- {title}")
        for frame, n in counter.most_common(a.top):
            print(f"{100 * n / total:5.1f}%  {frame[:150]}")


if __name__ == "__main__":
    main()
