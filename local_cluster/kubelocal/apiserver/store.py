"""In-memory object storage with one global, increasing resourceVersion, a bounded per-resource event
history for watch resumption, and fan-out to live watchers. Stored objects are never mutated: every
write stores a new dict, so readers can share them.

Lists are indexed, as kube-apiserver's watch cache is: by namespace, by every label, and by each field a
field selector has asked for (an index per field is built on its first use, then kept current by every
write), so a selected list costs what it returns, not what the collection holds."""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
import json
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .selectors import Selector, field_value

Key = tuple[str, str]  # (group, plural)
#: The later pages of a paged list are read from the collection as it was at the first page: kept this long, as
#: etcd keeps a revision until kube-apiserver compacts it (--etcd-compaction-interval, 5 minutes by default).
SNAPSHOT_SECONDS = 300.0
#: At most this many such snapshots are kept, the oldest going first; a list's last page drops its own. Each holds
#: references, not copies, but keeps the objects it saw alive while later writes replace them.
MAX_SNAPSHOTS = 16
Predicate = Callable[[Mapping[str, Any]], bool]
#: A collection as a paged list reads it: (namespace or "", name) → object, in that order.
Ordered = list[tuple[tuple[str, str], "Stored"]]


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass
class Stored:
    obj: dict[str, Any]
    _raw: bytes | None = None

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = dumps(self.obj)
        return self._raw


@dataclass
class Event:
    type: str
    new: Stored
    old: dict[str, Any] | None
    rv: int


@dataclass(eq=False)
class Watcher:
    """One watch stream's subscription: a selector, an optional namespace, and a queue of events."""

    namespace: str | None
    predicate: Predicate
    queue: asyncio.Queue[tuple[str, Stored] | None] = field(default_factory=asyncio.Queue)
    dropped: bool = False

    def offer(self, event: Event) -> None:
        obj = event.new.obj
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return
        matches_new = self.predicate(obj)
        if event.type == "DELETED":
            if matches_new:
                self.queue.put_nowait(("DELETED", event.new))
            return
        matches_old = event.old is not None and self.predicate(event.old)
        if event.type == "ADDED" or (matches_new and not matches_old):
            if matches_new:
                self.queue.put_nowait(("ADDED", event.new))
        elif matches_new:
            self.queue.put_nowait(("MODIFIED", event.new))
        elif matches_old:
            self.queue.put_nowait(("DELETED", event.new))

    def close(self, *, drop: bool = False) -> None:
        self.dropped = self.dropped or drop
        self.queue.put_nowait(None)


class ResourceVersionTooOld(Exception):
    """The requested resourceVersion is older than the history the store keeps (HTTP 410 Gone)."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


Ident = tuple[str | None, str]  # (namespace, name)
#: ("ns", namespace) | ("label", key, value) | ("field", path, value)
IndexKey = tuple[str | None, ...]


class Collection:
    """All objects of one resource (group, plural) across namespaces, with its event history and indexes."""

    def __init__(self, history_size: int) -> None:
        self.objects: dict[Ident, Stored] = {}
        self.history: deque[Event] = deque(maxlen=history_size)
        self.compacted_rv = 0  # every event with rv > compacted_rv is still in history
        self.truncated = False  # whether history has ever dropped an event (else it goes back to the start)
        self.watchers: set[Watcher] = set()
        self.indexed: dict[IndexKey, set[Ident]] = {}
        self.indexed_fields: set[str] = set()

    def _index_keys(self, obj: Mapping[str, Any] | None) -> set[IndexKey]:
        if obj is None:
            return set()
        meta = obj["metadata"]
        keys: set[IndexKey] = {("ns", meta.get("namespace"))}
        keys.update(("label", k, v) for k, v in (meta.get("labels") or {}).items())
        keys.update(("field", path, field_value(obj, path)) for path in self.indexed_fields)
        return keys

    def reindex(self, ident: Ident, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        """Move one object's index entries from its old version to its new one (None: absent)."""
        before, after = self._index_keys(old), self._index_keys(new)
        for key in before - after:
            idents = self.indexed.get(key)
            if idents is not None:
                idents.discard(ident)
                if not idents:
                    del self.indexed[key]
        for key in after - before:
            self.indexed.setdefault(key, set()).add(ident)

    def _index_field(self, path: str) -> None:
        """Start indexing a field (on the first selector that asks for it)."""
        if path in self.indexed_fields:
            return
        self.indexed_fields.add(path)
        for ident, stored in self.objects.items():
            self.indexed.setdefault(("field", path, field_value(stored.obj, path)), set()).add(ident)

    def candidates(self, namespace: str | None, selector: Selector | None) -> Iterable[Ident]:
        """The objects in every indexed set the namespace and selector name (all objects when none)."""
        options: list[set[Ident]] = []
        if namespace is not None:
            options.append(self.indexed.get(("ns", namespace), set()))
        for kind, key, values in selector.equalities() if selector is not None else ():
            if kind == "field":
                self._index_field(key)
            found = [self.indexed.get((kind, key, value), set()) for value in values]
            options.append(found[0] if len(found) == 1 else set().union(*found))
        if not options:
            return self.objects.keys()
        options.sort(key=len)
        return options[0].intersection(*options[1:]) if len(options) > 1 else options[0]


