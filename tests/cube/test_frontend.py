import pytest
import numpy as np

from ember import cube
from ember.cube import ir


def ops(kernel):
    return [s.op for s in ir.walk(kernel.body) if isinstance(s, ir.Instr)]


@cube.kernel
def scaled_copy(x: cube.Array, y: cube.Array, n: cube.Comptime[int], flip: cube.Comptime[bool] = False):
    i = cube.ABSOLUTE_POS
    if i < len(x):
        v = x[i]
        for _ in cube.unroll(range(n)):
            v = v * x.dtype(2)
        if flip:
            v = -v
        y[i] = v


def test_comptime_values_specialize_and_unroll():
    k3 = scaled_copy.specialize((cube.f32, cube.f32), {"n": 3, "flip": False})
    k1 = scaled_copy.specialize((cube.f32, cube.f32), {"n": 1, "flip": True})
    assert ops(k3).count("mul") == 3 and "neg" not in ops(k3)
    assert ops(k1).count("mul") == 1 and "neg" in ops(k1)
    assert not any(isinstance(s, ir.For) for s in ir.walk(k3.body))
    assert scaled_copy.specialize((cube.f32, cube.f32), {"n": 3, "flip": False}) is k3


def test_generic_array_takes_the_argument_dtype():
    k = scaled_copy.specialize((cube.f64, cube.f64), {"n": 1, "flip": False})
    assert k.params[0].dtype is cube.f64
    consts = [s for s in ir.walk(k.body) if isinstance(s, ir.Instr) and s.op == "const"]
    assert all(c.result.type.dtype is cube.f64 for c in consts if isinstance(c.attr, float))


@cube.kernel
def loop_sum(x: cube.Array[cube.f32], out: cube.Array[cube.f32], n: cube.i32):
    acc = cube.f32(0)
    for k in range(n):
        acc += x[k]
    out[0] = acc


def test_reassigned_names_become_locals_and_loops_stay_runtime():
    k = loop_sum.specialize((cube.f32, cube.f32, cube.i32), {})
    loops = [s for s in ir.walk(k.body) if isinstance(s, ir.For)]
    assert len(loops) == 1
    assert {"local", "read", "write"} <= set(ops(k))


@cube.kernel
def typed_array(x: cube.Array["T"], T: cube.Comptime):
    x[0] = T(1)


def test_array_dtype_from_a_comptime_parameter():
    k = typed_array.specialize(typed_array.resolve_dtypes((cube.i32,), {"T": cube.i32}), {"T": cube.i32})
    assert k.params[0].dtype is cube.i32
    with pytest.raises(cube.KernelError, match="must hold i32"):
        typed_array.resolve_dtypes((cube.f32,), {"T": cube.i32})


def test_type_errors_show_file_line_and_source():
    @cube.kernel
    def bad(x: cube.Array[cube.f32]):
        x[0] = x[1] + cube.i32(2)

    with pytest.raises(cube.KernelError) as e:
        bad.specialize((cube.f32,), {})
    message = str(e.value)
    assert "one type" in message and "test_frontend.py" in message
    assert "x[0] = x[1] + cube.i32(2)" in message


@pytest.mark.parametrize("body, match", [
    ("while True:\n        pass", "unsupported statement"),
    ("for i in range(3):\n        break", "break"),
    ("y = x[0] / cube.i32(2)", "use //"),
    ("x[0] = undefined_name", "not defined"),
    ("return 3", "cannot return a value"),
])
def test_unsupported_constructs_raise_kernel_error(tmp_path, body, match):
    import importlib.util
    path = tmp_path / "bad_kernel.py"
    path.write_text(f"from ember import cube\n@cube.kernel\ndef k(x: cube.Array[cube.i32]):\n    {body}\n")
    spec = importlib.util.spec_from_file_location("bad_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(cube.KernelError, match=match) as e:
        mod.k.specialize((cube.i32,), {})
    assert "bad_kernel.py" in str(e.value)


def test_missing_comptime_and_calling_a_kernel_directly():
    with pytest.raises(cube.KernelError, match="'n' is missing"):
        scaled_copy.comptime_values({})
    with pytest.raises(cube.KernelError, match="launch"):
        scaled_copy(1, 2)


@cube.function
def twice_plus(v, c):
    return v * 2 + c


@cube.kernel
def uses_helper(x: cube.Array[cube.f32]):
    x[0] = twice_plus(x[0], 1.0)


def test_functions_are_inlined():
    k = uses_helper.specialize((cube.f32,), {})
    assert ops(k).count("mul") == 1 and ops(k).count("add") == 1


@cube.kernel
def blocked(x: cube.Array[cube.f32], out: cube.Array[cube.f32], n: cube.i32, width: cube.Comptime[int]):
    acc = tuple(cube.f32(0) for _ in range(width))
    for k in range(n):
        acc = tuple(acc[j] + x[k * width + j] for j in range(width))
    for j in cube.unroll(range(width)):
        out[j] = acc[j]


def test_tuples_reassigned_in_a_loop_become_one_local_per_element():
    k = blocked.specialize((cube.f32, cube.f32, cube.i32), {"width": 3})
    locals_ = {s.attr.name for s in ir.walk(k.body) if isinstance(s, ir.Instr) and s.op == "local"}
    assert locals_ == {"acc0", "acc1", "acc2"}


def test_tuple_accumulators_run():
    import numpy as np
    x = np.arange(12, dtype=np.float32)
    out = np.zeros(3, np.float32)
    blocked.launch(cube.CubeCount(1), cube.CubeDim(1), x, out, 4, width=3)
    np.testing.assert_array_equal(out, x.reshape(4, 3).sum(0))


@cube.kernel
def fill_scalar(out: cube.Array["T"], value: cube.Scalar["T"], T: cube.Comptime):
    if cube.ABSOLUTE_POS < len(out):
        out[cube.ABSOLUTE_POS] = value


def test_scalar_dtype_from_a_comptime_parameter():
    import numpy as np
    out = np.zeros(5, np.int64)
    fill_scalar.launch(cube.CubeCount(1), cube.CubeDim(8), out, 7, T=cube.i64)
    np.testing.assert_array_equal(out, 7)


@cube.kernel
def _branch_names(x: cube.Array[cube.f32], y: cube.Array[cube.f32]):
    i = cube.ABSOLUTE_POS
    if i < 4:
        v = x[i]
        y[i] = v
    else:
        if i < 8:
            v = x[i]  # a fresh name in this branch, not the then branch's value
            y[i] = v * 2.0


def test_a_name_bound_in_the_then_branch_is_unknown_to_the_else_branch():
    x = np.arange(1, 11, dtype=np.float32)
    y = np.zeros(10, np.float32)
    _branch_names.launch(cube.CubeCount(1), cube.CubeDim(16), x, y)
    np.testing.assert_array_equal(y, np.where(np.arange(10) < 4, x, np.where(np.arange(10) < 8, 2 * x, 0)))
