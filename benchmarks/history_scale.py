"""History at scale: ingest RUNS runs x CASES cases, then `perfgate history show` of one case and
`perfgate history detect` over every case, through the real CLI; times and store size. SQLite always,
PostgreSQL with --postgres (a throwaway server, as in the tests). Prints figures, asserts nothing.

    python benchmarks/history_scale.py [--runs 10000] [--cases 50] [--postgres]

Runs are synthetic results (tests/fixtures/history.py: two processes x five samples per case, two
profile metrics), each case's series with CV-3% noise and a +5% step in every tenth case. Ingest goes
through perfgate.history.ingest (RunResult -> record, the path `history add` takes after reading
results.json) and one transaction per run, as `history add` does; building the RunResult objects is
timed apart. Targets: show < 1 s, detect < 30 s, on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfgate.history import ingest  # noqa: E402
from perfgate.history.reading import run_count  # noqa: E402
from perfgate.history.store import open_store, resolve_url  # noqa: E402
from perfgate.history.writing import add_run  # noqa: E402
from tests.fixtures.history import make_run, spec  # noqa: E402
from tests.fixtures.postgres import postgres_server  # noqa: E402


def cli(args: list[str], cwd: Path, url: str) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, "PERFGATE_HISTORY_URL": url}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "perfgate", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"perfgate {' '.join(args)} failed: {out.stderr}")
    return time.perf_counter() - t0, out


def bench(label: str, url: str, runs: int, cases: int, work: Path, size_of) -> None:  # noqa: ANN001
    rng = np.random.default_rng(0)
    base = 0.001 * (1 + np.arange(cases))
    steps = np.where(np.arange(cases) % 10 == 0, runs // 2, runs + 1)
    t_build = t_add = 0.0
    with open_store(resolve_url({}, work, url), create=True) as store:
        for i in range(runs):
            t0 = time.perf_counter()
            times = base * rng.normal(1.0, 0.03, cases) * np.where(i >= steps, 1.05, 1.0)
            record = ingest.record_from_run(make_run(i, times.tolist()), None, ROOT)
            t1 = time.perf_counter()
            add_run(store, record)
            t_add += time.perf_counter() - t1
            t_build += t1 - t0
            if (i + 1) % 2000 == 0:
                print(f"  {label}: {i + 1} runs ingested, {t_add:.0f} s in the store so far", flush=True)
        assert run_count(store) == runs
    print(f"{label}: ingest {runs} runs x {cases} cases: {t_add:.1f} s in the store "
          f"({t_add / runs * 1000:.1f} ms per run), {t_build:.1f} s building the records; "
          f"store size {size_of() / 1e6:.0f} MB")
    key = spec(7).key
    wall, out = cli(["history", "show", "-w", key, "--format", "csv"], work, url)
    rows = out.stdout.count("\n") - 1
    wall2, _ = cli(["history", "show", "-w", key, "--format", "csv"], work, url)
    print(f"{label}: history show of one case ({rows} points): {wall:.2f} s, again {wall2:.2f} s "
          "(whole CLI process; target < 1 s)")
    wall, out = cli(["history", "detect"], work, url)
    print(f"{label}: history detect over {cases} cases x {runs} runs: {wall:.1f} s (whole CLI process; "
          f"target < 30 s): {out.stdout.strip().splitlines()[-1]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--cases", type=int, default=50)
    ap.add_argument("--postgres", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        db = work / "history.db"

        def sqlite_size() -> int:
            return sum(p.stat().st_size for p in work.glob("history.db*"))

        bench("sqlite", f"sqlite:///{db}", args.runs, args.cases, work, sqlite_size)
        if args.postgres:
            with postgres_server() as url:
                import sqlalchemy as sa

                def pg_size() -> int:
                    engine = sa.create_engine(resolve_url({}, work, url))
                    with contextlib.closing(engine.connect()) as conn:
                        return int(conn.exec_driver_sql("SELECT pg_database_size('perfgate')").scalar_one())

                bench("postgresql", url, args.runs, args.cases, work, pg_size)


if __name__ == "__main__":
    main()
