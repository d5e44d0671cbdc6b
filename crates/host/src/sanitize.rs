//! Error sanitisation (docs/events.md, "Error texts"): every error text that reaches the job
//! store or an event passes through [`sanitize`], which removes connection strings,
//! network operands and IPv4 addresses.

/// Applies the four rules in order: URLs → `[redacted]`; `dial tcp X` etc. keep the
/// operation words and redact the operand; `Addr: X`; any remaining dotted IPv4
/// (optionally with `:port`).
pub fn sanitize(text: &str) -> String {
    let mut words: Vec<String> = Vec::new();
    let tokens: Vec<&str> = text.split(' ').collect();
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i];
        if is_url(t) {
            words.push("[redacted]".into());
        } else if matches!(
            (t, tokens.get(i + 1).copied()),
            ("dial" | "read" | "write", Some("tcp" | "udp"))
        ) && i + 2 < tokens.len()
        {
            words.push(t.into());
            words.push(tokens[i + 1].into());
            words.push(redact_operand(tokens[i + 2]));
            i += 3;
            continue;
        } else if (t == "lookup" || t == "Addr:") && i + 1 < tokens.len() {
            words.push(t.into());
            words.push(redact_operand(tokens[i + 1]));
            i += 2;
            continue;
        } else {
            words.push(redact_ipv4(t));
        }
        i += 1;
    }
    words.join(" ")
}

/// Keeps a trailing `:` (Go error chains put one after the operand).
fn redact_operand(t: &str) -> String {
    if t.ends_with(':') {
        "[redacted]:".into()
    } else {
        "[redacted]".into()
    }
}

fn is_url(t: &str) -> bool {
    match t.find("://") {
        Some(pos) if pos > 0 => {
            let scheme = &t[..pos];
            let start = scheme
                .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
                .map_or(0, |p| p + 1);
            start < pos && t.len() > pos + 3
        }
        _ => false,
    }
}

/// Replaces dotted IPv4 addresses (with an optional `:port`) inside a token.
fn redact_ipv4(t: &str) -> String {
    let b = t.as_bytes();
    let mut out = String::with_capacity(t.len());
    let (mut last, mut i) = (0, 0);
    while i < b.len() {
        if b[i].is_ascii_digit()
            && (i == 0 || !b[i - 1].is_ascii_alphanumeric())
            && let Some(end) = ipv4_end(b, i)
        {
            out.push_str(&t[last..i]);
            out.push_str("[redacted]");
            (i, last) = (end, end);
            continue;
        }
        i += 1;
    }
    out.push_str(&t[last..]);
    out
}

fn ipv4_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start;
    for part in 0..4 {
        let s = i;
        while i < b.len() && b[i].is_ascii_digit() && i - s < 3 {
            i += 1;
        }
        if i == s {
            return None;
        }
        if part < 3 {
            if b.get(i) != Some(&b'.') {
                return None;
            }
            i += 1;
        }
    }
    if b.get(i).is_some_and(|c| c.is_ascii_digit()) {
        return None;
    }
    if b.get(i) == Some(&b':') && b.get(i + 1).is_some_and(|c| c.is_ascii_digit()) {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
    }
    Some(i)
}

#[cfg(test)]
mod tests {
    use super::sanitize;

    #[test]
    fn the_reference_examples() {
        assert_eq!(
            sanitize("failed to connect: mongodb://admin:secret@db.internal:27017/prod"),
            "failed to connect: [redacted]"
        );
        assert_eq!(
            sanitize("failed: dial tcp db.internal:5432 timeout"),
            "failed: dial tcp [redacted] timeout"
        );
        assert_eq!(
            sanitize("error at 192.168.1.10:8080 occurred"),
            "error at [redacted] occurred"
        );
        assert_eq!(
            sanitize("lookup db.internal: no such host"),
            "lookup [redacted]: no such host"
        );
        assert_eq!(
            sanitize("Addr: 10.0.0.1:5432 refused"),
            "Addr: [redacted] refused"
        );
        assert_eq!(
            sanitize("postgres://u:p@h/db?sslmode=require"),
            "[redacted]"
        );
        assert_eq!(
            sanitize("engine: [unavailable] failed to query datasource"),
            "engine: [unavailable] failed to query datasource"
        );
        assert_eq!(
            sanitize("host db.internal kept, 10.1.2.3 not"),
            "host db.internal kept, [redacted] not"
        );
        assert_eq!(sanitize("version 1.2.3 is fine"), "version 1.2.3 is fine");
        assert_eq!(sanitize("ünïcødé 1.2.3.4"), "ünïcødé [redacted]");
    }
}
