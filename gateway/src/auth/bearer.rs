//! Reading `Authorization: Bearer <token>` (RFC 6750), or `Operator <secret>`, bounded before
//! anything is parsed.

use axum::http::{HeaderMap, header};

use super::token::MAX_TOKEN_BYTES;

/// What the `Authorization` header holds.
pub enum Bearer<'a> {
    /// No `Authorization` header.
    Missing,
    /// A header that is not a usable bearer token; says why.
    Malformed(&'static str),
    /// The token.
    Token(&'a str),
    /// `Authorization: Operator <secret>` (the operator credential, `super::operator`).
    Operator(&'a str),
}

/// The bearer token of `headers`. The scheme is matched case-insensitively; the token must be
/// one non-empty run of visible ASCII of at most [`MAX_TOKEN_BYTES`] bytes.
pub fn bearer(headers: &HeaderMap) -> Bearer<'_> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Bearer::Missing;
    };
    if values.next().is_some() {
        return Bearer::Malformed("more than one Authorization header");
    }
    if value.len() > MAX_TOKEN_BYTES + 7 {
        return Bearer::Malformed("the Authorization header is too long");
    }
    let Ok(value) = value.to_str() else {
        return Bearer::Malformed("the Authorization header is not visible ASCII");
    };
    let Some((scheme, token)) = value.split_once(' ') else {
        return Bearer::Malformed("expected Authorization: Bearer <token>");
    };
    let operator = scheme.eq_ignore_ascii_case("operator");
    if !operator && !scheme.eq_ignore_ascii_case("bearer") {
        return Bearer::Malformed("expected the Bearer scheme");
    }
    let token = token.trim_matches(' ');
    if token.is_empty() || token.contains(' ') {
        return Bearer::Malformed("expected one token after Bearer");
    }
    if operator {
        Bearer::Operator(token)
    } else {
        Bearer::Token(token)
    }
}
