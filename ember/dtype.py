"""Element types and PyTorch's type-promotion rules.

A `DType` is a small immutable value: a name (`"f32"`), a category (bool < int < float < complex) and the NumPy
dtype that holds it on the host (bf16 through `ml_dtypes`, imported when bf16's NumPy dtype is first
needed: it is slow to import and most programs never touch bf16). Promotion follows PyTorch exactly:

- within a category (bool < int < float < complex) the wider type wins; `u8` with a signed type gives
  the next signed type that holds both; `f16` with `bf16` gives `f32`; any int with any float gives the
  float; a float with a complex gives the complex type wide enough for both (`f64` with `c64`: `c128`);
- in an op, dimensioned tensors decide first, then 0-d tensors, then Python scalars, and a lower
  priority participant only changes the result when it is of a higher category
  (`i32 tensor + 2.5 -> f32`, `f16 tensor + f64 0-d tensor -> f16`).

Example:
    >>> promote_types(i32, f16)
    f16
    >>> result_type(f16, 3.0)
    f16
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "DType", "f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool_", "c64", "c128",
    "ALL", "FLOATS", "INTS", "COMPLEXES", "complex_of", "real_of", "HALF_NP", "TORCH_NAMES", "NpTable", "dtype_of", "promote_types", "result_type",
    "default_float", "float_to_int",
]

BOOL, INT, FLOAT, COMPLEX = 0, 1, 2, 3
_ML_DTYPES = frozenset({"bfloat16"})  # NumPy dtypes that only ml_dtypes defines
_LAZY: dict[str, "DType"] = {}  # ml_dtypes type name -> DType, while its `np` is unbound


class DType:
    """An element type. Compare with `==`; use `ember.f32` and friends rather than constructing."""

    __slots__ = ("name", "category", "itemsize", "signed", "np")

    def __init__(self, name: str, category: int, itemsize: int, signed: bool, np_dtype) -> None:
        """`np_dtype` is anything `np.dtype` takes; an ml_dtypes type is given by name ("bfloat16") and
        bound on first use of `.np`."""
        self.name = name
        self.category = category
        self.itemsize = itemsize
        self.signed = signed
        if isinstance(np_dtype, str) and np_dtype in _ML_DTYPES:
            _LAZY[np_dtype] = self
        else:
            self.np = np.dtype(np_dtype)

    def __getattr__(self, attr: str):
        # Reached only while the `np` slot is unset: an ml_dtypes type not yet imported.
        if attr != "np":
            raise AttributeError(f"'DType' object has no attribute {attr!r}")
        _bind_ml_dtypes()
        return self.np

    @property
    def is_float(self) -> bool:
        return self.category == FLOAT

    @property
    def is_int(self) -> bool:
        return self.category == INT

    @property
    def is_bool(self) -> bool:
        return self.category == BOOL

    @property
    def is_complex(self) -> bool:
        """complex64 and complex128 (not floats: `is_float` is False for them, as `is_floating_point` in torch)."""
        return self.category == COMPLEX

    @property
    def is_inexact(self) -> bool:
        """Float or complex: the dtypes that carry gradients and that float math computes in."""
        return self.category >= FLOAT

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self):
        return (dtype_of, (self.name,))


f64 = DType("f64", FLOAT, 8, True, np.float64)
f32 = DType("f32", FLOAT, 4, True, np.float32)
f16 = DType("f16", FLOAT, 2, True, np.float16)
bf16 = DType("bf16", FLOAT, 2, True, "bfloat16")
i64 = DType("i64", INT, 8, True, np.int64)
i32 = DType("i32", INT, 4, True, np.int32)
i16 = DType("i16", INT, 2, True, np.int16)
i8 = DType("i8", INT, 1, True, np.int8)
u8 = DType("u8", INT, 1, False, np.uint8)
bool_ = DType("bool", BOOL, 1, False, np.bool_)
c64 = DType("c64", COMPLEX, 8, True, np.complex64)
c128 = DType("c128", COMPLEX, 16, True, np.complex128)

ALL = (f64, f32, f16, bf16, i64, i32, i16, i8, u8, bool_, c64, c128)
FLOATS = (f64, f32, f16, bf16)
INTS = (i64, i32, i16, i8, u8)
COMPLEXES = (c64, c128)
_C32 = DType("complex32", COMPLEX, 4, True, np.complex64)
"""torch's complex32, a step of promotion only (f16 with a complex scalar): no tensor holds it."""
_COMPLEX_BY_PART = {2: _C32, 4: c64, 8: c128}
_REAL_OF = {c64: f32, c128: f64}
_COMPLEX_OF = {f32: c64, f64: c128}


