"""ember's benchmark suite: `python -m bench [names] --device numpy --peers numpy,torch`.

Each benchmark compares ember with peers (NumPy, torch eager, tinygrad) in the same run and reports
medians and ratios. Speed is measured here, never in tests. Record figures in bench/RESULTS.md.
"""
