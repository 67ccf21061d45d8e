"""The adaptive memory pool every cube runtime allocates through (CPU, CUDA and wgpu).

A pool owns *pages* obtained from the device (`allocate(nbytes)` / `release(page)`) and hands out
*slices* of them; live slices never move. Small allocations come from slab pages of one power-of-two size class, large ones from pages
managed first-fit with coalescing, sized from the recent requests; empty pages are given back by age,
by `cleanup()`, or when a new page would take reserved memory past its peak. `deferring()` delays
releases while a CUDA graph may still write them; `trace` and `retake` let a replay take the same
slices again. `stats()` reports reserved and in-use bytes and their peaks. The rules and why:
docs/cube.md, "The memory pool".

Example:
    >>> pool = MemoryPool(allocate=lambda n: bytearray(n), release=lambda page: None)
    >>> s = pool.reserve(1000)
    >>> pool.stats().in_use
    1024
"""

from __future__ import annotations

import bisect
import heapq
import statistics
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

ALIGN = 256
MIN_PAGE = 2 << 20
MAX_PAGE = 256 << 20
SLAB_PAGE = 1 << 20


@dataclass(slots=True)
class Slice:
    """A reserved range of a page: `page.buffer[offset:offset + size]`."""

    page: "Page"
    offset: int
    size: int

    @property
    def buffer(self) -> Any:
        return self.page.buffer


@dataclass
class MemoryStats:
    """Bytes reserved from the device and handed out to tensors, now and at their peaks."""

    reserved: int
    in_use: int
    peak_reserved: int
    peak_in_use: int
    pages: int
    slices: int


class Page:
    """One device allocation and the ranges of it that are free."""

    def __init__(self, buffer: Any, size: int, chunk: int = 0, floor: int = 0) -> None:
        self.buffer = buffer
        self.size = size
        self.chunk = chunk                      # slab chunk size, 0 for a large page
        self.floor = floor                      # the smallest request served: 0, or half a dedicated page
        self.live = 0                           # slices handed out
        self.empty_since = time.monotonic()
        if chunk:
            self.free_chunks = list(range(0, size - chunk + 1, chunk))  # a heap: the lowest offset first
        else:
            self.free_ranges = [(0, size)]      # sorted, coalesced (offset, size)
        self.largest = size
        """At least the longest free range (a large page): a request above it skips the page unscanned."""
        self.released = False                   # given back to the device: its slices are no one's to retake

    def take(self, size: int) -> int | None:
        """Reserve `size` bytes; the offset, or None if this page cannot hold them."""
        if self.chunk:
            if not self.free_chunks:
                return None
            self.live += 1
            return heapq.heappop(self.free_chunks)
        if size > self.largest:
            return None
        longest = 0
        for i, (offset, length) in enumerate(self.free_ranges):
            if length >= size:
                if length == size:
                    del self.free_ranges[i]
                else:
                    self.free_ranges[i] = (offset + size, length - size)
                self.live += 1
                return offset
            longest = max(longest, length)
        self.largest = longest  # the whole list was scanned: now exact
        return None

    def take_at(self, offset: int, size: int) -> bool:
        """Reserve `size` bytes at `offset` if they are free (a slab page: if `offset` is its lowest free
        chunk, the one `take` would give); whether they were."""
        if self.chunk:
            chunks = self.free_chunks
            if not chunks or chunks[0] != offset:
                return False
            heapq.heappop(chunks)
            self.live += 1
            return True
        ranges = self.free_ranges
        i = bisect.bisect_right(ranges, (offset, 1 << 62)) - 1  # the free range starting at or before offset
        if i < 0:
            return False
        start, length = ranges[i]
        end = offset + size
        if end > start + length:
            return False
        parts = [(start, offset - start)] if offset > start else []
        if end < start + length:
            parts.append((end, start + length - end))
        ranges[i:i + 1] = parts
        self.live += 1
        return True

    def give(self, offset: int, size: int) -> None:
        """Return a range taken earlier."""
        self.live -= 1
        if self.live == 0:
            self.empty_since = time.monotonic()
        if self.chunk:
            heapq.heappush(self.free_chunks, offset)
            return
        ranges = self.free_ranges
        i = bisect.bisect_left(ranges, (offset, 0))
        start, length = offset, size
        if i < len(ranges) and ranges[i][0] == start + length:      # merge with the next range
            length += ranges[i][1]
            del ranges[i]
        if i > 0 and ranges[i - 1][0] + ranges[i - 1][1] == start:  # merge with the previous one
            start, length = ranges[i - 1][0], ranges[i - 1][1] + length
            del ranges[i - 1]
            i -= 1
        ranges.insert(i, (start, length))
        if length > self.largest:
            self.largest = length


