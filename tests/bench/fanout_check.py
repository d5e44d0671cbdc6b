"""What the fan-out decision costs a small job (README, "Benchmarks"): two `serve`s on one
PostgreSQL table too small to fan out, one with fan-out on (`FETCHER_FANOUT_RANGES=4`,
the default: its planner reads the table's key span before the job runs) and one with it
off (`1`), small jobs alternating between them; prints the median latency per job (POST
to `completed`, polled every 2 ms) of each and their ratio. Not part of the test suite.

    cargo build --profile bench -p fetcher --bin fetcher
    python3 tests/bench/fanout_check.py --fetcher target/release/fetcher --rows 2000 --pairs 60

Creates a scratch database on 127.0.0.1:5432 (user postgres, trust auth) and drops it.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

KEY = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
DB = f"fanout_check_{os.getpid()}"


def psql(sql, db="postgres"):
    subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", db, "-q", "-c", sql], check=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def call(port, method, path, body=None):
    r = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json", "X-Product-Name": "bench"},
    )
    try:
        with urllib.request.urlopen(r) as f:
            return f.status, json.loads(f.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def start(fetcher, ranges, data_dir, db=None, env=None, args=()):
    """A `serve` on a free port with fan-out into `ranges` (`env`, `args`: more settings),
    its connection `ledger` to database `db` (this script's by default) registered."""
    port = free_port()
    env = dict(os.environ, FETCHER_MASTER_KEY=KEY, FETCHER_LOG="warn", FETCHER_FANOUT_RANGES=str(ranges),
               **(env or {}))
    proc = subprocess.Popen(
        [fetcher, "serve", "--data-dir", data_dir, "--listen", f"127.0.0.1:{port}", "--drain-delay", "0",
         *args],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    for _ in range(400):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            break
        except OSError:
            time.sleep(0.05)
    status, v = call(port, "POST", "/v1/management/connections", {
        "configName": "ledger", "type": "POSTGRESQL", "host": "127.0.0.1", "port": 5432,
        "databaseName": db or DB, "userName": "postgres", "password": "unused"})
    assert status == 201, v
    return proc, port


def job(port, run):
    started = time.perf_counter()
    status, v = call(port, "POST", "/v1/fetcher", {
        "dataRequest": {"mappedFields": {"ledger": {"small": ["id", "t"]}}},
        "metadata": {"source": "bench", "run": run}})
    assert status == 202, v
    while True:
        _, v = call(port, "GET", f"/v1/fetcher/{v.get('jobId') or v['id']}")
        if v["status"] in ("completed", "failed"):
            break
        time.sleep(0.002)
    assert v["status"] == "completed", v
    return time.perf_counter() - started


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fetcher", default="target/release/fetcher")
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--pairs", type=int, default=60)
    a = ap.parse_args()
    psql(f"CREATE DATABASE {DB}")
    scratch = tempfile.mkdtemp()
    serves = []
    try:
        psql(f"CREATE TABLE small (id bigint PRIMARY KEY, t text); "
             f"INSERT INTO small SELECT g, 'x' || g FROM generate_series(1, {a.rows}) g; ANALYZE small", DB)
        on = start(a.fetcher, 4, os.path.join(scratch, "on"))
        off = start(a.fetcher, 1, os.path.join(scratch, "off"))
        serves = [on[0], off[0]]
        for i in range(5):  # warm both
            job(on[1], -1 - i)
            job(off[1], -100 - i)
        with_check, without = [], []
        for i in range(a.pairs):
            if i % 2:
                with_check.append(job(on[1], i))
                without.append(job(off[1], i))
            else:
                without.append(job(off[1], i))
                with_check.append(job(on[1], i))
        m_on, m_off = statistics.median(with_check), statistics.median(without)
        print(f"{a.pairs} pairs of {a.rows}-row jobs: fan-out on {m_on * 1000:.1f} ms, "
              f"off {m_off * 1000:.1f} ms (median per job), ratio {m_on / m_off:.3f}, "
              f"difference {(m_on - m_off) * 1000:.1f} ms")
    finally:
        for p in serves:
            p.kill()
        shutil.rmtree(scratch, ignore_errors=True)
        psql(f"DROP DATABASE IF EXISTS {DB}")


if __name__ == "__main__":
    main()
