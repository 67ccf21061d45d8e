"""One client's session on an `ember serve` server: its messages decoded, checked and run.

`Session.handle(frame, channel)` takes one frame: `put` (a tensor, its chunks read from `channel`),
`graph` (a block's ops, registered once), `run` (a graph on held tensors, its live values kept under
new ids), `free`, and the requests `get` (data and chunks back), `sync` and `stats`. A frame that is
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
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend.remote.protocol import CHUNK, LIMITS, Limits, encode
from ..dtype import _BY_NAME
from ..errors import OutOfMemoryError, ProtocolError
from ..ops.primitive import Aval, registry

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
    """What the sessions of one server share: the device stack, the limits, the per-client quota."""

    def __init__(self, device, max_memory: int | None = None, limits: Limits = LIMITS) -> None:
        from ..nn import fused_attention  # noqa: F401 - registers the primitives ember's layers and
        from ..optim import fused  # noqa: F401 - optimizers declare as extensions (adam_update, ...)
        self.device = device
        self.backend = device.backend
        self.max_memory = max_memory
        self.limits = limits
        self.sessions: set = set()

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
        """Drop every tensor and graph of the session."""
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
        buffer = bytearray(CHUNK if over else nbytes)
        view = memoryview(buffer)
        for start in range(0, nbytes, CHUNK):  # the chunks follow whatever the outcome, in step with the client
            size = min(CHUNK, nbytes - start)
            channel.recv_into(view[:size] if over else view[start:start + size])
        if over:
            self._fail((id,), over)
            return
        try:
            handle = self.state.backend.from_host(np.frombuffer(buffer, dtype.np).reshape(shape))
        except Exception as e:  # noqa: BLE001 - the device refused it (a dtype it cannot hold): the client hears
            self._fail((id,), Failure("put", type(e).__name__, str(e)))
            return
        self._keep(id, handle, Aval(shape, dtype), nbytes)

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
        id = _field(message, "id", int)
        found = self.values.get(id)
        if found is None:
            failure = self.failed.get(id)
            if failure is None:
                raise ProtocolError(f"'get': tensor {id} is not held by this session")
            channel.send(encode(failure.reply()))
            return
        handle, (shape, dtype), _ = found
        try:
            array = np.ascontiguousarray(self.state.backend.to_host(handle))
        except Exception as e:  # noqa: BLE001 - a block the server's fusion ran only now raised: answered
            notes = " ".join(getattr(e, "__notes__", ()))
            channel.send(encode(Failure(_op_of(notes), type(e).__name__, f"{e} {notes}".strip()).reply()))
            return
        data = array.reshape(-1).view(np.uint8)
        channel.send(encode({"t": "data", "dt": dtype.name, "sh": shape}),
                     *[data[i:i + CHUNK].data for i in range(0, data.size, CHUNK)])

    def _sync(self, message: dict, channel) -> None:
        try:
            self.state.backend.sync()
        except Exception as e:  # noqa: BLE001 - a recorded op of this thread failed at the flush: answered
            self.error = self.error or Failure(_op_of(" ".join(getattr(e, "__notes__", ()))), type(e).__name__, str(e))
        error, self.error = self.error, None
        channel.send(encode(error.reply() if error else {"t": "ok"}))

    def _stats(self, message: dict, channel) -> None:
        channel.send(encode({"t": "stats", "held": self.held, "tensors": len(self.values) + len(self.failed),
                             "graphs": len(self.graphs), "sessions": len(self.state.sessions),
                             "in_use": self.state.memory_in_use(), "rss": _rss()}))

    # ---- bookkeeping -----------------------------------------------------------------------------
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
             "get": Session._get, "sync": Session._sync, "stats": Session._stats}
