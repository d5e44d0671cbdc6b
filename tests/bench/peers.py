"""Fetcher through `serve` against other extractors of the same PostgreSQL table, in
alternating rounds of one run (README, "Benchmarks"): `psql \\copy` (text), ConnectorX
(into Arrow, in memory, nothing written) and sling (to JSON lines). Prints each round and
the median of the per-round ratios ours/theirs. Not part of the test suite.

    python3 -m venv /tmp/peers
    /tmp/peers/bin/pip install connectorx==0.4.6 pyarrow sling-linux-amd64==1.4.11
    cargo build --profile bench -p fetcher --bin fetcher
    /tmp/peers/bin/python tests/bench/peers.py --fetcher target/release/fetcher --rows 1000000 --rounds 5

Creates the table of `bench-serve` (8 columns) in a scratch database and drops it after.
"""

import argparse
import glob
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

KEY = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
COLUMNS = ["id", "u", "t", "n", "i", "b", "ts", "nt"]
SELECT = f"SELECT {', '.join(COLUMNS)} FROM bench ORDER BY id"


def psql(db, sql):
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-U",
                    "postgres", "-d", db, "-c", sql], check=True, stdout=subprocess.DEVNULL)


def http(port, method, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/json",
                                          "X-Product-Name": "bench"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def timed(f):
    start = time.perf_counter()
    f()
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fetcher", required=True)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import connectorx as cx

    sling = glob.glob(os.path.join(os.path.dirname(sys.executable), "..", "lib", "python3*",
                                   "site-packages", "sling_linux_amd64", "bin", "sling-*"))
    db = f"bench_peers_{os.getpid()}"
    psql("postgres", f"CREATE DATABASE {db}")
    scratch = tempfile.mkdtemp(prefix="fetcher-peers-")
    serve = None
    try:
        psql(db, "CREATE TABLE bench (id bigint PRIMARY KEY, u uuid NOT NULL, t text NOT NULL, "
                 "n numeric(18,4) NOT NULL, i int NOT NULL, b bool NOT NULL, ts timestamptz NOT NULL, "
                 "nt text); INSERT INTO bench SELECT g, md5(g::text)::uuid, 'name-' || g, "
                 "(g * 1.2345)::numeric(18,4), (g % 100000)::int, g % 2 = 0, "
                 "'2024-01-01T00:00:00Z'::timestamptz + g * interval '1 second', "
                 "CASE WHEN g % 3 = 0 THEN NULL ELSE 'note ' || g END "
                 f"FROM generate_series(1, {args.rows}) g")
        psql(db, "VACUUM ANALYZE bench")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        serve = subprocess.Popen(
            [args.fetcher, "serve", "--workers", "1", "--drain-delay", "0",
             "--max-result-bytes", "0", "--listen", f"127.0.0.1:{port}",
             "--data-dir", os.path.join(scratch, "data")],
            env={**os.environ, "FETCHER_MASTER_KEY": KEY, "FETCHER_LOG": "warn"},
            stdout=subprocess.DEVNULL)
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        http(port, "POST", "/v1/management/connections",
             {"configName": "bench", "type": "POSTGRESQL", "host": "127.0.0.1", "port": 5432,
              "databaseName": db, "userName": "postgres", "password": "x"})
        uri = f"postgresql://postgres@127.0.0.1:5432/{db}"
        run = [0]

        def ours():
            run[0] += 1
            job = http(port, "POST", "/v1/fetcher", {
                "dataRequest": {"mappedFields": {"bench": {"bench": COLUMNS}}},
                "metadata": {"source": "bench", "run": run[0]}})
            while True:
                status = http(port, "GET", f"/v1/fetcher/{job['jobId']}")["status"]
                if status == "completed":
                    return
                assert status in ("pending", "processing"), status
                time.sleep(0.01)

        peers = {
            "psql": lambda: psql(db, f"\\copy ({SELECT}) TO '{scratch}/copy.txt'"),
            "connectorx": lambda: cx.read_sql(uri, SELECT, return_type="arrow"),
        }
        if sling:
            peers["sling"] = lambda: subprocess.run(
                [sling[0], "run", "--src-conn", "PG", "--src-stream", SELECT,
                 "--tgt-object", f"file://{scratch}/sling.jsonl"],
                env={**os.environ, "PG": uri + "?sslmode=disable"}, check=True,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Warm every one (page cache, first connection).
        ours()
        for f in peers.values():
            f()
        ratios = {name: [] for name in peers}
        walls = {name: [] for name in ["fetcher", *peers]}
        for r in range(args.rounds):
            # Rotate who goes first, so drift in the machine's load hits all.
            order = ["fetcher", *peers]
            order = order[r % len(order):] + order[:r % len(order)]
            got = {name: timed(ours if name == "fetcher" else peers[name]) for name in order}
            for name in peers:
                ratios[name].append(got["fetcher"] / got[name])
            for name, t in got.items():
                walls[name].append(t)
            print(f"round {r + 1}: " + "  ".join(f"{n} {got[n]:.2f} s" for n in walls))
        for name in peers:
            print(f"median over {args.rounds} rounds: fetcher/{name} wall "
                  f"{statistics.median(ratios[name]):.2f} "
                  f"(fetcher {statistics.median(walls['fetcher']):.2f} s, "
                  f"{name} {statistics.median(walls[name]):.2f} s)")
    finally:
        if serve:
            serve.kill()
            serve.wait()
        shutil.rmtree(scratch, ignore_errors=True)
        psql("postgres", f"DROP DATABASE {db} WITH (FORCE)")


if __name__ == "__main__":
    main()
