//! Host safety (SSRF guard; docs/datasources.md, "Host safety") for tenant-supplied hosts.
//!
//! * [`validate_host_input`] is layer 1 (the API layer, on create/update): the host must
//!   be an RFC 952 hostname or a strict IP literal; in multi-tenant mode a blocked IP
//!   literal is rejected.
//! * [`HostPolicy::target`] is layer 2 (before every dial): blocked names and non-canonical
//!   numeric forms are rejected without DNS; IP literals are checked; names are resolved
//!   **once**, every address is checked, and the connector dials the first checked address
//!   (pinning), so DNS rebinding cannot swap the address between check and dial. A DNS
//!   failure is an error (`connect`), never a pass.
//!
//! The guard applies only in multi-tenant mode and only to external connections (non-empty
//! key version). Internal datasources (docs/datasources.md) are exempt;
//! [`HostPolicy::single_tenant`] checks nothing (local development and tests reach
//! 127.0.0.1).
//!
//! A VPC deployment reaches customer databases at private addresses: the operator names
//! those networks ([`PrivateNetworks`], docs/operations.md "Private networks"), and the
//! guard then admits addresses inside them. Only private ranges can be admitted; a list
//! that would reach loopback, link-local (cloud metadata), "this network", multicast or
//! reserved space, or that is not inside a private range at all, is refused when parsed, so
//! the host stops at start.
//!
//! SQLite datasources name a file, not a host: [`SqliteFiles`] says which files. Hosts
//! that take connections from an API confine them to an operator-named directory
//! ([`SqliteRoot`]: no `..`, no symlinks, never the service's own data directory) or
//! refuse them; multi-tenant deployments always refuse them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fetcher_engine::{
    BoxFuture, Category, ConnectionDescriptor, Context, EngineError, Reason, Result,
};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::cloud_services;
use crate::error::{self, msg};

/// Private networks the operator admits past host safety (a VPC's subnets, where its
/// customer databases live). Empty by default: no private address is reachable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrivateNetworks(Vec<IpNet>);

/// The ranges an admitted network must lie inside: private and shared address space, where
/// a VPC's databases can be. Loopback, link-local (cloud metadata), "this network",
/// multicast and reserved ranges are outside every one of them, so no list reaches them.
const ADMISSIBLE: [&str; 5] = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "fc00::/7",
];

impl PrivateNetworks {
    /// No network admitted.
    pub fn none() -> Self {
        Self::default()
    }

    /// A comma-separated list of CIDRs (`10.0.0.0/16,fd00:1::/64`; blanks ignored). Each
    /// must be a network address (no host bits set) inside one private range
    /// ([`ADMISSIBLE`]); the error says which entry is refused and why, for a start-up
    /// message.
    pub fn parse(list: &str) -> std::result::Result<Self, String> {
        let mut nets = Vec::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if has_leading_zero(entry) {
                return Err(format!(
                    "{entry} has a number with a leading zero (octal to some parsers); write it without"
                ));
            }
            let net: IpNet = entry
                .parse()
                .map_err(|_| format!("{entry} is not a CIDR (such as 10.0.0.0/16)"))?;
            if net.trunc() != net {
                return Err(format!(
                    "{entry} has host bits set; the network is {}",
                    net.trunc()
                ));
            }
            let inside = ADMISSIBLE.iter().any(|r| {
                r.parse::<IpNet>()
                    .expect("a valid built-in range")
                    .contains(&net)
            });
            if !inside {
                return Err(format!(
                    "{entry} is not inside a private range ({}): loopback, link-local and metadata addresses, and public ones, are never admitted",
                    ADMISSIBLE.join(", ")
                ));
            }
            if let Some((service, what)) = cloud_services::named_by(&net) {
                return Err(format!(
                    "{entry} lies inside {service} ({what}): cloud metadata, DNS and time addresses are never admitted"
                ));
            }
            nets.push(net);
        }
        Ok(PrivateNetworks(nets))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The admitted networks, as given.
    pub fn networks(&self) -> &[IpNet] {
        &self.0
    }

    /// Whether `ip` lies in an admitted network (an IPv4-mapped IPv6 address by its IPv4
    /// form).
    pub fn admits(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.0.iter().any(|n| match (n, ip) {
            (IpNet::V4(n), IpAddr::V4(a)) => Ipv4Net::contains(n, &a),
            (IpNet::V6(n), IpAddr::V6(a)) => Ipv6Net::contains(n, &a),
            _ => false,
        })
    }

