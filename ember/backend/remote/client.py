"""The client backend of `Device.remote(ticket)`: ops recorded into blocks, replayed on the server by id.

Every op is recorded into a fusion `Stream` (`ember.backend.fusion.stream`) and returns a pending
`LazyHandle`; nothing is sent until a sync point (`to_host`, `sync`, `[fusion] max_ops` ops). There the
block is cut and its normalized key (op names, params, relative ids, dtypes, shape classes, liveness)
looked up: a new key sends the block's graph once (`graph`), and every run sends only the graph's id,
the handles it reads, the ids of the values still held, and its dynamic params (`DYNAMIC`: random seeds
and offsets, fill values), so a training step's blocks are registered once and replayed after.
Uploads (`put`), runs and frees are posted without waiting; a read (`get`) or `sync` is a round trip
(`round_trips` counts them). An op that fails on the server makes the values it computes raise when
read, and `sync` raise, with the server's op and message (`RemoteError`, also an instance of the
server's error class: `IndexError`, `ShapeError`, ...). A tensor moved to another server
(`move_from`) goes there directly: this client asks the source for a transfer token bound to the
destination's node id (`export`) and hands it to the destination, which pulls the bytes (`claim`).

Example:
    >>> backend = RemoteBackend(ticket)
    >>> h = backend.from_host(np.ones(3, np.float32))
    >>> backend.to_host(backend.execute(registry["exp"], [h], {}, Aval((3,), f32))).round(3)
    array([2.718, 2.718, 2.718], dtype=float32)
"""

from __future__ import annotations

import builtins
import collections
import itertools
import math
import threading
from typing import Any, Sequence

import numpy as np

from ... import errors
from ...dtype import _BY_NAME, DType, dtype_of
from ...errors import RemoteError
from ...ops.primitive import Aval, Primitive
from ...settings import settings
from ..base import Backend
from ..fusion.blocks import Block
from ..fusion.ops import handle_bounds, index_bounds
from ..fusion.stream import LazyHandle, Stream
from .protocol import CHUNK, PROTOCOL, decode, encode, parse_ticket
from .transport import connect

DYNAMIC = frozenset(("seed", "offset", "value"))
"""Params sent with each run rather than registered with the graph (they change from step to step)."""


def hashable(value: Any) -> Any:
    """`value` (a param) as a hashable key part: lists as tuples, arrays as (dtype, shape, bytes)."""
    kind = type(value)
    if kind is tuple or kind is list:
        return tuple(hashable(v) for v in value)
    if kind is dict:
        return tuple(sorted((k, hashable(v)) for k, v in value.items()))
    if kind is np.ndarray:
        return (value.dtype.str, value.shape, value.tobytes())
    return value


def graph_params(prim: Primitive, params: dict) -> tuple:
    """The params a registered graph holds (all but `DYNAMIC`), as the stream's key part."""
    return tuple((k, hashable(v)) for k, v in params.items() if k not in DYNAMIC)


class RemoteRef:
    """A tensor held by the server, by its id; dropping the last reference frees it there."""

    __slots__ = ("id", "frees", "bounds", "__weakref__")

    def __init__(self, id: int, frees: collections.deque, bounds: tuple | None = None) -> None:
        self.id, self.frees, self.bounds = id, frees, bounds
        """`bounds`: (min, max) of integer data uploaded from the host (`index_bounds` reads it)."""

    def __del__(self) -> None:
        self.frees.append(self.id)


