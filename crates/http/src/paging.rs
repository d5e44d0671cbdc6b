//! List query parameters (docs/api.md, "Lists"): `page`/`limit` paging, `sortOrder`, the creation-date
//! window, `type` and `metadata.<key>` filters, and the flat envelope.
//!
//! The creation-date window is always applied (the reference's behaviour): without
//! `startDate`/`endDate` only records created in the last `N` months (default 1) are
//! listed. Clients migrating older records pass explicit dates.

use serde::Serialize;

use super::error::ApiError;

/// Parsed list parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ListQuery {
    pub page: u64,
    pub limit: u64,
    pub ascending: bool,
    /// Inclusive bounds on `createdAt`, in Unix seconds.
    pub start: i64,
    pub end: i64,
    /// Upper-cased `type` filter.
    pub datasource_type: Option<String>,
    /// `metadata.<key>` equality filters.
    pub metadata: Vec<(String, String)>,
}

/// Paging settings.
#[derive(Debug, Clone, Copy)]
pub struct PagingConfig {
    pub default_limit: u64,
    pub max_limit: u32,
    /// `MAX_PAGINATION_MONTH_DATE_RANGE`.
    pub date_range_months: u32,
}

impl Default for PagingConfig {
    fn default() -> Self {
        PagingConfig {
            default_limit: 10,
            max_limit: 100,
            date_range_months: 1,
        }
    }
}

/// The flat list envelope.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Page<T: Serialize> {
    pub items: Vec<T>,
    pub page: u64,
    pub limit: u64,
    pub total: u64,
}

impl<T: Serialize> Page<T> {
    /// The page `q` asks for of `all` (already filtered and ordered), each item made by
    /// `item`; `total` counts them all.
    pub fn of<S>(all: &[S], q: &ListQuery, item: impl Fn(&S) -> T) -> Page<T> {
        let skip = (q.page - 1).saturating_mul(q.limit) as usize;
        Page {
            items: all
                .iter()
                .skip(skip)
                .take(q.limit as usize)
                .map(item)
                .collect(),
            page: q.page,
            limit: q.limit,
            total: all.len() as u64,
        }
    }
}

const DAY: i64 = 86_400;

/// Parses the query pairs in the precedence of docs/api.md, "Lists" (first failure wins):
/// (1) integers, dates and forbidden keys, (2) the date window, (3) limit bounds, page,
/// sort order, cursor. `today` is the current date at 00:00 UTC (Unix seconds).
pub fn parse(
    pairs: &[(String, String)],
    cfg: &PagingConfig,
    today: i64,
) -> Result<ListQuery, ApiError> {
    let mut page: Option<i64> = None;
    let mut limit: Option<i64> = None;
    let mut sort: Option<String> = None;
    let mut start: Option<i64> = None;
    let mut end: Option<i64> = None;
    let mut cursor: Option<String> = None;
    let mut q = ListQuery {
        page: 1,
        limit: cfg.default_limit,
        ascending: false,
        start: 0,
        end: 0,
        datasource_type: None,
        metadata: Vec::new(),
    };
    for (k, v) in pairs {
        if k.starts_with('$') || k.starts_with('_') || k.len() > 64 || v.len() > 256 {
            return Err(ApiError::invalid_query(k));
        }
        if v.is_empty() {
            continue;
        }
        match k.as_str() {
            "page" => page = Some(v.parse().map_err(|_| ApiError::invalid_query("page"))?),
            "limit" => limit = Some(v.parse().map_err(|_| ApiError::invalid_query("limit"))?),
            "sortOrder" => sort = Some(v.to_ascii_lowercase()),
            "startDate" => start = Some(parse_date(v).ok_or_else(ApiError::date_format)?),
            "endDate" => end = Some(parse_date(v).ok_or_else(ApiError::date_format)?),
            "cursor" => cursor = Some(v.clone()),
            "type" => q.datasource_type = Some(v.to_ascii_uppercase()),
            other => {
                if let Some(key) = other.strip_prefix("metadata.") {
                    q.metadata.push((key.to_owned(), v.clone()));
                }
            }
        }
    }
    let n = cfg.date_range_months;
    let (s, e) = match (start, end) {
        (None, None) => {
            let e = today + DAY;
            (add_months(e, -(n as i64)), e)
        }
        (Some(s), None) => (s, s + DAY),
        (None, Some(e)) => {
            let s = add_months(today, -(n as i64));
            if s > e {
                return Err(ApiError::final_date());
            }
            (s, e)
        }
        (Some(s), Some(e)) => {
            if s > e {
                return Err(ApiError::final_date());
            }
            let e = if s == e { e + DAY } else { e };
            (s.max(add_months(e, -(n as i64))), e)
        }
    };
    q.start = s;
    q.end = e;
    if let Some(l) = limit {
        if l < 1 {
            return Err(ApiError::invalid_query("limit must be greater than 0"));
        }
        if l > cfg.max_limit as i64 {
            return Err(ApiError::page_limit(cfg.max_limit));
        }
        q.limit = l as u64;
    }
    if let Some(p) = page {
        if p < 1 {
            return Err(ApiError::invalid_query("page must be greater than 0"));
        }
        q.page = p as u64;
    }
    match sort.as_deref() {
        None | Some("desc") => {}
        Some("asc") => q.ascending = true,
        Some(_) => return Err(ApiError::sort_order()),
    }
    if let Some(c) = cursor
        && !valid_cursor(&c)
    {
        return Err(ApiError::invalid_query("cursor"));
    }
    Ok(q)
}