    /// Whether host safety refuses `ip`: a cloud service address (metadata, DNS, time:
    /// [`cloud_services`]) whatever the list says, or a blocked address ([`is_blocked_ip`])
    /// that no admitted network holds.
    pub fn refuses(&self, ip: IpAddr) -> bool {
        cloud_services::is_cloud_service(ip) || (is_blocked_ip(ip) && !self.admits(ip))
    }
}

/// Whether a decimal part of an IPv4 CIDR (an octet or the prefix length) has a leading
/// zero: `010.1.0.0/16` is 8.1.0.0 to an octal reader and 10.1.0.0 to a decimal one.
fn has_leading_zero(entry: &str) -> bool {
    let (addr, prefix) = entry.split_once('/').unwrap_or((entry, ""));
    let decimal_parts: Vec<&str> = if addr.contains(':') {
        vec![prefix]
    } else {
        addr.split('.').chain([prefix]).collect()
    };
    decimal_parts
        .iter()
        .any(|p| p.len() > 1 && p.starts_with('0'))
}

impl std::fmt::Display for PrivateNetworks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&list.join(","))
    }
}

/// Resolves a host name to addresses. Injectable so tests can simulate DNS answers.
pub trait Resolver: Send + Sync {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>>;
}

/// The system resolver (`getaddrinfo` through tokio).
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host, 0))
                .await?
                .map(|a| a.ip())
                .collect())
        })
    }
}

/// Where the connector dials: the host name as configured (guard off) or a checked,
/// pinned address (guard on). `tls_name` is the configured host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DialTarget {
    pub address: String,
    pub tls_name: String,
    pub pinned: bool,
}

/// Which files a SQLite datasource may open.
#[derive(Debug, Clone, Default)]
pub enum SqliteFiles {
    /// Any path the process can read: the connector used on its own (tests, tools).
    #[default]
    Anywhere,
    /// None: every SQLite datasource is refused (Lambda, multi-tenant hosts, `serve`
    /// without `--sqlite-dir`).
    Nowhere,
    /// Files under one operator-named directory.
    Under(Arc<SqliteRoot>),
}

impl SqliteFiles {
    /// The file `requested` names, if allowed (a forbidden host otherwise).
    pub fn resolve(&self, requested: &str) -> Result<PathBuf> {
        if requested.trim().is_empty() {
            return Err(error::validation(msg::SQLITE_PATH));
        }
        match self {
            SqliteFiles::Anywhere => Ok(PathBuf::from(requested)),
            SqliteFiles::Nowhere => Err(error::forbidden_host()),
            SqliteFiles::Under(root) => root.resolve(requested),
        }
    }
}

/// The directory SQLite datasources must live in, canonical, and the directories they
/// must never reach (the service's own data).
#[derive(Debug, Clone)]
pub struct SqliteRoot {
    root: PathBuf,
    deny: Vec<PathBuf>,
}

impl SqliteRoot {
    /// `dir` must exist; it may neither lie inside nor contain any of `deny` (which
    /// need not exist yet). The error says why, for a start-up message.
    pub fn new(dir: &Path, deny: &[&Path]) -> std::result::Result<Self, String> {
        let root = dir
            .canonicalize()
            .map_err(|e| format!("the SQLite directory {}: {e}", dir.display()))?;
        let mut denied = Vec::new();
        for d in deny {
            let d = d
                .canonicalize()
                .or_else(|_| std::path::absolute(d))
                .map_err(|e| format!("{}: {e}", d.display()))?;
            if root.starts_with(&d) || d.starts_with(&root) {
                return Err(format!(
                    "the SQLite directory {} must neither be inside nor contain the data directory {}",
                    root.display(),
                    d.display()
                ));
            }
            denied.push(d);
        }
        Ok(SqliteRoot { root, deny: denied })
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    /// An existing file under the root, named without `..` and reached without a
    /// symlink (its canonical path is the path as written); relative names are taken
    /// from the root.
    pub fn resolve(&self, requested: &str) -> Result<PathBuf> {
        let p = Path::new(requested.trim());
        if p.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(error::forbidden_host());
        }
        let written: PathBuf = self
            .root
            .join(p)
            .components()
            .filter(|c| !matches!(c, Component::CurDir))
            .collect();
        let canonical = written
            .canonicalize()
            .map_err(|_| error::forbidden_host())?;
        if canonical != written
            || !canonical.starts_with(&self.root)
            || self.deny.iter().any(|d| canonical.starts_with(d))
            || !canonical.is_file()
        {
            return Err(error::forbidden_host());
        }
        Ok(canonical)
    }
}

