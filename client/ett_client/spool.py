"""The durable spool: events are written here before they are sent, removed once answered.

Layout: a directory of segment files ``ett-<host>-<pid>-<nonce>-<n>.jsonl``, one JSON event
per line, appended by the spool thread and read in order by the sender. A segment is
unlinked when every line in it has been answered by the service (accepted, duplicate or
rejected); the sender then starts a new one, so an idle recorder leaves no files behind.

Ownership uses ``flock``: a recorder holds an exclusive lock on each segment it has open,
so another live recorder never sends them; the kernel drops the locks when a process dies,
and a new recorder on the same directory adopts (locks, sends, unlinks) what is left.
Segments are created under a dot-name and renamed once locked, so a scanning recorder can
never adopt (and delete) a file its creator has not locked yet.

Progress within a segment: once the service has answered the start of a segment, the
offset answered so far is written to ``<segment>.off`` (one ``pwrite``, as durable as the
appends). A recorder adopting the segment starts there, so nothing acknowledged is sent
twice; the offset file goes with its segment.

Durability (the fsync policy, also in docs/client.md): every append is an ``os.write``, so
once an event is in the spool it survives the process being killed (it is in the kernel's
page cache). ``sync()`` fsyncs the segments written since the last sync and the directory;
the spool thread calls it at most once per ``fsync_interval_s`` and on every flush/close, so
a power loss or kernel crash loses at most that interval of events.

:class:`MemorySpool` has the same interface and no files (``spool_dir=":memory:"``).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ett_client.errors import warn_once

SEGMENT_MAX_BYTES = 8 << 20
_PREFIX = "ett-"
_SUFFIX = ".jsonl"
_OFFSET = ".off"


@dataclass(eq=False)
class Segment:
    path: str
    fd: int
    own: bool
    size: int = 0
    read_off: int = 0
    closed: bool = False  # no more appends
    dirty: bool = False  # written since the last fsync


@dataclass(frozen=True)
class Batch:
    """Consecutive lines of one segment, sent as one request."""

    segment: Segment
    end: int
    lines: list[bytes]

    @property
    def own(self) -> bool:
        return self.segment.own


class Spool(Protocol):
    def append(self, lines: list[bytes]) -> int: ...
    def sync(self) -> None: ...
    def next_batch(self, max_events: int, max_bytes: int) -> Batch | None: ...
    def resolve(self, batch: Batch) -> None: ...
    def adopt_leftovers(self) -> int: ...
    def leftover_bytes(self) -> int: ...
    def pending_bytes(self) -> int: ...
    def forget_after_fork(self) -> None: ...
    def close(self) -> None: ...


def _split_lines(data: bytes, max_events: int) -> tuple[list[bytes], int]:
    """Complete lines of ``data`` (at most ``max_events``) and the bytes they span."""
    lines: list[bytes] = []
    pos = 0
    while len(lines) < max_events:
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        line = data[pos:nl]
        if line.strip():
            lines.append(line)
        pos = nl + 1
    return lines, pos


class FileSpool:
    def __init__(self, directory: str, max_bytes: int, segment_max_bytes: int = SEGMENT_MAX_BYTES):
        self.directory = directory
        Path(directory).mkdir(parents=True, exist_ok=True)
        self._dir_fd = os.open(directory, os.O_RDONLY)
        self._max_bytes = max_bytes
        self._segment_max_bytes = segment_max_bytes
        # Reentrant: the SIGTERM hook flushes on the main thread, which the signal may have
        # interrupted inside a flush already holding this lock (leftover_bytes).
        self._lock = threading.RLock()
        self._segments: list[Segment] = []
        self._current: Segment | None = None
        self._dir_dirty = False
        self._reset_identity()

    def _reset_identity(self) -> None:
        host = socket.gethostname().split(".")[0] or "host"
        self._stem = f"{_PREFIX}{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}-"
        self._seq = itertools.count()

    # -- writing (spool thread) ---------------------------------------------------------

    def _new_segment(self) -> Segment:
        name = f"{self._stem}{next(self._seq):06d}{_SUFFIX}"
        tmp = os.path.join(self.directory, "." + name)
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_APPEND, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        path = os.path.join(self.directory, name)
        os.rename(tmp, path)
        self._dir_dirty = True
        seg = Segment(path=path, fd=fd, own=True)
        self._segments.append(seg)
        return seg

    def append(self, lines: list[bytes]) -> int:
        """Append whole lines; returns how many were kept (the rest exceed ``max_bytes``)."""
        with self._lock:
            room = self._max_bytes - self._pending_bytes_locked()
            kept = 0
            size = 0
            for line in lines:
                if size + len(line) > room:
                    break
                size += len(line)
                kept += 1
            if not kept:
                return 0
            data = b"".join(lines[:kept])
            seg = self._current
            if seg is None or seg.closed or seg.size >= self._segment_max_bytes:
                if seg is not None:
                    seg.closed = True
                seg = self._current = self._new_segment()
            view = memoryview(data)
            while view:
                written = os.write(seg.fd, view)
                view = view[written:]
            seg.size += len(data)
            seg.dirty = True
            return kept

    def sync(self) -> None:
        with self._lock:
            dirty = [s for s in self._segments if s.dirty and s.fd >= 0]
            for seg in dirty:
                seg.dirty = False
            dir_dirty, self._dir_dirty = self._dir_dirty, False
        # fsync outside the lock: it can take milliseconds and the sender must not wait.
        for seg in dirty:
            # The sender may have unlinked and closed it meanwhile: nothing left to protect.
            with contextlib.suppress(OSError):
                os.fsync(seg.fd)
        if dir_dirty:
            os.fsync(self._dir_fd)

    # -- reading (sender thread) --------------------------------------------------------

    def next_batch(self, max_events: int, max_bytes: int) -> Batch | None:
        with self._lock:
            for seg in list(self._segments):
                if seg.read_off >= seg.size:
                    if seg.closed:
                        self._drop_locked(seg)
                    continue
                data = os.pread(seg.fd, min(seg.size - seg.read_off, max_bytes), seg.read_off)
                lines, used = _split_lines(data, max_events)
                if used == 0:
                    if len(data) < seg.size - seg.read_off:  # one line longer than max_bytes
                        data = os.pread(seg.fd, seg.size - seg.read_off, seg.read_off)
                        lines, used = _split_lines(data, 1)
                    if used == 0:
                        # A torn last line: its writer was killed mid-write. Nothing to send.
                        warn_once("spool:torn", "ett_client: skipping a partial line in %s",
                                  seg.path)
                        seg.read_off = seg.size
                        if seg.closed:
                            self._drop_locked(seg)
                        continue
                if not lines:  # only blank lines
                    seg.read_off += used
                    continue
                return Batch(segment=seg, end=seg.read_off + used, lines=lines)
            return None

    def resolve(self, batch: Batch) -> None:
        """The service answered every line of ``batch``: forget them, delete the file if done."""
        with self._lock:
            seg = batch.segment
            seg.read_off = max(seg.read_off, batch.end)
            if seg.read_off >= seg.size:
                if seg is self._current:
                    self._current = None
                seg.closed = True
                self._drop_locked(seg)
            elif seg.fd >= 0:
                _write_offset(seg.path, seg.read_off)

    def _drop_locked(self, seg: Segment) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(seg.path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(seg.path + _OFFSET)
        if seg.fd >= 0:
            os.close(seg.fd)  # releases the flock
            seg.fd = -1
        if seg in self._segments:
            self._segments.remove(seg)

    # -- leftovers ------------------------------------------------------------------------

    def adopt_leftovers(self) -> int:
        """Lock and queue other (dead) recorders' segments, oldest first; returns bytes adopted."""
        with self._lock:
            known = {s.path for s in self._segments}
        candidates = []
        for entry in os.scandir(self.directory):
            if (entry.name.startswith(_PREFIX) and entry.name.endswith(_SUFFIX)
                    and entry.path not in known and not entry.name.startswith(self._stem)):
                try:
                    candidates.append((entry.stat().st_mtime, entry.path))
                except FileNotFoundError:
                    continue
        adopted: list[Segment] = []
        total = 0
        for _, path in sorted(candidates):
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                # The owner may have deleted it between our scan and our lock.
                if os.stat(path).st_ino != os.fstat(fd).st_ino:
                    raise FileNotFoundError(path)
            except OSError:
                os.close(fd)
                continue
            size = os.fstat(fd).st_size
            done = min(_read_offset(path), size)
            adopted.append(Segment(path=path, fd=fd, own=False, size=size, read_off=done,
                                   closed=True))
            total += size - done
        if adopted:
            with self._lock:
                # Leftovers are older than anything we wrote: send them first.
                self._segments[:0] = adopted
        return total

    # -- bookkeeping ----------------------------------------------------------------------

    def leftover_bytes(self) -> int:
        """Bytes of adopted segments not yet answered (what ``flush`` also waits for)."""
        with self._lock:
            return sum(s.size - s.read_off for s in self._segments if not s.own)

    def _pending_bytes_locked(self) -> int:
        return sum(s.size - s.read_off for s in self._segments)

    def pending_bytes(self) -> int:
        with self._lock:
            return self._pending_bytes_locked()

    def forget_after_fork(self) -> None:
        """In a forked child: drop the parent's segments without touching them.

        Closing our copies of the descriptors does not release the parent's locks (flock
        belongs to the open file description, which the parent still holds).
        """
        self._lock = threading.RLock()
        for seg in self._segments:
            if seg.fd >= 0:
                os.close(seg.fd)
        self._segments = []
        self._current = None
        self._reset_identity()

    def close(self) -> None:
        """Release our files. Unsent segments stay on disk for the next recorder."""
        with self._lock:
            for seg in self._segments:
                if seg.fd >= 0:
                    if seg.dirty:
                        os.fsync(seg.fd)
                    os.close(seg.fd)
                    seg.fd = -1
            self._segments = []
            self._current = None
        os.close(self._dir_fd)


