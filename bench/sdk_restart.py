"""The SDK's retries after a server restart (issue 30): a fleet of `ett_client.Recorder`s
must not come back in step.

A real `ett serve` (in-flight limit lowered to `IN_FLIGHT`, so that the fleet's return
draws 503 + `Retry-After`), RECORDERS recorders in this process, each its own job, each
sending a heartbeat every `BEAT_S`. After a steady start the server is stopped, kept down
for `DOWN_S` (the recorders still record), and started again on the same port, from when
nothing more is recorded: what is sent then is the backlog coming back. Every POST the
SDK makes is noted (its instant and answer) by wrapping `ett_client.transport.post_batch`,
the one function the SDK sends through. Measured, per variant:

- `jitter` (the SDK as shipped: full jitter, `Retry-After` honoured) and `in_step` (the
  same fleet with the jitter's draw pinned to its maximum, as a client without jitter
  would retry; not in --quick): after the restart, the most POSTs in any 100 ms, against
  the mean over the time the fleet took to deliver everything again;
- the seconds from the restart until every recorder had delivered all it recorded;
- POSTs sent sooner after a 503 than its `Retry-After` asked (must be 0);
- events lost: recorded but never acknowledged (must be 0).

    python -m bench --only sdk_restart
"""

from __future__ import annotations

import logging
import random
import tempfile
import threading
import time
from collections import Counter
from typing import Any

from ett_client import Recorder, transport

from .common import ADMIN_TOKEN, Postgres, ett_serve, free_port, record

NAME = "sdk_restart"
IN_FLIGHT = 16
BEAT_S = 0.5
DOWN_S = 3.0
BUCKET_S = 0.1


class MaxJitter(random.Random):
    """A draw always at the top of its range: the retry schedule of a client without
    jitter (every client that failed at once retries at once)."""

    def uniform(self, a: float, b: float) -> float:
        return b


