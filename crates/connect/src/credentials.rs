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

/// What every connector's `build` does before it holds a credential, in this order: the
/// descriptor is of `datasource_type` and its TLS mode one of that type's; host safety's
/// checks that need no network pass (so a blocked host never gets a credential); then the
/// password is revealed, and must be UTF-8 text. No network I/O.
pub async fn reveal_checked(
    ctx: &Context,
    tenant: &TenantContext,
    d: &ConnectionDescriptor,
    datasource_type: fetcher_engine::DatasourceType,
    policy: &crate::HostPolicy,
    credentials: &dyn CredentialSource,
) -> Result<Secret> {
    use crate::error::msg;
    use fetcher_engine::{Category, EngineError};
    if d.datasource_type != datasource_type {
        return Err(EngineError::new(Category::Validation, msg::TYPE_MISMATCH));
    }
    crate::error::checked_tls_mode(d)?;
    policy.precheck(d)?;
    let password = credentials.password(ctx, tenant, d).await?;
    if password.expose_str().is_none() {
        return Err(EngineError::new(
            Category::Validation,
            msg::PASSWORD_NOT_UTF8,
        ));
    }
    Ok(password)
}
