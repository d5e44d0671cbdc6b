//! # fetcher-connect
//!
//! What every connector shares, whatever its datasource, with no database driver: the SQL
//! connectors (`fetcher-connectors`, on sqlx) and any other family depend on it, so a
//! document datasource is added beside them without pulling in sqlx.
//!
//! ## Module map
//!
//! | module | what it holds |
//! |---|---|
//! | [`host`] | host safety (SSRF): [`HostPolicy`] and its checked [`DialTarget`], operator-admitted [`PrivateNetworks`], blocked names and ranges, [`validate_host_input`]; which files SQLite may open ([`SqliteFiles`]) |
//! | [`bound`] | [`bound::bounded`]: a connect or discovery ended by its limit and the caller's context |
//! | [`cloud_services`] | cloud providers' metadata and internal service addresses, with sources |
//! | [`credentials`] | [`CredentialSource`] (the host's store) and [`StaticCredentials`] (internal datasources, tests) |
//! | [`error`] | the connectors' fixed messages, the typed hidden causes hosts match ([`ForbiddenHost`], [`InvalidSslMode`]) |
//! | [`registry`] | [`registry::Families`]: the connector families a host registers, by datasource type |
//! | [`stream`] | [`stream::ChannelCursor`]: the cursor a producer task feeds in bounded batches |
//! | [`values`] | lossless rendering helpers: calendar, RFC 3339 timestamps with microseconds, tagged specials, exact floats, UUIDs, JSON |
//!
//! ## Error policy
//!
//! Every error is a [`fetcher_engine::EngineError`] with a fixed message
//! ([`error::msg`]); a driver's error is only ever the hidden cause, never in a message.

pub mod bound;
pub mod cloud_services;
pub mod credentials;
pub mod error;
pub mod host;
pub mod registry;
pub mod stream;
pub mod values;

pub use credentials::{CredentialSource, StaticCredentials};
pub use error::{ForbiddenHost, InvalidSslMode, is_forbidden_host};
pub use host::{
    DialTarget, HostPolicy, PrivateNetworks, Resolver, SqliteFiles, SqliteRoot, SystemResolver,
    is_blocked_hostname, is_blocked_ip, validate_host_input, validate_host_input_admitting,
};

/// Installs rustls' `ring` provider as the process default, once. Drivers build their TLS
/// configuration from the process default, and rustls refuses to guess one when a binary
/// links both `ring` and `aws-lc-rs` (the AWS SDK): without this, the first TLS
/// connection of such a binary panics. Called before every connect; cheap after the first.
pub fn tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err means another provider was installed first; any installed provider works.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