/// The host-safety policy a factory applies before dialling.
#[derive(Clone)]
pub struct HostPolicy {
    multi_tenant: bool,
    resolver: Arc<dyn Resolver>,
    dns_timeout: Duration,
    sqlite: SqliteFiles,
    private: PrivateNetworks,
}

impl std::fmt::Debug for HostPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostPolicy")
            .field("multi_tenant", &self.multi_tenant)
            .field("private_networks", &self.private)
            .finish()
    }
}

impl HostPolicy {
    /// No checks: single-tenant deployments, whose hosts come from the operator
    /// (loopback allowed).
    pub fn single_tenant() -> Self {
        HostPolicy {
            multi_tenant: false,
            resolver: Arc::new(SystemResolver),
            dns_timeout: Duration::from_secs(5),
            sqlite: SqliteFiles::Anywhere,
            private: PrivateNetworks::none(),
        }
    }

    /// The guard on (`MULTI_TENANT_ENABLED=true`), with the system resolver.
    pub fn multi_tenant() -> Self {
        HostPolicy {
            multi_tenant: true,
            ..Self::single_tenant()
        }
    }

    /// [`Self::multi_tenant`] or [`Self::single_tenant`].
    pub fn for_tenancy(multi_tenant: bool) -> Self {
        if multi_tenant {
            Self::multi_tenant()
        } else {
            Self::single_tenant()
        }
    }

    /// Where SQLite datasource files may live (default: anywhere).
    pub fn with_sqlite_files(mut self, files: SqliteFiles) -> Self {
        self.sqlite = files;
        self
    }

    /// The file a SQLite datasource opens, checked ([`SqliteFiles::resolve`]). With the
    /// guard on, an external connection may name a file only under an operator-named
    /// directory (the API lets no tenant create one; `serve --demo` registers its own):
    /// "anywhere" counts as nowhere.
    pub fn sqlite_path(&self, d: &ConnectionDescriptor) -> Result<PathBuf> {
        if self.applies_to(d) && matches!(self.sqlite, SqliteFiles::Anywhere) {
            return Err(error::forbidden_host());
        }
        self.sqlite.resolve(&d.database_name)
    }

    /// Admits addresses in these private networks (a VPC deployment's databases).
    pub fn with_private_networks(mut self, networks: PrivateNetworks) -> Self {
        self.private = networks;
        self
    }

    pub fn private_networks(&self) -> &PrivateNetworks {
        &self.private
    }

    /// Replaces the DNS timeout (tests).
    pub fn with_dns_timeout(mut self, timeout: Duration) -> Self {
        self.dns_timeout = timeout;
        self
    }

    /// Replaces the resolver (tests).
    pub fn with_resolver(mut self, resolver: Arc<dyn Resolver>) -> Self {
        self.resolver = resolver;
        self
    }

    pub fn is_multi_tenant(&self) -> bool {
        self.multi_tenant
    }

    /// Whether the guard applies to this connection: multi-tenant mode and an external
    /// connection (non-empty key version). Internal datasources are exempt.
    pub fn applies_to(&self, d: &ConnectionDescriptor) -> bool {
        self.multi_tenant && !d.key_version.is_empty()
    }

    /// The checks that need no network: blocked names, non-canonical numeric forms and
    /// blocked IP literals. Run by `build` (before credentials are revealed).
    pub fn precheck(&self, d: &ConnectionDescriptor) -> Result<()> {
        if d.datasource_type == fetcher_engine::DatasourceType::Sqlite {
            return self.sqlite_path(d).map(|_| ());
        }
        if !self.applies_to(d) {
            return Ok(());
        }
        match classify(&d.host, &self.private) {
            Literal::Blocked => Err(error::forbidden_host()),
            Literal::Ip(_) | Literal::Name(_) => Ok(()),
        }
    }

