"""`python -m bench [names...] [--device D] [--peers numpy,torch,tinygrad] [--large] [--json PATH]`: run
benchmarks, print a markdown table in which each ember row shows its ratio to every peer, optionally
save JSON with the machine description, the commit and the command line.

`python -m bench --report [--results bench/results] [--out bench/RESULTS.md]`: write the results file
from every JSON in the results folder (bench/report.py), running nothing."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import time

from . import (autodiff, checkpointing, elementwise, fft, fusion, imports, linalg, lora, matmul, onnx_models,
               overhead, quant, reduce, spatial, store, training, transfer)
from .frameworks import PEERS, Frameworks
from .harness import Settings, machine, markdown, write_json
from .report import ReportError, write_report

# name -> run(frameworks, settings) -> rows; in the order they run and print.
BENCHMARKS = {name: run for module in (elementwise, reduce, matmul, quant, spatial, fft, training, lora, autodiff,
                                       overhead, transfer, store, checkpointing, fusion, imports, linalg,
                                       onnx_models)
              for name, run in module.BENCHMARKS.items()}
RESULTS, OUT = "bench/results", "bench/RESULTS.md"  # --report's defaults, from the repository root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of {list(BENCHMARKS)})")
    parser.add_argument("--device", default="numpy", help="ember device to measure (default: numpy)")
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated peers (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=Settings.repeats, help="timed repeats per implementation")
    parser.add_argument("--large", action="store_true", help="also run the large cases (matmul at 4096)")
    parser.add_argument("--json", help="also write the rows and machine description to this file")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: write --out from the JSON files in --results")
    parser.add_argument("--results", default=RESULTS, help="--report's input folder (default: %(default)s)")
    parser.add_argument("--out", default=OUT, help="--report's output file (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.report:
        try:
            write_report(args.results, args.out)
        except ReportError as e:
            parser.error(str(e))
        print(f"wrote {args.out} from {args.results}")
        return 0
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; known: {list(BENCHMARKS)}")
    settings = Settings(repeats=args.repeats, large=args.large)
    frameworks = Frameworks(args.device, [p for p in args.peers.split(",") if p])
    rows = []
    for name in args.names or BENCHMARKS:
        start = time.perf_counter()
        rows += BENCHMARKS[name](frameworks, settings)
        print(f"{name}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    print(f"machine: {machine()}")
    print(f"device: {frameworks.device}; peers: {', '.join(frameworks.modules)}")
    print(markdown(rows))
    if args.json:
        command = shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)])
        write_json(args.json, rows, {"device": repr(frameworks.device), "peers": list(frameworks.modules),
                                     **dataclasses.asdict(settings), "command": command})
    return 0


if __name__ == "__main__":
    sys.exit(main())
