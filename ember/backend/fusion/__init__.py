"""The fusion decorator (issue 6): lazy streams, fused kernels chosen by bytes saved, plan cache.

This is the generic part: it imports no kernel language. What compiles and runs the fused kernels is
the inner backend's `FusionTarget` (`target.py`): for the Cube backend, `ember.backend.cube.fused`
(generated kernels, step replay, CUDA graphs, donation).

| module       | job                                                                   |
|--------------|-----------------------------------------------------------------------|
| `stream.py`  | lazy handles, recording, the block's normalized key                   |
| `blocks.py`  | a cut of the stream as a dataflow graph (consumers, needed values)    |
| `ops.py`     | which primitives fuse, and how each one records                       |
| `fusers.py`  | choosing fused kernels by bytes of memory traffic saved               |
| `plan.py`    | plans (steps, when values are dropped) and the bounded plan cache     |
| `target.py`  | `FusionTarget`: the hooks the inner backend implements                |
| `backend.py` | `Fusion(inner)`: the backend protocol, sync points, thread safety     |

See docs/fusion.md.
"""

from .backend import Fusion
from .stream import LazyHandle

__all__ = ["Fusion", "LazyHandle"]
