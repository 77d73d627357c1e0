"""The background half of a recorder: ring buffer -> spool thread -> spool -> sender thread.

The caller's thread only appends a record to a bounded ring (a ``deque``; when full the
oldest record is dropped and counted). Two daemon threads do everything else:

* the **spool thread** wakes every ``spool_interval_s``, encodes what is in the ring and
  appends it to the spool (so a killed process loses at most that interval), and fsyncs at
  most once per ``fsync_interval_s``;
* the **sender thread** wakes every ``send_interval_s`` (or as soon as a batch is full, or on
  a flush), reads batches of up to ``max_batch`` events from the spool in order and posts
  them, retrying with backoff until the service answers; answered lines leave the spool.

They are two threads so that a slow or blackholed service (a request can take up to
``request_timeout_s``) never delays getting events onto disk.

``flush(timeout)`` is a fence: it returns True once everything recorded before it has been
answered by the service, or False at its deadline, whatever the network does.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass

from ett_client import transport
from ett_client.config import Settings
from ett_client.dead_letter import DeadLetters
from ett_client.errors import logger, warn_once
from ett_client.events import Encoder, Record
from ett_client.spool import Batch, Spool


@dataclass
class Counters:
    """Written by one thread each (no lost updates); see ``Recorder.stats`` for meanings."""

    enqueued: int = 0
    spooled: int = 0
    sent: int = 0
    acknowledged: int = 0
    duplicates: int = 0
    rejected: int = 0
    dead_lettered: int = 0
    dropped: int = 0
    retries: int = 0


class Pipeline:
    def __init__(self, settings: Settings, spool: Spool) -> None:
        self.settings = settings
        self.spool = spool
        self.encoder = Encoder(settings)
        # Beside the spool's segments; an in-memory spool has no file (rejections are counted).
        self.dead_letters = DeadLetters(getattr(spool, "directory", None))
        self.ring: deque[Record] = deque(maxlen=settings.max_queue)
        self._rng = random.Random()
        self._init_state()

    def _init_state(self) -> None:
        """Everything a forked child must not share with its parent."""
        self.caller = Counters()  # enqueued, dropped (ring full), rejected (invalid calls)
        self.spooler = Counters()  # spooled, dropped (spool full)
        # sent, acknowledged, duplicates, rejected, dead_lettered, retries
        self.sender = Counters()
        self._cv = threading.Condition(threading.RLock())  # RLock: signal handlers re-enter
        self._spool_wake = threading.Event()
        self._send_wake = threading.Event()
        self._stop = threading.Event()
        self._flush_gen = 0
        self._drained_gen = 0
        self._drained_target = 0  # own events spooled when the last flush drained the ring
        self._settled = 0  # own spooled events the service has answered
        self._failing = False
        self._threads: list[threading.Thread] = []
        self.started = False

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        with self._cv:
            if self.started:
                return
            self.started = True
        # Adopted now, not at the sender's first scan: a recorder that records nothing
        # still delivers what a killed process left, and its flush/close wait for it.
        try:
            if self.spool.adopt_leftovers():
                logger.info("ett_client: sending events left in the spool by an earlier process")
        except OSError:
            logger.exception("ett_client: could not adopt leftover spool segments")
        with self._cv:
            self._threads = [
                threading.Thread(target=self._spool_loop, name="ett-client-spool", daemon=True),
                threading.Thread(target=self._send_loop, name="ett-client-send", daemon=True),
            ]
        for thread in self._threads:
            thread.start()

    def after_fork_in_child(self) -> None:
        """The threads did not survive the fork: reset state; ``start`` runs again on use."""
        self.ring.clear()  # the parent spools and sends these
        self.spool.forget_after_fork()
        self._init_state()

    def is_own_thread(self, thread: threading.Thread | None) -> bool:
        return thread is not None and thread in self._threads

    # -- the caller's side ----------------------------------------------------------------

    def note_ring_drop(self) -> None:
        self.caller.dropped += 1
        warn_once("ring-full", "ett_client: the event queue is full (%d); dropping the oldest "
                  "events (counted in stats()['dropped'])", self.settings.max_queue)

    def flush(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + max(0.0, timeout_s)
        if not self.started:
            return not self.ring
        with self._cv:
            self._flush_gen += 1
            gen = self._flush_gen
            self._spool_wake.set()
            while self._drained_gen < gen:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return False
                self._cv.wait(left)
            target = self._drained_target
            self._send_wake.set()
            while self._settled < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        # And what earlier processes left (adopted at start): resolved by the sender, which
        # does not signal per leftover batch, so this polls.
        while self.spool.leftover_bytes() > 0:
            left = deadline - time.monotonic()
            if left <= 0 or self._stop.is_set():
                return False
            self._send_wake.set()
            time.sleep(min(left, 0.02))
        return True

    def stop(self, timeout_s: float) -> bool:
        """Stop both threads; True if they ended in time (then the spool is closed too)."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        self._stop.set()
        self._spool_wake.set()
        self._send_wake.set()
        current = threading.current_thread()
        for thread in self._threads:
            if thread is not current:
                thread.join(max(0.0, deadline - time.monotonic()))
        if all(not t.is_alive() for t in self._threads):
            self.spool.close()
            return True
        # A request to a blackholed service is still in flight; the daemon thread dies
        # with the process and its segments stay on disk for the next recorder.
        return False

    # -- the spool thread -----------------------------------------------------------------

    def _spool_loop(self) -> None:
        last_sync = time.monotonic()
        unsynced = False
        while True:
            self._spool_wake.wait(self.settings.spool_interval_s)
            self._spool_wake.clear()
            stopping = self._stop.is_set()
            with self._cv:
                gen = self._flush_gen
            flushing = gen > self._drained_gen
            try:
                unsynced |= self._drain_ring() > 0
                now = time.monotonic()
                if unsynced and (flushing or stopping
                                 or now - last_sync >= self.settings.fsync_interval_s):
                    self.spool.sync()
                    last_sync, unsynced = now, False
            except Exception:  # keep the thread alive whatever happens (disk full...)
                logger.exception("ett_client: spooling failed; will retry")
            if flushing:
                with self._cv:
                    self._drained_gen = gen
                    self._drained_target = self.spooler.spooled
                    self._cv.notify_all()
                self._send_wake.set()
            if stopping:
                return

    def _drain_ring(self) -> int:
        lines: list[bytes] = []
        ring = self.ring
        encode = self.encoder.line
        while ring:
            try:
                record = ring.popleft()
            except IndexError:
                break
            lines.append(encode(record))
        if not lines:
            return 0
        kept = self.spool.append(lines)
        self.spooler.spooled += kept
        if kept < len(lines):
            self.spooler.dropped += len(lines) - kept
            warn_once("spool-full", "ett_client: the spool is full (%d bytes pending); dropping "
                      "new events", self.spool.pending_bytes())
        if self.spooler.spooled - self._settled >= self.settings.max_batch:
            self._send_wake.set()
        return kept

    # -- the sender thread ----------------------------------------------------------------

    def _send_loop(self) -> None:
        last_scan = -float("inf")
        while not self._stop.is_set():
            try:
                if time.monotonic() - last_scan >= self.settings.rescan_interval_s:
                    last_scan = time.monotonic()
                    if self.spool.adopt_leftovers():
                        logger.info("ett_client: sending events left in the spool by an "
                                    "earlier process")
                while not self._stop.is_set():
                    batch = self.spool.next_batch(self.settings.max_batch,
                                                  self.settings.max_batch_bytes)
                    if batch is None:
                        break
                    self._deliver(batch)
            except Exception:
                logger.exception("ett_client: sending failed; will retry")
                self._stop.wait(1.0)
            self._send_wake.wait(self.settings.send_interval_s)
            self._send_wake.clear()

    def _deliver(self, batch: Batch) -> None:
        """Post one batch until the service answers it (or we are stopped)."""
        body = transport.build_body(batch.lines)
        retry = 0
        while True:
            outcome = transport.post_batch(self.settings.events_url, self.settings.token, body,
                                           self.settings.request_timeout_s)
            self.sender.sent += len(batch.lines)
            if not outcome.retry:
                break
            if self._stop.is_set():
                return
            delay = transport.retry_delay_s(
                retry, outcome.retry_after_s, self.settings.backoff_base_s,
                self.settings.backoff_max_s, self.settings.retry_after_max_s, self._rng)
            level = logging.DEBUG if self._failing else logging.WARNING
            logger.log(level, "ett_client: could not deliver %d events (%s); retrying in %.2fs, "
                       "they are kept in the spool", len(batch.lines), outcome.error, delay)
            self._failing = True
            self.sender.retries += 1
            retry += 1
            if self._stop.wait(delay):
                return
        if self._failing:
            logger.warning("ett_client: the service answers again")
            self._failing = False
        self._account(batch, outcome)
        self.spool.resolve(batch)
        if batch.own:
            with self._cv:
                self._settled += len(batch.lines)
                self._cv.notify_all()

    def _account(self, batch: Batch, outcome: transport.Outcome) -> None:
        n = len(batch.lines)
        if outcome.status is not None and 400 <= outcome.status < 500:
            self.sender.rejected += n
            logger.error("ett_client: the service refused a batch of %d events, which are "
                         "not retried (kept in the dead-letter file): %s", n, outcome.error)
            self.sender.dead_lettered += self.dead_letters.keep(
                list(batch.lines), [outcome.error or f"HTTP {outcome.status}"] * n,
                outcome.status)
            return
        if outcome.accepted < 0:  # 2xx with a body we could not read
            self.sender.acknowledged += n
            return
        self.sender.acknowledged += outcome.accepted
        self.sender.duplicates += outcome.duplicates
        for job in {m.get("job_id") for m in outcome.moved if isinstance(m, dict)}:
            warn_once(f"moved:{job}", "ett_client: another team wrote this job id first; the"
                      " service stores this job's events as %r (read it under that name)", job)
        if outcome.rejected:
            self.sender.rejected += len(outcome.rejected)
            lines, errors = [], []
            for r in outcome.rejected:
                index = r.get("index") if isinstance(r, dict) else None
                if isinstance(index, int) and 0 <= index < n:
                    lines.append(batch.lines[index])
                    errors.append(str(r.get("error")))
            self.sender.dead_lettered += self.dead_letters.keep(lines, errors, outcome.status)

    # -- stats ----------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        total = Counters()
        for part in (self.caller, self.spooler, self.sender):
            for key, value in asdict(part).items():
                setattr(total, key, getattr(total, key) + value)
        out = asdict(total)
        out["pending"] = max(0, total.spooled - self._settled) + len(self.ring)
        return out
