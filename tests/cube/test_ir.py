import pytest

from ember.cube import ir
from ember.cube.ir import Builder, IRError, Type
from ember.dtype import f32, i32, bool_


def small_kernel(name="k", scale=2.0):
    b = Builder(name)
    x = b.array_param("x", f32)
    n = b.scalar_param("n", i32)
    i = b.builtin("absolute_pos")
    cond = b.binary("lt", i, n)
    stmt = b.branch(cond)
    with b.inside(stmt.then):
        b.store(x, i, b.binary("mul", b.load(x, i), b.const(scale, f32)))
    return b.kernel


def test_types_are_checked():
    b = Builder("k")
    a, c = b.const(1.0, f32), b.const(1, i32)
    with pytest.raises(IRError, match="one type"):
        b.binary("add", a, c)
    with pytest.raises(IRError, match="float"):
        b.unary("exp", c)
    with pytest.raises(IRError, match="does not fit"):
        b.const(1 << 40, i32)
    with pytest.raises(IRError, match="condition"):
        b.branch(a)
    assert b.binary("lt", a, a).type == Type(bool_)


def test_printing_shows_structure():
    text = str(small_kernel())
    assert "kernel k(x: array<f32>" in text
    assert "if %" in text and "store" in text and "mul" in text


def test_hash_ignores_names_and_ids_but_not_content():
    assert small_kernel("a").hash() == small_kernel("b").hash()
    assert small_kernel(scale=2.0).hash() != small_kernel(scale=3.0).hash()


def test_walk_and_substitute():
    k = small_kernel()
    loads = [s for s in ir.walk(k.body) if isinstance(s, ir.Instr) and s.op == "load"]
    assert len(loads) == 1
    n = k.params[1].value
    i = k.body[0].result
    ir.substitute(k.body, {i: n})
    assert all(i not in ir.operands(s) for s in ir.walk(k.body))
