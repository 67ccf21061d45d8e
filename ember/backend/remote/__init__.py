"""The remote backend (`Device.remote(ticket)`): ember's ops run on an `ember serve` server's device.

| module         | job                                                                         |
|----------------|-----------------------------------------------------------------------------|
| `protocol.py`  | versioned MessagePack messages in frames, tickets, limits                    |
| `transport.py` | iroh QUIC (authentication, the init exchange) and the TCP bulk transport     |
| `client.py`    | `RemoteBackend`: blocks recorded, registered once and replayed by id          |

Needs the `remote` extra (`pip install 'ember[remote]'`: iroh, msgpack). The server: `ember.remote`.
See docs/remote.md.

Example:
    >>> x = ember.ones(3, device=Device.remote(ticket))
    >>> (x + 1).numpy()
    array([2., 2., 2.], dtype=float32)
"""

from __future__ import annotations

import importlib.util

from ...errors import DeviceUnavailableError
from .protocol import INSTALL


def remote_backend(device):
    """The `RemoteBackend` of a `Device.remote(ticket)` device, connected; `DeviceUnavailableError` naming
    the extra when iroh or msgpack is missing; `RemoteError` with the reason when the server cannot be
    reached or refuses this client."""
    for module in ("iroh", "msgpack"):
        if importlib.util.find_spec(module) is None:
            raise DeviceUnavailableError(f"{device!r} is unavailable: the remote backend needs {module}: {INSTALL}")
    from .client import RemoteBackend
    return RemoteBackend(device.ticket)
