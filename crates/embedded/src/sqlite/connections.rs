//! Connections: a row per connection, its protected secret beside the descriptor; deletes
//! are soft (the row keeps its id).

use super::*;

pub(super) fn descriptor_from(
    doc: &str,
    attrs: &str,
) -> fetcher_engine::Result<ConnectionDescriptor> {
    let corrupt = || EngineError::new(Category::Internal, "stored connection is corrupt");
    let mut d: ConnectionDescriptor = serde_json::from_str(doc).map_err(|_| corrupt())?;
    d.host_attributes = serde_json::from_str::<HostAttributes>(attrs).map_err(|_| corrupt())?;
    d.lift_legacy_tls();
    Ok(d)
}

pub(super) fn not_found() -> EngineError {
    EngineError::of(fetcher_engine::Reason::ConnectionNotFound)
}

impl SqliteStore {
    async fn find_live(
        &self,
        tenant: &str,
        name: &str,
    ) -> fetcher_engine::Result<Option<ConnectionDescriptor>> {
        let row = sqlx::query("SELECT doc, host_attributes FROM connections WHERE tenant = ? AND config_name = ? AND deleted_at IS NULL")
            .bind(tenant)
            .bind(name)
            .fetch_optional(&self.read)
            .await
            .map_err(engine_db_error)?;
        row.map(|r| descriptor_from(r.get(0), r.get(1))).transpose()
    }

    async fn write_connection(
        &self,
        tenant: &str,
        key: (&str, &str),
        d: &ConnectionDescriptor,
        credential: Option<&ProtectedCredential>,
    ) -> fetcher_engine::Result<()> {
        let doc = serde_json::to_string(d).expect("descriptor is JSON");
        let attrs = serde_json::to_string(&d.host_attributes).expect("attributes are JSON");
        let mut q =
            String::from("UPDATE connections SET config_name = ?, doc = ?, host_attributes = ?");
        if credential.is_some() {
            q.push_str(", ciphertext = ?, cred_version = ?");
        }
        q.push_str(" WHERE tenant = ? AND config_name = ? AND id = ? AND deleted_at IS NULL");
        let mut query = sqlx::query(&q).bind(&d.config_name).bind(doc).bind(attrs);
        if let Some(c) = credential {
            query = query.bind(c.ciphertext.clone()).bind(c.key_version.clone());
        }
        let done = query
            .bind(tenant)
            .bind(key.0)
            .bind(key.1)
            .execute(&self.write)
            .await
            .map_err(engine_db_error)?;
        if done.rows_affected() == 0 {
            Err(not_found())
        } else {
            Ok(())
        }
    }

    async fn live_key_by_id(
        &self,
        tenant: &str,
        id: &str,
    ) -> fetcher_engine::Result<Option<(String, String)>> {
        if id.is_empty() {
            return Ok(None);
        }
        let row = sqlx::query("SELECT config_name, id FROM connections WHERE tenant = ? AND id = ? AND deleted_at IS NULL")
            .bind(tenant)
            .bind(id)
            .fetch_optional(&self.read)
            .await
            .map_err(engine_db_error)?;
        Ok(row.map(|r| (r.get(0), r.get(1))))
    }

    async fn live_id(&self, tenant: &str, name: &str) -> fetcher_engine::Result<Option<String>> {
        let row = sqlx::query("SELECT id FROM connections WHERE tenant = ? AND config_name = ? AND deleted_at IS NULL")
            .bind(tenant)
            .bind(name)
            .fetch_optional(&self.read)
            .await
            .map_err(engine_db_error)?;
        Ok(row.map(|r| r.get(0)))
    }
}

impl ConnectionStore for SqliteStore {
    fn find<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ConnectionDescriptor>>> {
        Box::pin(self.find_live(&t.tenant_id, name))
    }

