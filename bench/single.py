"""Target 2: single-event posts, open loop: 1000 requests/s for 60 s, p99 <= 25 ms, no errors.

The load generator (bench.loadgen, its own process) schedules request i at t0 + i/rate
whatever the server does, and measures latency from the scheduled instant. The 60 s are cut
into five 12 s windows for the median and spread; the p99 of the whole run is the target.
"""

from __future__ import annotations

from typing import Any

from .common import ADMIN_TOKEN, Postgres, ett_serve, fmt, record, run_json, spread

NAME = "ingest_single"


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * q))] if s else 0.0


def run(pg: Postgres, quick: bool) -> dict[str, Any]:
    url = pg.create_database("bench_single")
    rate, seconds = (200.0, 5.0) if quick else (1000.0, 60.0)
    with ett_serve(url) as srv:
        out = run_json(["bench.loadgen", "open", "--url", srv.url, "--token", ADMIN_TOKEN,
                        "--rate", str(rate), "--seconds", str(seconds)])
    pg.drop_database(url)
    lat, offs = out["latencies_ms"], out["offsets_s"]
    window = seconds / 5
    p50s, p99s, maxs = [], [], []
    for w in range(5):
        part = [x for x, o in zip(lat, offs, strict=True) if w * window <= o < (w + 1) * window]
        p50s.append(_pct(part, 0.5))
        p99s.append(_pct(part, 0.99))
        maxs.append(max(part))
    achieved = out["requests"] / out["wall_s"]
    p99_all = _pct(lat, 0.99)
    figures = {"rate_rps": rate, "seconds": seconds, "requests": out["requests"],
               "achieved_rps": round(achieved, 1), "errors": out["errors"],
               "p50_ms_windows": spread(p50s), "p99_ms_windows": spread(p99s),
               "max_ms_windows": spread(maxs), "p50_ms": round(_pct(lat, 0.5), 3),
               "p99_ms": round(p99_all, 3), "max_ms": round(max(lat), 3)}
    print(f"single-event posts, open loop {rate:.0f}/s for {seconds:.0f} s: achieved"
          f" {achieved:.0f}/s, p50 {figures['p50_ms']:.1f} ms, p99 {p99_all:.1f} ms"
          f" (per 12 s window {fmt(figures['p99_ms_windows'], ' ms')}), max"
          f" {figures['max_ms']:.0f} ms, errors {out['errors']}")
    judged = not quick
    ok = achieved >= 0.98 * rate and p99_all <= 25 and out["errors"] == 0
    return record(NAME, quick, figures, [
        (f"{rate:.0f} req/s for {seconds:.0f} s, p99 <= 25 ms, no errors",
         f"achieved {achieved:.0f}/s, p99 {p99_all:.1f} ms (windows"
         f" {fmt(figures['p99_ms_windows'], ' ms')}), p50 {figures['p50_ms']:.1f} ms,"
         f" errors {out['errors']}", ok if judged else None),
    ])
