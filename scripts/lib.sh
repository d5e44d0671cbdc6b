# Shared helpers for the project's scripts. Sourced, not run.

step() { printf '\n==> %s\n' "$*"; }

ensure_rust_components() {
  command -v cargo >/dev/null || { echo "cargo is required (rustup)" >&2; exit 1; }
  if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    rustup component add rustfmt clippy
  fi
}

# PostgreSQL on 127.0.0.1:5432 with trust auth (the machine's own cluster).
ensure_postgres() {
  if pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then return; fi
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
  for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && return; sleep 1; done
  echo "PostgreSQL did not start" >&2; exit 1
}

# MariaDB on 127.0.0.1:3306, root without a password.
ensure_mariadb() {
  if mariadb-admin -h 127.0.0.1 -P 3306 -uroot ping >/dev/null 2>&1; then return; fi
  echo "starting MariaDB"
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  for _ in $(seq 1 30); do mariadb-admin -h 127.0.0.1 -P 3306 -uroot ping >/dev/null 2>&1 && return; sleep 1; done
  echo "MariaDB did not start" >&2; exit 1
}

# moto server (AWS emulator for the AWS adapters' tests) on 127.0.0.1:${MOTO_PORT:-5555};
# creates the .venv on first use. Exports AWS_ENDPOINT_URL and test credentials unless
# the caller already points the tests elsewhere (e.g. LocalStack).
ensure_moto() {
  if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
    AWS_ENDPOINT_URL="$(./scripts/moto)"
    export AWS_ENDPOINT_URL
  fi
  export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
  export AWS_REGION="${AWS_REGION:-us-east-1}"
  # The end-to-end test drives the Lambda binaries under `cargo lambda watch`.
  [ -x .venv/bin/python ] || python3 -m venv .venv
  [ -x .venv/bin/cargo-lambda ] || .venv/bin/pip install -q cargo-lambda
  echo "AWS endpoint: ${AWS_ENDPOINT_URL}"
}

# A MongoDB wire server (SecantusDB's secantusd-rs, built once into a cache outside the
# checkout) on 127.0.0.1:${MONGO_PORT:-27117}, for the MongoDB connector's tests, which
# read MONGO_PORT too. (Not a FETCHER_* name: the functions under test refuse settings
# they do not declare, and they inherit the test's environment.)
ensure_mongo() {
  ./scripts/mongo start >/dev/null
  export MONGO_PORT="${MONGO_PORT:-27117}"
}

# A private PostgreSQL cluster with wal_level=logical on 127.0.0.1:${PG_LOGICAL_PORT:-55432}
# for the log-read tests (the machine's server on 5432 runs wal_level=replica and is never
# reconfigured); stopped and removed at the end of the run.
ensure_pg_logical() {
  ./scripts/pg-logical start >/dev/null
  export PG_LOGICAL_PORT="${PG_LOGICAL_PORT:-55432}"
}

# Debian's Chromium, headless, for the API page's browser test.
ensure_chromium() {
  command -v chromium >/dev/null && return
  echo "installing chromium (Debian's package)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
}

# pyarrow and DuckDB in the project's .venv: the Parquet tests read results back with
# both (DuckDB as a second, stricter reader).
ensure_pyarrow() {
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -c 'import pyarrow' 2>/dev/null || .venv/bin/pip install -q 'pyarrow==26.0.1'
  .venv/bin/python -c 'import duckdb' 2>/dev/null || .venv/bin/pip install -q 'duckdb==1.4.2'
}

# LocalStack (host mode, no container) on 127.0.0.1:4566 for SQS, S3, KMS, EventBridge,
# Secrets Manager and STS; DynamoDB stays on moto (see scripts/localstack).
ensure_localstack() {
  LOCALSTACK_URL="$(./scripts/localstack start)"
  export LOCALSTACK_URL
}

# The packages whose tests talk to AWS (or an emulator): run by scripts/test-aws.
AWS_TEST_PACKAGES=(-p fetcher-aws -p fetcher-fn-api -p fetcher-fn-extract -p fetcher-e2e)

# Sums cargo's per-binary `test result:` lines of the logs given; prints
# "<passed> <failed> <ignored>".
cargo_test_counts() {
  awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;?/) p += $i; if ($(i+1) ~ /^failed;?/) f += $i; if ($(i+1) ~ /^ignored;?/) g += $i } }
       END { printf "%d %d %d\n", p, f, g }' "$@"
}
