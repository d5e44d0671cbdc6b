//! The deployment's key check (docs/operations.md, "Master key"): one item holding, per
//! master key version, the check value of the key that sealed what the table holds
//! (`KeyRing::check_value`). A Lambda checks its keys against it at its cold start and
//! refuses to start with another key for a recorded version, where it would otherwise
//! start and find every stored credential unreadable. The first start under a version
//! records it.

use fetcher_crypto::KeyRing;

use super::*;

const KEY_CHECK_PK: &str = "KEYCHECK";
const KEY_CHECK_SK: &str = "K";
/// A version's check value is attribute `check_<version>` of the item.
const ATTR_PREFIX: &str = "check_";

/// Why a start was refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyCheckError {
    /// The configured key of `version` is not the one recorded: what to do.
    #[error(
        "the store's credentials and results were sealed with another master key (version {0} differs): restore the master key secret this deployment was created with"
    )]
    AnotherKey(String),
    #[error("the key check could not be read or written")]
    Store(#[source] ServiceError),
    #[error("the key check could not be computed")]
    Keys(#[source] fetcher_crypto::Error),
}

impl DynamoStore {
    /// Checks `ring` against the recorded key checks: every version both hold must have
    /// the recorded key; the current version is recorded when it is new. A recorded
    /// version the ring no longer holds (retired after a rotation) is only logged.
    pub async fn verify_key_check(&self, ring: &KeyRing) -> std::result::Result<(), KeyCheckError> {
        let recorded = self
            .get_item(key(KEY_CHECK_PK.into(), KEY_CHECK_SK))
            .await
            .map_err(KeyCheckError::Store)?
            .unwrap_or_default();
        for (name, value) in &recorded {
            let (Some(version), Some(value)) = (name.strip_prefix(ATTR_PREFIX), value.as_s().ok())
            else {
                continue;
            };
            match ring.check_value(version) {
                Ok(mine) if mine == *value => {}
                Ok(_) => return Err(KeyCheckError::AnotherKey(version.to_owned())),
                Err(_) => tracing::warn!(
                    version,
                    "the store records a master key version the configured keys no longer hold"
                ),
            }
        }
        let current = ring.current_version();
        let mine = ring.check_value(current).map_err(KeyCheckError::Keys)?;
        let attr = format!("{ATTR_PREFIX}{current}");
        if recorded.contains_key(&attr) {
            return Ok(());
        }
        // Recorded once; a start racing this one with another key loses here.
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(KEY_CHECK_PK.into(), KEY_CHECK_SK)))
            .update_expression("SET #v = :c")
            .condition_expression("attribute_not_exists(#v) OR #v = :c")
            .expression_attribute_names("#v", &attr)
            .expression_attribute_values(":c", s(mine))
            .send()
            .await;
        match out {
            Ok(_) => Ok(()),
            Err(e) if is_conditional(&e) => Err(KeyCheckError::AnotherKey(current.to_owned())),
            Err(e) => Err(KeyCheckError::Store(unavailable(e))),
        }
    }
}
