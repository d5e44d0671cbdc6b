//! Host safety in multi-tenant mode: the bypass table (both layers), DNS answers through a
//! fake resolver (pinning, rebinding, failures), the exemptions, and the factory order.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use fetcher_connectors::{
    CredentialSource, Dialect, ForbiddenHost, HostPolicy, PrivateNetworks, Resolver,
    SqlConnectorFactory, is_blocked_hostname, is_blocked_ip, validate_host_input,
    validate_host_input_admitting,
};
use fetcher_engine::ports::Connector;
use fetcher_engine::{
    BoxFuture, Category, ConnectionDescriptor, Context, Result, Secret, TenantContext,
};

/// Answers from a table; counts lookups; a second answer simulates rebinding.
#[derive(Default)]
struct FakeDns {
    answers: BTreeMap<String, Vec<Vec<IpAddr>>>,
    calls: AtomicUsize,
}

impl FakeDns {
    fn with(mut self, name: &str, answers: &[&[&str]]) -> Self {
        self.answers.insert(
            name.into(),
            answers
                .iter()
                .map(|a| a.iter().map(|s| s.parse().unwrap()).collect())
                .collect(),
        );
        self
    }
}

impl Resolver for FakeDns {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let out = match self.answers.get(host) {
            Some(a) => Ok(a[n.min(a.len() - 1)].clone()),
            None => Err(std::io::Error::other("NXDOMAIN")),
        };
        Box::pin(async move { out })
    }
}

fn external(host: &str) -> ConnectionDescriptor {
    ConnectionDescriptor {
        config_name: "ext".into(),
        datasource_type: fetcher_engine::DatasourceType::Postgresql,
        host: host.into(),
        port: 5432,
        database_name: "db".into(),
        username: "u".into(),
        key_version: "1".into(),
        ..Default::default()
    }
}

fn policy(dns: FakeDns) -> HostPolicy {
    HostPolicy::multi_tenant().with_resolver(Arc::new(dns))
}

