"""The two ends of the stored history: `ett import` brings old events in (the backfill
path, through the API with an admin token), `ett prune` drops the raw events and job
detail of jobs that ended long ago."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import httpx
import orjson

# A batch: at most this many events and bytes (the service takes 5,000 and 5 MiB).
BATCH_EVENTS = 1000
BATCH_BYTES = 1024 * 1024
RETRIES = 8
# Answers worth retrying: the same batch again is safe, its event ids make it a duplicate.
_TRANSIENT = {408, 429, 500, 502, 503, 504}


class ImportRefused(Exception):
    """The service refuses this token (401, 403): no batch can succeed."""


@dataclass
class ImportSummary:
    lines: int = 0
    accepted: int = 0
    duplicates: int = 0
    moved: int = 0
    # (line number, why), for unreadable lines and the events the service rejected.
    rejected: list[tuple[int, str]] = field(default_factory=list)

    def __str__(self) -> str:
        return (f"{self.lines} lines: {self.accepted} accepted, {self.duplicates} duplicates,"
                f" {self.moved} moved to their team's job, {len(self.rejected)} rejected")


def _readable(lines: IO[bytes], summary: ImportSummary, err: IO[str]
              ) -> Iterator[tuple[int, bytes]]:
    """(line number, the line's JSON object) of each line that holds one; the others are
    reported by number and skipped."""
    for number, raw in enumerate(lines, 1):
        summary.lines = number
        line = raw.strip()
        if not line:
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            why = f"not valid JSON: {exc}"
        else:
            if isinstance(obj, dict):
                yield number, line
                continue
            why = "must be a JSON object (one v1 event)"
        summary.rejected.append((number, why))
        print(f"line {number}: {why}", file=err)


def _batches(readable: Iterator[tuple[int, bytes]], max_events: int, max_bytes: int
             ) -> Iterator[list[tuple[int, bytes]]]:
    batch: list[tuple[int, bytes]] = []
    size = 0
    for item in readable:
        if batch and (len(batch) >= max_events or size + len(item[1]) > max_bytes):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += len(item[1]) + 1
    if batch:
        yield batch


def _post(client: httpx.Client, batch: list[tuple[int, bytes]], retries: int,
          err: IO[str]) -> httpx.Response:
    body = b'{"events":[' + b",".join(line for _, line in batch) + b"]}"
    for attempt in range(retries + 1):
        try:
            response = client.post("/v1/events", content=body,
                                   headers={"Content-Type": "application/json"})
        except httpx.TransportError as exc:
            why, wait = f"{type(exc).__name__}: {exc}", 0.0
        else:
            if response.status_code not in _TRANSIENT:
                return response
            why = f"HTTP {response.status_code}"
            wait = float(response.headers.get("Retry-After", 0) or 0)
        if attempt == retries:
            raise ImportRefused(f"lines {batch[0][0]}-{batch[-1][0]}: {why}, {retries}"
                                " retries")
        wait = max(wait, min(30.0, 0.5 * 2**attempt))
        print(f"lines {batch[0][0]}-{batch[-1][0]}: {why}; retrying in {wait:g} s", file=err)
        time.sleep(wait)
    raise AssertionError("unreachable")


def _send(client: httpx.Client, batch: list[tuple[int, bytes]], summary: ImportSummary,
          retries: int, err: IO[str]) -> None:
    response = _post(client, batch, retries, err)
    if response.status_code in (401, 403):
        raise ImportRefused(f"HTTP {response.status_code}: {_detail(response)}")
    if response.status_code in (400, 413, 422) and len(batch) > 1:
        # The batch as a whole is refused: halves, down to the line at fault.
        half = len(batch) // 2
        _send(client, batch[:half], summary, retries, err)
        _send(client, batch[half:], summary, retries, err)
        return
    if response.status_code != 202:
        why = f"HTTP {response.status_code}: {_detail(response)}"
        summary.rejected.append((batch[0][0], why))
        print(f"line {batch[0][0]}: {why}", file=err)
        return
    answer = response.json()
    summary.accepted += answer["accepted"]
    summary.duplicates += answer["duplicates"]
    summary.moved += len(answer.get("moved") or ())
    for item in answer["rejected"]:
        number = batch[item["index"]][0]
        summary.rejected.append((number, item["error"]))
        print(f"line {number}: {item['error']}", file=err)


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json()["detail"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200]


def import_events(lines: IO[bytes], client: httpx.Client, *, batch_events: int = BATCH_EVENTS,
                  batch_bytes: int = BATCH_BYTES, retries: int = RETRIES,
                  err: IO[str] = sys.stderr, progress: Any = None) -> ImportSummary:
    """Post one v1 event per line through `client` (its base URL and token set), in
    batches; report each bad line by number and keep the others. `progress`: a tqdm bar
    advanced by the lines sent."""
    summary = ImportSummary()
    for batch in _batches(_readable(lines, summary, err), batch_events, batch_bytes):
        _send(client, batch, summary, retries, err)
        if progress is not None:
            progress.update(len(batch))
            progress.set_postfix_str(f"{summary.accepted} accepted,"
                                     f" {len(summary.rejected)} rejected", refresh=False)
    return summary


def _import(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    url = args.url or os.environ.get("ETT_URL")
    token = args.token or os.environ.get("ETT_TOKEN") or args.settings.admin_token_value()
    if not url or not token:
        print("ett import: give the service's URL (--url or ETT_URL) and an admin token"
              " (--token, ETT_TOKEN or ETT_ADMIN_TOKEN)", file=sys.stderr)
        return 2
    path = Path(args.file)
    if not path.is_file():
        print(f"ett import: {path}: no such file", file=sys.stderr)
        return 2
    with (path.open("rb") as lines,
          httpx.Client(base_url=url, timeout=args.timeout,
                       headers={"Authorization": f"Bearer {token}"}) as client,
          tqdm(desc=f"import {path.name}", unit=" lines", file=sys.stderr,
               disable=args.quiet) as bar):
        try:
            summary = import_events(lines, client, batch_events=args.batch,
                                    retries=args.retries, progress=bar)
        except ImportRefused as exc:
            print(f"ett import: {exc}; an admin token is needed for events older than"
                  " ETT_INGEST_MAX_AGE", file=sys.stderr)
            return 2
    print(f"imported {path}: {summary}")
    return 1 if summary.rejected else 0


def _prune(args: argparse.Namespace) -> int:
    from service.store.engine import open_database
    from service.store.retention import prune

    if args.older_than_days < args.settings.max_event_age_days:
        print(f"ett prune: --older-than-days must be at least ETT_MAX_EVENT_AGE_DAYS "
              f"({args.settings.max_event_age_days:g}): a late event for a pruned job would "
              "otherwise be accepted and double-count its rollups")
        return 2
    with open_database(args.settings, pool_size=1) as db:
        jobs, events = prune(db.engine, timedelta(days=args.older_than_days), datetime.now(UTC))
    print(f"pruned {jobs} jobs and {events} events older than {args.older_than_days:g} days")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "import", help="backfill: post the v1 events of an NDJSON file with an admin token",
        description="Post one v1 event per line of FILE to POST /v1/events, in batches."
                    " Bad lines are reported by number and skipped; the others are stored."
                    " A failed batch is retried: its event ids make a re-sent event a"
                    " duplicate, so an interrupted import can simply be run again."
                    " Exit 0 when every line was stored (or was a duplicate), 1 when some"
                    " were rejected, 2 when the service refused the token.")
    p.add_argument("file", metavar="FILE.ndjson")
    p.add_argument("--url", default=None, help="the service (default ETT_URL)")
    p.add_argument("--token", default=None,
                   help="an admin token (default ETT_TOKEN, then ETT_ADMIN_TOKEN)")
    p.add_argument("--batch", type=int, default=BATCH_EVENTS,
                   help=f"events per request (default {BATCH_EVENTS}, at most 5000)")
    p.add_argument("--retries", type=int, default=RETRIES,
                   help=f"retries of a batch the service could not take (default {RETRIES})")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_import)

    p = subparsers.add_parser("prune", help="drop raw events and job detail past retention")
    p.add_argument("--older-than-days", type=float, required=True,
                   help="jobs that ended longer ago than this (>= ETT_MAX_EVENT_AGE_DAYS)")
    p.set_defaults(func=_prune)
