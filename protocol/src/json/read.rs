//! The reading half of [`super`]: [`Members`] reads the top-level members of one JSON object
//! with scalar values, checking everything else for syntax. Network input is hostile: it never
//! panics, never recurses deeper than [`MAX_DEPTH`] and allocates only for the member names
//! and string values it returns.

/// Nesting deeper than this is refused (serde_json's own limit is 128).
pub const MAX_DEPTH: usize = 128;

/// A member's value, as far as a flat reader cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scalar {
    /// A string, unescaped.
    Str(String),
    /// A non-negative integer without fraction or exponent that fits in a `u64`.
    Int(u64),
    /// `true` or `false`.
    Bool(bool),
    /// `null`.
    Null,
    /// Any other valid JSON value: an object, an array, or another number.
    Other,
}

/// A member name given twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Duplicate;

/// The top-level members of one JSON object, in document order (names unescaped).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Members(pub Vec<(String, Scalar)>);

impl Members {
    /// Reads `text`, which must be exactly one JSON object (whitespace around it allowed).
    pub fn parse(text: &str) -> Option<Members> {
        let mut r = Reader {
            s: text.as_bytes(),
            i: 0,
        };
        r.ws();
        r.expect(b'{')?;
        let mut members = Vec::new();
        r.ws();
        if r.peek() == Some(b'}') {
            r.i += 1;
        } else {
            loop {
                r.ws();
                let name = r.string()?;
                r.ws();
                r.expect(b':')?;
                r.ws();
                let value = r.scalar()?;
                members.push((name, value));
                r.ws();
                match r.next()? {
                    b',' => continue,
                    b'}' => break,
                    _ => return None,
                }
            }
        }
        r.ws();
        (r.i == r.s.len()).then_some(Members(members))
    }

    /// The value of `name`; an error when the name occurs more than once (serde refuses a
    /// duplicate field too).
    pub fn get(&self, name: &str) -> Result<Option<&Scalar>, Duplicate> {
        let mut found = None;
        for (n, v) in &self.0 {
            if n == name {
                if found.is_some() {
                    return Err(Duplicate);
                }
                found = Some(v);
            }
        }
        Ok(found)
    }
}