def real_of(dtype: "DType") -> "DType":
    """The real dtype of a complex one's parts (`c64` -> `f32`); other dtypes are their own.

    Example:
        >>> real_of(c128), real_of(f16)
        (f64, f16)
    """
    return _REAL_OF.get(dtype, dtype)


def complex_of(dtype: "DType", op: str = "complex") -> "DType":
    """The complex dtype whose parts are `dtype` (`f32` -> `c64`; a complex dtype is its own; ints and
    bools give the default complex, `c64`). f16 and bf16 have none here (torch's complex32 is not held):
    a `DTypeError` naming `op`.

    Example:
        >>> complex_of(f64), complex_of(i32)
        (c128, c64)
    """
    if dtype.category == COMPLEX:
        return dtype
    if dtype.category < FLOAT:
        return _COMPLEX_OF[_default_float]
    found = _COMPLEX_OF.get(dtype)
    if found is None:
        from .errors import DTypeError
        raise DTypeError(f"{op}: {dtype.name} has no complex dtype in ember (torch's complex32 is not held); "
                         f"cast to f32 first")
    return found

_BY_NAME = {d.name: d for d in ALL}
TORCH_NAMES = {
    "float64": f64, "double": f64, "float32": f32, "float": f32, "float16": f16, "half": f16, "bfloat16": bf16,
    "int64": i64, "long": i64, "int32": i32, "int": i32, "int16": i16, "short": i16, "int8": i8, "uint8": u8,
    "bool": bool_, "complex64": c64, "cfloat": c64, "complex128": c128, "cdouble": c128,
}
"""PyTorch's dtype names (`torch.float32`, `torch.half`, ...) for ember's dtypes: `ember.float32 is ember.f32`."""
HALF_NP: set[np.dtype] = {f16.np}
"""The NumPy dtypes of f16 and bf16 (bf16's once bound), which the NumPy references compute in f32."""


class NpTable(dict):
    """A dict keyed by NumPy dtype, built from `DType`s (each its own value) or a mapping from `DType`s to
    values, that does not import ml_dtypes: a lazy dtype's (bf16's) entry is added when ml_dtypes is
    bound, which a lookup of one of its NumPy dtypes does first.

    Example:
        >>> NpTable([f32, bf16]).get(np.dtype(np.float32))
        f32
        >>> NpTable({bf16: "wide"})[bf16.np]
        'wide'
    """

    _tables: list["NpTable"] = []

    def __init__(self, entries) -> None:
        self.entries = dict(entries) if isinstance(entries, dict) else {d: d for d in entries}
        super().__init__((d.np, v) for d, v in self.entries.items() if d not in _LAZY.values())
        if _LAZY:
            NpTable._tables.append(self)

    def get(self, key, default=None):
        found = dict.get(self, key)
        # ml_dtypes' types have kind "V" (a cheap test: a dtype's name is slow to build)
        if found is None and _LAZY and getattr(key, "kind", None) == "V" and key.name in _LAZY:
            _bind_ml_dtypes()
            found = dict.get(self, key)
        return default if found is None else found

    def __missing__(self, key):
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found


def _bind_ml_dtypes() -> None:
    """Import ml_dtypes and bind every lazy DType's `np`, adding it to every `NpTable`."""
    import ml_dtypes
    for name, lazy in list(_LAZY.items()):
        npd = np.dtype(getattr(ml_dtypes, name))
        lazy.np = npd
        if lazy.itemsize == 2 and lazy.is_float:
            HALF_NP.add(npd)
        _LAZY.pop(name, None)
    for table in NpTable._tables:
        table.update((d.np, v) for d, v in table.entries.items())


_BY_NP = NpTable(ALL)

_default_float = f32


def default_float() -> DType:
    """The float type Python floats and float-only ops on ints become (f32)."""
    return _default_float


def dtype_of(spec) -> DType:
    """Resolve a dtype from a `DType`, a name (`"f32"`, `"float32"`), a NumPy dtype or a torch dtype.

    Example:
        >>> dtype_of("float32") is f32
        True
    """
    if isinstance(spec, DType):
        return spec
    if isinstance(spec, str):
        found = _BY_NAME.get(spec) or TORCH_NAMES.get(spec)
        if found is None:
            from .errors import DTypeError
            raise DTypeError(f"unknown dtype {spec!r}; known: {', '.join(_BY_NAME)}")
        return found
    if spec is bool:
        return bool_
    if spec is float:
        return _default_float
    if spec is int:
        return i64
    if type(spec).__module__.startswith("torch"):
        return dtype_of(str(spec).removeprefix("torch."))
    try:
        npd = np.dtype(spec)
    except TypeError:
        npd = None
    found = _BY_NP.get(npd) if npd is not None else None
    if found is None:
        from .errors import DTypeError
        raise DTypeError(f"unsupported dtype {spec!r}; ember holds {', '.join(_BY_NAME)}")
    return found


