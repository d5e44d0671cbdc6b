//! What one client may hold of `serve` and how it starts and stops as a process: the
//! connection cap and its share per peer, the file limit, `--listen`, Ctrl-C (#52 item 5,
//! #53 items 8 and 10). The other settings are in `serve_settings.rs`.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// #52 item 5: one client holding idle sockets, more than the cap, cannot hold the
/// listener: past its share (per peer) or the cap, the oldest silent socket is closed
/// for the next connection, and `/health` answers within 1 s.
#[test]
fn idle_sockets_of_one_client_cannot_hold_the_listener() {
    use std::io::Read;
    for (cap, per_peer) in [("20", "10"), ("20", "1000")] {
        let dir = tempfile::tempdir().unwrap();
        let server = Server::start(
            &dir.path().join("data"),
            &[
                "--max-http-connections",
                cap,
                "--max-connections-per-peer",
                per_peer,
                "--header-timeout",
                "60",
            ],
        );
        let mut idle: Vec<std::net::TcpStream> = (0..30)
            .map(|_| std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        for round in 0..3 {
            let started = std::time::Instant::now();
            let (status, body) = server.request("GET", "/health", None, &[]);
            assert_eq!(status, 200, "{body}");
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "cap {cap}, per peer {per_peer}, round {round}: /health waited {:?}",
                started.elapsed()
            );
        }
        // The silent sockets that made room were closed (the read ends at once).
        let mut closed = 0;
        for s in idle.iter_mut() {
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            closed += match s.read(&mut [0u8; 16]) {
                Ok(0) => 1,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => 1,
                _ => 0,
            };
        }
        assert!(
            closed >= 10,
            "cap {cap}, per peer {per_peer}: {closed} closed"
        );
    }
}

/// #52 item 5: the connection cap fits the file limit: the soft limit is raised to the
/// hard one and the cap lowered (logged) to leave the stores and datasources room; a
/// limit too low for anything stops the start with what to do.
#[test]
fn the_connection_cap_fits_the_file_limit() {
    let dir = tempfile::tempdir().unwrap();
    let run = |limit: u32, data: &str| {
        let port = free_port();
        std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ulimit -n {limit} && exec \"$0\" serve --data-dir \"$1\" --listen 127.0.0.1:{port} --max-http-connections 1024 --drain-delay 0"
            ))
            .arg(env!("CARGO_BIN_EXE_fetcher"))
            .arg(dir.path().join(data))
            .env("FETCHER_MASTER_KEY", KEY)
            .env("FETCHER_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut child = run(256, "a");
    let mut log = String::new();
    let stderr = child.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        log.push_str(&line);
        log.push('\n');
        if line.contains("listener limits") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    // Without the terminal's colours.
    let mut plain = String::new();
    let mut in_escape = false;
    for ch in log.chars() {
        match (in_escape, ch) {
            (false, '\u{1b}') => in_escape = true,
            (true, 'm') => in_escape = false,
            (true, _) => {}
            (false, c) => plain.push(c),
        }
    }
    let log = plain;
    let effective = log
        .lines()
        .find(|l| l.contains("listener limits"))
        .and_then(|l| l.split("max_http_connections").nth(1))
        .and_then(|rest| {
            rest.trim_start_matches(|c: char| !c.is_ascii_digit())
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse::<u32>().ok())
        });
    let effective = effective.unwrap_or_else(|| panic!("no effective cap logged: {log}"));
    assert!((8..256).contains(&effective), "{effective}: {log}");
    assert!(log.contains("lowered to fit the file limit"), "{log}");
    let out = run(40, "b").wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("file limit (ulimit -n) is 40"), "{err}");
}

/// #53 item 10: Ctrl-C on a laptop stops an idle serve at once (no drain by default), and
/// a second signal cuts a drain short.
#[test]
fn ctrl_c_stops_at_once_and_a_second_one_cuts_a_drain_short() {
    let interrupt = |server: &Server| {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(server.child.id() as i32, libc::SIGINT) };
    };
    let wait_exit = |server: &mut Server, within: Duration| {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = server.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "serve still running after {within:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut idle = Server::start_with(&data, &[], None, &[]);
    let started = Instant::now();
    interrupt(&idle);
    let status = wait_exit(&mut idle, Duration::from_secs(5));
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let mut draining = Server::start_with(&data, &["--drain-delay", "30"], None, &[]);
    interrupt(&draining);
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    interrupt(&draining);
    let status = wait_exit(&mut draining, Duration::from_secs(5));
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// #53 item 8: `--listen` takes a bare port (on 127.0.0.1) and says what it wants
/// otherwise; `result open` names the data directory it looked in when there is none.
#[test]
fn listen_takes_a_bare_port_and_result_open_names_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_fetcher"))
        .args(["serve", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--listen", &port.to_string()])
        .env("FETCHER_MASTER_KEY", KEY)
        .env("FETCHER_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let healthy = loop {
        if let Ok((200, _)) = http(port, "GET", "/health", None, &[]) {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        healthy,
        "serve --listen {port} did not answer on 127.0.0.1:{port}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_fetcher"))
        .args(["serve", "--data-dir"])
        .arg(dir.path().join("other"))
        .args(["--listen", "localhost:8080"])
        .env("FETCHER_MASTER_KEY", KEY)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("HOST:PORT"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_fetcher"))
        .args([
            "result",
            "open",
            "0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b",
            "--data-dir",
        ])
        .arg(dir.path().join("nowhere"))
        .env("FETCHER_MASTER_KEY", KEY)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("no serve data directory at")
            && err.contains("nowhere"),
        "{err}"
    );
}
