//! Authentication and tenancy: HS256 and RS256 tokens, host-verified claims, required
//! auth in single-tenant mode, weak secrets, `crit` and repeated names, issuer and
//! audience.

mod http_support;

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use fetcher_http::{
    ApiConfig, ClaimsAuthenticator, JwtAuthenticator, JwtConfigError, VerifiedClaims,
};
use http_support::*;
use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;

#[tokio::test]
async fn hs256_tenancy_and_isolation() {
    let h = multi_tenant(Arc::new(JwtAuthenticator::hs256(SECRET).unwrap()));
    let exp = now() + 600;
    let a = format!(
        "Bearer {}",
        hs(json!({"tenantId": "tenant-a", "sub": "u1", "exp": exp}))
    );
    let b = hs(json!({"tenantId": "tenant-b", "exp": exp})); // bare token accepted
    let create = |auth: String, name: &'static str| {
        let h = &h;
        async move {
            h.call(
                Method::POST,
                "/v1/management/connections",
                &[("authorization", auth.as_str()), ("x-product-name", "p")],
                Some(connection(name)),
            )
            .await
        }
    };
    let ca = create(a.clone(), "shared-name").await;
    assert_eq!(ca.status, StatusCode::CREATED, "{}", ca.text);
    // The same name in another tenant is fine; ids are invisible across tenants.
    assert_eq!(
        create(b.clone(), "shared-name").await.status,
        StatusCode::CREATED
    );
    let id = ca.json()["id"].as_str().unwrap().to_owned();
    let url = format!("/v1/management/connections/{id}");
    assert_eq!(
        h.call(
            Method::GET,
            &url,
            &[("authorization", a.as_str()), ("x-product-name", "p")],
            None
        )
        .await
        .status,
        StatusCode::OK
    );
    for (m, u) in [
        (Method::GET, url.clone()),
        (Method::DELETE, url.clone()),
        (Method::POST, format!("{url}/test")),
        (Method::GET, format!("{url}/schema")),
    ] {
        let r = h
            .call(m.clone(), &u, &[("authorization", b.as_str())], None)
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::NOT_FOUND, json!("FET-1001")),
            "{m} {u}"
        );
    }
    let r = h
        .call(
            Method::GET,
            "/v1/management/connections",
            &[("authorization", b.as_str())],
            None,
        )
        .await;
    assert_eq!(r.json()["total"], 1);
    // A job of tenant A is invisible to tenant B.
    let j = h
        .call(
            Method::POST,
            "/v1/fetcher",
            &[("authorization", a.as_str())],
            Some(job("shared-name", "p")),
        )
        .await;
    assert_eq!(j.status, StatusCode::ACCEPTED, "{}", j.text);
    let job_url = format!("/v1/fetcher/{}", j.json()["jobId"].as_str().unwrap());
    assert_eq!(
        h.call(
            Method::GET,
            &job_url,
            &[("authorization", a.as_str())],
            None
        )
        .await
        .status,
        StatusCode::OK
    );
    assert_eq!(
        h.call(
            Method::GET,
            &job_url,
            &[("authorization", b.as_str())],
            None
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(h.queue.sent()[0].headers["X-Tenant-ID"], "tenant-a");

    // Perimeter errors (shape E).
    let forged = jsonwebtoken::encode(
        &Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"tenantId": "tenant-a", "exp": exp}),
        &EncodingKey::from_secret(b"another-secret-entirely-0123456789"),
    )
    .unwrap();
    let cases = [
        (None, "MISSING_TOKEN", "Authorization token is required"),
        (
            Some("Bearer not.a.jwt".to_owned()),
            "INVALID_TOKEN",
            "Failed to parse authorization token",
        ),
        (
            Some(forged),
            "INVALID_TOKEN",
            "Authorization token is invalid or expired",
        ),
        (
            Some(hs(json!({"tenantId": "tenant-a", "exp": now() - 3600}))),
            "INVALID_TOKEN",
            "Authorization token is invalid or expired",
        ),
        (
            Some(hs(
                json!({"tenantId": "tenant-a", "exp": exp, "nbf": now() + 3600}),
            )),
            "INVALID_TOKEN",
            "Authorization token is invalid or expired",
        ),
        (
            Some(hs(json!({"tenantId": "tenant-a"}))),
            "INVALID_TOKEN",
            "Authorization token is invalid or expired",
        ),
        (
            Some(hs(json!({"exp": exp}))),
            "MISSING_TENANT",
            "tenantId is required in JWT token",
        ),
        (
            Some(hs(json!({"tenantId": "", "exp": exp}))),
            "MISSING_TENANT",
            "tenantId is required in JWT token",
        ),
        (
            Some(hs(json!({"tenantId": 7, "exp": exp}))),
            "MISSING_TENANT",
            "tenantId is required in JWT token",
        ),
        (
            Some(hs(json!({"tenantId": "-bad", "exp": exp}))),
            "INVALID_TENANT",
            "tenantId has invalid format",
        ),
        (
            Some(hs(json!({"tenantId": "a".repeat(257), "exp": exp}))),
            "INVALID_TENANT",
            "tenantId has invalid format",
        ),
    ];
    for (token, code, message) in cases {
        let hdrs: Vec<(&str, &str)> = token
            .as_deref()
            .map(|t| vec![("authorization", t)])
            .unwrap_or_default();
        let r = h
            .call(Method::GET, "/v1/management/connections", &hdrs, None)
            .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{code}");
        assert_eq!(
            r.json(),
            json!({"code": code, "title": "Unauthorized", "message": message})
        );
        assert!(r.headers.contains_key("x-request-id"));
    }
    // Probes need no token.
    assert_eq!(h.get("/health").await.status, StatusCode::OK);
    assert_eq!(h.get("/metrics").await.status, StatusCode::OK);
}

