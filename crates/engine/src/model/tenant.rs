//! Tenant context: the only isolation boundary inside the engine (docs/engine.md, "Tenancy").

use crate::error::{EngineError, Result, msg};

/// Who is asking. `tenant_id` scopes every owned resource; `request_id` is for
/// correlation only and never used for authorisation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TenantContext {
    pub tenant_id: String,
    pub request_id: String,
}

/// The tenant id single-tenant hosts use when the request carries none.
pub const DEFAULT_TENANT: &str = "default";

impl TenantContext {
    /// Trims surrounding whitespace, then validates the id shape.
    pub fn new(raw: &str) -> Result<Self> {
        let id = raw.trim();
        if !is_valid_tenant_id(id) {
            return Err(EngineError::validation(msg::TENANT_INVALID));
        }
        Ok(TenantContext {
            tenant_id: id.to_owned(),
            request_id: String::new(),
        })
    }

    /// A copy with the (trimmed) request id set; the request id is not validated.
    pub fn with_request_id(&self, id: &str) -> Self {
        TenantContext {
            tenant_id: self.tenant_id.clone(),
            request_id: id.trim().to_owned(),
        }
    }

    pub fn is_zero(&self) -> bool {
        self.tenant_id.is_empty() && self.request_id.is_empty()
    }

    pub fn is_multi_tenant(&self) -> bool {
        !self.tenant_id.is_empty()
    }

    /// The operation-level guard: fields are public, so every scoped operation re-checks
    /// the shape (without trimming).
    pub fn validate_scope(&self) -> Result<()> {
        if is_valid_tenant_id(&self.tenant_id) {
            Ok(())
        } else {
            Err(EngineError::validation(msg::TENANT_SCOPE_REQUIRED))
        }
    }
}

/// 1..=256 bytes; first an ASCII letter or digit, then letters, digits, `-` or `_`.
pub fn is_valid_tenant_id(id: &str) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= 256
        && b[0].is_ascii_alphanumeric()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Category;

    #[test]
    fn pinned_valid_and_invalid_ids() {
        let long = "a".repeat(256);
        for ok in ["t", "tenant-1", "Tenant_9", "0abc", long.as_str()] {
            assert!(is_valid_tenant_id(ok), "{ok}");
            assert_eq!(TenantContext::new(ok).unwrap().tenant_id, ok);
        }
        let too_long = "a".repeat(257);
        for bad in [
            "",
            " ",
            "-a",
            "_a",
            "has spaces",
            "a\tb",
            "a\0b",
            "a/b",
            "ténant",
            "a.b",
            too_long.as_str(),
        ] {
            assert!(!is_valid_tenant_id(bad), "{bad:?}");
        }
        let err = TenantContext::new("has spaces").unwrap_err();
        assert_eq!(err.category(), Category::Validation);
        assert_eq!(err.message(), "tenant id is invalid");
    }

    #[test]
    fn constructor_trims_but_the_guard_does_not() {
        let t = TenantContext::new("  acme \n").unwrap();
        assert_eq!(t.tenant_id, "acme");
        assert!(t.request_id.is_empty());
        let raw = TenantContext {
            tenant_id: " acme".into(),
            request_id: String::new(),
        };
        assert_eq!(
            raw.validate_scope().unwrap_err().message(),
            "tenant scope is required"
        );
        let r = t.with_request_id("  req-1 ");
        assert_eq!(r.request_id, "req-1");
        assert!(t.request_id.is_empty(), "original unchanged");
        assert!(TenantContext::default().is_zero());
        assert!(!TenantContext::default().is_multi_tenant());
        assert!(t.is_multi_tenant());
    }
}
