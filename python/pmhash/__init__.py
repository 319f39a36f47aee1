"""pmhash: persistent hash indexes on persistent memory, from Python.

    import pmhash
    with pmhash.open("/dev/shm/a.pool", engine="wophi", create=True) as db:
        db[b"key"] = b"value"        # str keys and values are stored as UTF-8
        assert db["key"] == b"value"
        del db["key"]

Every call releases the GIL while the index works, so threads run in parallel. Errors are
exceptions: a missing key is KeyError, a bad argument ValueError, a damaged pool
CorruptionError, a full pool or table FullError (all subclasses of pmhash.Error but the
first two). docs/python.md has the whole surface.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

try:
    from . import _pmhash
except ImportError as _error:  # the source tree, module not built: pmhash.bench still works
    _pmhash = None
    _native_error = _error

__all__ = ["open", "engines", "bench", "Index", "Error", "AlreadyExistsError", "CorruptionError",
           "FullError", "BusyError", "MAX_KEY_SIZE", "MAX_VALUE_SIZE"]

Key = Union[bytes, bytearray, memoryview, str]

MAX_KEY_SIZE: int = 64 * 1024      # include/pmhash/index.h kMaxKeySize
MAX_VALUE_SIZE: int = 1024 * 1024  # kMaxValueSize


def _native():
    """The native module, or ImportError saying how to build it."""
    if _pmhash is None:
        raise ImportError("pmhash's native module is not built: `pip install ./python` "
                          f"(or make python) ({_native_error})")
    return _pmhash


class Error(Exception):
    """An error of the index that no built-in exception names."""


class AlreadyExistsError(Error, KeyError):
    """Index.insert of a key that is present (nothing changed)."""


class CorruptionError(Error):
    """A pool file that fails validation: never read as an empty index."""


class FullError(Error, MemoryError):
    """The pool, or a table that may not grow, has no room for the write."""


class BusyError(Error):
    """The pool is open in another process."""


_ERRORS = {
    "Error": Error,
    "NotFound": KeyError,
    "AlreadyExists": AlreadyExistsError,
    "InvalidArgument": ValueError,
    "Corruption": CorruptionError,
    "IOError": OSError,
    "ResourceExhausted": FullError,
    "Busy": BusyError,
}
if _pmhash is not None:
    _pmhash.set_exceptions(_ERRORS)

_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)i?B?\s*$", re.I)


def _size_bytes(size: Union[int, str]) -> int:
    """256 * 2**20, or "256M" (K, M, G, T: powers of 1024) as bytes."""
    if isinstance(size, int):
        return size
    m = _SIZE.match(size)
    if not m:
        raise ValueError(f"size {size!r}: expected bytes or a number with K, M, G or T")
    return int(m.group(1)) << (10 * " KMGT".index(m.group(2).upper() or " "))


class Index:
    """An open pool: a mapping of bytes keys to bytes values, persistent.

    Made by pmhash.open. Use it as a context manager, or call close(): a pool that is
    not closed is recovered at its next open (nothing acknowledged is lost either way).
    """

    def __init__(self, native: "_pmhash.Db") -> None:
        self._db = native

    # The mapping protocol.
    def __getitem__(self, key: Key) -> bytes:
        """The value of key; KeyError if absent."""
        value = self._db.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key: Key, value: Key) -> None:
        """Inserts or updates key (durable when it returns)."""
        self._db.put(key, value)

    def __delitem__(self, key: Key) -> None:
        """Deletes key; KeyError if absent."""
        self._db.delete(key)

    def __contains__(self, key: object) -> bool:
        """Whether key is present."""
        return self._db.get(key) is not None

    def __len__(self) -> int:
        """The number of keys (exact when no write is in flight)."""
        return self._db.count()

    def __iter__(self) -> Iterator[bytes]:
        """The keys, page by page through the index's Scan (hash order)."""
        for key, _ in self.items():
            yield key

    def items(self, page_keys: int = 1024) -> Iterator[Tuple[bytes, bytes]]:
        """(key, value) pairs through Scan: every key present from start to end is seen at
        least once, whatever writes happen meanwhile (rarely twice; include/pmhash/index.h)."""
        cursor = 0
        while True:
            cursor, page = self._db.scan_page(cursor, page_keys)
            yield from page
            if cursor == 0:
                return

    def keys(self) -> Iterator[bytes]:
        """The keys (as iter(index))."""
        return iter(self)

    def values(self) -> Iterator[bytes]:
        """The values, in the order of items()."""
        for _, value in self.items():
            yield value

    def scan(self, cursor: int = 0, count: int = 1024) -> Tuple[int, List[Tuple[bytes, bytes]]]:
        """One page of Scan from cursor: (next cursor, [(key, value), ...]); 0 ends it.
        A cursor stays valid across reopens of the same pool."""
        return self._db.scan_page(cursor, count)

    # Explicit operations.
    def get(self, key: Key, default: Optional[bytes] = None) -> Optional[bytes]:
        """The value of key, or default."""
        value = self._db.get(key)
        return default if value is None else value

    def get_many(self, keys: Iterable[Key]) -> List[Optional[bytes]]:
        """Values of many keys in one call (the index's MultiGet, pipelined where the
        engine prefetches); None for an absent key."""
        return self._db.get_many(keys)

    def insert(self, key: Key, value: Key) -> None:
        """Adds key; AlreadyExistsError if present."""
        self._db.insert(key, value)

    def update(self, key: Key, value: Key) -> None:
        """Replaces the value of key; KeyError if absent."""
        self._db.update(key, value)

    def put(self, key: Key, value: Key) -> None:
        """Inserts or updates key (as index[key] = value)."""
        self._db.put(key, value)

    def delete(self, key: Key) -> None:
        """Deletes key; KeyError if absent."""
        self._db.delete(key)

    def stats(self) -> Dict[str, object]:
        """Engine, count, key slots, load factor, PM / pool / DRAM bytes, mapping,
        recovered and recovery_ms, counted (whether the pool was opened with
        counters=True), persistence counters (0 unless counted), engine counters."""
        return self._db.stats()

    def sync(self) -> None:
        """Makes everything durable against power failure on a non-DAX mapping (msync)."""
        self._db.sync()

    def close(self) -> None:
        """Closes the pool cleanly (idempotent)."""
        self._db.close()

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self._db.closed

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open(path: str, engine: str = "", *, create: bool = False, size: Union[int, str] = "256M",
         persist: str = "adr", counters: bool = False,
         **options: object) -> Index:  # noqa: A001 (as builtins.open)
    """Opens the pool at path (recovering it if it was not closed), or creates it with
    create=True (engine required). size: of a created pool (bytes, or "256M"); persist:
    "adr" (flush + fence), "eadr" (fences only) or "none"; counters=True counts flushes,
    fences and PM bytes for stats() (slower: off by default). Other keyword arguments are
    the engine's options (pmhash.engines(), `pmhash engines NAME`), e.g. resize=False.
    An empty path is an anonymous DRAM pool (volatile)."""
    if not isinstance(counters, bool):
        raise TypeError(f"counters must be True or False, not {counters!r}")
    opts = {k: (("on" if v else "off") if isinstance(v, bool) else str(v))
            for k, v in options.items()}
    return Index(_native().Db(path, engine, _size_bytes(size), create, persist, opts,
                              counters))


def engines() -> List[Mapping[str, object]]:
    """Every registered engine: name, summary, paper, crash_consistent."""
    return _native().engines()
