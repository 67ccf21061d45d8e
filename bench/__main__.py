"""`python -m bench [names...] [--device D] [--peers numpy,torch] [--json PATH]`: run benchmarks, print a
markdown table with ratios to NumPy, optionally save JSON with the machine description."""

from __future__ import annotations

import argparse
import sys

from . import checkpointing, overhead
from .harness import machine, markdown, write_json

BENCHMARKS = {m.NAME: m for m in (overhead, checkpointing)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of {sorted(BENCHMARKS)})")
    parser.add_argument("--device", default="numpy", help="ember device to measure (default: numpy)")
    parser.add_argument("--peers", default="numpy,torch,tinygrad", help="comma-separated peers")
    parser.add_argument("--json", help="also write the rows and machine description to this file")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; known: {sorted(BENCHMARKS)}")
    peers = [p for p in args.peers.split(",") if p]
    rows = []
    for name in args.names or sorted(BENCHMARKS):
        rows += BENCHMARKS[name].run(args.device, peers)
    print(f"machine: {machine()}")
    print(markdown(rows, baseline="numpy"))
    if args.json:
        write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
