//! Authentication and tenancy (docs/api.md, "Calling it").
//!
//! An [`Authenticator`] turns a request's head into an optional verified [`Principal`].
//! Two implementations:
//!
//! * [`JwtAuthenticator`] (for `fetcher serve`): `Authorization: Bearer <jwt>` (scheme
//!   case-insensitive, bare token accepted), verified with an HS256 secret or an RS256
//!   public key (PEM); signature, `exp` (required) and `nbf` are checked, and optionally
//!   `iss` / `aud`. An HS256 secret under [`MIN_HS256_SECRET_BYTES`] is refused at
//!   construction (an empty key would let anyone sign); a token whose header has `crit`
//!   (RFC 7515 §4.1.11: we understand no extension) or whose header or claims repeat a
//!   name (RFC 7519 §4: reject or take the last; we reject) is refused.
//! * [`ClaimsAuthenticator`] (for the API Lambda): the host has already verified the token
//!   (API Gateway JWT authorizer) and puts the claims in the request extensions as
//!   [`VerifiedClaims`]; nothing is parsed from headers.
//!
//! [`NoAuthentication`] is the single-tenant default. Unlike the reference, a token is
//! never trusted unverified: the reference parsed the tenant from an unverified JWT and
//! left verification to an optional plugin.

use axum::http::StatusCode;
use axum::http::request::Parts;
use fetcher_engine::tenant::is_valid_tenant_id;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use super::error::ApiError;

/// Claims already verified by the host (e.g. API Gateway's JWT authorizer), inserted as a
/// request extension.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VerifiedClaims(pub Map<String, Value>);

/// Who is calling, after verification.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Principal {
    /// `sub`, when present.
    pub subject: Option<String>,
    /// All verified claims (the tenant is read from `tenantId`).
    pub claims: Map<String, Value>,
}

/// Why a request could not be authenticated. Rendered as shape E (docs/api.md, "Errors").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthError {
    /// `Authorization` present but not a parseable JWT.
    Malformed,
    /// Parseable, but the signature, `exp`, `nbf`, `iss` or `aud` check failed.
    Rejected,
    /// Claims are not a JSON object.
    ClaimsNotObject,
}

impl AuthError {
    pub fn to_api_error(&self) -> ApiError {
        match self {
            AuthError::Malformed => ApiError::perimeter(
                StatusCode::UNAUTHORIZED,
                "INVALID_TOKEN",
                "Unauthorized",
                "Failed to parse authorization token",
            ),
            AuthError::Rejected => ApiError::perimeter(
                StatusCode::UNAUTHORIZED,
                "INVALID_TOKEN",
                "Unauthorized",
                "Authorization token is invalid or expired",
            ),
            AuthError::ClaimsNotObject => ApiError::perimeter(
                StatusCode::UNAUTHORIZED,
                "INVALID_TOKEN",
                "Unauthorized",
                "JWT claims are not in expected format",
            ),
        }
    }
}

/// Authenticates a request from its head. `Ok(None)`: no credentials were presented.
pub trait Authenticator: Send + Sync {
    fn authenticate(&self, parts: &Parts) -> Result<Option<Principal>, AuthError>;
}

/// Presents nobody (single-tenant deployments without authentication).
pub struct NoAuthentication;

impl Authenticator for NoAuthentication {
    fn authenticate(&self, _: &Parts) -> Result<Option<Principal>, AuthError> {
        Ok(None)
    }
}

/// Reads [`VerifiedClaims`] placed in the request extensions by the host.
pub struct ClaimsAuthenticator;

impl Authenticator for ClaimsAuthenticator {
    fn authenticate(&self, parts: &Parts) -> Result<Option<Principal>, AuthError> {
        Ok(parts
            .extensions
            .get::<VerifiedClaims>()
            .map(|c| principal(c.0.clone())))
    }
}