class RemoteBackend(Backend):
    """A connection to one `ember serve` server (see the module docstring)."""

    def __init__(self, ticket: str) -> None:
        fields = parse_ticket(ticket)
        self.channel, ready, self._keep = connect(fields, {"t": "init", "v": PROTOCOL, "cred": fields.get("cred")})
        if ready.get("v") != PROTOCOL:
            raise RemoteError(f"the ember server speaks remote protocol {ready.get('v')}, this client {PROTOCOL}")
        self.endpoint: str = fields["endpoint"]
        """The server's iroh endpoint ticket (its node id and addresses, no credential)."""
        self.node: str = ready["node"]
        self.server_device: str = ready["device"]
        self.name = f"remote({self.server_device})"
        self.dtypes = tuple(_BY_NAME[n] for n in ready["dtypes"] if n in _BY_NAME)
        self.max_ops = settings().get("fusion", "max_ops")
        self.lock = threading.RLock()
        self.stream = Stream(graph_params)
        self.graphs: dict = {}
        self.frees: collections.deque = collections.deque()
        self._ids = itertools.count(1)
        self.counts = dict.fromkeys(("round_trips", "graphs", "runs", "puts", "gets", "imports", "bytes_up",
                                             "bytes_down"), 0)

    @property
    def round_trips(self) -> int:
        """Requests that waited for the server's answer (reads, syncs, stats) since the connection."""
        return self.counts["round_trips"]

    # ---- the protocol ----------------------------------------------------------------------------
    def execute(self, prim: Primitive, inputs: Sequence[LazyHandle], params: dict, out: Aval) -> LazyHandle:
        if out.dtype not in self.dtypes:
            self._refuse(prim.name, out.dtype)
        with self.lock:
            handle = self.stream.record(prim, inputs, params, out)
            if len(self.stream.records) >= self.max_ops:
                self._flush()
        return handle

    def from_host(self, array: np.ndarray) -> LazyHandle:
        dtype = dtype_of(array.dtype)
        if dtype not in self.dtypes:
            self._refuse("a tensor", dtype)
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        with self.lock:
            ref = RemoteRef(next(self._ids), self.frees, index_bounds(array) if array.dtype.kind in "iu" else None)
            chunks = [data[i:i + CHUNK].data for i in range(0, data.size, CHUNK)]
            self.channel.send(encode({"t": "put", "id": ref.id, "dt": dtype.name, "sh": array.shape}), *chunks)
            self.counts["puts"] += 1
            self.counts["bytes_up"] += data.size
        return LazyHandle.concrete(ref, Aval(tuple(array.shape), dtype))

    def to_host(self, handle: LazyHandle) -> np.ndarray:
        with self.lock:
            self._flush()
            reply = self._request({"t": "get", "id": handle.value.id})
            dtype, shape = _BY_NAME[reply["dt"]], tuple(reply["sh"])
            out = np.empty(math.prod(shape) * dtype.itemsize, np.uint8)
            view = memoryview(out)
            for i in range(0, out.size, CHUNK):
                self.channel.recv_into(view[i:i + CHUNK])
            self.counts["gets"] += 1
            self.counts["bytes_down"] += out.size
        return out.view(dtype.np).reshape(shape)

    def move_from(self, source: Backend, handle: LazyHandle, aval: Aval) -> LazyHandle | None:
        """`handle` of another remote backend moved here server to server (None for other backends): a
        transfer token from its server, redeemed by this one, which pulls the bytes itself (or, the same
        server, takes the tensor without any network). `RemoteError` saying why when refused."""
        if not isinstance(source, RemoteBackend):
            return None
        if aval.dtype not in self.dtypes:
            self._refuse("a tensor", aval.dtype)
        token = source.export(handle, self.node)
        return self.claim(source.endpoint, token, aval, handle.value.bounds)

    def export(self, handle: LazyHandle, to: str, ttl: float | None = None) -> bytes:
        """A transfer token for `handle`: one read of it by the server of node id `to`, within `ttl`
        seconds (None: the server's longest, `ember.remote.tokens.TTL`)."""
        with self.lock:
            self._flush()
            message = {"t": "export", "id": handle.value.id, "to": to}
            if ttl is not None:
                message["ttl"] = float(ttl)
            return self._request(message)["token"]

    def claim(self, source: str, token: bytes, aval: Aval, bounds: tuple | None = None) -> LazyHandle:
        """The tensor (of `aval`) that `token` grants on the server of iroh endpoint ticket `source`, now
        held by this backend's server; `RemoteError` with its reason when it is refused."""
        with self.lock:
            id = next(self._ids)
            self._request({"t": "import", "id": id, "from": source, "token": token, "dt": aval.dtype.name,
                           "sh": tuple(aval.shape)})
            self.counts["imports"] += 1
            return LazyHandle.concrete(RemoteRef(id, self.frees, bounds), aval)

    def value_bounds(self, handle: LazyHandle) -> tuple[int, int] | None:
        return handle_bounds(handle) or None  # host data's, so class targets are checked without a read

    def sync(self) -> None:
        with self.lock:
            self._flush()
            self._request({"t": "sync"})

    def stats(self) -> dict:
        """The server's view of this session and itself: bytes and tensors held, graphs, sessions, memory."""
        with self.lock:
            self._flush()
            return self._request({"t": "stats"})

    def close(self) -> None:
        """End the session: the server frees this client's tensors."""
        with self.lock:
            self.channel.close()

    # ---- blocks ----------------------------------------------------------------------------------
    def _flush(self) -> None:
        """Send the recorded block (its graph first when its key is new) and the frees since the last one."""
        stream = self.stream
        if len(stream):
            records, externals, external_avals, live, key = stream.take()
            messages = []
            graph = self.graphs.get(key)
            if graph is None:
                block = Block.of(records, externals, external_avals, live)
                graph = self.graphs[key] = len(self.graphs) + 1
                nodes = tuple((n.prim.name, {k: v for k, v in n.params.items() if k not in DYNAMIC}, n.inputs)
                              for n in block.nodes)
                messages.append(encode({"t": "graph", "id": graph, "ext": len(externals), "nodes": nodes,
                                        "live": tuple(i for i, x in enumerate(live) if x)}))
                self.counts["graphs"] += 1
            outputs, dynamic = [], []
            for rec, is_live in zip(records, live):
                if rec.params and not DYNAMIC.isdisjoint(rec.params):
                    dynamic.append((rec.index, {k: v for k, v in rec.params.items() if k in DYNAMIC}))
                handle = rec.out() if is_live else None
                if handle is not None:
                    ref = RemoteRef(next(self._ids), self.frees)
                    outputs.append(ref.id)
                    handle.value, handle.record = ref, None
                elif is_live:  # released since `take`: the server still writes it, and frees it at once
                    ref = next(self._ids)
                    outputs.append(ref)
                    self.frees.append(ref)
            messages.append(encode({"t": "run", "g": graph, "x": tuple(x.id for x in externals),
                                    "o": tuple(outputs), "d": tuple(dynamic)}))
            self.counts["runs"] += 1
            self.channel.send(*messages)
        self._send_frees()

    def _send_frees(self) -> None:
        frees = self.frees
        if frees:
            ids = []
            while frees and len(ids) < 1 << 15:
                ids.append(frees.popleft())
            self.channel.send(encode({"t": "free", "ids": tuple(ids)}))

    def _request(self, message: dict) -> dict:
        self._send_frees()
        self.channel.send(encode(message))
        self.counts["round_trips"] += 1
        reply = decode(self.channel.recv())
        if not isinstance(reply, dict):
            raise RemoteError(f"{self.name}: a malformed reply {reply!r:.80}")
        if reply.get("t") == "error":
            raise remote_error(self.name, reply)
        return reply

    def _refuse(self, what: str, dtype: DType) -> None:
        raise errors.DTypeError(f"{what}: {dtype.name} cannot be held by {self.name} (it holds "
                                f"{', '.join(d.name for d in self.dtypes)})")


_CLASSES: dict[str, type] = {}


def remote_error(server: str, reply: dict) -> RemoteError:
    """The `RemoteError` of an error reply, also an instance of the server's error class where ember or
    Python defines it (an `IndexError` stays catchable as one)."""
    name = str(reply.get("type", "Exception"))
    cls = _CLASSES.get(name)
    if cls is None:
        base = getattr(errors, name, None) or getattr(builtins, name, None)
        if not (isinstance(base, type) and issubclass(base, Exception)) or issubclass(base, RemoteError):
            base = None
        cls = _CLASSES[name] = type(f"Remote{name}", (RemoteError, base) if base else (RemoteError,), {})
    op = reply.get("op")
    return cls(f"{server}: {f'{op}: ' if op else ''}{name}: {reply.get('msg', '')}")