/// Every bypass form is rejected by layer 2 before any DNS lookup.
#[tokio::test]
async fn bypass_table_is_rejected_without_dns() {
    let forms = [
        "127.0.0.1",
        "127.0.0.2",
        "127.255.255.255",
        "0.0.0.0",
        "0.0.0.1",
        "0.255.255.255",
        "10.0.0.1",
        "10.255.255.255",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.0.1",
        "192.168.255.255",
        "169.254.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "100.100.100.100",
        "100.127.255.254",
        "192.0.0.1",
        "192.0.2.1",
        "198.18.0.1",
        "198.19.255.255",
        "198.51.100.10",
        "203.0.113.10",
        "224.0.0.1",
        "239.255.255.255",
        "240.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fd12:3456::1",
        "ff02::1",
        "2001:db8::1",
        "100::1",
        "fec0::1",
        // IPv4-mapped and IPv4-compatible IPv6, NAT64, 6to4 embedding private addresses.
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "::ffff:100.64.0.1",
        "::ffff:198.51.100.10",
        "::ffff:169.254.169.254",
        "::127.0.0.1",
        "::10.0.0.1",
        "::8.8.8.8",
        "64:ff9b::a00:1",
        "2002:7f00:1::1",
        "2001::1",
        // IPv4-translated (SIIT) ::ffff:0:a.b.c.d, and the other embeddings of loopback,
        // private and metadata addresses.
        "::ffff:0:7f00:1",
        "::ffff:0:127.0.0.1",
        "::ffff:0:a00:1",
        "::ffff:0:169.254.169.254",
        "64:ff9b::127.0.0.1",
        "64:ff9b::169.254.169.254",
        "64:ff9b:1::a00:1",
        "2002:a9fe:a9fe::1",
        "2002:c0a8:0101::1",
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        // Non-canonical numeric IPv4 forms: decimal, octal, hex, short.
        "2130706433",
        "0177.0.0.1",
        "0x7f.0.0.1",
        "0x7f000001",
        "017700000001",
        "127.1",
        "127.0.1",
        "0",
        "1.2.3.4.5",
        // Brackets, zones, whitespace, user-info tricks.
        "[::1]",
        "fe80::1%eth0",
        "127.0.0.1:5432",
        "evil.com@127.0.0.1",
        " 127.0.0.1 ",
        // Names.
        "localhost",
        "LOCALHOST",
        "Localhost",
        "localhost.",
        "LOCALHOST.",
        "localhost..",
        "metadata.google.internal",
        "metadata.google.internal.",
        "metadata.gcp.internal",
        "metadata.azure.internal",
        "myhost.local",
        "myhost.local.",
        "service.internal",
        "service.internal..",
        "service.INTERNAL",
        "api.default.svc.cluster.local",
        "foo.svc.cluster.local",
        "some-node.cluster.local",
        "app.localhost",
        "",
        " ",
        ".",
        "..",
    ];
    assert!(forms.len() >= 30);
    let dns = Arc::new(FakeDns::default());
    let p = HostPolicy::multi_tenant().with_resolver(dns.clone());
    let ctx = Context::background();
    for h in forms {
        let e = p.target(&ctx, &external(h)).await.unwrap_err();
        assert_eq!(e.category(), Category::Validation, "{h:?}");
        assert!(e.cause_as::<ForbiddenHost>().is_some(), "{h:?}");
        assert_eq!(
            e.reason(),
            Some(fetcher_engine::Reason::ForbiddenHost),
            "{h:?}"
        );
        assert!(
            !e.message().contains("FET-"),
            "no API code in the engine's text"
        );
        assert!(
            !e.to_string().contains(h.trim()) || h.trim().is_empty() || h == "0",
            "{h:?}"
        );
    }
    assert_eq!(dns.calls.load(Ordering::SeqCst), 0, "no DNS lookups");

    // Layer 1: IP literals blocked (multi-tenant), malformed forms are format errors.
    for h in [
        "127.0.0.1",
        "::ffff:127.0.0.1",
        "10.0.0.1",
        "169.254.169.254",
        "::1",
        "0.0.0.0",
    ] {
        let e = validate_host_input(h, true).unwrap_err();
        assert!(e.cause_as::<ForbiddenHost>().is_some(), "{h}");
        validate_host_input(h, false).unwrap();
    }
    for h in [
        "2130706433",
        "0177.0.0.1",
        "[::1]",
        "fe80::1%eth0",
        "localhost.",
        "my_db.example.com",
        "x.example.com",
    ] {
        let e = validate_host_input(h, true).unwrap_err();
        assert_eq!(
            e.message(),
            "host must be a valid hostname or IP address",
            "{h}"
        );
    }
    for h in [
        "db.example.com",
        "metadata.google.internal",
        "8.8.8.8",
        "2001:4860:4860::8888",
        "db.x.com",
    ] {
        validate_host_input(h, true).unwrap();
    }
}

#[test]
fn allowed_addresses_and_names() {
    for ip in [
        "8.8.8.8",
        "1.1.1.1",
        "2001:4860:4860::8888",
        "93.184.216.34",
        "100.63.255.255",
        "100.128.0.1",
        "172.15.255.255",
        "172.32.0.1",
        "1.0.0.1",
        "198.17.255.255",
        "198.20.0.1",
        "::ffff:8.8.8.8",
        "::ffff:0:808:808",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ] {
        assert!(!is_blocked_ip(ip.parse().unwrap()), "{ip}");
    }
    for n in [
        "example.com",
        "api.example.com",
        "hooks.stripe.com",
        "localhostx",
        "mylocal",
        "internal.example.com",
    ] {
        assert!(!is_blocked_hostname(n), "{n}");
    }
}