def _write_offset(path: str, offset: int) -> None:
    # Fixed width, so a rewrite in place never leaves a longer old number's tail behind.
    fd = os.open(path + _OFFSET, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        os.pwrite(fd, b"%020d\n" % offset, 0)
    finally:
        os.close(fd)


def _read_offset(path: str) -> int:
    try:
        with open(path + _OFFSET, "rb") as fh:
            return max(0, int(fh.read(21) or b"0"))
    except (OSError, ValueError):
        return 0  # none, or torn: sending again from the start only makes duplicates


class MemorySpool:
    """The same interface, in memory only: an outage is survived, a killed process is not."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._lines: list[bytes] = []
        self._bytes = 0
        self._segment = Segment(path=":memory:", fd=-1, own=True)

    def append(self, lines: list[bytes]) -> int:
        with self._lock:
            kept = 0
            for line in lines:
                if self._bytes + len(line) > self._max_bytes:
                    break
                self._lines.append(line.rstrip(b"\n"))
                self._bytes += len(line)
                kept += 1
            return kept

    def sync(self) -> None:
        return None

    def next_batch(self, max_events: int, max_bytes: int) -> Batch | None:
        with self._lock:
            lines: list[bytes] = []
            size = 0
            for line in self._lines:
                if len(lines) >= max_events or (lines and size + len(line) > max_bytes):
                    break
                lines.append(line)
                size += len(line) + 1
            return Batch(segment=self._segment, end=len(lines), lines=lines) if lines else None

    def resolve(self, batch: Batch) -> None:
        with self._lock:
            self._bytes -= sum(len(line) + 1 for line in self._lines[: batch.end])
            del self._lines[: batch.end]

    def adopt_leftovers(self) -> int:
        return 0

    def leftover_bytes(self) -> int:
        return 0

    def pending_bytes(self) -> int:
        with self._lock:
            return self._bytes

    def forget_after_fork(self) -> None:
        self._lock = threading.Lock()
        self._lines = []
        self._bytes = 0

    def close(self) -> None:
        return None