class Store:
    def __init__(self, history_size: int = 1000) -> None:
        self.rv = 1
        self.history_size = history_size
        self._collections: dict[Key, Collection] = {}
        self.by_uid: dict[str, tuple[Key, str | None, str]] = {}
        #: Called with (key, event) after every change; the server hooks garbage collection here.
        self.listeners: list[Callable[[Key, Event], None]] = []
        self._snapshots: OrderedDict[tuple[Key, int], tuple[float, Ordered]] = OrderedDict()

    def collection(self, key: Key) -> Collection:
        col = self._collections.get(key)
        if col is None:
            col = self._collections[key] = Collection(self.history_size)
            col.compacted_rv = self.rv  # nothing of this resource happened before now
        return col

    def get(self, key: Key, namespace: str | None, name: str) -> dict[str, Any] | None:
        stored = self.collection(key).objects.get((namespace, name))
        return stored.obj if stored else None

    def get_stored(self, key: Key, namespace: str | None, name: str) -> Stored | None:
        return self.collection(key).objects.get((namespace, name))

    def items(self, key: Key, namespace: str | None = None, selector: Selector | None = None) -> Iterator[Stored]:
        """Objects by namespace then name; with a selector, at least those it matches (indexes narrow the
        walk; the caller still applies the selector)."""
        col = self.collection(key)
        idents = sorted(col.candidates(namespace, selector), key=lambda i: (i[0] or "", i[1]))
        for ident in idents:
            if namespace is None or ident[0] == namespace:
                yield col.objects[ident]

    def first(
        self, key: Key, namespace: str | None, selector: Selector | None, limit: int
    ) -> tuple[list[Stored], int]:
        """The first `limit` objects by namespace then name among those the indexes select, and how many
        they select: the first page of a large selected list without sorting all of it."""
        col = self.collection(key)
        idents = [i for i in col.candidates(namespace, selector) if namespace is None or i[0] == namespace]
        firsts = heapq.nsmallest(limit, idents, key=lambda i: (i[0] or "", i[1]))
        return [col.objects[ident] for ident in firsts], len(idents)

    def items_at(self, key: Key, rv: int, namespace: str | None = None,
                 after: tuple[str, str] | None = None) -> list[Stored]:
        """The objects as they were at resourceVersion `rv` (an etcd read at a revision), by namespace then name,
        those after `after` (namespace or "", name) only: a snapshot a paged list kept (sorted once, not once per
        page: at 10,000 objects the sort was most of a page's cost), else rebuilt by undoing the later events;
        ResourceVersionTooOld once neither reaches back to `rv`."""
        kept = self._snapshots.get((key, rv))
        fresh = kept is not None and time.monotonic() - kept[0] < SNAPSHOT_SECONDS
        ordered = kept[1] if kept is not None and fresh else _ordered(self._undo_to(key, rv))
        start = bisect.bisect_right(ordered, after, key=lambda kv: kv[0]) if after is not None else 0
        return [stored for (ns, _), stored in itertools.islice(ordered, start, None)
                if namespace is None or ns == namespace]

    def _undo_to(self, key: Key, rv: int) -> dict[Ident, Stored]:
        col = self.collection(key)
        if col.truncated and rv < col.compacted_rv:
            raise ResourceVersionTooOld(rv, col.compacted_rv + 1)
        state = dict(col.objects)
        for event in reversed(col.history):
            if event.rv <= rv:
                break
            meta = event.new.obj["metadata"]
            ident = (meta.get("namespace"), meta["name"])
            if event.type == "ADDED":
                state.pop(ident, None)
            else:
                assert event.old is not None
                state[ident] = Stored(event.old)
        return state

    def snapshot(self, key: Key) -> None:
        """Keep the collection as it is now, at the current resourceVersion, for `items_at`: the pages after a
        paged list's first read from it for SNAPSHOT_SECONDS however many writes follow (as etcd serves a revision
        until compaction), not only while the bounded watch history reaches back."""
        now = time.monotonic()
        while self._snapshots and (len(self._snapshots) >= MAX_SNAPSHOTS
                                   or now - next(iter(self._snapshots.values()))[0] >= SNAPSHOT_SECONDS):
            self._snapshots.popitem(last=False)
        if (key, self.rv) not in self._snapshots:
            self._snapshots[(key, self.rv)] = (now, _ordered(self.collection(key).objects))

    def list_done(self, key: Key, rv: int) -> None:
        """A paged list read at `rv` served its last page: its snapshot goes."""
        self._snapshots.pop((key, rv), None)

    def keys(self) -> list[Key]:
        return list(self._collections)

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def _emit(self, key: Key, event: Event) -> None:
        col = self.collection(key)
        if len(col.history) == col.history.maxlen and col.history:
            col.compacted_rv = col.history[0].rv
            col.truncated = True
        col.history.append(event)
        for watcher in list(col.watchers):
            watcher.offer(event)
        for listener in self.listeners:
            listener(key, event)

    def write(self, key: Key, obj: dict[str, Any]) -> dict[str, Any]:
        """Store `obj` (already complete) under a fresh resourceVersion; emits ADDED or MODIFIED."""
        meta = obj["metadata"]
        ident = (meta.get("namespace"), meta["name"])
        col = self.collection(key)
        old = col.objects.get(ident)
        rv = self.next_rv()
        meta["resourceVersion"] = str(rv)
        stored = Stored(obj)
        col.objects[ident] = stored
        col.reindex(ident, old.obj if old else None, obj)
        self.by_uid[meta["uid"]] = (key, ident[0], ident[1])
        self._emit(key, Event("MODIFIED" if old else "ADDED", stored, old.obj if old else None, rv))
        return obj

    def remove(self, key: Key, namespace: str | None, name: str) -> dict[str, Any] | None:
        """Remove an object for good; emits DELETED carrying the deletion's resourceVersion."""
        col = self.collection(key)
        old = col.objects.pop((namespace, name), None)
        if old is None:
            return None
        col.reindex((namespace, name), old.obj, None)
        rv = self.next_rv()
        final = {**old.obj, "metadata": {**old.obj["metadata"], "resourceVersion": str(rv)}}
        self.by_uid.pop(final["metadata"]["uid"], None)
        self._emit(key, Event("DELETED", Stored(final), old.obj, rv))
        return final

    def watch(self, key: Key, namespace: str | None, predicate: Predicate, since: int | None) -> Watcher:
        """Subscribe; queue the replay first (current state when `since` is None, else history after it)."""
        col = self.collection(key)
        watcher = Watcher(namespace, predicate)
        if since is None:
            for stored in self.items(key, namespace):
                if predicate(stored.obj):
                    watcher.queue.put_nowait(("ADDED", stored))
        else:
            if since < col.compacted_rv:
                raise ResourceVersionTooOld(since, col.compacted_rv + 1)
            for event in col.history:
                if event.rv > since:
                    watcher.offer(event)
        col.watchers.add(watcher)
        return watcher

    def unwatch(self, key: Key, watcher: Watcher) -> None:
        self.collection(key).watchers.discard(watcher)

    def compact(self) -> None:
        """Forget every event so far, as etcd compaction does: a watch or list resumed from an older
        resourceVersion then gets 410 Expired, and the client must list again."""
        for col in self._collections.values():
            col.history.clear()
            col.compacted_rv = self.rv
            col.truncated = True

    def all_watchers(self) -> list[tuple[Key, Watcher]]:
        return [(k, w) for k, col in self._collections.items() for w in col.watchers]


def _ordered(state: Mapping[Ident, Stored]) -> Ordered:
    """The objects by namespace ("" for none) then name: a paged list's order."""
    return sorted((((ns or ""), name), stored) for (ns, name), stored in state.items())
