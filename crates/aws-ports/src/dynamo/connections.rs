//! Connections: a name item and an id item per connection, created and renamed in one
//! transaction; the credential re-encryption pass.

use super::*;

pub(super) fn conn_pk(tenant: &str) -> String {
    format!("CONN#{tenant}")
}

pub(super) fn name_sk(name: &str) -> String {
    format!("N#{name}")
}

pub(super) fn id_sk(id: &str) -> String {
    format!("I#{id}")
}

pub(super) fn not_found() -> EngineError {
    EngineError::of(fetcher_engine::Reason::ConnectionNotFound)
}

pub(super) const CONN_UNAVAILABLE: &str = "connection store unavailable";

pub(super) fn descriptor_from(item: &Item) -> fetcher_engine::Result<ConnectionDescriptor> {
    let corrupt = || EngineError::new(Category::Internal, "stored connection is corrupt");
    let mut d: ConnectionDescriptor =
        serde_json::from_str(get_s(item, "doc").ok_or_else(corrupt)?).map_err(|_| corrupt())?;
    d.host_attributes =
        serde_json::from_str::<HostAttributes>(get_s(item, "attrs").ok_or_else(corrupt)?)
            .map_err(|_| corrupt())?;
    d.id = get_s(item, "id").ok_or_else(corrupt)?.to_owned();
    d.lift_legacy_tls();
    Ok(d)
}

pub(super) fn name_item(
    tenant: &str,
    d: &ConnectionDescriptor,
    credential: Option<&ProtectedCredential>,
) -> Item {
    let mut item = key(conn_pk(tenant), &name_sk(&d.config_name));
    item.insert("id".into(), s(&d.id));
    item.insert(
        "doc".into(),
        s(serde_json::to_string(d).expect("descriptor is JSON")),
    );
    item.insert(
        "attrs".into(),
        s(serde_json::to_string(&d.host_attributes).expect("attributes are JSON")),
    );
    if let Some(c) = credential {
        item.insert(
            "cred".into(),
            AttributeValue::B(Blob::new(c.ciphertext.clone())),
        );
        item.insert("credVersion".into(), s(&c.key_version));
    }
    item
}

/// What a re-encryption pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReencryptReport {
    /// Stored credentials seen.
    pub credentials: u64,
    /// Re-encrypted under the current key version.
    pub reencrypted: u64,
    /// Not readable under any version of the ring (left as they are).
    pub unreadable: u64,
}