fn valid_cursor(c: &str) -> bool {
    use base64::Engine as _;
    let engines = [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::URL_SAFE,
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    engines
        .iter()
        .filter_map(|e| e.decode(c).ok())
        .any(|bytes| {
            matches!(
                serde_json::from_slice::<serde_json::Value>(&bytes),
                Ok(serde_json::Value::Object(_))
            )
        })
}

/// `YYYY-MM-DD` → Unix seconds at 00:00 UTC.
pub fn parse_date(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| {
        s.get(r)
            .filter(|t| t.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|t| t.parse::<i64>().ok())
    };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return None;
    }
    Some(days_from_civil(y, m, d) * DAY)
}

/// Today at 00:00 UTC, in Unix seconds.
pub fn today_utc() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    now - now.rem_euclid(DAY)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Adds calendar months to a midnight instant, normalising overflowing days like the
/// reference's date library (Jan 31 − 1 month → Mar 3 of a non-leap year is not possible
/// backwards; Mar 31 − 1 month → Mar 3 / Mar 2).
fn add_months(t: i64, months: i64) -> i64 {
    let (y, m, d) = civil_from_days(t.div_euclid(DAY));
    let total = y * 12 + (m - 1) + months;
    let (ny, nm) = (total.div_euclid(12), total.rem_euclid(12) + 1);
    // Overflowing days roll into the next month (Go's time.AddDate normalisation).
    (days_from_civil(ny, nm, 1) + d - 1) * DAY + t.rem_euclid(DAY)
}

/// Unix seconds of a timestamp.
pub fn unix_seconds(t: fetcher_engine::Timestamp) -> i64 {
    t.unix_nanos().div_euclid(1_000_000_000) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(q: &[(&str, &str)]) -> Vec<(String, String)> {
        q.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn code(r: Result<ListQuery, ApiError>) -> String {
        r.unwrap_err().body["code"].as_str().unwrap().to_owned()
    }

    #[test]
    fn defaults_and_window() {
        let cfg = PagingConfig::default();
        let today = parse_date("2025-03-31").unwrap();
        let q = parse(&[], &cfg, today).unwrap();
        assert_eq!((q.page, q.limit, q.ascending), (1, 10, false));
        assert_eq!(q.end, parse_date("2025-04-01").unwrap());
        assert_eq!(q.start, parse_date("2025-03-01").unwrap());
        let q = parse(&pairs(&[("startDate", "2025-01-10")]), &cfg, today).unwrap();
        assert_eq!(
            (q.start, q.end),
            (
                parse_date("2025-01-10").unwrap(),
                parse_date("2025-01-11").unwrap()
            )
        );
        let q = parse(
            &pairs(&[("startDate", "2025-01-10"), ("endDate", "2025-01-10")]),
            &cfg,
            today,
        )
        .unwrap();
        assert_eq!(q.end - q.start, DAY);
        let q = parse(
            &pairs(&[("startDate", "2024-01-10"), ("endDate", "2025-01-10")]),
            &cfg,
            today,
        )
        .unwrap();
        assert_eq!(q.start, parse_date("2024-12-10").unwrap());
        assert_eq!(
            code(parse(&pairs(&[("endDate", "2020-01-01")]), &cfg, today)),
            "FET-0409"
        );
    }

    #[test]
    fn errors_and_precedence() {
        let cfg = PagingConfig::default();
        let today = parse_date("2025-03-01").unwrap();
        assert_eq!(
            code(parse(&pairs(&[("page", "x")]), &cfg, today)),
            "FET-0405"
        );
        assert_eq!(
            code(parse(&pairs(&[("limit", "0")]), &cfg, today)),
            "FET-0405"
        );
        assert_eq!(
            code(parse(&pairs(&[("page", "0")]), &cfg, today)),
            "FET-0405"
        );
        assert_eq!(
            code(parse(&pairs(&[("limit", "101")]), &cfg, today)),
            "FET-0406"
        );
        assert!(parse(&pairs(&[("limit", "100")]), &cfg, today).is_ok());
        assert_eq!(
            code(parse(&pairs(&[("sortOrder", "invalid")]), &cfg, today)),
            "FET-0407"
        );
        assert!(
            parse(&pairs(&[("sortOrder", "ASC")]), &cfg, today)
                .unwrap()
                .ascending
        );
        assert_eq!(
            code(parse(&pairs(&[("startDate", "2025-13-01")]), &cfg, today)),
            "FET-0408"
        );
        assert_eq!(
            code(parse(
                &pairs(&[
                    ("limit", "0"),
                    ("startDate", "2025-02-01"),
                    ("endDate", "2025-01-01")
                ]),
                &cfg,
                today
            )),
            "FET-0409"
        );
        assert_eq!(
            code(parse(&pairs(&[("$where", "1")]), &cfg, today)),
            "FET-0405"
        );
        assert_eq!(
            code(parse(&pairs(&[("cursor", "!!")]), &cfg, today)),
            "FET-0405"
        );
        assert!(
            parse(
                &pairs(&[("cursor", "eyJpZCI6IjEifQ=="), ("limit", ""), ("host", "x")]),
                &cfg,
                today
            )
            .is_ok()
        );
    }

    #[test]
    fn civil_round_trip() {
        for d in [-1000, 0, 19_000, 20_000, 50_000] {
            let (y, m, dd) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, dd), d);
        }
        assert_eq!(
            add_months(parse_date("2025-03-31").unwrap(), -1),
            parse_date("2025-03-03").unwrap()
        );
    }
}