fn principal(claims: Map<String, Value>) -> Principal {
    Principal {
        subject: claims.get("sub").and_then(Value::as_str).map(str::to_owned),
        claims,
    }
}

/// The shortest HS256 secret accepted: 256 bits, the size of the HMAC-SHA256 output
/// (RFC 7518 §3.2 requires a key at least that long).
pub const MIN_HS256_SECRET_BYTES: usize = 32;

/// Why a [`JwtAuthenticator`] could not be built. Hosts stop at start on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtConfigError {
    #[error("the HS256 secret is {0} bytes; at least {MIN_HS256_SECRET_BYTES} are required")]
    WeakSecret(usize),
    #[error("invalid RSA public key (PEM)")]
    InvalidPublicKey,
    /// A private key where the public one belongs: the key that signs tokens must stay
    /// with their issuer, and a verifier holding it could mint them.
    #[error(
        "this PEM holds a private key: give the issuer's RSA public key (BEGIN PUBLIC KEY or BEGIN RSA PUBLIC KEY), and keep the private key with the token issuer"
    )]
    PrivateKeyGiven,
}

/// Verifies `Authorization: Bearer <jwt>` with one key.
pub struct JwtAuthenticator {
    key: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for JwtAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtAuthenticator")
            .field("algorithms", &self.validation.algorithms)
            .finish_non_exhaustive()
    }
}

impl JwtAuthenticator {
    /// HS256 with a shared secret of at least [`MIN_HS256_SECRET_BYTES`].
    pub fn hs256(secret: &[u8]) -> Result<Self, JwtConfigError> {
        if secret.len() < MIN_HS256_SECRET_BYTES {
            return Err(JwtConfigError::WeakSecret(secret.len()));
        }
        Ok(Self::new(
            DecodingKey::from_secret(secret),
            Algorithm::HS256,
        ))
    }

    /// RS256 with an RSA public key in PEM.
    pub fn rs256_pem(pem: &[u8]) -> Result<Self, JwtConfigError> {
        // jsonwebtoken reads the public half out of a private key PEM too: refuse one.
        let text = String::from_utf8_lossy(pem);
        if text.contains("PRIVATE KEY-----") {
            return Err(JwtConfigError::PrivateKeyGiven);
        }
        if !text.contains("-----BEGIN PUBLIC KEY-----")
            && !text.contains("-----BEGIN RSA PUBLIC KEY-----")
        {
            return Err(JwtConfigError::InvalidPublicKey);
        }
        let key = DecodingKey::from_rsa_pem(pem).map_err(|_| JwtConfigError::InvalidPublicKey)?;
        Ok(Self::new(key, Algorithm::RS256))
    }

    fn new(key: DecodingKey, alg: Algorithm) -> Self {
        let mut validation = Validation::new(alg);
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.validate_aud = false;
        validation.leeway = 30;
        JwtAuthenticator { key, validation }
    }

    /// Also require `iss`, and to be one of these (a token without `iss` is rejected).
    pub fn with_issuer(mut self, issuers: &[&str]) -> Self {
        self.validation.set_issuer(issuers);
        self.validation.required_spec_claims.insert("iss".into());
        self
    }

    /// Also require `aud`, and to contain one of these (a token without `aud` is
    /// rejected).
    pub fn with_audience(mut self, audiences: &[&str]) -> Self {
        self.validation.set_audience(audiences);
        self.validation.validate_aud = true;
        self.validation.required_spec_claims.insert("aud".into());
        self
    }

    /// Verifies a raw token.
    pub fn verify(&self, token: &str) -> Result<Principal, AuthError> {
        // Shape first, so a non-JWT is "malformed" rather than "rejected".
        jsonwebtoken::decode_header(token).map_err(|_| AuthError::Malformed)?;
        check_segments(token)?;
        let data = jsonwebtoken::decode::<Value>(token, &self.key, &self.validation).map_err(
            |e| match e.kind() {
                jsonwebtoken::errors::ErrorKind::InvalidToken
                | jsonwebtoken::errors::ErrorKind::Base64(_)
                | jsonwebtoken::errors::ErrorKind::Json(_)
                | jsonwebtoken::errors::ErrorKind::Utf8(_) => AuthError::Malformed,
                _ => AuthError::Rejected,
            },
        )?;
        match data.claims {
            Value::Object(map) => Ok(principal(map)),
            _ => Err(AuthError::ClaimsNotObject),
        }
    }
}