impl DynamoStore {
    /// Re-encrypts every stored credential, across tenants, that is not under the
    /// cipher's current key version (after a master key rotation): a scan of the
    /// connection items, each rewritten only if its version is still the one read.
    pub async fn reencrypt_credentials(
        &self,
        cipher: &fetcher_crypto::CredentialCipher,
        current_version: &str,
    ) -> Result<ReencryptReport> {
        let mut report = ReencryptReport::default();
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("begins_with(pk, :conn) AND attribute_exists(cred)")
                .expression_attribute_values(":conn", s("CONN#"))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(unavailable)?;
            for item in page.items() {
                let Some(cred) = credential_from(item) else {
                    continue;
                };
                report.credentials += 1;
                if cred.key_version == current_version {
                    continue;
                }
                let revealed = std::str::from_utf8(&cred.ciphertext)
                    .ok()
                    .and_then(|text| cipher.reveal(text, &cred.key_version).ok());
                let Some(plain) = revealed else {
                    report.unreadable += 1;
                    continue;
                };
                let fresh = cipher
                    .protect(&plain)
                    .map_err(|e| ServiceError::internal("re-encryption failed").with_cause(e))?;
                let (Some(pk), Some(sk)) = (item.get("pk"), item.get("sk")) else {
                    continue;
                };
                let res = self
                    .client
                    .update_item()
                    .table_name(&self.table)
                    .key("pk", pk.clone())
                    .key("sk", sk.clone())
                    .update_expression("SET cred = :c, credVersion = :v")
                    .condition_expression("credVersion = :old")
                    .expression_attribute_values(
                        ":c",
                        AttributeValue::B(Blob::new(fresh.ciphertext.into_bytes())),
                    )
                    .expression_attribute_values(":v", s(&fresh.key_version))
                    .expression_attribute_values(":old", s(&cred.key_version))
                    .send()
                    .await;
                match res {
                    Ok(_) => report.reencrypted += 1,
                    Err(e) if is_conditional(&e) => {} // changed meanwhile (a PATCH): it is current
                    Err(e) => return Err(unavailable(e)),
                }
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        Ok(report)
    }
}

pub(super) fn credential_from(item: &Item) -> Option<ProtectedCredential> {
    let ciphertext = item.get("cred")?.as_b().ok()?.as_ref().to_vec();
    Some(ProtectedCredential {
        ciphertext,
        key_version: get_s(item, "credVersion").unwrap_or_default().to_owned(),
    })
}

impl DynamoStore {
    async fn conn_get(&self, tenant: &str, sk: &str) -> fetcher_engine::Result<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(conn_pk(tenant), sk)))
            .consistent_read(true)
            .send()
            .await
            .map_err(engine_unavailable(CONN_UNAVAILABLE))?;
        Ok(out.item)
    }

    /// The live name item of connection `id`.
    async fn conn_by_id(&self, tenant: &str, id: &str) -> fetcher_engine::Result<Option<Item>> {
        if id.is_empty() {
            return Ok(None);
        }
        let Some(idx) = self.conn_get(tenant, &id_sk(id)).await? else {
            return Ok(None);
        };
        let Some(name) = get_s(&idx, "name") else {
            return Ok(None);
        };
        Ok(self
            .conn_get(tenant, &name_sk(name))
            .await?
            .filter(|item| get_s(item, "id") == Some(id)))
    }

    /// Rewrites the name item of `current` (same name) with `d`, keeping the secret when
    /// `credential` is `None`. Conditional on the record still being connection `id`.
    async fn conn_update_same_name(
        &self,
        tenant: &str,
        id: &str,
        d: &ConnectionDescriptor,
        credential: Option<&ProtectedCredential>,
    ) -> fetcher_engine::Result<()> {
        let mut d = d.clone();
        d.id = id.to_owned();
        let mut expr = String::from("SET doc = :doc, attrs = :attrs");
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(conn_pk(tenant), &name_sk(&d.config_name))))
            .condition_expression("attribute_exists(pk) AND id = :id")
            .expression_attribute_values(":id", s(id))
            .expression_attribute_values(
                ":doc",
                s(serde_json::to_string(&d).expect("descriptor is JSON")),
            )
            .expression_attribute_values(
                ":attrs",
                s(serde_json::to_string(&d.host_attributes).expect("attributes are JSON")),
            );
        if let Some(c) = credential {
            expr.push_str(", cred = :cred, credVersion = :cv");
            req = req
                .expression_attribute_values(
                    ":cred",
                    AttributeValue::B(Blob::new(c.ciphertext.clone())),
                )
                .expression_attribute_values(":cv", s(&c.key_version));
        }
        match req.update_expression(expr).send().await {
            Ok(_) => Ok(()),
            Err(e) if is_conditional(&e) => Err(not_found()),
            Err(e) => Err(engine_unavailable(CONN_UNAVAILABLE)(e)),
        }
    }

    /// Deletes the name item (conditional on `id`) and the id item in one transaction.
    async fn conn_delete(&self, tenant: &str, name: &str, id: &str) -> fetcher_engine::Result<()> {
        let items = vec![
            delete(
                &self.table,
                key(conn_pk(tenant), &name_sk(name)),
                Some("id = :id"),
                &[(":id", s(id))],
            ),
            delete(&self.table, key(conn_pk(tenant), &id_sk(id)), None, &[]),
        ];
        match self.transact(items).await {
            Ok(()) => Ok(()),
            Err(e) if cancellation(&e).is_some() => Err(not_found()),
            Err(e) => Err(engine_unavailable(CONN_UNAVAILABLE)(e)),
        }
    }
}

