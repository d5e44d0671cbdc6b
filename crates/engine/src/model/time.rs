//! UTC timestamps rendered as RFC 3339 (trailing zero nanoseconds trimmed, `Z` suffix).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// A UTC instant. Serialized as RFC 3339 text, e.g. `2024-05-01T12:00:00.5Z`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(SystemTime);

impl Timestamp {
    pub fn now() -> Self {
        Timestamp(SystemTime::now())
    }

    pub fn from_system_time(t: SystemTime) -> Self {
        Timestamp(t)
    }

    pub fn from_unix_nanos(n: i128) -> Self {
        let t = if n >= 0 {
            UNIX_EPOCH + Duration::from_nanos(n as u64)
        } else {
            UNIX_EPOCH - Duration::from_nanos(n.unsigned_abs() as u64)
        };
        Timestamp(t)
    }

    pub fn system_time(self) -> SystemTime {
        self.0
    }

    pub fn unix_nanos(self) -> i128 {
        match self.0.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i128,
            Err(e) => -(e.duration().as_nanos() as i128),
        }
    }

    /// Whole seconds from `earlier` to this instant; 0 when `earlier` is not before it.
    pub fn seconds_since(self, earlier: Timestamp) -> u64 {
        u64::try_from((self.unix_nanos() - earlier.unix_nanos()).max(0) / 1_000_000_000)
            .unwrap_or(u64::MAX)
    }

    /// Parses RFC 3339 (`Z` or `±hh:mm` offset, optional fraction up to nanoseconds).
    pub fn parse(s: &str) -> Option<Self> {
        let b = s.as_bytes();
        if b.len() < 20
            || b[4] != b'-'
            || b[7] != b'-'
            || !matches!(b[10], b'T' | b't')
            || b[13] != b':'
            || b[16] != b':'
        {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<i64> {
            let t = s.get(r)?;
            t.bytes()
                .all(|c| c.is_ascii_digit())
                .then(|| t.parse().ok())?
        };
        let (y, mo, d, h, mi, se) = (
            num(0..4)?,
            num(5..7)?,
            num(8..10)?,
            num(11..13)?,
            num(14..16)?,
            num(17..19)?,
        );
        if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
            return None;
        }
        let mut i = 19;
        let mut nanos: i64 = 0;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let digits = &s[start..i];
            if digits.is_empty() || digits.len() > 9 {
                return None;
            }
            nanos = digits.parse::<i64>().ok()? * 10_i64.pow(9 - digits.len() as u32);
        }
        let offset_secs = match b.get(i) {
            Some(b'Z' | b'z') if i + 1 == b.len() => 0,
            Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
                let oh = num(i + 1..i + 3)?;
                let om = num(i + 4..i + 6)?;
                let v = oh * 3600 + om * 60;
                if *sign == b'-' { -v } else { v }
            }
            _ => return None,
        };
        let days = days_from_civil(y, mo as u32, d as u32);
        let secs = days * 86_400 + h * 3600 + mi * 60 + se - offset_secs;
        Some(Self::from_unix_nanos(
            secs as i128 * 1_000_000_000 + nanos as i128,
        ))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.unix_nanos();
        let secs = n.div_euclid(1_000_000_000) as i64;
        let nanos = n.rem_euclid(1_000_000_000) as u32;
        let days = secs.div_euclid(86_400);
        let sod = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
            sod / 3600,
            sod % 3600 / 60,
            sod % 60
        )?;
        if nanos > 0 {
            let frac = format!("{nanos:09}");
            write!(f, ".{}", frac.trim_end_matches('0'))?;
        }
        f.write_str("Z")
    }
}

impl Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse(&s).ok_or_else(|| serde::de::Error::custom("invalid RFC 3339 timestamp"))
    }
}

// Howard Hinnant's civil calendar algorithms (proleptic Gregorian, astronomical years):
// the one copy every crate uses.

/// (year, month, day) of a day count since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_and_parses_rfc3339() {
        assert_eq!(
            Timestamp::from_unix_nanos(0).to_string(),
            "1970-01-01T00:00:00Z"
        );
        let t = Timestamp::from_unix_nanos(1_714_564_800_500_000_000);
        assert_eq!(t.to_string(), "2024-05-01T12:00:00.5Z");
        assert_eq!(Timestamp::parse("2024-05-01T12:00:00.5Z"), Some(t));
        assert_eq!(Timestamp::parse("2024-05-01T14:00:00.500+02:00"), Some(t));
        assert_eq!(
            Timestamp::from_unix_nanos(-1).to_string(),
            "1969-12-31T23:59:59.999999999Z"
        );
        assert_eq!(
            Timestamp::parse("2000-02-29T00:00:00Z")
                .unwrap()
                .to_string(),
            "2000-02-29T00:00:00Z"
        );
        for bad in [
            "",
            "2024-05-01",
            "2024-13-01T00:00:00Z",
            "2024-05-01T00:00:00",
            "2024-05-01T00:00:00.Z",
        ] {
            assert_eq!(Timestamp::parse(bad), None, "{bad}");
        }
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, "\"2024-05-01T12:00:00.5Z\"");
        assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), t);
    }
}
