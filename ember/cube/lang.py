"""The names a kernel uses: parameter annotations, builtins, intrinsics and launch shapes.

These objects do nothing when called from ordinary Python; the frontend recognises them while it
walks a kernel's AST and turns each use into IR. Keeping them as plain marker objects (not functions
with bodies) means there is exactly one meaning for each: the one the frontend gives it.

Example:
    >>> from ember import cube
    >>> @cube.kernel
    ... def scale(x: cube.Array[cube.f32], y: cube.Array[cube.f32], a: cube.f32):
    ...     i = cube.ABSOLUTE_POS
    ...     if i < len(x):
    ...         y[i] = a * x[i]
"""

from __future__ import annotations

from dataclasses import dataclass

from ..dtype import DType


class KernelError(Exception):
    """A kernel that cannot be traced: the message names the kernel's file, line and source line."""


# ----------------------------------------------------------------------------------------------
# Parameter annotations

@dataclass(frozen=True)
class ArraySpec:
    """`Array[f32]`: element type fixed; `Array["T"]`: element type is comptime `T`; `Array`: any."""

    dtype: DType | str | None = None


@dataclass(frozen=True)
class ComptimeSpec:
    """A parameter whose Python value is folded into the kernel; each value gets its own kernel."""

    kind: object = None


@dataclass(frozen=True)
class ScalarSpec:
    """`Scalar["T"]`: a runtime scalar whose dtype is comptime `T`."""

    dtype: DType | str


class SpecFactory:
    """`cube.Array`, `cube.Comptime`, `cube.Scalar`: subscripting builds the parameter spec, and the
    bare name stands for the spec with no argument (`Array`: any dtype; `Comptime`: any value)."""

    def __init__(self, name: str, spec: type) -> None:
        self.name = name
        self.spec = spec

    def __getitem__(self, arg):
        return self.spec(arg)

    def bare(self):
        """The spec the unsubscripted name means (TypeError where an argument is required)."""
        return self.spec()

    def __repr__(self) -> str:
        return f"cube.{self.name}"


Array = SpecFactory("Array", ArraySpec)
Comptime = SpecFactory("Comptime", ComptimeSpec)
Scalar = SpecFactory("Scalar", ScalarSpec)


# ----------------------------------------------------------------------------------------------
# Builtins and intrinsics: markers the frontend dispatches on by name.

@dataclass(frozen=True)
class Builtin:
    """A launch coordinate such as ABSOLUTE_POS (an i32 inside the kernel)."""

    name: str

    def __repr__(self) -> str:
        return self.name.upper()


@dataclass(frozen=True)
class Intrinsic:
    """A kernel-only function such as `exp` or `sync_units`."""

    name: str

    def __call__(self, *args, **kwargs):
        raise KernelError(f"cube.{self.name} can only be called inside a @cube.kernel or @cube.function")

    def __repr__(self) -> str:
        return f"cube.{self.name}"


_BUILTIN_NAMES = ("absolute_pos", "unit_pos", "cube_pos", "cube_dim", "cube_count")
BUILTINS = {}
for _base in _BUILTIN_NAMES:
    for _suffix in ("", "_x", "_y", "_z"):
        BUILTINS[(_base + _suffix).upper()] = Builtin(_base + _suffix)
BUILTINS["PLANE_DIM"] = Builtin("plane_dim")
BUILTINS["UNIT_POS_PLANE"] = Builtin("unit_pos_plane")

INTRINSIC_NAMES = (
    # math, elementwise
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "floor", "ceil",
    "round", "trunc", "reciprocal", "abs", "min", "max", "pow", "atan2", "fma", "select", "where",
    "cast", "mulhi", "mad8",
    # memory and synchronisation
    "shared", "sync_units", "atomic_add", "atomic_max", "atomic_min", "lut16",
    # plane (warp / subgroup) collectives
    "plane_sum", "plane_prod", "plane_max", "plane_min", "plane_all", "plane_any",
    # loop control
    "unroll",
)
INTRINSICS = {name: Intrinsic(name) for name in INTRINSIC_NAMES}


# ----------------------------------------------------------------------------------------------
# Launch shapes

@dataclass(frozen=True)
class _Extent:
    """Sizes along x, y and z."""

    x: int = 1
    y: int = 1
    z: int = 1

    @property
    def total(self) -> int:
        return self.x * self.y * self.z


@dataclass(frozen=True)
class CubeCount(_Extent):
    """How many cubes (CUDA blocks, WGSL workgroups) to launch along x, y and z."""


@dataclass(frozen=True)
class CubeDim(_Extent):
    """How many units (threads, invocations) one cube has along x, y and z."""
