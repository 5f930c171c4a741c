//! A strict reader of the `Forwarded` header (RFC 7239) for `super`'s walk: its list elements,
//! and each element's `for=` node.
//!
//! Hand-written on purpose. The `rfc7239` crate (0.1.3) is not quote-aware: it splits at every
//! `,` and `;` even inside a quoted-string, strips quotes with `trim_matches`, and lets a
//! repeated `for=` win, so `for=198.51.100.7;host="a;for=203.0.113.66"` (a proxy's element whose
//! quoted `host` a client chose) counted under 203.0.113.66. Here quoted-strings and their
//! backslash escapes (RFC 7230 §3.2.6) are honoured when splitting, and an element is
//! unreadable (the walk stops at the last trusted hop) if it has a repeated parameter,
//! unbalanced quotes, a partly quoted value, no `for=`, or a `for=` that is no address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::Hop;

/// Most parameters one element may have: RFC 7239 defines four (`by`, `for`, `host`, `proto`);
/// an element with more is unreadable. Bounds the work on one element whatever its length.
const MAX_PARAMS: usize = 8;

/// The elements of one header line, **from the right**, split at `,` outside quoted-strings.
///
/// From the right because the rightmost elements are the ones the proxies wrote, and only
/// they are read: a proxy that appends to a client's line (nginx's
/// `"$http_forwarded, for=$remote_addr"`) writes balanced quotes, so scanning leftwards finds its
/// elements exactly whatever the client put before them. A left-to-right scan let a client's
/// unclosed quote (`for=x;a="`) swallow the proxy's element into its own, so the request counted
/// under the proxy. Lazy: a line of thousands of elements costs only the ones read.
pub(super) fn elements_from_right(line: &[u8]) -> FromRight<'_> {
    FromRight { rest: Some(line) }
}

/// The iterator of [`elements_from_right`].
pub(super) struct FromRight<'a> {
    rest: Option<&'a [u8]>,
}

impl<'a> Iterator for FromRight<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.rest?;
        let mut quoted = false;
        let mut i = rest.len();
        while i > 0 {
            i -= 1;
            match rest[i] {
                b'"' if !quoted => quoted = true,
                // Inside a quoted-string a quote after an odd run of backslashes is escaped.
                b'"' => {
                    let run = rest[..i].iter().rev().take_while(|b| **b == b'\\').count();
                    if run % 2 == 0 {
                        quoted = false;
                    }
                }
                b',' if !quoted => {
                    self.rest = Some(&rest[..i]);
                    return Some(&rest[i + 1..]);
                }
                _ => {}
            }
        }
        self.rest = None;
        Some(rest)
    }
}

/// One element's `for=` node (the element as [`elements_from_right`] gives it, untrimmed).
pub(super) fn for_node(element: &str) -> Hop {
    let element = element.trim_matches([' ', '\t']);
    if element.is_empty() {
        return Hop::Empty;
    }
    let Some(pairs) = split_unquoted(element, b';', MAX_PARAMS) else {
        return Hop::Opaque;
    };
    let mut names: Vec<String> = Vec::with_capacity(pairs.len());
    let mut node = None;
    for pair in pairs {
        let Some((name, raw)) = pair.trim_matches([' ', '\t']).split_once('=') else {
            return Hop::Opaque;
        };
        let name = name.to_ascii_lowercase();
        if name.is_empty() || !name.bytes().all(is_tchar) || names.contains(&name) {
            return Hop::Opaque;
        }
        let Some(value) = value(raw) else {
            return Hop::Opaque;
        };
        if name == "for" {
            node = Some(value);
        }
        names.push(name);
    }
    node.map_or(Hop::Opaque, |n| address(&n))
}

