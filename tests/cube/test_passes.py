import math

import numpy as np
import pytest

from ember.cube import ir
from ember.cube.ir import Builder, For, If, Instr
from ember.cube.lang import CubeCount, CubeDim
from ember.cube.passes import (eliminate_common_subexpressions, eliminate_dead_code, fold_constants,
                               optimize)
from ember.cube.passes.fold import evaluate
from ember.cube.runtime.cpu import cpu_runtime
from ember.dtype import f32, f64, i32, i64, i8, u8


def instrs(kernel, op=None):
    return [s for s in ir.walk(kernel.body) if isinstance(s, Instr) and (op is None or s.op == op)]


def test_fold_computes_constants_with_kernel_semantics():
    b = Builder("k")
    out = b.array_param("out", i32)
    seven, minus_two = b.const(7, i32), b.const(-2, i32)
    b.store(out, b.const(0, i32), b.binary("div", b.binary("sub", b.const(0, i32), seven), minus_two))
    b.store(out, b.const(1, i32), b.binary("rem", b.binary("sub", b.const(0, i32), seven), minus_two))
    fold_constants(b.kernel)
    stores = instrs(b.kernel, "store")
    values = [next(s.attr for s in instrs(b.kernel, "const") if s.result is st.args[1]) for st in stores]
    assert values == [3, -1]  # C truncation, unlike Python's -7 // -2 == 3, -7 % -2 == -1
    assert evaluate("add", [127, 1], [ir.Type(i8)] * 2, ir.Type(i8)) == -128  # wraps


def test_fold_simplifies_identities_and_constant_branches():
    b = Builder("k")
    x = b.array_param("x", f32)
    i = b.builtin("absolute_pos")
    v = b.binary("mul", b.load(x, i), b.const(1.0, f32))
    stmt = b.branch(b.binary("lt", b.const(1, i32), b.const(2, i32)))
    with b.inside(stmt.then):
        b.store(x, i, v)
    fold_constants(b.kernel)
    eliminate_dead_code(b.kernel)
    assert not instrs(b.kernel, "mul")
    assert not any(isinstance(s, If) for s in ir.walk(b.kernel.body))
    store = instrs(b.kernel, "store")[0]
    assert store.args[1] is instrs(b.kernel, "load")[0].result


def test_cse_merges_duplicates_but_not_across_stores():
    b = Builder("k")
    x = b.array_param("x", f32)
    i = b.builtin("absolute_pos")
    a1 = b.binary("add", i, b.const(1, i32))
    a2 = b.binary("add", i, b.const(1, i32))
    l1 = b.load(x, a1)
    l2 = b.load(x, a2)           # same address, nothing in between: merged
    b.store(x, i, b.binary("mul", l1, l2))
    l3 = b.load(x, a1)           # after a store to x: kept
    b.store(x, a2, l3)
    eliminate_common_subexpressions(b.kernel)
    assert len(instrs(b.kernel, "add")) == 1
    assert len(instrs(b.kernel, "load")) == 2
    mul = instrs(b.kernel, "mul")[0]
    assert mul.args[0] is mul.args[1]


def test_cse_forgets_loads_of_arrays_a_loop_writes():
    b = Builder("k")
    x = b.array_param("x", f32)
    zero = b.const(0, i32)
    before = b.load(x, zero)
    with b.loop(zero, b.const(4, i32), b.const(1, i32)):
        inside = b.load(x, zero)
        b.store(x, zero, b.binary("add", inside, before))
    eliminate_common_subexpressions(b.kernel)
    assert len(instrs(b.kernel, "load")) == 2


def test_dce_removes_unused_values_locals_and_empty_loops():
    b = Builder("k")
    x = b.array_param("x", f32)
    i = b.builtin("absolute_pos")
    b.unary("exp", b.load(x, i))
    var = b.local(ir.Type(f32), "unused")
    b.write(var, b.const(0.0, f32))
    with b.loop(b.const(0, i32), b.const(4, i32), b.const(1, i32)):
        b.binary("add", i, i)
    b.store(x, i, b.const(1.0, f32))
    eliminate_dead_code(b.kernel)
    assert [s.op for s in instrs(b.kernel)] == ["builtin", "const", "store"]
    assert not any(isinstance(s, For) for s in b.kernel.body)


