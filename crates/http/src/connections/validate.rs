//! The two validation layers of docs/api.md, "Connections": the request as sent (required
//! fields per bucket, shapes, host literals, SQLite files, metadata size), then the merged
//! record.

use super::*;

pub(super) type Fields = BTreeMap<String, String>;

pub(super) fn blank(v: &Option<String>) -> bool {
    v.as_deref().is_none_or(str::is_empty)
}

/// Layer 1 on create (docs/api.md, "Connections": the request). The SSRF literal check wins.
pub(super) fn request_rules_create(b: &ConnectionBody, cfg: &ApiConfig) -> Result<(), ApiError> {
    ssrf_literal(b, cfg)?;
    let (mut missing, mut invalid) = (Fields::new(), Fields::new());
    let mut require = |key: &str, absent: bool| {
        if absent {
            missing.insert(key.into(), format!("{key} is a required field"));
        }
    };
    require("configName", blank(&b.config_name));
    require("type", blank(&b.datasource_type));
    require("host", blank(&b.host));
    require("port", b.port.unwrap_or(0) == 0);
    require("databaseName", blank(&b.database_name));
    // A MongoDB server may run without authentication: its user and password are
    // optional, a password only without a user (beyond the reference, which required
    // both for every type).
    let mongo = b.datasource_type.as_deref().and_then(DatasourceType::parse)
        == Some(DatasourceType::MongoDb);
    require("userName", !mongo && blank(&b.user_name));
    // A password may be empty, said on purpose: a server with trust authentication
    // asks for none (#53 item 7). Left out, it is still missing: a forgotten password
    // is caught here, not by a refused login later.
    let password_missing = if mongo {
        !blank(&b.user_name) && blank(&b.password)
    } else {
        b.password.is_none()
    };
    if password_missing {
        missing.insert(
            "password".into(),
            r#"password is a required field (send "" for a server that asks for none)"#.into(),
        );
    }
    shape_rules(b, &mut invalid);
    ApiError::field_buckets(missing, invalid, false).map_or(Ok(()), Err)
}

/// Layer 1 on PATCH: only present keys are checked.
pub(super) fn request_rules_patch(b: &ConnectionBody, cfg: &ApiConfig) -> Result<(), ApiError> {
    ssrf_literal(b, cfg)?;
    let (missing, mut invalid) = (Fields::new(), Fields::new());
    if let Some(n) = &b.config_name {
        let len = n.chars().count();
        if len < 3 {
            invalid.insert(
                "configName".into(),
                "configName must be at least 3 characters in length".into(),
            );
        } else if len > 100 {
            invalid.insert(
                "configName".into(),
                "configName must be a maximum of 100 characters in length".into(),
            );
        }
    }
    if b.host.as_deref() == Some("") {
        invalid.insert("host".into(), HOST_FORMAT_MESSAGE.into());
    }
    if b.port == Some(0) {
        invalid.insert("port".into(), "port must be 1 or greater".into());
    }
    shape_rules(b, &mut invalid);
    ApiError::field_buckets(missing, invalid, false).map_or(Ok(()), Err)
}

/// Connection metadata is stored and echoed: capped, JSON-encoded (docs/api.md "Limits").
pub(super) fn metadata_size(b: &ConnectionBody, cfg: &ApiConfig) -> Result<(), ApiError> {
    let size = b
        .metadata
        .as_ref()
        .map_or(0, |m| serde_json::to_vec(m).map_or(usize::MAX, |v| v.len()));
    if size > cfg.max_metadata_bytes {
        return Err(ApiError::metadata_too_large(cfg.max_metadata_bytes));
    }
    Ok(())
}

/// A tenant may not point the service at a file on its own disk, nor may anyone on a
/// host without local files (Lambda).
pub(super) fn local_file_refused(cfg: &ApiConfig, datasource_type: DatasourceType) -> bool {
    datasource_type == DatasourceType::Sqlite
        && (cfg.multi_tenant
            || matches!(cfg.sqlite_files, fetcher_connectors::SqliteFiles::Nowhere))
}

/// The complete record (created, or patched and merged): a SQLite file must be one the
/// host allows (under `--sqlite-dir`, no `..`, no symlink, not the service's own data).
pub(super) fn sqlite_file_refused(cfg: &ApiConfig, r: &ConnectionRecord) -> bool {
    r.datasource_type == DatasourceType::Sqlite
        && (local_file_refused(cfg, r.datasource_type)
            || cfg.sqlite_files.resolve(&r.database_name).is_err())
}