#[tokio::test]
async fn names_resolve_once_are_checked_and_pinned() {
    let ctx = Context::background();
    // Public answer: pinned to the checked address, TLS name kept.
    let p = policy(FakeDns::default().with("db.example.com", &[&["93.184.216.34"]]));
    let t = p.target(&ctx, &external("db.example.com")).await.unwrap();
    assert_eq!(
        (t.address.as_str(), t.tls_name.as_str(), t.pinned),
        ("93.184.216.34", "db.example.com", true)
    );
    // Any private answer rejects.
    let p = policy(FakeDns::default().with("mixed.example.com", &[&["93.184.216.34", "10.0.0.5"]]));
    let e = p
        .target(&ctx, &external("mixed.example.com"))
        .await
        .unwrap_err();
    assert!(e.cause_as::<ForbiddenHost>().is_some());
    // Rebinding: the first answer is public, later ones private. One lookup, pinned.
    let dns = Arc::new(
        FakeDns::default().with("rebind.example.com", &[&["93.184.216.34"], &["127.0.0.1"]]),
    );
    let p = HostPolicy::multi_tenant().with_resolver(dns.clone());
    let t = p
        .target(&ctx, &external("rebind.example.com"))
        .await
        .unwrap();
    assert_eq!(t.address, "93.184.216.34");
    assert_eq!(dns.calls.load(Ordering::SeqCst), 1);
    // DNS failure is an error, not a pass.
    let e = p
        .target(&ctx, &external("nxdomain.example.com"))
        .await
        .unwrap_err();
    assert_eq!(e.category(), Category::Connect);
    assert_eq!(e.message(), "datasource host could not be resolved");
    assert_eq!(e.reason(), Some(fetcher_engine::Reason::HostNotResolved));
    // Exemptions: internal connections and single-tenant mode.
    let mut internal = external("127.0.0.1");
    internal.key_version.clear();
    assert!(!p.target(&ctx, &internal).await.unwrap().pinned);
    let t = HostPolicy::single_tenant()
        .target(&ctx, &external("localhost"))
        .await
        .unwrap();
    assert_eq!((t.address.as_str(), t.pinned), ("localhost", false));
    // Unguarded (single-tenant), a name with no address has the same reason (#30): the
    // API answers it as a host to fix, not as a server error.
    let e = HostPolicy::single_tenant()
        .with_resolver(Arc::new(FakeDns::default()))
        .target(&ctx, &external("nowhere.invalid"))
        .await
        .unwrap_err();
    assert_eq!(e.reason(), Some(fetcher_engine::Reason::HostNotResolved));
    // A resolver that does not answer in time is an outage, not a wrong host.
    let slow = HostPolicy::single_tenant()
        .with_resolver(Arc::new(SlowDns))
        .with_dns_timeout(std::time::Duration::from_millis(50));
    let e = slow
        .target(&ctx, &external("slow.example.com"))
        .await
        .unwrap_err();
    assert_eq!((e.category(), e.reason()), (Category::Connect, None));
}

/// A resolver that never answers.
struct SlowDns;

impl Resolver for SlowDns {
    fn lookup<'a>(&'a self, _: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        Box::pin(std::future::pending())
    }
}

/// Counts credential reveals, to prove host checks come first.
#[derive(Default)]
struct CountingCreds(AtomicUsize);

impl CredentialSource for CountingCreds {
    fn password<'a>(
        &'a self,
        _: &'a Context,
        _: &'a TenantContext,
        _: &'a ConnectionDescriptor,
    ) -> BoxFuture<'a, Result<Secret>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(Secret::default()) })
    }
}

