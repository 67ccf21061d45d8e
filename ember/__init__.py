"""ember: a deep-learning framework on Burn's design."""

from .dtype import DType, f64, f32, f16, bf16, i64, i32, i16, i8, u8, bool_
from .errors import EmberError, ShapeError, DTypeError, DeviceError, DeviceUnavailableError

__version__ = "0.1.0"