pub(super) fn ssrf_literal(b: &ConnectionBody, cfg: &ApiConfig) -> Result<(), ApiError> {
    let guard = cfg.multi_tenant || cfg.guard_hosts;
    if b.datasource_type
        .as_deref()
        .and_then(DatasourceType::parse)
        .is_some_and(|t| local_file_refused(cfg, t))
    {
        return Err(ApiError::forbidden_host());
    }
    if guard
        && let Some(h) = b.host.as_deref()
        && let Err(e) = validate_host_input_admitting(h, true, &cfg.private_networks)
        && is_forbidden_host(&e)
    {
        return Err(ApiError::forbidden_host());
    }
    Ok(())
}

/// Enum, host format and port range of present, non-empty values.
pub(super) fn shape_rules(b: &ConnectionBody, invalid: &mut Fields) {
    if let Some(t) = b.datasource_type.as_deref().filter(|t| !t.is_empty())
        && DatasourceType::parse(t).is_none()
    {
        invalid.insert("type".into(), TYPE_ENUM_MESSAGE.into());
    }
    if let Some(h) = b.host.as_deref().filter(|h| !h.is_empty())
        && validate_host_input(h, false).is_err()
    {
        invalid.insert("host".into(), HOST_FORMAT_MESSAGE.into());
    }
    // A NUL cannot travel in a login or a database name (PostgreSQL's protocol ends the
    // string there, and drivers refuse it only when the server is reached): 400 now.
    for (key, value) in [
        ("username", &b.user_name),
        ("database_name", &b.database_name),
        ("schema", &b.schema),
        ("password", &b.password),
    ] {
        if value.as_deref().is_some_and(|v| v.contains('\0')) {
            invalid.insert(
                key.into(),
                format!("{key} must not contain a NUL character"),
            );
        }
    }
    match b.port {
        Some(p) if p < 0 => {
            invalid.insert("port".into(), "port must be 1 or greater".into());
        }
        Some(p) if p > 65_535 => {
            invalid.insert("port".into(), "port must be 65,535 or less".into());
        }
        _ => {}
    }
}

/// The request's text for the record's typed fields, where it gave one: layer 2 parses
/// it into the record (the one place the API turns these texts into types).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TypedText<'a> {
    pub datasource_type: Option<&'a str>,
    pub ssl_mode: Option<&'a str>,
}

impl<'a> TypedText<'a> {
    pub(super) fn of(b: &'a ConnectionBody) -> Self {
        TypedText {
            datasource_type: b.datasource_type.as_deref(),
            ssl_mode: b.ssl.as_ref().and_then(|s| s.mode.as_deref()),
        }
    }
}

/// Layer 2 (docs/api.md, "Connections": the record) on the trimmed / patched record: the
/// request's type and TLS mode `text` are parsed into it here, the mode against the
/// record's (possibly new) type; a stored mode is re-checked against a patched type.
pub(super) fn model_rules(r: &mut ConnectionRecord, text: TypedText<'_>) -> Result<(), ApiError> {
    let (mut missing, mut invalid) = (Fields::new(), Fields::new());
    if r.product.is_empty() {
        missing.insert("product_name".into(), "product name is required".into());
    }
    // The rule is said whole, and a name that breaks it is invalid, not "missing" (the
    // reference filed a bad character under missing fields; #53 item 3).
    if r.config_name.is_empty() {
        missing.insert("config_name".into(), "config name is required".into());
    } else if let Some(why) = config_name_breaks_rule(&r.config_name) {
        invalid.insert("config_name".into(), why);
    }
    if r.port == 0 {
        missing.insert("port".into(), "port must be a positive integer".into());
    }
    if r.host.is_empty() {
        missing.insert("host".into(), "host is required".into());
    }
    if r.database_name.is_empty() {
        missing.insert("database_name".into(), "database name is required".into());
    }
    let parsed_type = text
        .datasource_type
        .map_or(Some(r.datasource_type), DatasourceType::parse);
    // A MongoDB server may run without authentication (see the request layer).
    if r.username.is_empty() && parsed_type != Some(DatasourceType::MongoDb) {
        missing.insert("username".into(), "username is required".into());
    }
    let type_ok = parsed_type.is_some();
    match parsed_type {
        Some(t) => r.datasource_type = t,
        None => {
            invalid.insert("type".into(), "invalid connection type".into());
        }
    }
    let ty = r.datasource_type;
    // A type's options in the metadata are typed (docs/datasources.md): a bad one is
    // named now, not found by a failed login later.
    if type_ok
        && ty == DatasourceType::MongoDb
        && let Err(e) = fetcher_engine::MongoOptions::from_metadata(r.metadata.as_ref())
    {
        invalid.insert(format!("metadata.{}", e.key), e.to_string());
    }
    // A CA is optional (#53 item 7): `require` encrypts without verifying, and a verifying
    // mode without one checks against the bundled Mozilla roots (docs/datasources.md).
    if let Some(SslSettings { mode, .. }) = &mut r.ssl {
        let mode_text = text.ssl_mode.unwrap_or(mode.as_str());
        if mode_text.is_empty() {
            missing.insert("ssl.mode".into(), "SSL mode is required".into());
        } else if type_ok {
            match validate_ssl_mode(ty, mode_text) {
                Ok(m) => *mode = m,
                Err(e) => {
                    invalid.insert("ssl.mode".into(), ApiError::invalid_ssl_mode_text(&e));
                }
            }
        }
    }
    if !missing.is_empty() {
        // The invalid SSL mode stays visible next to the missing fields (docs/api.md, "Connections").
        if let Some(m) = invalid.remove("ssl.mode") {
            missing.insert("ssl.mode".into(), m);
        }
    }
    ApiError::field_buckets(missing, invalid, true).map_or(Ok(()), Err)
}