impl Authenticator for JwtAuthenticator {
    fn authenticate(&self, parts: &Parts) -> Result<Option<Principal>, AuthError> {
        let Some(value) = parts.headers.get(axum::http::header::AUTHORIZATION) else {
            return Ok(None);
        };
        let Ok(text) = value.to_str() else {
            return Err(AuthError::Malformed);
        };
        match bearer_token(text) {
            None => Ok(None),
            Some(token) => self.verify(token).map(Some),
        }
    }
}

/// What `jsonwebtoken` does not check: a `crit` header parameter (we implement no
/// extension, so any is one we do not understand) and a name repeated in the header or
/// the claims (serde would silently keep the last).
fn check_segments(token: &str) -> Result<(), AuthError> {
    use base64::Engine as _;
    let mut parts = token.split('.');
    for segment in [parts.next(), parts.next()] {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(segment.ok_or(AuthError::Malformed)?.trim_end_matches('='))
            .map_err(|_| AuthError::Malformed)?;
        let names: UniqueNames = serde_json::from_slice(&bytes).map_err(|_| AuthError::Rejected)?;
        if names.0.iter().any(|n| n == "crit") {
            return Err(AuthError::Rejected);
        }
    }
    Ok(())
}

/// The member names of a JSON object, failing on a repeated one.
struct UniqueNames(Vec<String>);

impl<'de> serde::Deserialize<'de> for UniqueNames {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = UniqueNames;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<UniqueNames, A::Error> {
                let mut seen = std::collections::HashSet::new();
                while let Some(name) = map.next_key::<String>()? {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    if !seen.insert(name.clone()) {
                        return Err(serde::de::Error::custom(format!(
                            "duplicate member `{name}`"
                        )));
                    }
                }
                Ok(UniqueNames(seen.into_iter().collect()))
            }
        }
        d.deserialize_map(Visitor)
    }
}

/// The token of an `Authorization` value: `Bearer <t>` (any case) or a bare token.
pub fn bearer_token(value: &str) -> Option<&str> {
    let v = value.trim();
    let token = match v.split_once(' ') {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
        _ => v,
    };
    (!token.is_empty()).then_some(token)
}

/// The tenant of a verified principal (multi-tenant mode), or the perimeter error.
pub fn tenant_of(principal: Option<&Principal>) -> Result<String, ApiError> {
    let Some(p) = principal else {
        return Err(ApiError::perimeter(
            StatusCode::UNAUTHORIZED,
            "MISSING_TOKEN",
            "Unauthorized",
            "Authorization token is required",
        ));
    };
    let missing = || {
        ApiError::perimeter(
            StatusCode::UNAUTHORIZED,
            "MISSING_TENANT",
            "Unauthorized",
            "tenantId is required in JWT token",
        )
    };
    match p.claims.get("tenantId") {
        Some(Value::String(t)) if !t.is_empty() => {
            if is_valid_tenant_id(t) {
                Ok(t.clone())
            } else {
                Err(ApiError::perimeter(
                    StatusCode::UNAUTHORIZED,
                    "INVALID_TENANT",
                    "Unauthorized",
                    "tenantId has invalid format",
                ))
            }
        }
        _ => Err(missing()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_extraction() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bEaReR   abc "), Some("abc"));
        assert_eq!(bearer_token("abc"), Some("abc"));
        assert_eq!(bearer_token("Bearer "), Some("Bearer"));
        assert_eq!(bearer_token("  "), None);
    }
}