#[tokio::test]
async fn rs256_tokens() {
    let public = include_bytes!("http_support/test_rsa_public.pem");
    let private = include_bytes!("http_support/test_rsa_private.pem");
    let h = multi_tenant(Arc::new(JwtAuthenticator::rs256_pem(public).unwrap()));
    let token = jsonwebtoken::encode(
        &Header::new(jsonwebtoken::Algorithm::RS256),
        &json!({"tenantId": "t1", "exp": now() + 60}),
        &EncodingKey::from_rsa_pem(private).unwrap(),
    )
    .unwrap();
    let r = h
        .call(
            Method::GET,
            "/v1/management/connections",
            &[("authorization", &format!("bearer {token}"))],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    // An HS256 token signed with the public key text (algorithm confusion) is rejected.
    let confused = jsonwebtoken::encode(
        &Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"tenantId": "t1", "exp": now() + 60}),
        &EncodingKey::from_secret(public),
    )
    .unwrap();
    let r = h
        .call(
            Method::GET,
            "/v1/management/connections",
            &[("authorization", &format!("Bearer {confused}"))],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(JwtAuthenticator::rs256_pem(b"not a pem").is_err());
    // The private key given where the public one belongs is refused, not used (#30).
    assert!(matches!(
        JwtAuthenticator::rs256_pem(private),
        Err(fetcher_http::JwtConfigError::PrivateKeyGiven)
    ));
}

#[tokio::test]
async fn host_verified_claims() {
    let h = multi_tenant(Arc::new(ClaimsAuthenticator));
    let mut req = axum::http::Request::builder()
        .uri("/v1/management/connections")
        .body(axum::body::Body::empty())
        .unwrap();
    req.extensions_mut().insert(VerifiedClaims(
        json!({"tenantId": "acme"}).as_object().unwrap().clone(),
    ));
    assert_eq!(h.send(req).await.status, StatusCode::OK);
    // A header token is never trusted by this authenticator.
    let r = h
        .call(
            Method::GET,
            "/v1/management/connections",
            &[(
                "authorization",
                &format!(
                    "Bearer {}",
                    hs(json!({"tenantId": "acme", "exp": now() + 60}))
                ),
            )],
            None,
        )
        .await;
    assert_eq!(r.code(), json!("MISSING_TOKEN"));
}