#[tokio::test]
async fn factory_rejects_before_reveal_and_empty_password_is_no_exemption() {
    let ctx = Context::background();
    let tenant = TenantContext::new("t1").unwrap();
    let creds = Arc::new(CountingCreds::default());
    let f = SqlConnectorFactory::new(Dialect::Postgres, creds.clone(), HostPolicy::multi_tenant());
    for h in ["127.0.0.1", "localhost", "169.254.169.254", "0x7f.0.0.1"] {
        let e = f
            .build_connector(&ctx, &tenant, &external(h))
            .await
            .unwrap_err();
        assert!(e.cause_as::<ForbiddenHost>().is_some(), "{h}");
    }
    assert_eq!(
        creds.0.load(Ordering::SeqCst),
        0,
        "credential never revealed"
    );

    // A name resolving to loopback passes build (no DNS there) but never dials: the
    // connector fails with FET-0414 at connect, even though the password is empty.
    let dns = FakeDns::default().with("sneaky.example.com", &[&["127.0.0.1"]]);
    let f = SqlConnectorFactory::new(
        Dialect::Postgres,
        creds.clone(),
        HostPolicy::multi_tenant().with_resolver(Arc::new(dns)),
    );
    let mut c = f
        .build_connector(&ctx, &tenant, &external("sneaky.example.com"))
        .await
        .unwrap();
    let e = c.test_connection(&ctx).await.unwrap_err();
    assert!(e.cause_as::<ForbiddenHost>().is_some());
    let e = c.discover_schema(&ctx).await.unwrap_err();
    assert!(e.cause_as::<ForbiddenHost>().is_some());
    c.close(&ctx).await.unwrap();

    // Tenants may not name SQLite files.
    let f = SqlConnectorFactory::new(Dialect::Sqlite, creds, HostPolicy::multi_tenant());
    let mut lite = external("");
    lite.datasource_type = fetcher_engine::DatasourceType::Sqlite;
    lite.database_name = "/etc/passwd".into();
    let e = f.build_connector(&ctx, &tenant, &lite).await.unwrap_err();
    assert!(e.cause_as::<ForbiddenHost>().is_some());
}

/// A VPC deployment's private networks: admitted addresses pass both layers, others stay
/// refused, and metadata, loopback and link-local ranges can never be admitted.
#[tokio::test]
async fn operator_admitted_private_networks() {
    let nets = PrivateNetworks::parse("10.20.0.0/16, fd00:1::/64").unwrap();
    assert_eq!(nets.to_string(), "10.20.0.0/16,fd00:1::/64");
    let dns = FakeDns::default()
        .with("db.vpc.example.com", &[&["10.20.3.4"]])
        .with("mixed.example.com", &[&["10.20.3.4", "169.254.169.254"]])
        .with("elsewhere.example.com", &[&["10.99.0.1"]]);
    let p = policy(dns).with_private_networks(nets.clone());
    let ctx = Context::background();
    // Allowed: a literal in the list, an IPv4-mapped form of it, a name resolving into it.
    for host in [
        "10.20.0.5",
        "::ffff:10.20.0.5",
        "fd00:1::5",
        "db.vpc.example.com",
    ] {
        let t = p.target(&ctx, &external(host)).await.unwrap();
        assert!(t.pinned, "{host}");
        validate_host_input_admitting(host, true, &nets).unwrap();
    }
    // Refused: private addresses outside the list, and a name with any refused answer.
    for host in [
        "10.21.0.5",
        "192.168.1.1",
        "fd00:2::5",
        "169.254.169.254",
        "127.0.0.1",
        "mixed.example.com",
        "elsewhere.example.com",
    ] {
        let e = p.target(&ctx, &external(host)).await.unwrap_err();
        assert!(fetcher_connectors::is_forbidden_host(&e), "{host}: {e}");
    }
    assert!(validate_host_input_admitting("10.21.0.5", true, &nets).is_err());
    assert!(validate_host_input_admitting("169.254.169.254", true, &nets).is_err());
    // Without the list, the same address is refused.
    let bare = policy(FakeDns::default());
    assert!(bare.target(&ctx, &external("10.20.0.5")).await.is_err());
    assert!(validate_host_input("10.20.0.5", true).is_err());
}

