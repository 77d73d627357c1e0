"""Refresh the README's console screenshots (docs/images/) from a live demo.

    .venv/bin/python scripts/screenshots.py [--out docs/images] [--width 1280]

Starts `ett serve --demo` on a fresh embedded database in a temporary folder (the fleet
`make run` shows, with its paired benchmark and annotated roll-out), posts docs/model.md's
worked example (`ett demo --scenario worked-example`), waits for the aggregator, signs in
with Debian's chromium through Playwright (the browser the console tests use; no browser
is downloaded) and saves each page the README shows. Needs the test extras (Playwright)
and `chromium` (scripts/install-system-deps.sh).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
# README image -> (console path, what to capture: the whole page or the top of it)
SHOTS = {
    "console-fleet.png": ("/ui/", "page"),
    "console-job.png": ("/ui/jobs/worked-example", "top"),
    "console-impact.png": ("/ui/impact?model=paired_*", "page"),
    "console-checkpoints.png": ("/ui/checkpoints", "top"),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, check: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return
        except httpx.HTTPError:
            pass
        time.sleep(2)
    raise SystemExit(f"screenshots: gave up waiting for {what} after {timeout_s:.0f} s")


def _showcase_posted(base: str, headers: dict[str, str]) -> bool:
    since = time.strftime("%Y-%m-%dT00:00:00Z", time.gmtime(time.time() - 60 * 86400))
    r = httpx.get(f"{base}/v1/annotations", headers=headers, timeout=30,
                  params={"start": since, "tag": "rollout"})
    return r.status_code == 200 and len(r.json()["annotations"]) >= 5


def capture(base: str, token: str, out: Path, width: int, chromium: str) -> list[Path]:
    from playwright.sync_api import sync_playwright

    saved = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(base_url=base, viewport={"width": width, "height": 900})
        page.goto("/ui/login")
        page.fill("input[name=token]", token)
        page.click("form.login button[type=submit]")
        page.wait_for_url("**/ui/**")
        for name, (path, what) in SHOTS.items():
            page.goto(path)
            page.wait_for_load_state("networkidle")
            target = out / name
            page.screenshot(path=str(target), full_page=what == "page")
            saved.append(target)
        browser.close()
    return saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images")
    parser.add_argument("--width", type=int, default=1280)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        print("screenshots: chromium is not installed (scripts/install-system-deps.sh)",
              file=sys.stderr)
        return 2
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="ett-shots-") as data:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("ETT_")},
               "ETT_DATA_DIR": data, "ETT_LOG_LEVEL": "warning",
               "ETT_AGGREGATE_INTERVAL_S": "10"}
        ett = [sys.executable, "-m", "service.cli"]
        server = subprocess.Popen([*ett, "serve", "--demo", "--port", str(port)], cwd=REPO,
                                  env=env, stdout=subprocess.DEVNULL, start_new_session=True)
        try:
            _wait("the service", lambda: httpx.get(f"{base}/readyz", timeout=2).is_success, 120)
            token = (Path(data) / "admin-token").read_text().strip()
            headers = {"Authorization": f"Bearer {token}"}
            _wait("the demo's back-fill and showcase", lambda: _showcase_posted(base, headers),
                  900)
            subprocess.run([*ett, "demo", "--scenario", "worked-example", "--url", base],
                           cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
            httpx.post(f"{base}/v1/aggregate", headers=headers, timeout=600).raise_for_status()
            args.out.mkdir(parents=True, exist_ok=True)
            for path in capture(base, token, args.out, args.width, chromium):
                print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
        finally:
            os.killpg(server.pid, signal.SIGINT)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
