"""What every benchmark shares: statistics, result records, a PostgreSQL, an `ett serve`,
and the timing of reads against it (API calls, console pages signed in as a browser)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

REPO = Path(__file__).resolve().parent.parent
# ETT_BENCH_RESULTS_DIR: write records elsewhere (the smoke test keeps the repo clean).
RESULTS = Path(os.environ.get("ETT_BENCH_RESULTS_DIR") or REPO / "bench" / "results")
DOC = REPO / "docs" / "performance.md"
ADMIN_TOKEN = "bench-admin-token"


def spread(values: Sequence[float], digits: int = 3) -> dict[str, float]:
    """Median, min and max of the runs (the figures every table shows)."""
    return {"median": round(statistics.median(values), digits),
            "min": round(min(values), digits), "max": round(max(values), digits),
            "runs": len(values)}


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The `q` quantile of `values` by nearest rank (a latency that was measured, not an
    interpolation); NaN for none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def fmt(s: dict[str, float], unit: str = "", digits: int = 1) -> str:
    return f"{s['median']:.{digits}f}{unit} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def machine() -> dict[str, object]:
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"python": platform.python_version(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "load_1m_at_start": load,
            "note": "shared 2-core dev machine" if os.cpu_count() == 2 else ""}


def record(name: str, quick: bool, figures: dict[str, Any],
           targets: list[tuple[str, str, bool | None]]) -> dict[str, Any]:
    """Append one record to bench/results/<name>.json; return it.

    `targets` rows are (target, measured, met); met None means "not judged in this mode".
    """
    rec = {"when": datetime.now(UTC).isoformat(timespec="seconds"), "quick": quick,
           "machine": machine(), "figures": figures,
           "targets": [{"target": t, "measured": m, "met": ok} for t, m, ok in targets]}
    path = RESULTS / f"{name}.json"
    history = json.loads(path.read_text()) if path.exists() else []
    history.append(rec)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(history, indent=2) + "\n")
    for t, m, ok in targets:
        verdict = "info" if ok is None else ("MET" if ok else "NOT MET")
        print(f"  [{verdict}] {t}: {m}")
    if not quick:
        update_doc(name, rec)
    return rec


def update_doc(name: str, rec: dict[str, Any]) -> None:
    """Replace the table between this benchmark's markers in docs/performance.md."""
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    m = rec["machine"]
    lines = [begin, "",
             f"Last full run {rec['when']} on {m['cpus']} CPUs, Python {m['python']},"
             f" {m['platform']} (load {m['load_1m_at_start']}).", "",
             "| target | measured (median (min-max)) | met |", "|---|---|---|"]
    for row in rec["targets"]:
        met = "(figure)" if row["met"] is None else ("yes" if row["met"] else "**no**")
        lines.append(f"| {row['target']} | {row['measured']} | {met} |")
    lines += ["", end]
    block = "\n".join(lines)
    doc = DOC.read_text() if DOC.exists() else "# Performance\n"
    if begin in doc and end in doc:
        head, rest = doc.split(begin, 1)
        doc = head + block + rest.split(end, 1)[1]
    else:
        doc = doc.rstrip("\n") + f"\n\n### {name}\n\n{block}\n"
    DOC.write_text(doc)