    /// Layer 2: decides the dial target. With the guard on, resolves once, checks every
    /// address and pins the first one.
    pub async fn target(&self, ctx: &Context, d: &ConnectionDescriptor) -> Result<DialTarget> {
        let configured = DialTarget {
            address: d.host.clone(),
            tls_name: d.host.clone(),
            pinned: false,
        };
        if d.datasource_type == fetcher_engine::DatasourceType::Sqlite {
            // A file, not a host: nothing to dial or pin.
            self.precheck(d)?;
            return Ok(configured);
        }
        if !self.applies_to(d) {
            // Unguarded, the driver dials the name itself; resolving it first turns a
            // host with no address into its own reason instead of a bare connect failure.
            let host = d.host.trim();
            if host.parse::<IpAddr>().is_err() {
                self.resolve(ctx, host).await?;
            }
            return Ok(configured);
        }
        self.precheck(d)?;
        let name = match classify(&d.host, &self.private) {
            Literal::Blocked => return Err(error::forbidden_host()),
            Literal::Ip(ip) => {
                return Ok(DialTarget {
                    address: ip.to_string(),
                    tls_name: d.host.trim().to_owned(),
                    pinned: true,
                });
            }
            Literal::Name(n) => n,
        };
        let addrs = self.resolve(ctx, &name).await?;
        if addrs.iter().any(|ip| self.private.refuses(*ip)) {
            return Err(error::forbidden_host());
        }
        Ok(DialTarget {
            address: addrs[0].to_string(),
            tls_name: name,
            pinned: true,
        })
    }
}

impl HostPolicy {
    /// `name`'s addresses (never empty). A resolver that answers with an error or with
    /// nothing is [`fetcher_engine::Reason::HostNotResolved`]; one that does not answer
    /// within the DNS timeout is a plain connect failure (it may be the resolver's outage).
    async fn resolve(&self, ctx: &Context, name: &str) -> Result<Vec<IpAddr>> {
        let lookup = tokio::time::timeout(self.dns_timeout, self.resolver.lookup(name));
        match ctx.run(lookup).await {
            Err(done) => Err(error::from_done(done)),
            Ok(Err(_elapsed)) => Err(EngineError::new(Category::Connect, msg::DNS_FAILED)),
            Ok(Ok(Err(e))) => Err(EngineError::wrap_of(Reason::HostNotResolved, e)),
            Ok(Ok(Ok(a))) if a.is_empty() => Err(EngineError::of(Reason::HostNotResolved)),
            Ok(Ok(Ok(a))) => Ok(a),
        }
    }
}

enum Literal {
    Blocked,
    Ip(IpAddr),
    Name(String),
}

/// Trims, then: blocked name → Blocked; strict IP literal → checked (an admitted private
/// network lets it pass); a numeric-looking name that is not a strict dotted quad
/// (decimal `2130706433`, octal `0177.0.0.1`, hex `0x7f.1`, short `127.1`), a bracketed or
/// zoned IPv6 → Blocked (fail closed).
fn classify(host: &str, private: &PrivateNetworks) -> Literal {
    let h = host.trim();
    if is_blocked_hostname(h) {
        return Literal::Blocked;
    }
    if let Ok(ip) = h.parse::<IpAddr>() {
        return if private.refuses(ip) {
            Literal::Blocked
        } else {
            Literal::Ip(ip)
        };
    }
    if h.contains(['[', ']', '%', ':', '/', '@', '\\']) || h.chars().any(|c| c.is_whitespace()) {
        return Literal::Blocked;
    }
    let last = h.trim_end_matches('.').rsplit('.').next().unwrap_or("");
    if last.starts_with(|c: char| c.is_ascii_digit()) {
        return Literal::Blocked;
    }
    Literal::Name(h.to_ascii_lowercase())
}

/// Blocked names (docs/datasources.md, "Host safety"): exact names and suffixes, compared
/// lower-cased with trailing dots removed; empty names are blocked.
pub fn is_blocked_hostname(host: &str) -> bool {
    let n = host.trim().to_ascii_lowercase();
    let n = n.trim_end_matches('.');
    if n.is_empty() {
        return true;
    }
    n == "localhost"
        || cloud_services::CLOUD_SERVICE_NAMES.contains(&n)
        || n.ends_with(".local")
        || n.ends_with(".internal")
        || n.ends_with(".localhost")
}

fn v4_in(ip: Ipv4Addr, net: [u8; 4], bits: u32) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn v6_in(ip: Ipv6Addr, net: Ipv6Addr, bits: u32) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u128::MAX << (128 - bits)
    };
    (u128::from(ip) & mask) == (u128::from(net) & mask)
}

/// The IPv4 address an IPv6 address reaches: IPv4-mapped `::ffff:a.b.c.d`,
/// IPv4-translated `::ffff:0:a.b.c.d` (SIIT, RFC 2765), NAT64 `64:ff9b::a.b.c.d` and 6to4
/// `2002:aabb:ccdd::/48`.
pub(crate) fn translated_ipv4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let o = v6.octets();
    if v6.segments()[0] == 0x2002 {
        return Some(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
    }
    (v6_in(v6, Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, 0, 0), 96)
        || v6_in(v6, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96))
    .then(|| Ipv4Addr::new(o[12], o[13], o[14], o[15]))
}

