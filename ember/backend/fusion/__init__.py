"""The fusion decorator (issue 6): lazy streams, fused cube kernels chosen by bytes saved, plan cache.

| module       | job                                                                   |
|--------------|-----------------------------------------------------------------------|
| `stream.py`  | lazy handles, recording, the block's normalized key                   |
| `graph.py`   | a cut of the stream as a dataflow graph (consumers, needed values)    |
| `ops.py`     | which primitives fuse, and the kernel IR each one becomes             |
| `fusers.py`  | choosing fused kernels by bytes of memory traffic saved               |
| `codegen.py` | fused elementwise and fuse-on-read reduction kernels (cube IR)        |
| `plan.py`    | plans (steps, when values are dropped) and the bounded plan cache     |
| `backend.py` | `Fusion(inner)`: the backend protocol, sync points, thread safety     |

See docs/fusion.md.
"""

from .backend import Fusion
from .stream import LazyHandle

__all__ = ["Fusion", "LazyHandle"]