struct Reader<'a> {
    s: &'a [u8],
    i: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.i += 1;
        Some(b)
    }

    fn expect(&mut self, b: u8) -> Option<()> {
        (self.next()? == b).then_some(())
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i.checked_add(word.len())?;
        (self.s.get(self.i..end)? == word).then(|| self.i = end)
    }

    fn scalar(&mut self) -> Option<Scalar> {
        match self.peek()? {
            b'"' => self.string().map(Scalar::Str),
            b't' => self.literal(b"true").map(|()| Scalar::Bool(true)),
            b'f' => self.literal(b"false").map(|()| Scalar::Bool(false)),
            b'n' => self.literal(b"null").map(|()| Scalar::Null),
            b'{' | b'[' => self.skip_value(1).map(|()| Scalar::Other),
            _ => self.number(),
        }
    }

    /// A JSON number; `Int` when it is a non-negative integer that fits in a `u64` (serde_json
    /// reads `-0` as a float, so it is `Other` here too). Like serde_json, a number too large
    /// for an `f64` is refused — here from its decimal magnitude alone (no float parsing in the
    /// browser module): 1.8e308 and above.
    fn number(&mut self) -> Option<Scalar> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.i += 1;
        }
        let int_start = self.i;
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => {
                while matches!(self.peek(), Some(b'0'..=b'9')) {
                    self.i += 1;
                }
            }
            _ => return None,
        }
        let int_end = self.i;
        let (mut frac_start, mut frac_end) = (self.i, self.i);
        let mut exponent: i64 = 0;
        let mut integer = true;
        if self.peek() == Some(b'.') {
            integer = false;
            self.i += 1;
            frac_start = self.i;
            self.digits()?;
            frac_end = self.i;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            integer = false;
            self.i += 1;
            let sign = match self.peek() {
                Some(b'-') => {
                    self.i += 1;
                    -1
                }
                Some(b'+') => {
                    self.i += 1;
                    1
                }
                _ => 1,
            };
            let start = self.i;
            self.digits()?;
            for &d in &self.s[start..self.i] {
                exponent = exponent
                    .saturating_mul(10)
                    .saturating_add(i64::from(d - b'0'));
            }
            exponent *= sign;
        }
        let int_digits = &self.s[int_start..int_end];
        let frac_digits = &self.s[frac_start..frac_end];
        if too_large(int_digits, frac_digits, exponent) {
            return None;
        }
        if !integer || negative {
            return Some(Scalar::Other);
        }
        let digits = std::str::from_utf8(int_digits).ok()?;
        Some(digits.parse::<u64>().map_or(Scalar::Other, Scalar::Int))
    }

    fn digits(&mut self) -> Option<()> {
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        (self.i > start).then_some(())
    }

    fn hex4(&mut self) -> Option<u32> {
        let end = self.i.checked_add(4)?;
        let text = std::str::from_utf8(self.s.get(self.i..end)?).ok()?;
        if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        self.i = end;
        u32::from_str_radix(text, 16).ok()
    }

    /// A string, unescaped; refuses control characters, bad escapes and lone surrogates.
    fn string(&mut self) -> Option<String> {
        self.expect(b'"')?;
        let mut out = String::new();
        loop {
            let start = self.i;
            while matches!(self.peek(), Some(b) if b != b'"' && b != b'\\' && b >= 0x20) {
                self.i += 1;
            }
            // The input is a `&str`, and the run stops only at ASCII bytes: valid UTF-8.
            out.push_str(std::str::from_utf8(&self.s[start..self.i]).ok()?);
            match self.next()? {
                b'"' => return Some(out),
                b'\\' => {
                    let c = match self.next()? {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let first = self.hex4()?;
                            let code = match first {
                                0xD800..=0xDBFF => {
                                    self.expect(b'\\')?;
                                    self.expect(b'u')?;
                                    let second = self.hex4()?;
                                    if !(0xDC00..=0xDFFF).contains(&second) {
                                        return None;
                                    }
                                    0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                                }
                                0xDC00..=0xDFFF => return None,
                                other => other,
                            };
                            char::from_u32(code)?
                        }
                        _ => return None,
                    };
                    out.push(c);
                }
                _ => return None, // a control character
            }
        }
    }

    /// Checks and skips one value that starts at an object or array, `depth` levels deep.
    fn skip_value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'{' => {
                self.i += 1;
                self.ws();
                if self.peek() == Some(b'}') {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.ws();
                    self.string()?;
                    self.ws();
                    self.expect(b':')?;
                    self.ws();
                    self.skip_any(depth)?;
                    self.ws();
                    match self.next()? {
                        b',' => continue,
                        b'}' => return Some(()),
                        _ => return None,
                    }
                }
            }
            b'[' => {
                self.i += 1;
                self.ws();
                if self.peek() == Some(b']') {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.ws();
                    self.skip_any(depth)?;
                    self.ws();
                    match self.next()? {
                        b',' => continue,
                        b']' => return Some(()),
                        _ => return None,
                    }
                }
            }
            _ => None,
        }
    }

    fn skip_any(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'{' | b'[' => self.skip_value(depth + 1),
            _ => self.scalar().map(|_| ()),
        }
    }
}

