"""A short-lived cache of the read models behind the busiest pages, shared by everyone who looks.

Sixty-four operators with the overview open (it refreshes itself every two seconds), or a dozen
people paging through a million jobs, asked the database the same questions dozens of times a
second: each request ran the overview's half-dozen counting queries (or the jobs list's page and
count) on its own, and drew the same rows into the same HTML.  The answers are the same for
everyone signed in (neither page shows anything that depends on who asks), so one answer serves
everyone who asks at about the same time:

* **a page someone opens or reloads** gets a model loaded after the click (a change made a moment
  before, here or anywhere else, is on it), but shares that load: the requests that come while one
  load runs all wait for the next one, so 64 concurrent requests cause one or two queries, not 64;
* **a page refreshing itself** (the ``X-Errands-Live`` header of static/app.js: the overview every
  two seconds, the lists every five) gets the model of the last ``ttl`` seconds (1 by default)
  without a query, and when that expired, the previous one while the next loads (up to ``horizon``,
  5 s by default, from the start of its load), so the slow queries of a million-row overview are no
  refresh's wait;
* **fragments**: what a page draws from a model that is the same for everyone (the jobs table's
  rows, the overview's whole content) is drawn once per model and kept beside it;
* **your own changes at once**, in the refreshes too: a change made through this dashboard empties
  the cache, and the browser that made it reads past the cache (its ``errands_wrote`` cookie, the
  one the read replicas use for the same guarantee) until any entry another process of the
  dashboard may hold has expired.

The cache lives in one process and is only used from its event loop (loads run in worker threads,
their results are stored back on the loop), so it needs no lock.  A dashboard mounted in a host that
runs several event loops keeps the in-flight loads of each loop apart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from starlette.concurrency import run_in_threadpool

T = TypeVar("T")

DEFAULT_TTL = 1.0
"""Seconds a read model serves everyone before the next request loads it again (in the background)."""
STALE_FACTOR = 4.0
"""How many lifetimes more an entry still answers while its refresh is loading (:attr:`ReadModelCache.horizon`)."""
LIVE_HEADER = "x-errands-live"
"""Sent by a page refreshing itself (static/app.js): such a request may get a model ``ttl`` old, or
the previous one while the next loads."""
MAX_ENTRIES = 256
"""Keys kept at most (the jobs list has one per filter); expired ones go first, then the oldest."""


@dataclass
class Cached(Generic[T]):
    """One loaded model, when it stops serving, and what pages drew from it (by fragment name)."""

    value: T
    expires: float
    started: float = 0.0
    """When its load began: what it shows is no older than that."""
    fragments: dict[str, Any] = field(default_factory=dict)

    def fragment(self, name: str, draw: Callable[[T], Any]) -> Any:
        """What ``draw`` makes of the model, drawn once for everyone who reads this entry."""
        if name not in self.fragments:
            self.fragments[name] = draw(self.value)
        return self.fragments[name]


class ReadModelCache:
    """Read models by key for ``ttl`` seconds, loaded once however many ask at the same time."""

    def __init__(self, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic,
                 max_entries: int = MAX_ENTRIES) -> None:
        self.ttl = ttl
        self.clock = clock
        self.max_entries = max_entries
        self.entries: dict[Hashable, Cached[Any]] = {}
        self.inflight: dict[tuple[int, Hashable], asyncio.Task[Cached[Any]]] = {}
        self.following: dict[tuple[int, Hashable], asyncio.Task[Cached[Any]]] = {}
        """Per key, the load that starts when the running one ends, for the requests that came after it began."""
        self.generation = 0
        """Counts the clears: a load that began before one is not kept."""
        self.loads = 0
        """Loads started (a test and the bench read it: hits are the requests minus these)."""

    @property
    def enabled(self) -> bool:
        return self.ttl > 0

    @property
    def horizon(self) -> float:
        """The oldest an answer may be (from the start of its load): ``ttl`` and ``STALE_FACTOR``
        lifetimes more while a refresh loads.  A change made through another process of the
        dashboard is on every page of this one after that."""
        return self.ttl * (1 + STALE_FACTOR)

    async def get(self, key: Hashable, load: Callable[[], T], *, live: bool = False) -> Cached[T]:
        """The model of ``key`` (``load`` is blocking: it runs in a worker thread).

        A page someone opens or reloads (``live=False``) gets a model loaded after the request came
        in, so it shows every change made before the click, wherever it was made; the requests that
        come while a load runs share the next one (:meth:`_fresh`).  A page refreshing itself
        (``live=True``) may get a model up to ``ttl`` old, or the previous one while the next loads
        (:meth:`_recent`).  A load is a task of its own, so a request that gives up (its client went
        away) cancels nobody else's wait.  A failed load is nobody's entry: every request that waited
        for it gets the error, the next one loads again."""
        return await (self._recent(key, load) if live else self._fresh(key, load))

    async def _fresh(self, key: Hashable, load: Callable[[], T]) -> Cached[T]:
        loop = asyncio.get_running_loop()
        flight = (id(loop), key)
        running = self.inflight.get(flight)
        if running is None or running.get_loop() is not loop or running.done():
            return await asyncio.shield(self._start(loop, flight, key, load))
        # A load began before this request: it may miss a change made since.  Wait for the next one,
        # with every request that comes meanwhile.
        follow = self.following.get(flight)
        if follow is None or follow.get_loop() is not loop:
            follow = loop.create_task(self._after(running, flight, key, load))
            follow.add_done_callback(_retrieved)
            self.following[flight] = follow
        return await asyncio.shield(follow)

    async def _after(self, previous: asyncio.Task[Any], flight: tuple[int, Hashable], key: Hashable,
                     load: Callable[[], T]) -> Cached[T]:
        await asyncio.wait({previous})
        if self.following.get(flight) is asyncio.current_task():
            del self.following[flight]
        running = self.inflight.get(flight)  # one begun since ``previous`` ended began after our requests
        if running is None or running.done():
            running = self._start(asyncio.get_running_loop(), flight, key, load)
        return await running

    async def _recent(self, key: Hashable, load: Callable[[], T]) -> Cached[T]:
        found = self.entries.get(key)
        now = self.clock()
        if found is not None and now - found.started > self.horizon:
            found = None  # too old to show anyone, even while its reload runs
        if found is not None and found.expires > now:
            return found
        loop = asyncio.get_running_loop()
        flight = (id(loop), key)
        running = self.inflight.get(flight)
        if running is None or running.get_loop() is not loop or running.done():
            running = self._start(loop, flight, key, load)
        if found is not None:
            return found
        return await asyncio.shield(running)

    def _start(self, loop: asyncio.AbstractEventLoop, flight: tuple[int, Hashable], key: Hashable,
               load: Callable[[], T]) -> asyncio.Task[Cached[T]]:
        task = loop.create_task(self._load(flight, key, load))
        task.add_done_callback(_retrieved)
        self.inflight[flight] = task
        return task

    async def _load(self, flight: tuple[int, Hashable], key: Hashable, load: Callable[[], T]) -> Cached[T]:
        generation, started = self.generation, self.clock()
        self.loads += 1
        try:
            value = await run_in_threadpool(load)
        finally:
            if self.inflight.get(flight) is asyncio.current_task():
                del self.inflight[flight]
        entry = Cached(value, self.clock() + self.ttl, started)
        if generation == self.generation:  # nothing changed through this dashboard while it loaded
            self._keep(key, entry)
        return entry

    def _keep(self, key: Hashable, entry: Cached[Any]) -> None:
        if key not in self.entries and len(self.entries) >= self.max_entries:
            now = self.clock()
            for old in [k for k, e in self.entries.items() if e.expires <= now]:
                del self.entries[old]
            while len(self.entries) >= self.max_entries:
                del self.entries[next(iter(self.entries))]
        self.entries[key] = entry

    def clear(self) -> None:
        """Forget every entry: something changed through this dashboard.  Loads in flight still
        answer the requests that wait for them (they began before the change, as those requests did)
        but are no longer kept."""
        self.entries.clear()
        self.inflight.clear()
        self.generation += 1


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Mark a load's error as seen: when every request that waited for it had gone, nobody did."""
    if not task.cancelled():
        task.exception()


async def uncached(load: Callable[[], T]) -> Cached[T]:
    """``load`` as an entry of its own, for a request that must read past the cache."""
    return Cached(await run_in_threadpool(load), 0.0)