def promote_types(a: DType, b: DType) -> DType:
    """PyTorch's `promote_types` over ember's dtypes.

    Example:
        >>> promote_types(u8, i8)
        i16
    """
    if a is b:
        return a
    if a.category != b.category:
        high, low = (a, b) if a.category > b.category else (b, a)
        if high.category == COMPLEX and low.category == FLOAT and low.itemsize > high.itemsize // 2:
            return _COMPLEX_BY_PART[low.itemsize]  # f64 with c64: c128
        return high
    if a.category == COMPLEX:
        return a if a.itemsize > b.itemsize else b
    if a.category == FLOAT:
        if {a, b} == {f16, bf16}:
            return f32
        return a if a.itemsize > b.itemsize else b
    if a.category == INT:
        if a.signed == b.signed:
            return a if a.itemsize > b.itemsize else b
        signed, unsigned = (a, b) if a.signed else (b, a)
        if signed.itemsize > unsigned.itemsize:
            return signed
        return {1: i16, 2: i32, 4: i64, 8: i64}[unsigned.itemsize]
    return a


def _scalar_dtype(x) -> DType:
    if isinstance(x, bool):
        return bool_
    if isinstance(x, int):
        return i64
    if isinstance(x, float):
        return _default_float
    if isinstance(x, complex):
        return _COMPLEX_OF[_default_float]
    raise TypeError(f"expected a tensor or a Python scalar, got {type(x).__name__}")


def _combine(higher: DType | None, lower: DType | None) -> DType | None:
    """PyTorch's combine_categories: a lower-priority type only counts if it is of a higher category."""
    if higher is None:
        return lower
    if lower is None or higher.is_complex:
        return higher
    if lower.is_complex:  # a float keeps its width (f64 tensor * 1j: c128); an int or bool takes lower's
        if not higher.is_float:
            return lower
        return c64 if higher is bf16 else _COMPLEX_BY_PART[higher.itemsize]  # torch: bf16 -> c64, f16 -> c32
    if higher.is_float:
        return higher
    if higher.is_bool or lower.category > higher.category:
        return promote_types(higher, lower)
    return higher


def result_type(*operands) -> DType:
    """The dtype PyTorch gives an op over these operands (tensors, or Python scalars).

    Tensors are anything with `.dtype` and `.ndim`; 0-d tensors have lower priority than dimensioned
    ones, and Python scalars lower still.

    Example:
        >>> result_type(True, 2)
        i64
    """
    dim = zero = scalar = None
    for x in operands:
        if hasattr(x, "dtype") and hasattr(x, "ndim"):
            d = x.dtype if isinstance(x.dtype, DType) else dtype_of(x.dtype)
            if x.ndim:
                dim = d if dim is None else promote_types(dim, d)
            else:
                zero = d if zero is None else promote_types(zero, d)
        else:
            d = _scalar_dtype(x)
            scalar = d if scalar is None else promote_types(scalar, d)
    out = _combine(dim, _combine(zero, scalar))
    if out is None:
        raise TypeError("result_type needs at least one operand")
    if out is _C32:
        from .errors import DTypeError
        raise DTypeError("result_type: f16 with a complex number gives torch's complex32, which ember does "
                         "not hold; cast to f32 first")
    return out


def float_to_int(x, dtype: DType) -> np.ndarray:
    """Floats `x` truncated toward zero to the integer `dtype`, on every device alike: truncated to 32 bits
    (64 for i64 and the kernels' u32/u64), NaN and values outside that range giving its minimum, then
    wrapped to `dtype`'s width. This is what x86 (and PyTorch and NumPy on it) gives; C leaves it undefined.

    Example:
        >>> float_to_int(np.array([2.9, -2.9, np.nan, 300.0]), i8).tolist()
        [2, -2, 0, 44]
    """
    wide = np.int32 if dtype.itemsize < 4 or (dtype.itemsize == 4 and dtype.signed) else np.int64
    bound = float(2 ** (np.dtype(wide).itemsize * 8 - 1))
    t = np.trunc(np.asarray(x, np.float64))
    with np.errstate(invalid="ignore"):
        inside = (t >= -bound) & (t < bound)
    truncated = np.where(inside, t, 0).astype(wide)
    return np.where(inside, truncated, np.iinfo(wide).min).astype(dtype.np)
