"""The server side of remote compute: `ember serve` serves one device to `Device.remote(ticket)` clients.

| module       | job                                                                       |
|--------------|---------------------------------------------------------------------------|
| `server.py`  | the iroh endpoint, admission (allow list, credential), a thread per session |
| `session.py` | one client's messages checked and run on the device, its tensors and quota |
| `tokens.py`  | transfer tokens: the one-time capabilities of server-to-server moves       |

The client side and the wire format live in `ember.backend.remote`. See docs/remote.md.

Example:
    >>> from ember.remote import Server
    >>> ticket = Server(ember.Device.cpu()).start()
"""

from .server import Server, serve
from .session import ServerState, Session

__all__ = ["Server", "ServerState", "Session", "serve"]