#[test]
fn a_private_network_list_cannot_admit_metadata_loopback_or_public_space() {
    for bad in [
        "169.254.169.254/32",
        "169.254.0.0/16",
        "127.0.0.0/8",
        "::1/128",
        "fe80::/10",
        "0.0.0.0/0",
        "::/0",
        "10.0.0.0/7",
        "8.8.8.0/24",
        "224.0.0.0/4",
        "10.0.0.1/16",
        "10.0.0.0",
        "ten/8",
        // Cloud service addresses inside the private ranges (AWS Nitro, Alibaba).
        "fd00:ec2::254/128",
        "fd00:ec2::/32",
        "fd00:ec2:1::/48",
        "100.100.100.200/32",
        // #52 item 4: more providers' IPv6 metadata, Huawei's DNS/NTP, IBM's service network.
        "fd00:c1::a9fe:a9fe/128",
        "fd00:a9fe:a9fe::1/128",
        "fd00:42::42/128",
        "fd00:100::100:200/128",
        "100.125.0.0/16",
        "161.26.0.0/16",
        // Leading zeros read as octal by some parsers: refused, never guessed.
        "010.1.0.0/16",
        "10.1.0.0/016",
    ] {
        let err = PrivateNetworks::parse(&format!("10.1.0.0/16,{bad}")).unwrap_err();
        assert!(
            err.contains(bad.split('/').next().unwrap()) || err.contains(bad),
            "{bad}: {err}"
        );
    }
    assert!(PrivateNetworks::parse("").unwrap().is_empty());
    assert_eq!(
        PrivateNetworks::parse("10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,fc00::/7")
            .unwrap()
            .networks()
            .len(),
        5
    );
}

/// An allow-list that contains cloud service addresses (`fc00::/7` holds AWS's
/// `fd00:ec2::/32`, `100.64.0.0/10` holds Alibaba's metadata) is accepted, but those
/// addresses stay refused at both layers, in every form, literal or DNS answer.
#[tokio::test]
async fn a_wide_private_list_never_reaches_metadata_dns_or_time() {
    let nets = PrivateNetworks::parse("fc00::/7,100.64.0.0/10").unwrap();
    let dns = FakeDns::default().with("imds.example.com", &[&["fd00:ec2::254"]]);
    let p = policy(dns).with_private_networks(nets.clone());
    let ctx = Context::background();
    for host in [
        "fd00:ec2::254",
        "fd00:ec2::253",
        "fd00:ec2::23",
        "fd00:ec2::123",
        "100.100.100.200",
        "::ffff:100.100.100.200",
        "imds.example.com",
        "metadata.tencentyun.com",
        // #52 item 4: Oracle, Akamai, Scaleway and Alibaba IPv6 metadata, Huawei's DNS/NTP.
        "fd00:c1::a9fe:a9fe",
        "fd00:a9fe:a9fe::1",
        "fd00:42::42",
        "fd00:100::100:200",
        "100.125.1.250",
        "::ffff:100.125.0.251",
    ] {
        let e = p.target(&ctx, &external(host)).await.unwrap_err();
        assert!(fetcher_connectors::is_forbidden_host(&e), "{host}: {e}");
        if host.parse::<std::net::IpAddr>().is_ok() {
            assert!(
                validate_host_input_admitting(host, true, &nets).is_err(),
                "{host}"
            );
        }
    }
    // The rest of the admitted space still passes.
    for host in ["fd00:1::5", "100.64.1.2", "::ffff:100.64.1.2"] {
        p.target(&ctx, &external(host)).await.unwrap();
        validate_host_input_admitting(host, true, &nets).unwrap();
    }
    // A public cloud service address (Azure's WireServer) is refused without any list.
    let bare = policy(FakeDns::default());
    // IBM Cloud's DNS and NTP are public space too.
    for host in ["168.63.129.16", "161.26.0.10", "161.26.0.6"] {
        assert!(bare.target(&ctx, &external(host)).await.is_err(), "{host}");
        assert!(validate_host_input(host, true).is_err(), "{host}");
    }
}