/// What is wrong with a non-empty config name, if anything: the rule, and what breaks it.
fn config_name_breaks_rule(name: &str) -> Option<String> {
    const RULE: &str = "config name must be 3 to 100 characters of letters, digits, '_' and '-'";
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Some(format!("{RULE}; it contains {c:?}"));
    }
    let len = name.chars().count();
    (!(3..=100).contains(&len)).then(|| format!("{RULE}; it has {len}"))
}

pub(super) fn now_text() -> String {
    Timestamp::now().to_string()
}

pub(super) fn ctx() -> Context {
    Context::background()
}

/// The stored password was given for one server: a `PATCH` that points the connection
/// at another (a new host or port) or changes its TLS settings must give the password
/// again (docs/api.md, "Connections"), so a later test or job never sends it elsewhere.
pub(super) fn credentials_follow_the_server(
    b: &ConnectionBody,
    host: &str,
    port: u16,
) -> Result<(), ApiError> {
    let new_host = b.host.as_ref().is_some_and(|h| h.trim() != host);
    let new_port = b.port.is_some_and(|p| u16::try_from(p).ok() != Some(port));
    let tls = b.ssl.as_ref().is_some_and(|s| s.mode.is_some());
    if (new_host || new_port || tls) && b.password.is_none() {
        let mut missing = Fields::new();
        missing.insert(
            "password".into(),
            "password is required when host, port or TLS settings change".into(),
        );
        return Err(
            ApiError::field_buckets(missing, Fields::new(), false).expect("one missing field")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> ConnectionBody {
        serde_json::from_value(v).unwrap()
    }

    fn valid() -> Value {
        serde_json::json!({"configName":"core-pg","type":"POSTGRESQL","host":"db.example.com","port":5432,"databaseName":"ledger","userName":"ro","password":"pw"})
    }

    #[test]
    fn create_buckets() {
        let single = ApiConfig::default();
        let multi = ApiConfig {
            multi_tenant: true,
            ..ApiConfig::default()
        };
        assert!(request_rules_create(&body(valid()), &single).is_ok());
        let mut v = valid();
        v["host"] = Value::Null;
        v["type"] = "NOPE".into();
        let e = request_rules_create(&body(v), &single).unwrap_err();
        assert_eq!(e.body["code"], "FET-0402");
        assert_eq!(
            e.body["fields"],
            serde_json::json!({"host": "host is a required field"})
        );
        assert!(e.body.get("entityType").is_none());
        let mut v = valid();
        v["type"] = "NOPE".into();
        v["port"] = 65536.into();
        let e = request_rules_create(&body(v), &single).unwrap_err();
        assert_eq!(e.body["code"], "FET-0001");
        assert_eq!(e.body["fields"]["type"], TYPE_ENUM_MESSAGE);
        let mut v = valid();
        v["host"] = "169.254.169.254".into();
        v["port"] = 0.into();
        assert_eq!(
            request_rules_create(&body(v.clone()), &multi)
                .unwrap_err()
                .body["code"],
            "FET-0414"
        );
        assert_eq!(
            request_rules_create(&body(v), &single).unwrap_err().body["code"],
            "FET-0402"
        );

        // A SQLite file: single-tenant `serve` with a SQLite directory only; never in
        // multi-tenant mode nor on a host without local files (Lambda). (Which files the
        // directory allows is checked on the complete record.)
        let mut v = valid();
        v["type"] = "SQLITE".into();
        v["databaseName"] = "/tmp/x.db".into();
        let serve = ApiConfig {
            sqlite_files: fetcher_connectors::SqliteFiles::Anywhere,
            ..ApiConfig::default()
        };
        assert!(request_rules_create(&body(v.clone()), &serve).is_ok());
        let lambda = ApiConfig {
            sqlite_files: fetcher_connectors::SqliteFiles::Nowhere,
            ..ApiConfig::default()
        };
        for cfg in [&multi, &lambda] {
            let e = request_rules_create(&body(v.clone()), cfg).unwrap_err();
            assert_eq!(e.body["code"], "FET-0414");
            let e =
                request_rules_patch(&body(serde_json::json!({"type": "SQLITE"})), cfg).unwrap_err();
            assert_eq!(e.body["code"], "FET-0414");
        }
    }

    #[test]
    fn model_rules_ssl() {
        let mut r = ConnectionRecord {
            product: "p".into(),
            config_name: "core".into(),
            datasource_type: DatasourceType::Postgresql,
            host: "h".into(),
            port: 1,
            database_name: "d".into(),
            username: "u".into(),
            ..Default::default()
        };
        let none = TypedText::default();
        assert!(model_rules(&mut r, none).is_ok());
        let pem = |ca: &str| {
            Some(SslSettings {
                mode: TlsMode::Default,
                ca: ca.into(),
                cert: None,
            })
        };
        // MySQL's spelling on a PostgreSQL record: 400 with the mode as sent.
        r.ssl = pem("PEM");
        let skip = TypedText {
            ssl_mode: Some("skip-verify"),
            ..none
        };
        let e = model_rules(&mut r, skip).unwrap_err();
        assert_eq!(
            (e.body["code"].as_str(), e.body["entityType"].as_str()),
            (Some("FET-0001"), Some("connection"))
        );
        assert!(
            e.body["fields"]["ssl.mode"]
                .as_str()
                .unwrap()
                .starts_with("FET-0413 - Invalid SSL mode. The provided SSL mode 'skip-verify'")
        );
        // No CA is needed (#53 item 7).
        r.ssl = pem("");
        let require = TypedText {
            ssl_mode: Some("require"),
            ..none
        };
        model_rules(&mut r, require).unwrap();
        // A valid mode is parsed into the record.
        r.ssl = pem("PEM");
        let full = TypedText {
            ssl_mode: Some("verify-full"),
            ..none
        };
        model_rules(&mut r, full).unwrap();
        assert_eq!(r.ssl.as_ref().unwrap().mode, TlsMode::VerifyFull);
        // A patch to another type re-checks the stored mode against it.
        let to_mysql = TypedText {
            datasource_type: Some("MYSQL"),
            ..none
        };
        let e = model_rules(&mut r, to_mysql).unwrap_err();
        assert!(
            e.body["fields"]["ssl.mode"]
                .as_str()
                .unwrap()
                .contains("'verify-full'")
        );
        // An empty type on a patch is an invalid type, not a silent default.
        let blank = TypedText {
            datasource_type: Some(""),
            ..none
        };
        r.ssl = None;
        let e = model_rules(&mut r, blank).unwrap_err();
        assert_eq!(e.body["fields"]["type"], "invalid connection type");
        r.datasource_type = DatasourceType::Postgresql;
        r.config_name = "ab".into();
        assert_eq!(
            model_rules(&mut r, none).unwrap_err().body["fields"]["config_name"],
            "config name must be 3 to 100 characters of letters, digits, '_' and '-'; it has 2"
        );
        r.config_name = "my shop".into();
        let e = model_rules(&mut r, none).unwrap_err();
        assert_eq!(
            e.body["code"], "FET-0001",
            "invalid, not missing: {}",
            e.body
        );
        assert_eq!(
            e.body["fields"]["config_name"],
            "config name must be 3 to 100 characters of letters, digits, '_' and '-'; it contains ' '"
        );
        r.product.clear();
        assert_eq!(
            model_rules(&mut r, none).unwrap_err().body["fields"],
            serde_json::json!({"product_name": "product name is required"})
        );
    }
}
