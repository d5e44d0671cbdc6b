//! The API's connection record on top of the engine's descriptor: the host-attribute keys
//! it keeps there, and the store decorator that gives a created record its API id.
//! Host-level (no HTTP types), because the job service reads the same record.

use std::sync::Arc;

use fetcher_engine::ports::ConnectionStore;
use fetcher_engine::{
    BoxFuture, Category, ConnectionDescriptor, ConnectionListParams, ConnectionPage, Context,
    EngineError, ProtectedCredential, TenantContext,
};

/// Host-attribute keys of the API's connection record.
pub mod attr {
    pub const ID: &str = "id";
    pub const PRODUCT: &str = "productName";
    pub const METADATA: &str = "metadata";
    pub const CREATED_AT: &str = "createdAt";
    pub const UPDATED_AT: &str = "updatedAt";
    /// The tenant CA, where the connectors read it.
    pub const SSL_CA: &str = fetcher_connectors::SSL_ROOT_CERT_KEY;
    pub const SSL_CERT: &str = "sslCert";
}

/// Wraps a connection store for the API: a record's API identity (host attribute
/// [`attr::ID`]) becomes the descriptor's `id` on create (the engine's create leaves it
/// empty), and a duplicate create is reported as `conflict` whatever the store says.
pub struct ApiConnectionStore(pub Arc<dyn ConnectionStore>);

impl ApiConnectionStore {
    pub fn new(inner: Arc<dyn ConnectionStore>) -> Arc<Self> {
        Arc::new(ApiConnectionStore(inner))
    }
}

fn with_api_id(d: &ConnectionDescriptor) -> ConnectionDescriptor {
    let mut d = d.clone();
    if d.id.is_empty()
        && let Some(serde_json::Value::String(id)) = d.host_attributes.get(attr::ID)
    {
        d.id.clone_from(id);
    }
    d
}

impl ConnectionStore for ApiConnectionStore {
    fn find<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ConnectionDescriptor>>> {
        self.0.find(ctx, tenant, name)
    }

    fn create<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        d: &'a ConnectionDescriptor,
        credential: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let d = with_api_id(d);
            self.0
                .create(ctx, tenant, &d, credential)
                .await
                .map_err(|e| {
                    if e.category() == Category::Validation
                        && e.message() == fetcher_engine::error::msg::CONNECTION_EXISTS
                    {
                        EngineError::new(
                            Category::Conflict,
                            fetcher_engine::error::msg::CONNECTION_EXISTS,
                        )
                    } else {
                        e
                    }
                })
        })
    }

    fn update<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        d: &'a ConnectionDescriptor,
        credential: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        self.0.update(ctx, tenant, d, credential)
    }

    fn delete<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        self.0.delete(ctx, tenant, name)
    }

    fn list<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
    ) -> BoxFuture<'a, fetcher_engine::Result<Vec<ConnectionDescriptor>>> {
        self.0.list(ctx, tenant)
    }

    fn find_by_id<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        id: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ConnectionDescriptor>>> {
        self.0.find_by_id(ctx, tenant, id)
    }

    fn update_by_id<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        id: &'a str,
        d: &'a ConnectionDescriptor,
        credential: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        self.0.update_by_id(ctx, tenant, id, d, credential)
    }

    fn delete_by_id<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        id: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        self.0.delete_by_id(ctx, tenant, id)
    }

    fn list_paged<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        params: &'a ConnectionListParams,
    ) -> BoxFuture<'a, fetcher_engine::Result<ConnectionPage>> {
        self.0.list_paged(ctx, tenant, params)
    }

    fn credential<'a>(
        &'a self,
        ctx: &'a Context,
        tenant: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ProtectedCredential>>> {
        self.0.credential(ctx, tenant, name)
    }
}
