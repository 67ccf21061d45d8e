"""Transfer tokens: the capabilities behind server-to-server moves (`t.to(other_remote)`).

A client asks the source server to `mint` a token for one tensor it holds there, bound to the node id of
the destination server. The token is 32 random bytes (`secrets`): it grants exactly one read of that one
tensor, by that one node, within `ttl` seconds (at most `TTL`). `redeem` hands the tensor out once and
forgets it: an unknown (forged) token, one already used, one past its time, or one presented by
another node is refused with `TokenRefused` saying which, and a token presented by the wrong node is
burnt. A session holds at most `limit` unredeemed tokens, and they die with it (`drop`). Thread-safe:
sessions mint from their threads, peers redeem from the server's handshakes.

Example:
    >>> tokens = TransferTokens()
    >>> token = tokens.mint(session, handle, aval, 12, to="b7e1...", ttl=5.0, limit=64)
    >>> tokens.redeem(token, "b7e1...").handle is handle
    True
"""

from __future__ import annotations

import collections
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

TTL = 30.0
"""The longest a transfer token lives, in seconds (a client may ask for less)."""
_SPENT = 4096  # used and expired tokens remembered, so a reuse is told apart from a forgery


class TokenRefused(Exception):
    """A token that does not grant what it was presented for; the message says why."""


@dataclass(frozen=True)
class Export:
    """What a token grants: one read of `handle` (`nbytes` bytes of `aval`) by node `to` until `deadline`."""

    handle: Any
    aval: Any
    nbytes: int
    to: str
    deadline: float
    owner: Any  # the session that minted it


class TransferTokens:
    """The unredeemed transfer tokens of one server (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.live: dict[bytes, Export] = {}
        self.spent: collections.OrderedDict[bytes, str] = collections.OrderedDict()
        self.lock = threading.Lock()

    def mint(self, owner, handle, aval, nbytes: int, to: str, ttl: float, limit: int) -> bytes | None:
        """A new token for `handle`, redeemable once by node `to` within `ttl` seconds (capped at `TTL`);
        None when `owner` already holds `limit` unredeemed ones."""
        with self.lock:
            self._expire()
            if sum(1 for e in self.live.values() if e.owner is owner) >= limit:
                return None
            token = secrets.token_bytes(32)
            self.live[token] = Export(handle, aval, nbytes, to, self.clock() + min(ttl, TTL), owner)
            return token

    def redeem(self, token: bytes, peer: str) -> Export:
        """What `token` grants, taken out (a second `redeem` of it is refused); `TokenRefused` when it is
        unknown, used, expired, or bound to a node other than `peer` (that burns it)."""
        with self.lock:
            self._expire()
            export = self.live.pop(token, None)
            if export is None:
                why = self.spent.get(token) or "no such token (forged, or minted by another server)"
                raise TokenRefused(f"transfer token refused: {why}")
            if export.to != peer:
                self._spend(token, "it was burnt when another node presented it")
                raise TokenRefused(f"transfer token refused: it was minted for node {export.to[:16]}..., not for "
                                   f"node {peer[:16]}... (it is burnt now)")
            self._spend(token, "it was already used")
        return export

    def drop(self, owner) -> None:
        """Forget the tokens `owner` minted (its session ended)."""
        with self.lock:
            for token in [t for t, e in self.live.items() if e.owner is owner]:
                del self.live[token]
                self._spend(token, "its session on the source server ended")

    def __len__(self) -> int:
        return len(self.live)

    def _expire(self) -> None:
        now = self.clock()
        for token in [t for t, e in self.live.items() if e.deadline < now]:
            del self.live[token]
            self._spend(token, f"it expired (a token lives at most {TTL:g} s, or the time its client asked)")

    def _spend(self, token: bytes, why: str) -> None:
        self.spent[token] = why
        if len(self.spent) > _SPENT:
            self.spent.popitem(last=False)
