"""`python -m bench.onnx_node_tests [--device numpy] [--only OP,...] [--markdown PATH] [--json PATH]`:
ember's ONNX import against onnxruntime on the backend node tests that ship in the `onnx` package.

Every case of `onnx.backend.test.case.node` (generated in memory by `collect_testcases`) runs on both
with this one runner: outputs compared with the reference outputs of the case (rtol 1e-3, atol 1e-4,
NaN equal to NaN, dtype and shape equal); a case that raises (an unsupported op included) or runs past
the time limit fails. The table gives, per op family, the cases each passes and the op types ember
passes in every case. A case's op type is that of its single node (an `_expanded` case, the op's
function body, counts under the op it expands).

Example:
    >>> cases = node_cases(["Relu"]); check(run_ember(cases[0], "numpy"), cases[0].outputs)
    (True, '')
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import signal
import sys
import time
from typing import Any, NamedTuple

import numpy as np

RTOL, ATOL, LIMIT_S = 1e-3, 1e-4, 20


class Case(NamedTuple):
    name: str
    op_type: str
    model: Any  # onnx.ModelProto
    inputs: list
    outputs: list


def _as_value(v):
    """A case's input or output as NumPy arrays (TensorProtos converted), lists and None kept."""
    import onnx
    if isinstance(v, onnx.TensorProto):
        return onnx.numpy_helper.to_array(v)
    if isinstance(v, list):
        return [_as_value(x) for x in v]
    return v


def node_cases(only: list[str] | None = None) -> list[Case]:
    """Every node test case (optionally of the op types `only`), in the package's order."""
    import warnings
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = collect_testcases()
    base = {c.name: c.model.graph.node[0].op_type for c in raw if len(c.model.graph.node) == 1}
    cases = []
    for c in raw:
        stem = re.sub(r"_expanded(_ver\d+)?$", "", c.name)
        op_type = base.get(stem) or base.get(c.name) or c.model.graph.node[0].op_type
        if only and op_type not in only:
            continue
        (inputs, outputs), = c.data_sets
        cases.append(Case(c.name, op_type, c.model, [_as_value(x) for x in inputs], [_as_value(x) for x in outputs]))
    return cases


def _input_names(model) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def run_ember(case: Case, device: str) -> list:
    import ember
    from ember.onnx import load
    model = load(case.model, device=ember.Device(device))
    out = model.run(dict(zip(_input_names(case.model), case.inputs)))
    return [_host(v) for v in out.values()]


def _host(v):
    if isinstance(v, list):
        return [_host(x) for x in v]
    return v if v is None or isinstance(v, np.ndarray) else v.numpy()


