"""The Cube(cpu) backend: `CubeBackend` (backend.py) and its lowering table (lowering.py)."""

from .backend import CubeBackend

__all__ = ["CubeBackend"]
