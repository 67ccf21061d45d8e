"""The Cube backend (on the CPU, CUDA or wgpu runtime): `CubeBackend` (backend.py) and its lowering
table (lowering.py)."""

from .backend import CubeBackend

__all__ = ["CubeBackend"]
