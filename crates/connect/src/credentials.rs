//! Where a connector gets a connection's password: the host's store through its cipher,
//! or memory for internal datasources and tests.

use std::collections::BTreeMap;

use fetcher_engine::{BoxFuture, ConnectionDescriptor, Context, Result, Secret, TenantContext};

/// Where a connector gets the connection's password. Called by `build` (no network I/O
/// to the datasource happens there). The service layer implements it with
/// `store.credential` + `protector.reveal`; internal datasources use
/// [`StaticCredentials`]. Errors must be safe to show (the engine redacts them anyway).
pub trait CredentialSource: Send + Sync {
    fn password<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        descriptor: &'a ConnectionDescriptor,
    ) -> BoxFuture<'a, Result<Secret>>;
}

/// Passwords held in memory by config name (internal datasources, tests). A missing
/// entry is the empty password.
#[derive(Default)]
pub struct StaticCredentials {
    by_config: BTreeMap<String, Secret>,
}

impl StaticCredentials {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with(mut self, config_name: &str, password: impl Into<Secret>) -> Self {
        self.by_config
            .insert(config_name.to_owned(), password.into());
        self
    }

    pub fn insert(&mut self, config_name: &str, password: impl Into<Secret>) {
        self.by_config
            .insert(config_name.to_owned(), password.into());
    }
}

impl CredentialSource for StaticCredentials {
    fn password<'a>(
        &'a self,
        _ctx: &'a Context,
        _tenant: &'a TenantContext,
        d: &'a ConnectionDescriptor,
    ) -> BoxFuture<'a, Result<Secret>> {
        let s = self
            .by_config
            .get(&d.config_name)
            .cloned()
            .unwrap_or_default();
        Box::pin(async move { Ok(s) })
    }
}
