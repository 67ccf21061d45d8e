"""Kernels defined where Python keeps no source file: `exec`, `python -c`, stdin, a REPL or notebook.

Each kernel is launched on the C target (NumPy arrays) and checked against NumPy.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from ember import cube

BODY = '''
@cube.kernel{decorator_args}
def scale(x: cube.Array, y: cube.Array, k: cube.Comptime):
    i = cube.ABSOLUTE_POS
    if i < len(x):
        y[i] = x[i] * x.dtype(k) + x.dtype(1)
'''

SCRIPT = '''
import numpy as np
from ember import cube
from ember.cube.lang import CubeCount, CubeDim
''' + BODY + '''
x = np.arange(37, dtype=np.float32)
y = np.zeros_like(x)
scale.launch(CubeCount(1), CubeDim(64), x, y, k=3)
assert np.array_equal(y, x * 3 + 1), y
print("ok")
'''


def _run(kernel, n=37):
    from ember.cube.lang import CubeCount, CubeDim
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    y = np.zeros_like(x)
    kernel.launch(CubeCount(1), CubeDim(64), x, y, k=5)
    np.testing.assert_allclose(y, x * 5 + 1, rtol=1e-6)


def test_exec_with_source_given():
    text = BODY.format(decorator_args="(source=text)")
    namespace = {"cube": cube, "text": text}
    exec(text, namespace)
    _run(namespace["scale"])


def test_exec_of_code_compiled_under_a_registered_name():
    text = BODY.format(decorator_args="")
    namespace = {"cube": cube}
    exec(compile(text, cube.register_source(text), "exec"), namespace)
    _run(namespace["scale"], n=5)


def test_exec_without_the_source_says_how_to_give_it():
    text = BODY.format(decorator_args="")
    with pytest.raises(cube.KernelError, match=r"cannot read the source .* \(defined in <string>\).*"
                                               r"@cube\.kernel\(source=text\).*cube\.register_source"):
        exec(text, {"cube": cube})


def test_source_given_picks_the_definition_at_the_functions_line():
    two = BODY.format(decorator_args="(source=text)").replace("x.dtype(1)", "x.dtype(7)") + BODY.format(
        decorator_args="(source=text)")  # the second `scale` (adding 1) is the one kept
    namespace = {"cube": cube, "text": two}
    exec(two, namespace)
    _run(namespace["scale"], n=64)
    with pytest.raises(cube.KernelError, match="does not parse"):
        exec(BODY.format(decorator_args="(source='def scale(:')"), {"cube": cube})


def _python(args, stdin=None):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.run([sys.executable, *args], input=stdin, capture_output=True, text=True, timeout=180,
                          cwd=os.getcwd(), env=env)


def test_python_dash_c_reads_its_command_line():
    out = _python(["-c", SCRIPT.format(decorator_args="")])
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_stdin_needs_the_source_given():
    text = SCRIPT.format(decorator_args="(source=SOURCE)")
    out = _python(["-"], stdin="SOURCE = " + repr(text) + "\n" + text)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    out = _python(["-"], stdin=SCRIPT.format(decorator_args=""))
    assert out.returncode == 1 and "(defined in <stdin>)" in out.stderr and "source=text" in out.stderr