class Posts:
    """Every POST the SDK sends: (instant, recorder's job, status, Retry-After)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[float, str, int | None, float | None]] = []
        self._send = transport.post_batch

    def __enter__(self) -> Posts:
        def noted(url: str, token: str | None, body: bytes, timeout_s: float
                  ) -> transport.Outcome:
            job = body[body.find(b'"job_id"'):][:64].split(b'"')[3].decode()
            sent = time.monotonic()
            outcome = self._send(url, token, body, timeout_s)
            with self.lock:
                self.seen.append((sent, job, outcome.status, outcome.retry_after_s))
            return outcome

        transport.post_batch = noted  # type: ignore[assignment]
        return self

    def __exit__(self, *_exc: object) -> None:
        transport.post_batch = self._send  # type: ignore[assignment]


def _early_retries(seen: list[tuple[float, str, int | None, float | None]]) -> int:
    """POSTs a recorder sent sooner after a 503 than its Retry-After asked."""
    last: dict[str, tuple[float, int | None, float | None]] = {}
    early = 0
    for sent, job, status, retry_after in sorted(seen):
        before = last.get(job)
        if (before is not None and before[1] == 503 and before[2] is not None
                and sent - before[0] < before[2] - 0.05):  # 50 ms: the instant's own noise
            early += 1
        last[job] = (sent, status, retry_after)
    return early


def _variant(pg: Postgres, recorders: int, jitter: bool, after_s: float, down_s: float
             ) -> dict[str, Any]:
    url = pg.create_database("bench_restart")
    port = free_port()
    env = {"ETT_INGEST_MAX_IN_FLIGHT": str(IN_FLIGHT)}
    recs: list[Recorder] = []
    spools: list[tempfile.TemporaryDirectory[str]] = []
    with Posts() as posts:
        with ett_serve(url, port=port, env=env):
            for i in range(recorders):
                spools.append(tempfile.TemporaryDirectory())
                rec = Recorder(url=f"http://127.0.0.1:{port}", token=ADMIN_TOKEN,
                               job_id=f"restart-{i}", model="bench_restart", gpus=8,
                               spool_dir=spools[-1].name, install_hooks=False,
                               send_interval_s=BEAT_S,
                               backoff_base_s=0.5, backoff_max_s=8.0)
                if not jitter:
                    rec._pipeline._rng = MaxJitter()  # type: ignore[union-attr]
                recs.append(rec)
                rec.allocated()
            _beat(recs, 1.0)
        time.sleep(down_s)
        _beat(recs, 0.0)  # recorded while the server is down
        with ett_serve(url, port=port, env=env):
            restarted = time.monotonic()
            # Nothing more recorded: every POST from here is the backlog coming back.
            time.sleep(after_s)
            for rec in recs:
                rec.close(timeout=30.0)
    stats = [r.stats() for r in recs]
    recorded = sum(st["enqueued"] for st in stats)
    # A duplicate is an event stored by an earlier try whose answer was lost.
    acknowledged = sum(st["acknowledged"] + st["duplicates"] for st in stats)
    for spool in spools:
        spool.cleanup()
    pg.drop_database(url)
    after = [s for s in posts.seen if s[0] >= restarted]
    delivered = max((s[0] for s in after if s[2] == 202), default=restarted) - restarted
    buckets = Counter(int((s[0] - restarted) / BUCKET_S) for s in after
                      if s[0] - restarted <= delivered)
    span = max(1, int(delivered / BUCKET_S) + 1)
    peak = max(buckets.values(), default=0)
    mean = len([s for s in after if s[0] - restarted <= delivered]) / span
    return {"recorders": recorders, "posts_after_restart": len(after),
            "answers_after_restart": dict(Counter(str(s[2]) for s in after)),
            "peak_per_100ms": peak, "mean_per_100ms": round(mean, 1),
            "peak_to_mean": round(peak / mean, 2) if mean else None,
            "delivered_s": round(delivered, 2), "early_retries": _early_retries(posts.seen),
            "recorded": recorded, "acknowledged": acknowledged,
            "lost": recorded - acknowledged}


def _beat(recs: list[Recorder], seconds: float) -> int:
    """One heartbeat per recorder now, then every BEAT_S for `seconds`; how many rounds."""
    rounds = 0
    end = time.monotonic() + seconds
    while True:
        for rec in recs:
            rec.heartbeat(step=rounds)
        rounds += 1
        if time.monotonic() + BEAT_S > end:
            return rounds
        time.sleep(BEAT_S)


def run(pg: Postgres, quick: bool) -> dict[str, Any]:
    recorders = 20 if quick else 300
    after_s = 1.0 if quick else 8.0
    down_s = 1.5 if quick else DOWN_S
    # A recorder whose service is away logs each failure: by design, not for this output.
    logging.getLogger("ett_client").setLevel(logging.CRITICAL)
    # Quick (CI): the SDK as shipped only, to check the case runs.
    variants = {name: _variant(pg, recorders, jitter, after_s, down_s)
                for name, jitter in (("jitter", True), ("in_step", False))
                if jitter or not quick}
    for name, v in variants.items():
        print(f"{name}: {v['posts_after_restart']} POSTs after the restart"
              f" {v['answers_after_restart']}; peak {v['peak_per_100ms']} per 100 ms, mean"
              f" {v['mean_per_100ms']} ({v['peak_to_mean']}x); all delivered"
              f" {v['delivered_s']} s after it; {v['early_retries']} sooner than Retry-After;"
              f" {v['lost']} of {v['recorded']} events lost", flush=True)
    j = variants["jitter"]
    step = variants.get("in_step", j)
    judged = None if quick else True
    early = sum(v["early_retries"] for v in variants.values())
    told = sum(v["answers_after_restart"].get("503", 0) for v in variants.values())
    targets = [
        ("after a restart the SDK's retries are spread: the busiest 100 ms holds under half"
         " the POSTs of the same fleet retrying in step",
         f"peak {j['peak_per_100ms']} vs {step['peak_per_100ms']} in step (mean"
         f" {j['mean_per_100ms']} vs {step['mean_per_100ms']} per 100 ms)",
         judged and j["peak_per_100ms"] * 2 <= step["peak_per_100ms"]),
        ("no retry sooner than a 503's Retry-After (both variants)",
         f"{early} early after {told} answers 503 + Retry-After", judged and early == 0),
        ("every recorded event delivered after the restart",
         f"{j['lost']} lost of {j['recorded']}, all delivered {j['delivered_s']} s after",
         judged and j["lost"] == 0),
    ]
    return record(NAME, quick, {"variants": variants, "in_flight": IN_FLIGHT,
                                "down_s": down_s, "beat_s": BEAT_S}, targets)
