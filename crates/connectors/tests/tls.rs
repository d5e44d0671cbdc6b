//! PostgreSQL TLS modes against a private server this test starts with `initdb` on a spare
//! loopback port, `ssl = on`, certificates generated here (rcgen), scram passwords.
//! Skips loudly (prints why) only when no `initdb` exists.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use fetcher_connectors::{Dialect, HostPolicy, SqlConnectorFactory, StaticCredentials};
use fetcher_engine::ports::Connector;
use fetcher_engine::{Category, ConnectionDescriptor, Context, DatasourceType, TenantContext};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};

fn find_bin(name: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("bin").join(name))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0"))
        .unwrap_or(false)
}

/// Runs a PostgreSQL binary as `postgres` when we are root (initdb refuses root).
fn run(bin: &Path, args: &[&str]) -> std::process::Output {
    let mut c = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    c.args(args).output().expect("run PostgreSQL binary")
}

struct Server {
    pg_ctl: PathBuf,
    data: PathBuf,
    dir: PathBuf,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let d = self.data.to_string_lossy().into_owned();
        let _ = run(&self.pg_ctl, &["-D", &d, "-m", "immediate", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Pki {
    ca: String,
    other_ca: String,
}

fn write(path: &Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn make_ca(cn: &str) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, cn);
    (p.self_signed(&key).unwrap(), key)
}

fn start() -> Option<(Server, Pki)> {
    let Some(initdb) = find_bin("initdb") else {
        eprintln!(
            "SKIPPED tls tests: no initdb under /usr/lib/postgresql/*/bin (install postgresql)"
        );
        return None;
    };
    let pg_ctl = find_bin("pg_ctl").expect("pg_ctl next to initdb");
    let dir = std::env::temp_dir().join(format!("fetcher_tls_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("data");

    let (ca, ca_key) = make_ca("Fetcher Test CA");
    let (other, _) = make_ca("Unknown CA");
    let srv_key = KeyPair::generate().unwrap();
    let mut sp = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    sp.subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    sp.distinguished_name.push(DnType::CommonName, "localhost");
    let srv = sp.signed_by(&srv_key, &ca, &ca_key).unwrap();
    write(&dir.join("server.crt"), &srv.pem(), 0o644);
    write(&dir.join("server.key"), &srv_key.serialize_pem(), 0o600);
    write(&dir.join("pw"), "test-Pa55word\n", 0o600);
    if is_root() {
        let st = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(st.success());
    }
    let d = data.to_string_lossy().into_owned();
    let pw = dir.join("pw").to_string_lossy().into_owned();
    let out = run(
        &initdb,
        &[
            "-D",
            &d,
            "-U",
            "postgres",
            "--pwfile",
            &pw,
            "--auth-host=scram-sha-256",
            "--auth-local=trust",
            "-E",
            "UTF8",
        ],
    );
    assert!(
        out.status.success(),
        "initdb failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let opts = format!(
        "-p {port} -c listen_addresses=127.0.0.1,127.0.0.2 -c ssl=on -c ssl_cert_file={c} -c ssl_key_file={k} -c unix_socket_directories={s}",
        c = dir.join("server.crt").display(),
        k = dir.join("server.key").display(),
        s = dir.display()
    );
    let log = dir.join("log").to_string_lossy().into_owned();
    let out = run(&pg_ctl, &["-D", &d, "-l", &log, "-w", "-o", &opts, "start"]);
    let server = Server {
        pg_ctl,
        data,
        dir: dir.clone(),
        port,
    };
    assert!(
        out.status.success(),
        "pg_ctl start failed: {} {}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(dir.join("log")).unwrap_or_default()
    );
    Some((
        server,
        Pki {
            ca: ca.pem(),
            other_ca: other.pem(),
        },
    ))
}

fn descriptor(host: &str, port: u16, mode: &str, ca: Option<&str>) -> ConnectionDescriptor {
    let mut d = ConnectionDescriptor {
        config_name: "tls".into(),
        datasource_type: DatasourceType::Postgresql,
        host: host.into(),
        port,
        database_name: "postgres".into(),
        username: "postgres".into(),
        ssl_mode: mode.parse().expect("a TLS mode spelling"),
        ..Default::default()
    };
    d.tls.root_cert = ca.map(str::to_owned);
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tls_modes_are_applied() {
    let Some((server, pki)) = start() else { return };
    let port = server.port;
    let ctx = Context::background();
    let tenant = TenantContext::new("t1").unwrap();
    let factory = |pw: &str| {
        SqlConnectorFactory::new(
            Dialect::Postgres,
            Arc::new(StaticCredentials::new().with("tls", pw)),
            HostPolicy::single_tenant(),
        )
    };
    let good = factory("test-Pa55word");

    // (host, mode, CA, expected: None = refused, Some(encrypted))
    let cases: Vec<(&str, &str, Option<&str>, Option<bool>)> = vec![
        ("127.0.0.1", "disable", None, Some(false)),
        ("127.0.0.1", "", None, Some(false)),
        ("127.0.0.1", "allow", None, Some(false)),
        ("127.0.0.1", "prefer", None, Some(true)),
        ("127.0.0.1", "require", None, Some(true)),
        ("127.0.0.1", "require", Some(&pki.ca), Some(true)),
        ("127.0.0.1", "require", Some(&pki.other_ca), None), // libpq: require + CA = verify-ca
        ("127.0.0.1", "verify-ca", Some(&pki.ca), Some(true)),
        ("127.0.0.1", "verify-ca", Some(&pki.other_ca), None),
        ("127.0.0.1", "verify-ca", None, None), // server CA not among the bundled roots
        ("127.0.0.1", "verify-full", Some(&pki.ca), Some(true)),
        ("localhost", "verify-full", Some(&pki.ca), Some(true)),
        // libpq's verify-ca does not check the name, but sqlx 0.8.6's no-hostname verifier
        // only tolerates rustls' `NotValidForName`, and rustls >= 0.23.2x reports
        // `NotValidForNameContext`: verify-ca currently also checks the name (fails closed).
        // Documented gap; flip to Some(true) when sqlx fixes it.
        ("127.0.0.2", "verify-ca", Some(&pki.ca), None),
        ("127.0.0.2", "verify-full", Some(&pki.ca), None), // wrong host name
        ("127.0.0.1", "verify-full", Some(&pki.other_ca), None), // unknown CA
        ("127.0.0.1", "verify-full", None, None),
    ];
    for (host, mode, ca, expect) in cases {
        let d = descriptor(host, port, mode, ca);
        let mut c = good.build_connector(&ctx, &tenant, &d).await.unwrap();
        let tested = c.test_connection(&ctx).await;
        match expect {
            None => {
                let e = tested.unwrap_err();
                assert_eq!(e.category(), Category::Connect, "{host} {mode}");
                assert_eq!(
                    e.message(),
                    "the TLS handshake with the datasource failed",
                    "{host} {mode}"
                );
            }
            Some(encrypted) => {
                tested.unwrap_or_else(|e| {
                    panic!(
                        "{host} {mode} {}: {e} {:?}",
                        ca.is_some(),
                        std::error::Error::source(&e).map(|s| s.to_string())
                    )
                });
                assert_eq!(
                    c.tls_in_use(&ctx).await.unwrap(),
                    encrypted,
                    "{host} {mode}"
                );
            }
        }
        c.close(&ctx).await.unwrap();
    }

    // Wrong password: fixed category and text, no driver text, user or password.
    let wrong = factory("wrong-Secret-99");
    let mut c = wrong
        .build_connector(
            &ctx,
            &tenant,
            &descriptor("127.0.0.1", port, "require", None),
        )
        .await
        .unwrap();
    let e = c.test_connection(&ctx).await.unwrap_err();
    assert_eq!(e.category(), Category::Connect);
    let shown = format!("{e} | {e:?}");
    assert_eq!(
        shown,
        "engine: [connect] the datasource refused the login | engine: [connect] the datasource refused the login"
    );
    let e = c.discover_schema(&ctx).await.unwrap_err();
    assert_eq!(e.category(), Category::Connect);
    c.close(&ctx).await.unwrap();
    drop(server);
}
