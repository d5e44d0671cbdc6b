"""Small jobs behind fanned-out jobs (#39, README "Benchmarks"): one `serve --workers 4`
with fan-out into 4 ranges; two big jobs are submitted, then a small job every 0.5 s
while they run. Prints each small job's latency (POST to `completed`, polled every 5 ms),
median and max, and the big jobs' time, for two settings side by side in one run: ranges
and continuations allowed every worker (`--max-follow-up-jobs 4`, as before the share)
and the default share (`--workers` − 2). Not part of the test suite.

    cargo build --profile quick -p fetcher --bin fetcher
    python3 tests/bench/small_behind_big.py --fetcher target/quick/fetcher --rows 1000000

Creates a scratch database on 127.0.0.1:5432 (user postgres, trust auth) and drops it.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from fanout_check import call, psql, start  # noqa: E402

DB = f"small_behind_big_{os.getpid()}"


def submit(port, table, run):
    status, v = call(port, "POST", "/v1/fetcher", {
        "dataRequest": {"mappedFields": {"ledger": {table: ["id", "t"]}}},
        "metadata": {"source": "bench", "run": run}})
    assert status == 202, v
    return v["jobId"]


def wait(port, job_id, every=0.005):
    while True:
        _, v = call(port, "GET", f"/v1/fetcher/{job_id}")
        if v["status"] in ("completed", "failed", "canceled"):
            assert v["status"] == "completed", v
            return
        time.sleep(every)


def scenario(fetcher, rows, label, extra, scratch):
    proc, port = start(fetcher, 4, os.path.join(scratch, label), db=DB,
                       env={"FETCHER_FANOUT_RANGE_ROWS": str(rows // 4), "FETCHER_MAX_RESULT_BYTES": "0"},
                       args=["--workers", "4", *extra])
    try:
        wait(port, submit(port, "small", "warm"))
        t0 = time.perf_counter()
        big = [submit(port, t, label) for t in ("big1", "big2")]
        done = {}

        def watch_big(i, job_id):
            wait(port, job_id, 0.05)
            done[i] = time.perf_counter() - t0

        watchers = [threading.Thread(target=watch_big, args=(i, j)) for i, j in enumerate(big)]
        for w in watchers:
            w.start()
        latencies, threads, n = [], [], 0

        def small(n):
            s = time.perf_counter()
            wait(port, submit(port, "small", f"{label}-{n}"))
            latencies.append(time.perf_counter() - s)

        while len(done) < 2 or n < 4:
            t = threading.Thread(target=small, args=(n,))
            t.start()
            threads.append(t)
            n += 1
            time.sleep(0.5)
        for t in threads + watchers:
            t.join()
        print(f"{label:<40} small jobs {len(latencies):>3}: median {statistics.median(latencies):6.2f} s, "
              f"max {max(latencies):6.2f} s; big jobs done at {done[0]:.1f} s and {done[1]:.1f} s", flush=True)
    finally:
        proc.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fetcher", default="target/quick/fetcher")
    ap.add_argument("--rows", type=int, default=1_000_000)
    a = ap.parse_args()
    psql(f"CREATE DATABASE {DB}")
    scratch = tempfile.mkdtemp()
    try:
        for t in ("big1", "big2"):
            psql(f"CREATE TABLE {t} (id bigint PRIMARY KEY, t text); INSERT INTO {t} SELECT g, "
                 f"md5(g::text) || md5((g+1)::text) FROM generate_series(1, {a.rows}) g; ANALYZE {t}", DB)
        psql("CREATE TABLE small (id bigint PRIMARY KEY, t text); "
             "INSERT INTO small SELECT g, 'x' || g FROM generate_series(1, 100) g; ANALYZE small", DB)
        scenario(a.fetcher, a.rows, "ranges may take every worker (before)", ["--max-follow-up-jobs", "4"], scratch)
        scenario(a.fetcher, a.rows, "default share (workers - 2)", [], scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        psql(f"DROP DATABASE IF EXISTS {DB}")


if __name__ == "__main__":
    main()
