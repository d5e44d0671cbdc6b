//! The NDJSON texts of temporal values, decimals and UUIDs (docs/encodings.md) parsed
//! back into the numbers Parquet stores. Each parser accepts exactly what the
//! connectors print and returns `None` for anything else (a MySQL zero date, a value past
//! the Parquet type's range), which the caller reports as not representable.
//!
//! PostgreSQL's `infinity` / `-infinity` become the largest and smallest value of the
//! type (DuckDB's convention for its own infinities, and PostgreSQL's internal one).

use fetcher_engine::time::days_from_civil;

const MICROS_PER_DAY: i64 = 86_400_000_000;

fn digits(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `YYYY-MM-DD`, `+YYYYY-MM-DD` or `-YYYY-MM-DD` at the start of `s`: (days, rest).
fn civil_date(s: &str) -> Option<(i64, &str)> {
    let (sign, body) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => (1, s),
    };
    let (year, rest) = body.split_once('-')?;
    if year.len() < 4 {
        return None;
    }
    let year = sign * digits(year)?;
    if rest.as_bytes().get(2) != Some(&b'-') {
        return None;
    }
    let (month, day, rest) = (rest.get(..2)?, rest.get(3..5)?, rest.get(5..)?);
    let (month, day) = (digits(month)?, digits(day)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None; // also MySQL's zero dates and zero-in-date values
    }
    Some((days_from_civil(year, month as u32, day as u32), rest))
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if y.rem_euclid(4) == 0 && (y.rem_euclid(100) != 0 || y.rem_euclid(400) == 0) => 29,
        2 => 28,
        _ => 31,
    }
}

/// `HH:MM:SS[.f]` → microseconds, hours 0–23 (the digits after the sixth are zero).
fn clock(s: &str) -> Option<i64> {
    let (hms, frac) = match s.split_once('.') {
        Some((a, b)) => (a, b),
        None => (s, ""),
    };
    let mut it = hms.split(':');
    let (h, m, sec) = (it.next()?, it.next()?, it.next()?);
    if it.next().is_some() || h.len() != 2 || m.len() != 2 || sec.len() != 2 {
        return None;
    }
    let (h, m, sec) = (digits(h)?, digits(m)?, digits(sec)?);
    if h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let frac = frac.as_bytes();
    if frac.len() > 9
        || !frac.iter().all(u8::is_ascii_digit)
        || frac.iter().skip(6).any(|&d| d != b'0')
    {
        return None; // not a fraction, or finer than a microsecond
    }
    let micros = (0..6).fold(0, |acc, i| {
        acc * 10 + frac.get(i).map_or(0, |&d| i64::from(d - b'0'))
    });
    Some(((h * 60 + m) * 60 + sec) * 1_000_000 + micros)
}

/// `YYYY-MM-DDT00:00:00Z` (a date as NDJSON prints it) → days since 1970-01-01.
pub fn date(s: &str) -> Option<i32> {
    match s {
        "infinity" => return Some(i32::MAX),
        "-infinity" => return Some(i32::MIN),
        _ => {}
    }
    let (days, rest) = civil_date(s)?;
    if rest != "T00:00:00Z" {
        return None;
    }
    i32::try_from(days).ok()
}

/// `HH:MM:SS[.f]` → microseconds since midnight.
pub fn time_of_day(s: &str) -> Option<i64> {
    clock(s)
}

/// `YYYY-MM-DDTHH:MM:SS[.f]Z` → microseconds since 1970-01-01T00:00:00 (an instant for
/// `timestamptz`, the wall time for `timestamp`).
pub fn timestamp(s: &str) -> Option<i64> {
    match s {
        "infinity" => return Some(i64::MAX),
        "-infinity" => return Some(i64::MIN),
        _ => {}
    }
    let (days, rest) = civil_date(s)?;
    let clock_text = rest.strip_prefix('T')?.strip_suffix('Z')?;
    let micros = clock(clock_text)?;
    let v = days.checked_mul(MICROS_PER_DAY)?.checked_add(micros)?;
    // The two extremes stand for the infinities.
    (v != i64::MAX && v != i64::MIN).then_some(v)
}

/// An exact decimal's text (`-1500.00`, `12`) → (negative, the unscaled digits at
/// `scale`), when it fits `precision`. `None` for `NaN`, the infinities, exponents.
pub fn decimal_digits(s: &str, precision: u8, scale: u8) -> Option<(bool, String)> {
    let (negative, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || frac.len() > scale as usize
    {
        return None;
    }
    let mut unscaled = String::with_capacity(int.len() + scale as usize);
    unscaled.push_str(int.trim_start_matches('0'));
    unscaled.push_str(frac);
    for _ in frac.len()..scale as usize {
        unscaled.push('0');
    }
    let unscaled = unscaled.trim_start_matches('0');
    if unscaled.len() > precision as usize {
        return None;
    }
    Some((
        negative && !unscaled.is_empty(),
        if unscaled.is_empty() {
            "0".into()
        } else {
            unscaled.into()
        },
    ))
}

/// Canonical hyphenated UUID text → its 16 bytes.
pub fn uuid(s: &str) -> Option<[u8; 16]> {
    let b = s.as_bytes();
    if b.len() != 36 || [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
        return None;
    }
    let mut digits = b.iter().filter(|&&c| c != b'-');
    let mut out = [0u8; 16];
    for byte in &mut out {
        let mut nibble = || (*digits.next()? as char).to_digit(16);
        *byte = (nibble()? * 16 + nibble()?) as u8;
    }
    Some(out)
}