def unrolled_kernel(width, in_place=False):
    b = Builder("k")
    x = b.array_param("x", f32)
    y = x if in_place else b.array_param("y", f32)
    base = b.binary("mul", b.builtin("absolute_pos"), b.const(width, i32))
    two = b.const(2.0, f32)
    for j in range(width):
        idx = b.binary("add", base, b.const(j, i32))
        b.store(y, idx, b.binary("add", b.binary("mul", b.load(x, idx), two), b.unary("exp", b.load(x, idx))))
    return b.kernel


def test_vectorize_turns_contiguous_lanes_into_vector_ops():
    k = optimize(unrolled_kernel(4), vector_width=4)
    loads, stores = instrs(k, "load"), instrs(k, "store")
    assert len(loads) == 1 and loads[0].result.type.lanes == 4
    assert len(stores) == 1 and stores[0].args[1].type.lanes == 4
    assert {s.op for s in instrs(k)} >= {"splat", "mul", "exp", "add"}
    assert all(s.result.type.lanes == 4 for s in instrs(k)
               if s.op in ("mul", "exp", "add") and s.result.type.dtype is f32)


def test_vectorize_leaves_runs_shorter_than_the_width():
    k = optimize(unrolled_kernel(3), vector_width=4)
    assert all(s.result.type.lanes == 1 for s in instrs(k) if s.result is not None)


def test_vectorize_refuses_to_move_stores_past_loads_of_the_same_array():
    k = optimize(unrolled_kernel(4, in_place=True), vector_width=4)
    assert all(s.result.type.lanes == 1 for s in instrs(k) if s.result is not None)


EDGES = [("div", -2 ** 31, -1, i32, i32), ("rem", -2 ** 31, -1, i32, i32), ("div", 5, 0, i32, i32),
         ("rem", -5, 0, i32, i32), ("div", -128, -1, i8, i8), ("div", 200, 0, u8, u8), ("shl", 1, 32, i32, i32),
         ("shl", 3, -1, i32, i32), ("shl", 3, 7, i8, i8), ("shr", -8, 40, i32, i32), ("shr", 8, -3, i32, i32),
         ("shr", 200, 9, u8, u8), ("add", 2 ** 31 - 1, 1, i32, i32), ("mul", -2 ** 63, -1, i64, i64),
         ("cast", math.nan, None, f32, i32), ("cast", math.inf, None, f32, i8), ("cast", 3e9, None, f32, i32),
         ("cast", 300.0, None, f32, i8), ("cast", -1.0, None, f32, u8), ("cast", -1e30, None, f64, i64)]


@pytest.mark.parametrize("op, x, y, src, dst", EDGES, ids=[f"{e[0]}-{e[3].name}-{e[1]}-{e[2]}" for e in EDGES])
def test_fold_agrees_with_the_c_target_on_integer_edges(op, x, y, src, dst):
    """Each case computed twice in one kernel: from constants (folded away) and from loaded values (run)."""
    b = Builder("edge")
    a, c, out = b.array_param("a", src), b.array_param("c", src), b.array_param("out", dst)
    zero, one = b.const(0, i32), b.const(1, i32)

    def compute(u, v):
        return b.cast(u, dst) if op == "cast" else b.binary(op, u, v)

    b.store(out, zero, compute(b.const(x, src), b.const(0 if y is None else y, src)))
    b.store(out, one, compute(b.load(a, zero), b.load(c, zero)))
    kernel = optimize(b.kernel)
    assert len(instrs(kernel, op)) == 1  # the constant one folded
    result = np.zeros(2, dst.np)
    runtime = cpu_runtime()
    runtime.run(runtime.compile_ir(kernel, CubeDim(1)), CubeCount(1),
                (np.array([x], src.np), np.array([0 if y is None else y], src.np), result))
    assert result[0] == result[1]