#[tokio::test]
async fn single_tenant_with_required_auth() {
    let h = harness_with(Options {
        config: ApiConfig {
            require_auth: true,
            ..Default::default()
        },
        authenticator: Arc::new(JwtAuthenticator::hs256(SECRET).unwrap()),
        probes: Vec::new(),
    });
    assert_eq!(
        h.get("/v1/management/connections").await.code(),
        json!("MISSING_TOKEN")
    );
    let t = hs(json!({"sub": "x", "exp": now() + 60}));
    let r = h
        .call(
            Method::GET,
            "/v1/management/connections",
            &[("authorization", &format!("Bearer {t}"))],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
}

/// Signs `header` and `claims` as given (raw JSON text, so names can repeat).
fn hs_raw(header: &str, claims: &str) -> String {
    use base64::Engine as _;
    let b64 = |s: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let input = format!("{}.{}", b64(header.as_bytes()), b64(claims.as_bytes()));
    let signature = jsonwebtoken::crypto::sign(
        input.as_bytes(),
        &EncodingKey::from_secret(SECRET),
        jsonwebtoken::Algorithm::HS256,
    )
    .unwrap();
    format!("{input}.{signature}")
}

#[test]
fn weak_hs256_secrets_are_refused() {
    for secret in [&b""[..], b"short", &[b'x'; 31]] {
        assert!(
            matches!(
                JwtAuthenticator::hs256(secret),
                Err(JwtConfigError::WeakSecret(n)) if n == secret.len()
            ),
            "{} bytes accepted",
            secret.len()
        );
    }
    assert!(JwtAuthenticator::hs256(&[b'x'; 32]).is_ok());
}

#[tokio::test]
async fn tokens_with_crit_or_repeated_names_are_rejected() {
    let h = multi_tenant(Arc::new(JwtAuthenticator::hs256(SECRET).unwrap()));
    let exp = now() + 600;
    let call = |token: String| {
        let h = &h;
        async move {
            h.call(
                Method::GET,
                "/v1/management/connections",
                &[("authorization", &format!("Bearer {token}"))],
                None,
            )
            .await
        }
    };
    let claims = format!(r#"{{"tenantId":"tenant-a","exp":{exp}}}"#);
    // The same signing path accepts a plain token: the refusals below are for cause.
    let ok = call(hs_raw(r#"{"alg":"HS256","typ":"JWT"}"#, &claims)).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
    for (header, claims) in [
        (
            r#"{"alg":"HS256","crit":["exp"]}"#.to_owned(),
            claims.clone(),
        ),
        (r#"{"alg":"HS256","crit":[]}"#.to_owned(), claims.clone()),
        (
            r#"{"alg":"HS256","alg":"HS256"}"#.to_owned(),
            claims.clone(),
        ),
        (
            r#"{"alg":"HS256"}"#.to_owned(),
            format!(r#"{{"tenantId":"tenant-b","tenantId":"tenant-a","exp":{exp}}}"#),
        ),
    ] {
        let r = call(hs_raw(&header, &claims)).await;
        assert_eq!(
            (r.status, r.json()["code"].clone()),
            (StatusCode::UNAUTHORIZED, json!("INVALID_TOKEN")),
            "{header} {claims}"
        );
    }
}

#[tokio::test]
async fn issuer_and_audience_are_checked_when_set() {
    let jwt = JwtAuthenticator::hs256(SECRET)
        .unwrap()
        .with_issuer(&["https://idp.example"])
        .with_audience(&["fetcher"]);
    let h = multi_tenant(Arc::new(jwt));
    let exp = now() + 600;
    let status = |claims: serde_json::Value| {
        let h = &h;
        async move {
            h.call(
                Method::GET,
                "/v1/management/connections",
                &[("authorization", &hs(claims))],
                None,
            )
            .await
            .status
        }
    };
    let good = json!({"tenantId": "t", "exp": exp, "iss": "https://idp.example", "aud": "fetcher"});
    assert_eq!(status(good).await, StatusCode::OK);
    for bad in [
        json!({"tenantId": "t", "exp": exp, "aud": "fetcher"}),
        json!({"tenantId": "t", "exp": exp, "iss": "https://other.example", "aud": "fetcher"}),
        json!({"tenantId": "t", "exp": exp, "iss": "https://idp.example"}),
        json!({"tenantId": "t", "exp": exp, "iss": "https://idp.example", "aud": "other"}),
    ] {
        assert_eq!(status(bad.clone()).await, StatusCode::UNAUTHORIZED, "{bad}");
    }
}
