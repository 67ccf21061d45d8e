"""One client's session on an `ember serve` server: its messages decoded, checked and run.

`Session.handle(frame, channel)` takes one frame: `put` (a tensor, its chunks read from `channel`),
`graph` (a block's ops, registered once), `run` (a graph on held tensors, its live values kept under
new ids), `free`, and the requests `get` (data and chunks back), `sync`, `stats`, and the two halves
of a server-to-server move: `export` (a transfer token for a held tensor, bound to the destination's
node id: `tokens.py`) and `import` (a tensor pulled with such a token from its server, or taken from
this server's own tokens without any network, `ServerState.claim`). A frame that is
malformed, past `Limits`, or names a tensor or graph the session does not hold raises `ProtocolError`:
the server then closes this session only. An op that fails (its shape rule, its kernel, the memory
quota, a primitive the server lacks) is not a violation: the values of its run hold the error, and
reading them, or the next `sync`, answers it with the op and the message. `close()` drops every tensor
the session held. The fuzz tests drive this class directly, a million frames in a few seconds.

Example:
    >>> session = Session(ServerState(Device.cpu()), "peer")
    >>> session.handle(encode({"t": "stats"}), channel)     # channel.send gets the reply
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..backend.remote.protocol import CHUNK, LIMITS, Limits, encode
from ..backend.remote.transport import endpoint_node
from ..dtype import _BY_NAME
from ..errors import OutOfMemoryError, ProtocolError, RemoteError
from ..ops.primitive import Aval, registry
from .tokens import TTL, TokenRefused, TransferTokens

_MAX_ID = 1 << 62


@dataclass
class Failure:
    """Why a value could not be computed: the op and its error, as the client will raise it."""

    op: str
    type: str
    msg: str

    def reply(self) -> dict:
        return {"t": "error", "op": self.op, "type": self.type, "msg": self.msg}


@dataclass
class Graph:
    """A registered block: (primitive, params, refs) per node, how many externals it reads, its live nodes."""

    nodes: list
    externals: int
    live: tuple
    missing: Failure | None  # a primitive this server lacks: every run of the graph fails with it


class ServerState:
    """What the sessions of one server share: the device stack, the limits, the per-client quota, the
    transfer tokens; `node` (this server's node id) and `pull` (`Server._pull`) are set by the `Server`."""

    def __init__(self, device, max_memory: int | None = None, limits: Limits = LIMITS) -> None:
        from ..nn import fused_attention  # noqa: F401 - registers the primitives ember's layers and
        from ..optim import fused  # noqa: F401 - optimizers declare as extensions (adam_update, ...)
        self.device = device
        self.backend = device.backend
        self.max_memory = max_memory
        self.limits = limits
        self.sessions: set = set()
        self.tokens = TransferTokens()
        self.node: str | None = None
        self.pull: Callable[[str, bytes, Aval], Any] | None = None
        self.transfers = {"served": 0, "pulled": 0, "local": 0}  # moves sent to, pulled from, within peers
        self._counts_lock = threading.Lock()

    def claim(self, source: str, token: bytes, aval: Aval) -> Any:
        """The tensor `token` grants on the server of iroh endpoint ticket `source` (this server: from its
        own tokens, no network; another: pulled from it), a handle of this device holding `aval`.
        `RemoteError` saying why when it is refused or fails."""
        local = endpoint_node(source) == self.node and self.node is not None
        if local:
            try:
                export = self.tokens.redeem(token, self.node)
            except TokenRefused as e:
                raise RemoteError(str(e)) from None
            if export.aval != aval:
                raise RemoteError(f"the token is for a {_describe(export.aval)} tensor, not {_describe(aval)}")
            handle = export.handle
        elif self.pull is None:
            raise RemoteError("this server cannot pull tensors from other servers (it has no endpoint)")
        else:
            handle = self.pull(source, token, aval)
        self.count("local" if local else "pulled")
        return handle

    def count(self, kind: str) -> None:
        """One more transfer of `kind` ("served", "pulled", "local")."""
        with self._counts_lock:
            self.transfers[kind] += 1

    def memory_in_use(self) -> int | None:
        try:
            return self.device.memory_stats().in_use
        except Exception:  # noqa: BLE001 - the NumPy device has no pool
            return None


def _field(message: dict, name: str, kind: type | tuple) -> Any:
    value = message.get(name)
    if type(value) not in (kind if isinstance(kind, tuple) else (kind,)):
        raise ProtocolError(f"{message.get('t')!r}: field {name!r} must be {getattr(kind, '__name__', kind)}, "
                            f"got {type(value).__name__}")
    return value


def _ids(message: dict, name: str, limit: int) -> tuple:
    ids = _field(message, name, tuple)
    if len(ids) > limit or any(type(i) is not int or not 0 <= i < _MAX_ID for i in ids):
        raise ProtocolError(f"{message.get('t')!r}: {name!r} must be at most {limit} tensor ids")
    return ids


def _shape(message: dict) -> tuple:
    shape = _field(message, "sh", tuple)
    if len(shape) > LIMITS.rank or any(type(n) is not int or not 0 <= n < 1 << 40 for n in shape):
        raise ProtocolError(f"'put': bad shape {shape!r:.80}")
    return shape


class Session:
    """One client's tensors, graphs and pending error (see the module docstring)."""

    def __init__(self, state: ServerState, peer: str) -> None:
        self.state = state
        self.peer = peer
        self.limits = state.limits
        self.values: dict[int, tuple] = {}      # id -> (backend handle, aval, bytes)
        self.failed: dict[int, Failure] = {}
        self.graphs: dict[int, Graph] = {}
        self.held = 0
        self.error: Failure | None = None       # the first failure since the last sync
        self.messages = 0
        self.keep: tuple = ()                  # the transport objects the server keeps open for it

    # ---- dispatch --------------------------------------------------------------------------------
    def handle(self, frame: bytes, channel) -> None:
        """Take one frame (see the module docstring); replies and chunks go through `channel`."""
        from ..backend.remote.protocol import decode
        message = decode(frame, self.limits)
        if type(message) is not dict:
            raise ProtocolError(f"a message must be a map, got {type(message).__name__}")
        kind = message.get("t")
        handler = _HANDLERS.get(kind) if type(kind) is str else None
        if handler is None:
            raise ProtocolError(f"unknown message type {kind!r:.40}")
        self.messages += 1
        handler(self, message, channel)

    def close(self) -> None:
        """Drop every tensor, graph and transfer token of the session."""
        self.state.tokens.drop(self)
        self.values.clear()
        self.failed.clear()
        self.graphs.clear()
        self.held = 0

    # ---- messages --------------------------------------------------------------------------------
    def _put(self, message: dict, channel) -> None:
        id = self._new_id(message, "id")
        dtype = _BY_NAME.get(_field(message, "dt", str))
        if dtype is None:
            raise ProtocolError(f"'put': unknown dtype {message['dt']!r:.40}")
        shape = _shape(message)
        nbytes = math.prod(shape) * dtype.itemsize
        over = self._over_quota(nbytes)
        buffer = receive(channel, nbytes, keep=not over)  # the chunks follow whatever the outcome
        if over:
            self._fail((id,), over)
            return
        try:
            handle = self.state.backend.from_host(np.frombuffer(buffer, dtype.np).reshape(shape))
        except Exception as e:  # noqa: BLE001 - the device refused it (a dtype it cannot hold): the client hears
            self._fail((id,), Failure("put", type(e).__name__, str(e)))
            return
        self._keep(id, handle, Aval(shape, dtype), nbytes)

    def _export(self, message: dict, channel) -> None:
        found = self._held(message, "export")
        if isinstance(found, Failure):
            channel.send(encode(found.reply()))
            return
        to = _field(message, "to", str)
        ttl = message.get("ttl", TTL)
        if len(to) > 128 or type(ttl) not in (int, float) or not ttl > 0:
            raise ProtocolError(f"'export': bad destination node {to[:40]!r} or lifetime {ttl!r:.40}")
        token = self.state.tokens.mint(self, found[0], found[1], found[2], to, float(ttl), self.limits.exports)
        if token is None:
            channel.send(encode(Failure("export", "RemoteError", f"this session already holds {self.limits.exports} "
                                        f"unredeemed transfer tokens").reply()))
            return
        channel.send(encode({"t": "token", "token": token, "ttl": min(float(ttl), TTL)}))

    def _import(self, message: dict, channel) -> None:
        id = self._new_id(message, "id")
        dtype = _BY_NAME.get(_field(message, "dt", str))
        if dtype is None:
            raise ProtocolError(f"'import': unknown dtype {message['dt']!r:.40}")
        aval = Aval(_shape(message), dtype)
        token, source = _field(message, "token", bytes), _field(message, "from", str)
        nbytes = math.prod(aval.shape) * dtype.itemsize
        failure = self._over_quota(nbytes)
        if failure is None:
            try:
                handle = self.state.claim(source, token, aval)
            except RemoteError as e:
                failure = Failure("transfer", "RemoteError", str(e))
        if failure is not None:  # answered now, and nothing held: the client raises at its `to()`
            channel.send(encode(failure.reply()))
            return
        self._keep(id, handle, aval, nbytes)
        channel.send(encode({"t": "ok"}))

    def _graph(self, message: dict, channel) -> None:
        id = _field(message, "id", int)
        if id in self.graphs or not 0 <= id < _MAX_ID:
            raise ProtocolError(f"'graph': id {id} is already registered or out of range")
        if len(self.graphs) >= self.limits.graphs:
            raise ProtocolError(f"'graph': over the limit of {self.limits.graphs} graphs per session")
        externals = _field(message, "ext", int)
        raw = _field(message, "nodes", tuple)
        if not 0 <= externals <= self.limits.items or not 0 < len(raw) <= self.limits.nodes:
            raise ProtocolError(f"'graph': {len(raw)} nodes and {externals} externals are out of bounds")
        nodes, missing = [], None
        for index, node in enumerate(raw):
            if type(node) is not tuple or len(node) != 3 or type(node[0]) is not str or type(node[1]) is not dict:
                raise ProtocolError(f"'graph': node {index} must be (name, params, refs)")
            name, params, refs = node
            if type(refs) is not tuple or any(
                    type(r) is not tuple or len(r) != 2 or type(r[1]) is not int
                    or not (r[0] == "x" and 0 <= r[1] < externals or r[0] == "r" and 0 <= r[1] < index) for r in refs):
                raise ProtocolError(f"'graph': node {index} ({name[:40]}) has a bad input ref")
            prim = registry.get(name)
            if prim is None and missing is None:
                missing = Failure(name, "RemoteError", f"the server has no primitive {name!r} (a custom op: import "
                                                       f"the module that registers it on the server too)")
            nodes.append((prim, params, refs))
        live = _ids(message, "live", len(nodes))
        if any(i >= len(nodes) for i in live) or len(set(live)) != len(live):
            raise ProtocolError("'graph': bad live node indices")
        self.graphs[id] = Graph(nodes, externals, live, missing)

    def _run(self, message: dict, channel) -> None:
        graph = self.graphs.get(_field(message, "g", int))
        if graph is None:
            raise ProtocolError(f"'run': graph {message['g']} is not registered")
        inputs = _ids(message, "x", graph.externals)
        outputs = _ids(message, "o", len(graph.live))
        if len(inputs) != graph.externals or len(outputs) != len(graph.live):
            raise ProtocolError(f"'run': {len(inputs)} inputs and {len(outputs)} outputs for a graph of "
                                f"{graph.externals} and {len(graph.live)}")
        dynamic = self._dynamic(message, len(graph.nodes))
        for id in outputs:
            self._check_new(id)
        if len(set(outputs)) != len(outputs):
            raise ProtocolError("'run': repeated output ids")
        arrays, avals = [], []
        for id in inputs:
            found = self.values.get(id)
            if found is None:
                failure = self.failed.get(id)
                if failure is None:
                    raise ProtocolError(f"'run': tensor {id} is not held by this session")
                self._fail(outputs, failure)
                return
            arrays.append(found[0])
            avals.append(found[1])
        if graph.missing is not None:
            self._fail(outputs, graph.missing)
            return
        failure, values = self._execute(graph, arrays, avals, dynamic)
        if failure is not None:
            self._fail(outputs, failure)
            return
        for id, index in zip(outputs, graph.live):
            handle, aval = values[index]
            self._keep(id, handle, aval, math.prod(aval[0]) * aval[1].itemsize)

    def _execute(self, graph: Graph, arrays: list, avals: list, dynamic: dict) -> tuple:
        """(None, values by node) or (the failure, None): each node's shape rule, the quota, then the ops."""
        backend, total, planned = self.state.backend, 0, []
        env_avals: list = []
        for index, (prim, params, refs) in enumerate(graph.nodes):
            if index in dynamic:
                params = {**params, **dynamic[index]}
            ins = [env_avals[i] if kind == "r" else avals[i] for kind, i in refs]
            try:
                aval = prim.infer(*ins, **params)
            except Exception as e:  # noqa: BLE001 - a shape or param error of the client's op, answered to it
                return Failure(prim.name, type(e).__name__, str(e)), None
            env_avals.append(aval)
            planned.append(params)
            total += math.prod(aval.shape) * aval.dtype.itemsize
        over = self._over_quota(total)
        if over:
            return over, None
        env: list = []
        for (prim, _, refs), params, aval in zip(graph.nodes, planned, env_avals):
            try:
                env.append(backend.execute(prim, [env[i] if kind == "r" else arrays[i] for kind, i in refs], params, aval))
            except Exception as e:  # noqa: BLE001 - the op's own error (an index out of range): answered
                return Failure(prim.name, type(e).__name__, str(e)), None
        return None, {i: (env[i], env_avals[i]) for i in graph.live}

    def _dynamic(self, message: dict, nodes: int) -> dict:
        dynamic = {}
        for entry in _field(message, "d", tuple):
            if type(entry) is not tuple or len(entry) != 2 or type(entry[0]) is not int or not 0 <= entry[0] < nodes \
                    or type(entry[1]) is not dict:
                raise ProtocolError("'run': bad dynamic params")
            dynamic[entry[0]] = entry[1]
        return dynamic

    def _free(self, message: dict, channel) -> None:
        for id in _ids(message, "ids", self.limits.items):
            found = self.values.pop(id, None)
            if found is not None:
                self.held -= found[2]
            elif self.failed.pop(id, None) is None:
                raise ProtocolError(f"'free': tensor {id} is not held by this session")

    def _get(self, message: dict, channel) -> None:
        found = self._held(message, "get")
        if isinstance(found, Failure):
            channel.send(encode(found.reply()))
            return
        send_value(self.state.backend, found[0], found[1], channel)

    def _sync(self, message: dict, channel) -> None:
        try:
            self.state.backend.sync()
        except Exception as e:  # noqa: BLE001 - a recorded op of this thread failed at the flush: answered
            self.error = self.error or Failure(_op_of(" ".join(getattr(e, "__notes__", ()))), type(e).__name__, str(e))
        error, self.error = self.error, None
        channel.send(encode(error.reply() if error else {"t": "ok"}))

    def _stats(self, message: dict, channel) -> None:
        state = self.state
        channel.send(encode({"t": "stats", "held": self.held, "tensors": len(self.values) + len(self.failed),
                             "graphs": len(self.graphs), "sessions": len(state.sessions),
                             "in_use": state.memory_in_use(), "rss": _rss(), "tokens": len(state.tokens),
                             "transfers": dict(state.transfers)}))

    # ---- bookkeeping -----------------------------------------------------------------------------
    def _held(self, message: dict, kind: str) -> tuple | Failure:
        """The (handle, aval, bytes) of the tensor `message["id"]` names, or the failure it holds."""
        id = _field(message, "id", int)
        found = self.values.get(id) or self.failed.get(id)
        if found is None:
            raise ProtocolError(f"{kind!r}: tensor {id} is not held by this session")
        return found

    def _new_id(self, message: dict, name: str) -> int:
        id = _field(message, name, int)
        self._check_new(id)
        return id

    def _check_new(self, id: int) -> None:
        if not 0 <= id < _MAX_ID or id in self.values or id in self.failed:
            raise ProtocolError(f"tensor id {id} is already held or out of range")
        if len(self.values) + len(self.failed) >= self.limits.handles:
            raise ProtocolError(f"over the limit of {self.limits.handles} tensors per session")

    def _keep(self, id: int, handle, aval: tuple, nbytes: int) -> None:
        self.values[id] = (handle, aval, nbytes)
        self.held += nbytes

    def _fail(self, ids, failure: Failure) -> None:
        for id in ids:
            self.failed[id] = failure
        self.error = self.error or failure

    def _over_quota(self, nbytes: int) -> Failure | None:
        quota = self.state.max_memory
        if quota is None or self.held + nbytes <= quota:
            return None
        return Failure("memory quota", OutOfMemoryError.__name__,
                       f"this client would hold {self.held + nbytes:,} bytes on the server, over its quota of "
                       f"{quota:,} (ember serve --max-memory)")


def receive(channel, nbytes: int, keep: bool = True) -> bytearray:
    """The `nbytes` of a tensor's chunk frames read from `channel` (read and dropped when not `keep`)."""
    buffer = bytearray(nbytes if keep else min(CHUNK, nbytes))
    view = memoryview(buffer)
    for start in range(0, nbytes, CHUNK):
        size = min(CHUNK, nbytes - start)
        channel.recv_into(view[start:start + size] if keep else view[:size])
    return buffer


def send_value(backend, handle, aval: Aval, channel) -> None:
    """Send `handle` (of `aval`) as a `data` message and its chunk frames, or the error reading it raised."""
    shape, dtype = aval
    try:
        array = np.ascontiguousarray(backend.to_host(handle))
    except Exception as e:  # noqa: BLE001 - a block the server's fusion ran only now raised: answered
        notes = " ".join(getattr(e, "__notes__", ()))
        channel.send(encode(Failure(_op_of(notes), type(e).__name__, f"{e} {notes}".strip()).reply()))
        return
    data = array.reshape(-1).view(np.uint8)
    channel.send(encode({"t": "data", "dt": dtype.name, "sh": shape}),
                 *[data[i:i + CHUNK].data for i in range(0, data.size, CHUNK)])


def _describe(aval: Aval) -> str:
    return f"{aval.dtype.name}{list(aval.shape)}"


def _op_of(notes: str) -> str:
    """The primitive a fusion note names ("raised by gather (inputs ...") or ""."""
    return notes.split("raised by ", 1)[1].split(" ", 1)[0] if "raised by " in notes else ""


def _rss() -> int:
    """This process's resident memory in bytes (Linux), 0 elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            import os
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


_HANDLERS = {"put": Session._put, "graph": Session._graph, "run": Session._run, "free": Session._free,
             "get": Session._get, "sync": Session._sync, "stats": Session._stats, "export": Session._export,
             "import": Session._import}
