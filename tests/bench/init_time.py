#!/usr/bin/env python3
"""Lambda init time of a function binary: from spawning the process to its first
`GET /2018-06-01/runtime/invocation/next` on a minimal Runtime API emulator (the end of
Lambda's INIT phase). The function's environment comes from `--env-file` (KEY=VALUE
lines, e.g. the one the e2e test writes); everything talks to 127.0.0.1 only.

    python3 tests/bench/init_time.py --runs 5 --env-file /tmp/fetcher-e2e-*/watch.env \
        /work/target-aws/release/api /work/target-aws/release/extract
"""
import argparse, http.server, os, statistics, subprocess, threading, time

class Handler(http.server.BaseHTTPRequestHandler):
    first_next = None
    def do_GET(self):
        if self.path.endswith("/invocation/next") and Handler.first_next is None:
            Handler.first_next = time.perf_counter()
        # Never hand out an event: hold the request until the test ends.
        time.sleep(5)
    def log_message(self, *a):
        pass

def measure(binary, env):
    Handler.first_next = None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    env = dict(env, AWS_LAMBDA_RUNTIME_API=f"127.0.0.1:{srv.server_address[1]}",
               AWS_LAMBDA_FUNCTION_NAME=os.path.basename(binary),
               AWS_LAMBDA_FUNCTION_MEMORY_SIZE="512", AWS_LAMBDA_FUNCTION_VERSION="1",
               AWS_LAMBDA_LOG_STREAM_NAME="bench", AWS_LAMBDA_LOG_GROUP_NAME="bench")
    t0 = time.perf_counter()
    p = subprocess.Popen([binary], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = t0 + 10
    while Handler.first_next is None and time.perf_counter() < deadline and p.poll() is None:
        time.sleep(0.0005)
    took = (Handler.first_next - t0) * 1000 if Handler.first_next else None
    p.kill(); p.wait(); srv.shutdown()
    return took

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--env-file", required=True)
    ap.add_argument("binaries", nargs="+")
    a = ap.parse_args()
    env = dict(os.environ)
    for line in open(a.env_file):
        if "=" in line:
            k, v = line.rstrip("\n").split("=", 1)
            env[k] = v
    for b in a.binaries:
        runs = [measure(b, env) for _ in range(a.runs)]
        ok = [r for r in runs if r is not None]
        print(f"{os.path.basename(b)}: init ms median={statistics.median(ok):.1f} min={min(ok):.1f} max={max(ok):.1f} runs={len(ok)}/{len(runs)}" if ok else f"{b}: never reached /next")

if __name__ == "__main__":
    main()