    fn create<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        d: &'a ConnectionDescriptor,
        c: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let mut d = d.clone();
            if d.id.is_empty() {
                d.id = uuid::Uuid::now_v7().to_string();
            }
            let doc = serde_json::to_string(&d).expect("descriptor is JSON");
            let attrs = serde_json::to_string(&d.host_attributes).expect("attributes are JSON");
            let res = sqlx::query("INSERT INTO connections (tenant, config_name, id, doc, host_attributes, ciphertext, cred_version) VALUES (?, ?, ?, ?, ?, ?, ?)")
                .bind(&t.tenant_id)
                .bind(&d.config_name)
                .bind(&d.id)
                .bind(doc)
                .bind(attrs)
                .bind(c.map(|c| c.ciphertext.clone()))
                .bind(c.map(|c| c.key_version.clone()))
                .execute(&self.write)
                .await;
            match res {
                Ok(_) => Ok(()),
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                    Err(EngineError::of(fetcher_engine::Reason::ConnectionExists))
                }
                Err(e) => Err(engine_db_error(e)),
            }
        })
    }

    fn update<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        d: &'a ConnectionDescriptor,
        c: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let id = self
                .live_id(&t.tenant_id, &d.config_name)
                .await?
                .ok_or_else(not_found)?;
            let mut d = d.clone();
            d.id.clone_from(&id);
            self.write_connection(&t.tenant_id, (&d.config_name.clone(), &id), &d, c)
                .await
        })
    }

    fn delete<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let done = sqlx::query("DELETE FROM connections WHERE tenant = ? AND config_name = ? AND deleted_at IS NULL")
                .bind(&t.tenant_id)
                .bind(name)
                .execute(&self.write)
                .await
                .map_err(engine_db_error)?;
            if done.rows_affected() == 0 {
                Err(not_found())
            } else {
                Ok(())
            }
        })
    }

    fn list<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
    ) -> BoxFuture<'a, fetcher_engine::Result<Vec<ConnectionDescriptor>>> {
        Box::pin(async move {
            let rows = sqlx::query("SELECT doc, host_attributes FROM connections WHERE tenant = ? AND deleted_at IS NULL ORDER BY config_name")
                .bind(&t.tenant_id)
                .fetch_all(&self.read)
                .await
                .map_err(engine_db_error)?;
            rows.iter()
                .map(|r| descriptor_from(r.get(0), r.get(1)))
                .collect()
        })
    }

    fn find_by_id<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        id: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ConnectionDescriptor>>> {
        Box::pin(async move {
            match self.live_key_by_id(&t.tenant_id, id).await? {
                Some((name, _)) => self.find_live(&t.tenant_id, &name).await,
                None => Ok(None),
            }
        })
    }

    fn update_by_id<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        id: &'a str,
        d: &'a ConnectionDescriptor,
        c: Option<&'a ProtectedCredential>,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let (name, id) = self
                .live_key_by_id(&t.tenant_id, id)
                .await?
                .ok_or_else(not_found)?;
            let mut d = d.clone();
            d.id.clone_from(&id);
            self.write_connection(&t.tenant_id, (&name, &id), &d, c)
                .await
        })
    }

    /// Removes the record and its credential, as [`ConnectionStore::delete`] does (the
    /// port's retention rule: nothing of a deleted connection is kept).
    fn delete_by_id<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        id: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let done = sqlx::query(
                "DELETE FROM connections WHERE tenant = ? AND id = ? AND deleted_at IS NULL",
            )
            .bind(&t.tenant_id)
            .bind(id)
            .execute(&self.write)
            .await
            .map_err(engine_db_error)?;
            if done.rows_affected() == 0 {
                Err(not_found())
            } else {
                Ok(())
            }
        })
    }

    fn credential<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ProtectedCredential>>> {
        Box::pin(async move {
            let row = sqlx::query("SELECT ciphertext, cred_version FROM connections WHERE tenant = ? AND config_name = ? AND deleted_at IS NULL")
                .bind(&t.tenant_id)
                .bind(name)
                .fetch_optional(&self.read)
                .await
                .map_err(engine_db_error)?;
            Ok(row.and_then(|r| {
                let ciphertext: Option<Vec<u8>> = r.get(0);
                let key_version: Option<String> = r.get(1);
                ciphertext.map(|ciphertext| ProtectedCredential {
                    ciphertext,
                    key_version: key_version.unwrap_or_default(),
                })
            }))
        })
    }
}
