//! `--log`: a sync read from the PostgreSQL write-ahead log (docs/api.md, "Changes from
//! the log") against a full read of the same table, on the private `wal_level=logical`
//! cluster of `scripts/pg-logical` (started here; port `PG_LOGICAL_PORT`, 55432).
//!
//! The table is the `bench` table of the other modes. The sync's first job reads the
//! snapshot; then per pair a scattered 1% of the rows is updated (`id % 100 = pair`) and,
//! alternating which goes first, a full job of the table and the sync's next log job
//! run (a `CHECKPOINT` after each update, see below): the log job must deliver exactly
//! the updated rows. Reported: the wall ratio
//! log/full (the goal: at most 0.02), and rows per CPU-second of each, counting
//! `serve`'s CPU and then `serve`'s plus the database cluster's (the decoding is the
//! server's work: `pg_logical_slot_peek_binary_changes` decodes in the backend).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::json;

use super::{COLUMNS, Serve, http, median, pg_bench_table, run_body, start_serve};

fn port() -> u16 {
    std::env::var("PG_LOGICAL_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(55432)
}

fn script(action: &str) -> String {
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/pg-logical"
    ))
    .arg(action)
    .env("PG_LOGICAL_PORT", port().to_string())
    .output()
    .expect("scripts/pg-logical");
    assert!(
        out.status.success(),
        "scripts/pg-logical {action}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `sql` in `db` on the private cluster; the output (unaligned, tuples only).
fn psql(db: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args([
            "-X",
            "-qAt",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-p",
        ])
        .arg(port().to_string())
        .args(["-d", db, "-c", sql])
        .stderr(Stdio::inherit())
        .output()
        .expect("psql");
    assert!(out.status.success(), "psql failed: {sql}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// CPU seconds of the database cluster so far: the postmaster and its live children,
/// and what its exited children (a job's backend ends with its connection) left in the
/// postmaster's `cutime`/`cstime`.
fn cluster_cpu_seconds(postmaster: u32) -> f64 {
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let fields = |pid: u32| -> Option<Vec<String>> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let after = &stat[stat.rfind(')')? + 2..];
        Some(after.split_whitespace().map(str::to_owned).collect())
    };
    let Some(pm) = fields(postmaster) else {
        return 0.0;
    };
    let num = |f: &[String], i: usize| f[i].parse::<f64>().unwrap_or(0.0);
    // After the command: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
    let mut ticks = num(&pm, 11) + num(&pm, 12) + num(&pm, 13) + num(&pm, 14);
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(f) = fields(pid)
            && f[1] == postmaster.to_string()
        {
            ticks += num(&f, 11) + num(&f, 12);
        }
    }
    ticks / tick
}

struct Measured {
    wall: f64,
    serve_cpu: f64,
    db_cpu: f64,
    rows: u64,
}

fn measure(serve: &Serve, data_dir: &Path, postmaster: u32, body: &serde_json::Value) -> Measured {
    let db0 = cluster_cpu_seconds(postmaster);
    let run = run_body(serve, data_dir, body);
    Measured {
        wall: run.wall.as_secs_f64(),
        serve_cpu: run.cpu,
        db_cpu: cluster_cpu_seconds(postmaster) - db0,
        rows: run.rows,
    }
}

pub fn run(fetcher: &Path, rows: u64, pairs: usize) {
    assert!(
        rows >= 100 && pairs < 100,
        "--rows 100 or more, --pairs below 100"
    );
    script("start");
    let data = std::env::temp_dir().join(format!("fetcher-pg-logical-{}", port()));
    let postmaster: u32 = std::fs::read_to_string(data.join("data/postmaster.pid"))
        .expect("the cluster's postmaster.pid")
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .expect("a pid");
    let db = format!("bench_log_{}", std::process::id());
    let load = Instant::now();
    psql("postgres", &format!("CREATE DATABASE {db}"));
    psql(&db, &pg_bench_table(rows));
    psql(&db, "VACUUM ANALYZE bench");
    println!("loaded {rows} rows in {:.1?}", load.elapsed());

    let scratch = std::env::temp_dir().join(&db);
    let data_dir = scratch.join("data");
    let serve = start_serve(fetcher, &data_dir, 1, &[]);
    let (status, v) = http(
        serve.port,
        "POST",
        "/v1/management/connections",
        Some(
            &json!({"configName": "bench", "type": "POSTGRESQL", "host": "127.0.0.1",
            "port": port(), "databaseName": db, "userName": "postgres", "password": "unused"}),
        ),
    );
    assert_eq!(status, 201, "{v}");
    let full = |run: usize| {
        json!({
            "dataRequest": {"mappedFields": {"bench": {"bench": COLUMNS}}},
            "metadata": {"source": "bench", "run": run},
        })
    };
    let log = |run: usize| {
        json!({
            "dataRequest": {"mappedFields": {"bench": {"bench": COLUMNS}}},
            "metadata": {"source": "bench", "run": run},
            "incremental": {"bench": {"bench": {"mode": "log"}}},
            "syncId": "bench-log"
        })
    };
    // Warm the full read, then the sync's first job: the snapshot.
    measure(&serve, &data_dir, postmaster, &full(0));
    let snapshot = measure(&serve, &data_dir, postmaster, &log(0));
    assert_eq!(snapshot.rows, rows, "the snapshot reads the whole table");
    println!(
        "snapshot (the sync's first job): {:.2} s wall, serve {:.2} CPU-s, database {:.2} CPU-s",
        snapshot.wall, snapshot.serve_cpu, snapshot.db_cpu
    );
    let changed = rows / 100;
    let (mut wall_ratio, mut serve_rate, mut total_rate) = (Vec::new(), Vec::new(), Vec::new());
    let (mut log_runs, mut full_runs) = (Vec::new(), Vec::new());
    for pair in 0..pairs {
        let t = Instant::now();
        psql(
            &db,
            &format!(
                "UPDATE bench SET i = i + 1, t = 'changed-{pair}-' || id WHERE id % 100 = {pair}"
            ),
        );
        // A server logs its running transactions at least every 15 s while it is written
        // to, and the slot's restart point moves only past such a record: at this bench's
        // pace (jobs seconds apart) none would come between two jobs, and each job would
        // decode the log back to the slot's creation. A checkpoint logs one, as the
        // server's own would between jobs minutes apart.
        psql(&db, "CHECKPOINT");
        let update = t.elapsed();
        let (mut l, mut f) = (None, None);
        for turn in 0..2 {
            if (turn + pair) % 2 == 0 {
                l = Some(measure(&serve, &data_dir, postmaster, &log(1 + pair)));
            } else {
                f = Some(measure(&serve, &data_dir, postmaster, &full(1000 + pair)));
            }
        }
        let (l, f) = (l.unwrap(), f.unwrap());
        assert_eq!(
            l.rows, changed,
            "the log job delivers exactly the updated rows"
        );
        assert_eq!(f.rows, rows, "the full read");
        let per_cpu = |m: &Measured, cpu: f64| m.rows as f64 / cpu.max(1e-3);
        wall_ratio.push(l.wall / f.wall);
        serve_rate.push(per_cpu(&l, l.serve_cpu) / per_cpu(&f, f.serve_cpu));
        total_rate.push(per_cpu(&l, l.serve_cpu + l.db_cpu) / per_cpu(&f, f.serve_cpu + f.db_cpu));
        println!(
            "pair {}: update of {changed} rows {update:.1?} | log job {:.3} s (serve {:.2} CPU-s, db {:.2}) | full job {:.2} s (serve {:.2} CPU-s, db {:.2}) | wall log/full {:.4}",
            pair + 1,
            l.wall,
            l.serve_cpu,
            l.db_cpu,
            f.wall,
            f.serve_cpu,
            f.db_cpu,
            l.wall / f.wall
        );
        log_runs.push(l);
        full_runs.push(f);
    }
    let med = |v: &[Measured], f: fn(&Measured) -> f64| median(v.iter().map(f).collect());
    println!(
        "median over {pairs} pairs: wall log/full {:.4} (log {:.3} s, full {:.2} s); rows per CPU-second, log/full: serve {:.2}, serve + database {:.2} (log: {:.0} rows/CPU-s in serve, {:.0} with the database; full: {:.0} and {:.0})",
        median(wall_ratio),
        med(&log_runs, |m| m.wall),
        med(&full_runs, |m| m.wall),
        median(serve_rate),
        median(total_rate),
        med(&log_runs, |m| m.rows as f64 / m.serve_cpu.max(1e-3)),
        med(&log_runs, |m| m.rows as f64
            / (m.serve_cpu + m.db_cpu).max(1e-3)),
        med(&full_runs, |m| m.rows as f64 / m.serve_cpu.max(1e-3)),
        med(&full_runs, |m| m.rows as f64
            / (m.serve_cpu + m.db_cpu).max(1e-3)),
    );
    drop(serve);
    let _ = std::fs::remove_dir_all(&scratch);
    psql(
        "postgres",
        &format!(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '{db}'"
        ),
    );
    psql("postgres", &format!("DROP DATABASE {db} WITH (FORCE)"));
}