/// `s` split at `sep` outside quoted-strings (a `\` in one escapes the next byte); `None` past
/// `limit` parts (the scan stops there).
fn split_unquoted(s: &str, sep: u8, limit: usize) -> Option<Vec<&str>> {
    let bytes = s.as_bytes();
    let (mut out, mut start, mut quoted, mut i) = (Vec::new(), 0, false, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if quoted => i += 1,
            b'"' => quoted = !quoted,
            c if c == sep && !quoted => {
                out.push(&s[start..i]);
                if out.len() >= limit {
                    return None;
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(&s[start..]);
    Some(out)
}

/// A parameter's value: a token, or one whole quoted-string (unescaped); `None` for anything
/// else (empty, unbalanced or partly quoted, a bad escape).
fn value(raw: &str) -> Option<String> {
    let Some(rest) = raw.strip_prefix('"') else {
        return (!raw.is_empty() && raw.bytes().all(is_tchar)).then(|| raw.to_owned());
    };
    let mut out = String::new();
    let mut chars = rest.chars();
    loop {
        match chars.next()? {
            '\\' => out.push(
                chars
                    .next()
                    .filter(|c| *c == '\t' || (' '..='~').contains(c))?,
            ),
            '"' => break,
            c => out.push(c),
        }
    }
    // Text after the closing quote: partly quoted.
    chars.next().is_none().then_some(out)
}

/// RFC 7230 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A `for=` node (unquoted): `192.0.2.1`, `192.0.2.1:80`, `[2001:db8::1]`, `[2001:db8::1]:80`
/// (a port may be obfuscated, `_x`). `unknown`, an obfuscated `_name`, anything else: opaque.
fn address(node: &str) -> Hop {
    let (ip, port) = if let Some(rest) = node.strip_prefix('[') {
        let Some((ip, after)) = rest.split_once(']') else {
            return Hop::Opaque;
        };
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(p) => Some(p),
                None => return Hop::Opaque,
            },
        };
        match ip.parse::<Ipv6Addr>() {
            Ok(ip) => (IpAddr::V6(ip), port),
            Err(_) => return Hop::Opaque,
        }
    } else {
        let (ip, port) = match node.split_once(':') {
            Some((ip, port)) => (ip, Some(port)),
            None => (node, None),
        };
        match ip.parse::<Ipv4Addr>() {
            Ok(ip) => (IpAddr::V4(ip), port),
            Err(_) => return Hop::Opaque,
        }
    };
    if port.is_some_and(|p| !is_port(p)) {
        return Hop::Opaque;
    }
    Hop::Address(ip)
}

/// RFC 7239 `node-port`: 1 to 5 digits (at most 65535), or `_` and obfuscation characters.
fn is_port(p: &str) -> bool {
    match p.strip_prefix('_') {
        Some(obf) => {
            !obf.is_empty()
                && obf
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        }
        None => p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(element: &str) -> Option<String> {
        match for_node(element) {
            Hop::Address(ip) => Some(ip.to_string()),
            _ => None,
        }
    }

    #[test]
    fn quoted_strings_are_one_value_wherever_their_commas_and_semicolons_are() {
        let line = r#"for=198.51.100.7;host="a;for=203.0.113.66", for=10.0.0.5"#;
        let e = elements(line);
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(node(e[0]).as_deref(), Some("10.0.0.5"));
        assert_eq!(node(e[1]).as_deref(), Some("198.51.100.7"));
        let comma = r#"for=198.51.100.7;host="a,for=203.0.113.66""#;
        assert_eq!(elements(comma).len(), 1);
        assert_eq!(node(comma).as_deref(), Some("198.51.100.7"));
        // An escaped quote does not end the string; an escaped backslash does not escape it.
        let escaped = r#"for=198.51.100.7;host="a\";for=,203.0.113.66""#;
        assert_eq!(elements(escaped).len(), 1);
        assert_eq!(node(escaped).as_deref(), Some("198.51.100.7"));
        // From the right, an escaped quote must not close the string: here the proxy's own
        // element holds a quoted `", for=` (escaped), which is not a separator.
        let inner = r#"for=198.51.100.66, for=10.0.0.5;host="x\", for=203.0.113.66""#;
        assert_eq!(elements(inner).len(), 2, "{:?}", elements(inner));
        assert_eq!(node(elements(inner)[0]).as_deref(), Some("10.0.0.5"));
        let backslash = r#"for=198.51.100.7;host="a\\", for=10.0.0.5"#;
        assert_eq!(elements(backslash).len(), 2);
        assert_eq!(
            node(elements(backslash)[1]).as_deref(),
            Some("198.51.100.7")
        );
        assert_eq!(
            node(r#"for="[2001:db8::1]:4711""#).as_deref(),
            Some("2001:db8::1")
        );
        assert_eq!(
            node(r#"for="192.0.2.1:_p0rt""#).as_deref(),
            Some("192.0.2.1")
        );
        assert_eq!(
            node("FOR=192.0.2.1; proto=https").as_deref(),
            Some("192.0.2.1")
        );
    }

    #[test]
    fn repeated_unbalanced_or_partly_quoted_elements_are_unreadable() {
        for bad in [
            "for=198.51.100.7;for=203.0.113.66",
            "for=198.51.100.7;For=203.0.113.66",
            "for=198.51.100.7;host=a;host=b",
            r#"for="198.51.100.7"#,
            r#"for=198.51.100.7;host="a"#,
            r#"for="198.51.100.7"x"#,
            r#"for=x"198.51.100.7""#,
            r#"for=198.51.100.7\"#,
            "for=",
            "for=192.0.2.1;",
            "for = 192.0.2.1",
            "for=192.0.2.1:80",
            "for=[2001:db8::1]",
            r#"for="192.0.2.1:99999""#,
            r#"for="192.0.2.1:""#,
            r#"for="[2001:db8::1]x""#,
            "proto=https",
            "for=unknown",
            "for=_hidden",
        ] {
            assert_eq!(for_node(bad), Hop::Opaque, "{bad}");
        }
        // A client's open quote to the left cannot swallow the proxy's element after it:
        // the proxy's is read, the client's is unreadable.
        let e = elements(r#"for=198.51.100.66;x=", for=198.51.100.7"#);
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(node(e[0]).as_deref(), Some("198.51.100.7"));
        assert_eq!(for_node(e[1]), Hop::Opaque);
        assert_eq!(for_node("  "), Hop::Empty);
        // More parameters than RFC 7239 has use: unreadable, however long.
        assert_eq!(
            for_node("for=192.0.2.1;a=1;b=1;c=1;d=1;e=1;f=1;g=1"),
            Hop::Address("192.0.2.1".parse().unwrap())
        );
        assert_eq!(
            for_node("for=192.0.2.1;a=1;b=1;c=1;d=1;e=1;f=1;g=1;h=1"),
            Hop::Opaque
        );
    }

    #[test]
    fn one_element_of_thousands_of_parameters_costs_little() {
        // The line a client and an appending proxy make together: an open quote would have
        // swallowed the proxy's element, and each of 5,000 distinct names was checked against
        // all the others (quadratic: ~50 ms at 32 KiB).
        let mut line: String = (0..5_000).map(|i| format!("a{i}=1;")).collect();
        line.push_str(r#"x=", for=198.51.100.7"#);
        let started = std::time::Instant::now();
        for _ in 0..100 {
            let mut e = elements_from_right(line.as_bytes());
            let first = std::str::from_utf8(e.next().unwrap()).unwrap();
            assert_eq!(node(first).as_deref(), Some("198.51.100.7"));
            let second = std::str::from_utf8(e.next().unwrap()).unwrap();
            assert_eq!(for_node(second), Hop::Opaque);
        }
        // 100 requests' worth; a release build takes well under a millisecond for each.
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    /// The elements of `line`, from the right, as text.
    fn elements(line: &str) -> Vec<&str> {
        elements_from_right(line.as_bytes())
            .map(|e| std::str::from_utf8(e).unwrap())
            .collect()
    }
}
