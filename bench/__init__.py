"""ember's benchmark suite: `python -m bench [names] --device numpy --peers numpy,torch,tinygrad`.

Each benchmark compares ember with peers (NumPy, torch eager, tinygrad) in the same run and reports
medians and ember's ratio to each peer. Speed is measured here, never in tests (tests/bench only proves
every benchmark runs). A run's figures go to a results file (`--json bench/results/<machine>.json`);
`python -m bench --report` writes bench/RESULTS.md, the current table, from that folder (bench/report.py).

A benchmark module holds `BENCHMARKS = {name: run}` with `run(frameworks, settings) -> list[Row]`
(`frameworks.Frameworks`, `harness.Settings`, `harness.Row`) and is listed in `__main__.BENCHMARKS`.
`Frameworks.compare` times one case for every framework; sizes come from `settings.size(full, tiny)`.
"""