/// The blocked ranges of docs/datasources.md ("Host safety"), IPv6 forms that embed an
/// IPv4 address included.
pub fn is_blocked_ip(ip: IpAddr) -> bool {
    if cloud_services::is_cloud_service(ip) {
        return true;
    }
    match ip {
        IpAddr::V4(v4) => is_blocked_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = translated_ipv4(v6) {
                return is_blocked_v4(v4);
            }
            // IPv4-compatible ::a.b.c.d (deprecated; includes :: and ::1): blocked outright.
            if v6_in(v6, Ipv6Addr::UNSPECIFIED, 96) {
                return true;
            }
            let blocked: [(Ipv6Addr, u32); 8] = [
                (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7), // unique local
                (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10), // link-local
                (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10), // site-local (deprecated)
                (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8), // multicast
                (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32), // documentation
                (Ipv6Addr::new(0x0100, 0, 0, 0, 0, 0, 0, 0), 64), // discard-only
                // Teredo carries a server and an obfuscated client IPv4 address, and
                // local-use NAT64 embeds at an operator-chosen prefix length: neither
                // can be judged by one embedded address, so both are blocked outright.
                (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32), // Teredo
                (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48), // local-use NAT64
            ];
            blocked.iter().any(|(net, bits)| v6_in(v6, *net, *bits))
        }
    }
}

fn is_blocked_v4(ip: Ipv4Addr) -> bool {
    const NETS: [([u8; 4], u32); 15] = [
        ([0, 0, 0, 0], 8),       // "this network", includes 0.0.0.0
        ([10, 0, 0, 0], 8),      // private
        ([100, 64, 0, 0], 10),   // CGNAT
        ([127, 0, 0, 0], 8),     // loopback
        ([169, 254, 0, 0], 16),  // link-local, cloud metadata
        ([172, 16, 0, 0], 12),   // private
        ([192, 0, 0, 0], 24),    // IETF protocol assignments
        ([192, 0, 2, 0], 24),    // TEST-NET-1
        ([192, 168, 0, 0], 16),  // private
        ([198, 18, 0, 0], 15),   // benchmarking
        ([198, 51, 100, 0], 24), // TEST-NET-2
        ([203, 0, 113, 0], 24),  // TEST-NET-3
        ([224, 0, 0, 0], 4),     // multicast (incl. link-local multicast)
        ([240, 0, 0, 0], 4),     // reserved, broadcast
        ([255, 255, 255, 255], 32),
    ];
    NETS.iter().any(|(net, bits)| v4_in(ip, *net, *bits))
}

/// RFC 952 hostname as the reference's validator checks it
/// (`^[a-zA-Z]([a-zA-Z0-9-]+\.?)*[a-zA-Z0-9]$`): no trailing dot, no underscore, first
/// label at least two characters.
pub fn is_rfc952_hostname(h: &str) -> bool {
    let b = h.as_bytes();
    if b.len() < 2 || !b[0].is_ascii_alphabetic() || !b[b.len() - 1].is_ascii_alphanumeric() {
        return false;
    }
    if !b
        .iter()
        .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'.')
    {
        return false;
    }
    b[1] != b'.' && !h.contains("..")
}

/// Layer 1 (API input): an RFC 952 hostname or a strict IP literal (no brackets, no
/// zone); with the guard on, a blocked IP literal is a forbidden host. Host names pass this
/// layer (layer 2 resolves them).
pub fn validate_host_input(host: &str, multi_tenant: bool) -> Result<()> {
    validate_host_input_admitting(host, multi_tenant, &PrivateNetworks::none())
}

/// [`validate_host_input`] with the operator's admitted private networks: a literal inside
/// one of them passes the guard.
pub fn validate_host_input_admitting(
    host: &str,
    multi_tenant: bool,
    admitted: &PrivateNetworks,
) -> Result<()> {
    let ip = host.parse::<IpAddr>().ok();
    if ip.is_none() && !is_rfc952_hostname(host) {
        return Err(EngineError::new(Category::Validation, msg::HOST_FORMAT));
    }
    if multi_tenant
        && let Ok(ip) = host.trim().parse::<IpAddr>()
        && admitted.refuses(ip)
    {
        return Err(error::forbidden_host());
    }
    Ok(())
}