class MemoryPool:
    """Pages from a device, sliced for tensors (see the module docs)."""

    def __init__(self, allocate: Callable[[int], Any], release: Callable[[Any], None],
                 small_limit: int = 32 << 10, page_size: int = 0, free_after_s: float = 30.0) -> None:
        self._allocate = allocate
        self._release = release
        self.small_limit = small_limit
        self.fixed_page = page_size
        self.free_after_s = free_after_s
        self.max_page = MAX_PAGE  # a device may cap it (wgpu: max_buffer_size)
        self._slabs: dict[int, list[Page]] = {}
        self._large: list[Page] = []
        self._recent: deque[int] = deque(maxlen=64)
        self._lock = threading.Lock()
        self._pending: deque[Slice] = deque()  # freed by finalizers, given back under the lock
        self._next_idle_check = 0.0
        self._in_use = self._reserved = self._peak_in_use = self._peak_reserved = self._slices = 0
        self._deferred: list | None = None  # inside `deferring()`: pages given up, their memory not yet released
        self.trace: list | None = None
        """When a list: each slice handed out, as (nbytes asked, slice), and each given back (see above)."""

    def _tidy(self) -> None:
        """Under the lock, before a reserve: give back the slices finalizers freed, and now and then the
        pages idle for `free_after_s`."""
        if self._pending:
            self._drain()
        now = time.monotonic()
        if now >= self._next_idle_check:
            self._next_idle_check = now + min(1.0, self.free_after_s / 4)
            self._free_idle_pages()

    def reserve(self, nbytes: int) -> Slice:
        """A slice of at least `nbytes` (rounded up to the alignment or the size class)."""
        if nbytes < 0:
            raise ValueError(f"cannot reserve {nbytes} bytes")
        with self._lock:
            self._tidy()
            offset = None
            small = nbytes <= self.small_limit
            size = self._size(nbytes, small)
            if small:
                pages = self._slabs.get(size)
                if pages is None:
                    pages = self._slabs[size] = []
                for page in pages:  # the common case, inlined: a free chunk of a slab page
                    if page.free_chunks:
                        page.live += 1
                        offset = heapq.heappop(page.free_chunks)
                        break
            else:
                pages = self._large
                for page in pages:  # first fit; pages whose longest free range is too short are skipped
                    if page.largest >= size >= page.floor:
                        offset = page.take(size)
                        if offset is not None:
                            break
            if offset is None:
                target = 0 if small else self._target()
                new = max(SLAB_PAGE, size) if small else max(size, target)
                if self._reserved + new > self._peak_reserved:
                    if not small and size > target:
                        page, offset = self._room_in_dedicated(size)
                    if offset is None:  # empty dedicated pages, and stale ones (see above)
                        stale = target // 4
                        self._free_pages(lambda page: page.floor > 0 or (not page.chunk and page.size < stale))
                if offset is None:
                    # a slab page of `size` chunks; a dedicated page (above the target: floor half its size)
                    floor = size // 2 if size > target else 0
                    page = self._new_page(new, size) if small else self._new_page(new, 0, floor)
                    pages.append(page)
                    offset = page.take(size)
            return self._handed_out(nbytes, Slice(page, offset, size))

    def _size(self, nbytes: int, small: bool) -> int:
        """The bytes a slice of `nbytes` takes: its slab's chunk size (small), else `nbytes` aligned (and
        remembered for the page target)."""
        if small:
            return ALIGN if nbytes <= ALIGN else 1 << (nbytes - 1).bit_length()
        size = -(-nbytes // ALIGN) * ALIGN
        self._recent.append(size)
        return size

    def _handed_out(self, nbytes: int, piece: Slice) -> Slice:
        """Count `piece` as in use (and traced)."""
        self._in_use += piece.size
        self._slices += 1
        if self._in_use > self._peak_in_use:
            self._peak_in_use = self._in_use
        if self.trace is not None:
            self.trace.append((nbytes, piece))
        return piece

    def _given_back(self, piece: Slice) -> None:
        """Give `piece` back under the lock (and trace it)."""
        if self.trace is not None:
            self.trace.append(piece)
        self._give(piece)

    def retake(self, events: list) -> list | None:
        """The slices a trace names, taken where it says, in one call: `events` as `Captured` keeps them
        (`(nbytes, page, offset)` for a slice handed out, the number of an earlier one for a slice given
        back); the slices (None where given back), or None when one is not free at its place (then every
        slice taken here is given back and the pool is unchanged, but for pages of the call's idle check).

        How a CUDA graph's replay takes the slices its capture wrote (`ember/backend/cube/fused/cuda_graphs.py`),
        much cheaper than `reserve`'s first fit over many large pages (docs/cuda.md). It asks for no
        page, so it cannot run out of memory. A slice is taken at its
        place whenever that place is free, where `reserve` might have found an earlier hole: the graph
        writes only memory this run holds either way, and a loop's slices still recur.

        Example:
            >>> trace = []; pool.trace = trace; a = pool.reserve(1 << 20); pool.free(a); pool.trace = None
            >>> events = [(1 << 20, a.page, a.offset), 0]
            >>> pool.retake(events)
            [None]
        """
        with self._lock:
            self._tidy()
            taken: list = []
            small_limit = self.small_limit
            for event in events:
                if type(event) is int:
                    self._given_back(taken[event])
                    taken[event] = None
                    continue
                nbytes, page, offset = event
                size = self._size(nbytes, nbytes <= small_limit)
                if page.released or not page.take_at(offset, size):
                    for piece in taken:
                        if piece is not None:
                            self._given_back(piece)
                    return None
                taken.append(self._handed_out(nbytes, Slice(page, offset, size)))
            return taken

    def free(self, piece: Slice) -> None:
        """Give a slice back to its page (the page itself stays reserved until idle)."""
        if self.trace is not None:
            self.trace.append(piece)
        with self._lock:
            self._give(piece)

    def free_later(self, piece: Slice) -> None:
        """Give a slice back at the pool's next call: safe from a finalizer or `__del__`, which may run
        in the middle of another pool call on the same thread (a lock would deadlock there)."""
        if self.trace is not None:
            self.trace.append(piece)
        self._pending.append(piece)  # deque.append is atomic

    def _give(self, piece: Slice) -> None:
        piece.page.give(piece.offset, piece.size)
        self._in_use -= piece.size
        self._slices -= 1

    def _drain(self) -> None:
        pending = self._pending
        while pending:
            self._give(pending.popleft())

    def cleanup(self) -> int:
        """Give every empty page back to the device now; returns the bytes released."""
        with self._lock:
            self._drain()
            return self._free_pages(lambda page: True)

    @contextmanager
    def deferring(self) -> Iterator[None]:
        """Give the device the memory of pages given up inside the block only when it ends (see above);
        a block inside another leaves that to the outer one.

        Example:
            >>> with pool.deferring():
            ...     graph.replay()
        """
        if self._deferred is not None:
            yield
            return
        self._deferred = pages = []
        try:
            yield
        finally:
            self._deferred = None
            for buffer in pages:
                self._release(buffer)

    def stats(self, reset_peaks: bool = False) -> MemoryStats:
        """Reserved and in-use bytes, their peaks, and the page and slice counts; with `reset_peaks`, the
        peaks then start again from the current bytes (as torch's `reset_peak_memory_stats`)."""
        with self._lock:
            self._drain()
            pages = len(self._large) + sum(len(p) for p in self._slabs.values())
            stats = MemoryStats(self._reserved, self._in_use, self._peak_reserved, self._peak_in_use,
                                pages, self._slices)
            if reset_peaks:
                self._peak_reserved, self._peak_in_use = self._reserved, self._in_use
            return stats

    # ---- internals -------------------------------------------------------------------------------
    def _target(self) -> int:
        if self.fixed_page:
            return self.fixed_page
        typical = statistics.median(self._recent)
        return min(self.max_page, max(MIN_PAGE, -(-4 * int(typical) // MIN_PAGE) * MIN_PAGE))

    def _new_page(self, size: int, chunk: int, floor: int = 0) -> Page:
        page = Page(self._allocate(size), size, chunk, floor)
        self._reserved += size
        self._peak_reserved = max(self._peak_reserved, self._reserved)
        return page

    def _room_in_dedicated(self, size: int) -> tuple[Page | None, int | None]:
        """(page, offset) of a `size` slice in a dedicated page with room, whatever its floor, else (None, None)."""
        for page in self._large:
            if page.floor > 0 and page.largest >= size:
                offset = page.take(size)
                if offset is not None:
                    return page, offset
        return None, None

    def _free_idle_pages(self) -> None:
        deadline = time.monotonic() - self.free_after_s
        self._free_pages(lambda page: page.empty_since <= deadline)

    def _free_pages(self, condition: Callable[[Page], bool]) -> int:
        released = 0
        for pages in [self._large, *self._slabs.values()]:
            keep = []
            for page in pages:
                if page.live == 0 and condition(page):
                    page.released = True
                    if self._deferred is not None:
                        self._deferred.append(page.buffer)
                    else:
                        self._release(page.buffer)
                    released += page.size
                else:
                    keep.append(page)
            pages[:] = keep
        self._reserved -= released
        return released


def pool_from_settings(allocate: Callable[[int], Any], release: Callable[[Any], None]) -> MemoryPool:
    """A pool with `[memory] page_size_mb` and `free_after_s` from `ember.toml` / `EMBER_*`.

    Example:
        >>> pool = pool_from_settings(lambda n: bytearray(n), lambda page: None)
    """
    from ...settings import settings
    config = settings()
    return MemoryPool(allocate, release, page_size=config.get("memory", "page_size_mb") << 20,
                      free_after_s=config.get("memory", "free_after_s"))