/// Whether `int.frac × 10^exponent` is 1.8e308 or more (beyond `f64`, whose largest value is
/// about 1.797e308).
fn too_large(int: &[u8], frac: &[u8], exponent: i64) -> bool {
    let significant: Vec<u8> = int
        .iter()
        .chain(frac)
        .copied()
        .skip_while(|d| *d == b'0')
        .collect();
    if significant.is_empty() {
        return false; // zero
    }
    // The decimal magnitude of the first significant digit.
    let leading_int_zeros = int.iter().take_while(|d| **d == b'0').count() as i64;
    let int_significant = int.len() as i64 - leading_int_zeros;
    let magnitude = if int_significant > 0 {
        int_significant - 1
    } else {
        -(frac.iter().take_while(|d| **d == b'0').count() as i64) - 1
    }
    .saturating_add(exponent);
    magnitude > 308 || (magnitude == 308 && significant.as_slice() >= b"18".as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::tests::Rng;

    #[test]
    fn numbers_beyond_f64_are_refused_like_serde() {
        for (text, ok) in [
            ("1e308", true),
            ("1.7e308", true),
            ("17e307", true),
            ("0.00001e313", true),
            ("1e309", false),
            ("1.8e308", false),
            ("18e307", false),
            ("1e99999999999999999999", false),
            ("-1e309", false),
            ("0e99999", true),
            ("0.0e400", true),
            ("1e-400", true),
        ] {
            let json = format!("{{\"n\":{text}}}");
            assert_eq!(Members::parse(&json).is_some(), ok, "{text}");
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(&json).is_ok(),
                ok,
                "serde on {text}"
            );
        }
    }

    #[test]
    fn reads_flat_objects() {
        let m = Members::parse(
            " {\"a\" : \"x\\u00e9\\ud83d\\ude00\\n\", \"b\":12, \"c\":true,\"d\":null,\"e\":[1,{\"f\":[]}],\"g\":-1,\"h\":1.5,\"i\":-0,\"j\":18446744073709551616} ",
        )
        .unwrap();
        assert_eq!(
            m.0,
            vec![
                ("a".into(), Scalar::Str("xé😀\n".into())),
                ("b".into(), Scalar::Int(12)),
                ("c".into(), Scalar::Bool(true)),
                ("d".into(), Scalar::Null),
                ("e".into(), Scalar::Other),
                ("g".into(), Scalar::Other),
                ("h".into(), Scalar::Other),
                ("i".into(), Scalar::Other),
                ("j".into(), Scalar::Other),
            ]
        );
        assert_eq!(Members::parse("{}"), Some(Members::default()));
        for bad in [
            "",
            "[]",
            "{",
            "{\"a\"}",
            "{\"a\":}",
            "{\"a\":1,}",
            "{\"a\":01}",
            "{\"a\":1.}",
            "{\"a\":.5}",
            "{\"a\":tru}",
            "{\"a\":\"\\ud800\"}",
            "{\"a\":\"\\udc00\"}",
            "{\"a\":\"\\x\"}",
            "{\"a\":\"tab\there\"}",
            "{\"a\":[1,]}",
            "{\"a\":{\"b\"}}",
            "{} {}",
            "{\"a\":1} x",
            "{'a':1}",
        ] {
            assert_eq!(Members::parse(bad), None, "{bad:?}");
        }
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert_eq!(Members::parse(&deep), None, "too deep");
        let ok = format!("{{\"a\":{}{}}}", "[".repeat(100), "]".repeat(100));
        assert!(Members::parse(&ok).is_some());
        assert_eq!(
            Members::parse(r#"{"a":1,"a":2}"#).unwrap().get("a"),
            Err(Duplicate)
        );
    }

    #[test]
    fn agrees_with_serde_json_on_what_is_valid_json() {
        // Random byte soups around a valid object: whatever serde_json accepts as an object,
        // the reader accepts, and the other way round (arrays aside: the reader wants objects).
        let pieces = [
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            "\"k\"",
            "\"v\\n\"",
            "1",
            "-2",
            "3.5",
            "1e3",
            "true",
            "null",
            " ",
            "\"\\u0041\"",
            "0",
            "\"",
            "\\",
        ];
        let mut rng = Rng(42);
        let mut agreed = 0;
        for _ in 0..200_000 {
            let n = 1 + rng.next() % 9;
            let mut text: String = (0..n)
                .map(|_| pieces[(rng.next() % pieces.len() as u64) as usize])
                .collect();
            if rng.next() % 2 == 0 {
                text = format!("{{\"k\":{text}}}");
            }
            let theirs = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .filter(|v| v.is_object());
            let ours = Members::parse(&text);
            assert_eq!(ours.is_some(), theirs.is_some(), "{text:?}");
            if let (Some(ours), Some(theirs)) = (ours, theirs) {
                agreed += 1;
                for (name, value) in &ours.0 {
                    if ours.get(name).is_err() {
                        continue; // given twice: serde_json keeps the last, `get` refuses
                    }
                    match value {
                        Scalar::Str(s) => assert_eq!(theirs[name].as_str(), Some(s.as_str())),
                        Scalar::Int(i) => assert_eq!(theirs[name].as_u64(), Some(*i)),
                        _ => {}
                    }
                }
            }
        }
        assert!(agreed > 1_000, "{agreed}");
    }
}