impl ConnectionStore for DynamoStore {
    fn find<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ConnectionDescriptor>>> {
        Box::pin(async move {
            self.conn_get(&t.tenant_id, &name_sk(name))
                .await?
                .map(|i| descriptor_from(&i))
                .transpose()
        })
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
                d.id = uuid::Uuid::new_v4().to_string();
            }
            let tenant = &t.tenant_id;
            let mut idx = key(conn_pk(tenant), &id_sk(&d.id));
            idx.insert("name".into(), s(&d.config_name));
            let items = vec![
                put(
                    &self.table,
                    name_item(tenant, &d, c),
                    Some("attribute_not_exists(pk)"),
                    &[],
                ),
                put(&self.table, idx, Some("attribute_not_exists(pk)"), &[]),
            ];
            match self.transact(items).await {
                Ok(()) => Ok(()),
                Err(e)
                    if cancellation(&e)
                        .is_some_and(|r| r.iter().any(|c| c == "ConditionalCheckFailed")) =>
                {
                    Err(EngineError::of(fetcher_engine::Reason::ConnectionExists))
                }
                Err(e) => Err(engine_unavailable(CONN_UNAVAILABLE)(e)),
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
            let item = self
                .conn_get(&t.tenant_id, &name_sk(&d.config_name))
                .await?
                .ok_or_else(not_found)?;
            let id = get_s(&item, "id").unwrap_or_default().to_owned();
            self.conn_update_same_name(&t.tenant_id, &id, d, c).await
        })
    }

    fn delete<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let item = self
                .conn_get(&t.tenant_id, &name_sk(name))
                .await?
                .ok_or_else(not_found)?;
            let id = get_s(&item, "id").unwrap_or_default().to_owned();
            self.conn_delete(&t.tenant_id, name, &id).await
        })
    }

    fn list<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
    ) -> BoxFuture<'a, fetcher_engine::Result<Vec<ConnectionDescriptor>>> {
        Box::pin(async move {
            let mut out = Vec::new();
            let mut start: Option<Item> = None;
            loop {
                let page = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .key_condition_expression("pk = :pk AND begins_with(sk, :n)")
                    .expression_attribute_values(":pk", s(conn_pk(&t.tenant_id)))
                    .expression_attribute_values(":n", s("N#"))
                    .consistent_read(true)
                    .set_exclusive_start_key(start.take())
                    .send()
                    .await
                    .map_err(engine_unavailable(CONN_UNAVAILABLE))?;
                for item in page.items() {
                    out.push(descriptor_from(item)?);
                }
                match page.last_evaluated_key {
                    Some(k) if !k.is_empty() => start = Some(k),
                    _ => break,
                }
            }
            Ok(out)
        })
    }

    fn find_by_id<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        id: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ConnectionDescriptor>>> {
        Box::pin(async move {
            self.conn_by_id(&t.tenant_id, id)
                .await?
                .map(|i| descriptor_from(&i))
                .transpose()
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
            let tenant = &t.tenant_id;
            let current = self.conn_by_id(tenant, id).await?.ok_or_else(not_found)?;
            let old_name = descriptor_from(&current)?.config_name;
            if old_name == d.config_name {
                return self.conn_update_same_name(tenant, id, d, c).await;
            }
            // A rename: move the record to the new name in one transaction.
            let mut d = d.clone();
            d.id = id.to_owned();
            let kept = credential_from(&current);
            let mut idx = key(conn_pk(tenant), &id_sk(id));
            idx.insert("name".into(), s(&d.config_name));
            let items = vec![
                delete(
                    &self.table,
                    key(conn_pk(tenant), &name_sk(&old_name)),
                    Some("id = :id"),
                    &[(":id", s(id))],
                ),
                put(
                    &self.table,
                    name_item(tenant, &d, c.or(kept.as_ref())),
                    Some("attribute_not_exists(pk)"),
                    &[],
                ),
                put(&self.table, idx, None, &[]),
            ];
            match self.transact(items).await {
                Ok(()) => Ok(()),
                Err(e) => match cancellation(&e) {
                    Some(r) if r.get(1).is_some_and(|c| c == "ConditionalCheckFailed") => {
                        Err(EngineError::of(fetcher_engine::Reason::ConnectionExists))
                    }
                    Some(_) => Err(not_found()),
                    None => Err(engine_unavailable(CONN_UNAVAILABLE)(e)),
                },
            }
        })
    }

    fn delete_by_id<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        id: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<()>> {
        Box::pin(async move {
            let current = self
                .conn_by_id(&t.tenant_id, id)
                .await?
                .ok_or_else(not_found)?;
            let name = descriptor_from(&current)?.config_name;
            self.conn_delete(&t.tenant_id, &name, id).await
        })
    }

    fn credential<'a>(
        &'a self,
        _: &'a Context,
        t: &'a TenantContext,
        name: &'a str,
    ) -> BoxFuture<'a, fetcher_engine::Result<Option<ProtectedCredential>>> {
        Box::pin(async move {
            Ok(self
                .conn_get(&t.tenant_id, &name_sk(name))
                .await?
                .and_then(|i| credential_from(&i)))
        })
    }
}