def run_onnxruntime(case: Case) -> list:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(case.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = dict(zip([i.name for i in session.get_inputs()], case.inputs))
    return session.run(None, feeds)


def check(got: list, want: list) -> tuple[bool, str]:
    """Whether outputs `got` match `want`: dtype, shape, values within RTOL/ATOL, NaN equal."""
    if len(got) != len(want):
        return False, f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        ok, why = _check_one(g, w)
        if not ok:
            return False, f"output {i}: {why}"
    return True, ""


def _check_one(g, w) -> tuple[bool, str]:
    if isinstance(w, list):
        if not isinstance(g, list) or len(g) != len(w):
            return False, "sequence differs in length or kind"
        return check(g, w)
    if w is None or g is None:
        return (g is None and w is None), "optional presence differs"
    g, w = np.asarray(g), np.asarray(w)
    if g.dtype != w.dtype:
        return False, f"dtype {g.dtype}, expected {w.dtype}"
    if g.shape != w.shape:
        return False, f"shape {g.shape}, expected {w.shape}"
    if w.dtype.kind in "OUS":
        return bool(np.array_equal(g, w)), "values differ"
    if w.dtype.kind == "b":
        return bool(np.array_equal(g, w)), "values differ"
    if w.dtype.kind == "V":  # ml_dtypes' narrow floats and ints: compared exactly, NaN equal to NaN
        gf, wf = g.astype(np.float32), w.astype(np.float32)
        return bool(np.array_equal(gf, wf, equal_nan=True)), "values differ"
    gf, wf = g.astype(np.float64), w.astype(np.float64)
    if np.allclose(gf, wf, rtol=RTOL, atol=ATOL, equal_nan=True):
        return True, ""
    return False, f"values differ (max abs diff {np.nanmax(np.abs(gf - wf)) if gf.size else 0:.3g})"


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def attempt(fn, case: Case) -> tuple[bool, str]:
    """(passed, reason) of running `fn(case)` against the case's outputs, within LIMIT_S seconds."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(LIMIT_S)
    try:
        return check(fn(case), case.outputs)
    except _Timeout:
        return False, f"ran past {LIMIT_S} s"
    except Exception as e:  # every failure counts as one, with its first line as the reason
        return False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:160]
    finally:
        signal.alarm(0)


def family_of(op_type: str) -> str:
    """The family of ember's op function for `op_type`, "function body" for ops ember runs through
    their ONNX function, "missing" otherwise."""
    from ember.onnx.ops import FAMILY
    if op_type in FAMILY:
        return FAMILY[op_type]
    import onnx
    try:
        schema = onnx.defs.get_schema(op_type)
    except Exception:  # an ai.onnx.ml op or one the defs do not list by this name
        return "missing"
    has = schema.has_function or schema.has_context_dependent_function
    return "function body" if has else "missing"


def run(cases: list[Case], device: str, with_ort: bool = True) -> list[dict]:
    rows = []
    for case in cases:
        ok, why = attempt(lambda c: run_ember(c, device), case)
        ort_ok, ort_why = attempt(run_onnxruntime, case) if with_ort else (False, "not run")
        rows.append({"case": case.name, "op": case.op_type, "family": family_of(case.op_type),
                     "ember": ok, "ember_why": why, "onnxruntime": ort_ok, "onnxruntime_why": ort_why})
    return rows


def table(rows: list[dict], device: str) -> str:
    fam = collections.defaultdict(lambda: [0, 0, 0, set(), set()])
    by_op = collections.defaultdict(list)
    for r in rows:
        f = fam[r["family"]]
        f[0] += 1
        f[1] += r["ember"]
        f[2] += r["onnxruntime"]
        f[3].add(r["op"])
        by_op[r["op"]].append(r["ember"])
    full = {op for op, oks in by_op.items() if all(oks)}
    ort_full = {op for op in by_op if all(r["onnxruntime"] for r in rows if r["op"] == op)}
    lines = [f"| family | cases | ember ({device}) | onnxruntime | op types | ember passes every case | ember fails some |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for name in sorted(fam, key=lambda n: -fam[n][0]):
        cases, e, o, ops, _ = fam[name]
        failing = sorted(op for op in ops if op not in full)
        lines.append(f"| {name} | {cases} | {e} | {o} | {len(ops)} | {len(ops & full)} | {', '.join(failing)} |")
    e_total, o_total = sum(r["ember"] for r in rows), sum(r["onnxruntime"] for r in rows)
    lines.append(f"| **all** | {len(rows)} | **{e_total}** | **{o_total}** | {len(by_op)} | **{len(full)}** | |")
    lines.append("")
    lines.append(f"Op types passing every case: ember {len(full)}, onnxruntime {len(ort_full)} (of {len(by_op)}).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.onnx_node_tests", description=__doc__)
    parser.add_argument("--device", default="numpy")
    parser.add_argument("--only", help="comma-separated op types")
    parser.add_argument("--no-ort", action="store_true", help="run ember only")
    parser.add_argument("--failures", action="store_true", help="print each failing ember case and why")
    parser.add_argument("--markdown", help="also write the table here")
    parser.add_argument("--json", help="also write every case's result here")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    cases = node_cases(args.only.split(",") if args.only else None)
    rows = run(cases, args.device, with_ort=not args.no_ort)
    text = table(rows, args.device)
    print(text)
    if args.failures:
        for r in rows:
            if not r["ember"]:
                print(f"FAIL {r['case']} [{r['op']}]: {r['ember_why']}")
    print(f"\n{len(rows)} cases in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    if args.markdown:
        from ember.atomic import write_atomic
        write_atomic(args.markdown, (text + "\n").encode())
    if args.json:
        from ember.atomic import write_atomic
        write_atomic(args.json, json.dumps(rows, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