class Postgres:
    """One embedded PostgreSQL for the whole suite; a fresh database per benchmark."""

    def __init__(self) -> None:
        self.tmp: Path | None = None
        self.server_url: str | None = None
        self._embedded: Any = None

    def start(self) -> None:
        from service.store.engine import EmbeddedPostgres, normalize_url

        url = os.environ.get("ETT_BENCH_DATABASE_URL")
        if url:
            self.server_url = normalize_url(url)
            return
        self.tmp = Path(tempfile.mkdtemp(prefix="ett-bench-pg-"))
        self._embedded = EmbeddedPostgres(self.tmp)
        self.server_url = self._embedded.start()

    def stop(self) -> None:
        if self._embedded is not None:
            self._embedded.stop()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def create_database(self, prefix: str, template: str | None = None) -> str:
        """A new database, migrated; with `template` (a database's URL, with no one
        connected), a copy of that database."""
        from service.store import migrate
        from service.store.engine import make_engine

        assert self.server_url is not None
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        admin = create_engine(make_url(self.server_url).set(database="postgres"),
                              isolation_level="AUTOCOMMIT")
        copied = f' TEMPLATE "{make_url(template).database}"' if template else ""
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"{copied}'))
        admin.dispose()
        url = make_url(self.server_url).set(database=name).render_as_string(hide_password=False)
        engine = make_engine(url, pool_size=2)
        migrate.upgrade(engine)
        engine.dispose()
        return url

    def drop_database(self, url: str) -> None:
        assert self.server_url is not None
        name = make_url(url).database
        admin = create_engine(make_url(self.server_url).set(database="postgres"),
                              isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def libpq_url(url: str) -> str:
    """The SQLAlchemy URL as a plain libpq URL (for psycopg.connect)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def writer_token(url: str, team: str, patterns: tuple[str, ...]) -> str:
    """A new writer token of `team` for the model name patterns, straight into the database."""
    from service.access import tokens

    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            _info, secret = tokens.create_token(conn, "writer", team, patterns)
    finally:
        engine.dispose()
    return secret


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Serve:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid


@contextmanager
def ett_serve(database_url: str, *, aggregator: bool = False,
              env: dict[str, str] | None = None, port: int | None = None) -> Iterator[Serve]:
    """A real `ett serve` subprocess (what production runs), stopped on exit; on `port`
    (a restart on the same address), else a free one."""
    port = port or free_port()
    log = Path(tempfile.mkstemp(prefix="ett-bench-serve-", suffix=".log")[1])
    args = [sys.executable, "-m", "service.cli", "serve", "--port", str(port)]
    if not aggregator:
        args.append("--no-aggregator")
    full_env = {**os.environ, "ETT_DATABASE_URL": database_url, "ETT_ADMIN_TOKEN": ADMIN_TOKEN,
                "ETT_LOG_LEVEL": "warning", **(env or {})}
    with log.open("ab") as fh:
        proc = subprocess.Popen(args, cwd=REPO, env=full_env, stdout=fh, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"ett serve exited: {log.read_text()[-3000:]}")
            try:
                if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"ett serve not ready: {log.read_text()[-3000:]}")
            time.sleep(0.1)
        yield Serve(base, proc, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_json(args: list[str], env: dict[str, str] | None = None,
             timeout_s: float | None = None) -> dict[str, Any]:
    """Run a helper process (`python -m bench.x ...`) and parse its result: the file named
    by `BENCH_RESULT_FILE` if the helper wrote one (large results: a loaded machine's pipe
    once gave only the first 64-128 KiB of a line), else its last stdout line."""
    fd, name = tempfile.mkstemp(prefix="ett-bench-result-", suffix=".json")
    os.close(fd)
    result = Path(name)
    try:
        out = subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True,
                             text=True, timeout=timeout_s,
                             env={**os.environ, **(env or {}), "BENCH_RESULT_FILE": name})
        if out.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {out.stderr[-3000:]}")
        written = result.read_bytes()
        if written:
            return json.loads(written)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        result.unlink(missing_ok=True)


# --- timing reads --------------------------------------------------------------------------

def time_calls(fn: Callable[[], Any], runs: int) -> list[float]:
    """Milliseconds of each of `runs` calls of `fn`, after one warm-up call."""
    fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def time_get(client: httpx.Client, path: str, runs: int,
             params: dict[str, Any] | None = None) -> tuple[list[float], int]:
    """Milliseconds of each of `runs` GETs (after a warm-up that must succeed), and the
    size of the answer in bytes."""
    client.get(path, params=params).raise_for_status()
    out, size = [], 0
    for _ in range(runs):
        t0 = time.perf_counter()
        r = client.get(path, params=params)
        out.append((time.perf_counter() - t0) * 1000)
        r.raise_for_status()
        size = len(r.content)
    return out, size


def wait_for_metrics_snapshot(client: httpx.Client, timeout_s: float) -> None:
    """Until /metrics shows the aggregator's first snapshot: a sample line, not only the
    HELP text the collector describes before it exists."""
    deadline = time.monotonic() + timeout_s
    while "\nett_fleet_ett_ratio_7d " not in client.get("/metrics").text:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no metrics snapshot after {timeout_s:.0f} s")
        time.sleep(0.5)


def console_pages(model: str, team: str, job_id: str) -> dict[str, str]:
    """Every console page, by label: the fleet, a team of models, the team that owns the
    SLOs but no model, a model, a job, checkpoint advice and impact."""
    return {"fleet 7d": "/ui/", "fleet 30d": "/ui/?window=30d",
            "team (models)": f"/ui/teams/{team}", "team (owner, SLOs)": "/ui/teams/scheduler",
            "model": f"/ui/models/{model}", "job": f"/ui/jobs/{job_id}",
            "checkpoint advice 30d": "/ui/checkpoints",
            "impact (two labels, 30d)": "/ui/impact",
            "impact (two periods)": "/ui/impact?mode=periods"}


@contextmanager
def signed_in_browser(base_url: str, timeout_s: float) -> Iterator[httpx.Client]:
    """A client signed in to the console with the admin token, as a browser is (cookie)."""
    with httpx.Client(base_url=base_url, timeout=timeout_s) as browser:
        signed = browser.post("/ui/login", data={"token": ADMIN_TOKEN})
        if signed.status_code != 303 or "ett_session" not in browser.cookies:
            raise RuntimeError(f"sign-in failed: {signed.status_code} {signed.text[:300]}")
        yield browser


def time_page(browser: httpx.Client, path: str, runs: int) -> tuple[list[float], int]:
    """`time_get` for a console page: the warm-up also proves the page renders (not the
    sign-in form, not an error)."""
    first = browser.get(path)
    if first.status_code != 200 or "/ui/login" in str(first.url):
        raise RuntimeError(f"{path}: {first.status_code} {first.text[:300]}")
    ms, _size = time_get(browser, path, runs)
    return ms, len(first.content)


def most_attempts(url: str) -> str:
    """The job with the most attempts: the timeline with the most lanes and marks."""
    from service.store.engine import make_engine

    engine = make_engine(url, pool_size=1)
    with engine.connect() as conn:
        job_id = conn.execute(text("SELECT job_id FROM attempts GROUP BY job_id"
                                   " ORDER BY count(*) DESC, job_id LIMIT 1")).scalar_one()
    engine.dispose()
    return job_id
