"""The Cube backend's side of fusion: what `Fusion(CubeBackend(...))` runs its fused plans with.

| module           | job                                                                        |
|------------------|----------------------------------------------------------------------------|
| `target.py`      | `CubeFusionTarget`: the fusion hooks (`ember.backend.fusion.target`)        |
| `codegen.py`     | fused elementwise and fuse-on-read reduction kernels (cube IR)              |
| `launches.py`    | a plan step's launches captured for one layout of its inputs and replayed   |
| `cuda_graphs.py` | on CUDA: a plan's runs on inputs at the same addresses replayed as a graph  |
| `donation.py`    | an optimizer update written over its previous state when no one can tell    |

The generic part (recording, block graph, fusers, plans) is `ember.backend.fusion`. See docs/fusion.md.
"""

from .target import CubeFusionTarget

__all__ = ["CubeFusionTarget"]
