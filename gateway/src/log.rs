//! The gateway's log: one event, one line, whatever a request put in it.
//!
//! Much of what is logged comes from requests: the message of a refused session names the JSON
//! key that was wrong, an app token's subject, a fair-share key, a `Host` header. tracing's text
//! formatter writes a field's value as given (it escapes ANSI sequences, not line breaks), so a
//! key holding `"\n2026-12-04T… WARN …"` would start a forged line of its own. Instead of
//! escaping at every call site (and missing the next one), every field value — the message too —
//! goes through [`escape_controls`] in the formatter itself: control characters (C0, DEL, C1,
//! which includes NEL) and the Unicode line and paragraph separators are written as `\u{..}`
//! escapes, so a log line always ends where the event ends.

use std::fmt;

use tracing::field::Field;
use tracing_subscriber::field::MakeExt as _;
use tracing_subscriber::fmt::format::{FormatFields, Writer};

/// Writes `text` with every control character and line/paragraph separator escaped.
pub fn escape_controls(text: &str, out: &mut impl fmt::Write) -> fmt::Result {
    for c in text.chars() {
        if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
            match c {
                '\n' => out.write_str("\\n")?,
                '\r' => out.write_str("\\r")?,
                '\t' => out.write_str("\\t")?,
                _ => write!(out, "\\u{{{:x}}}", c as u32)?,
            }
        } else {
            out.write_char(c)?;
        }
    }
    Ok(())
}

/// The field formatter: `message` first as text, then `name=value`, separated by spaces, each
/// value escaped.
pub fn fields() -> impl for<'w> FormatFields<'w> + Send + Sync + 'static {
    tracing_subscriber::fmt::format::debug_fn(
        |writer: &mut Writer<'_>, field: &Field, value: &dyn fmt::Debug| {
            let text = format!("{value:?}");
            if field.name() != "message" {
                write!(writer, "{}=", field.name())?;
            }
            escape_controls(&text, writer)
        },
    )
    .delimited(" ")
}

/// Installs the gateway's subscriber (filter from `RUST_LOG`, default `info,tower_http=warn`).
pub fn init() {
    use tracing_subscriber::EnvFilter;
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,tower_http=warn")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .fmt_fields(fields())
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(text: &str) -> String {
        let mut out = String::new();
        escape_controls(text, &mut out).unwrap();
        out
    }

    #[test]
    fn nothing_can_break_a_line() {
        let hostile = "a\nb\rc\u{85}d\u{2028}e\u{2029}f\u{1b}[31mg\u{0}h\u{7f}i\tj";
        let out = escaped(hostile);
        assert_eq!(
            out,
            "a\\nb\\rc\\u{85}d\\u{2028}e\\u{2029}f\\u{1b}[31mg\\u{0}h\\u{7f}i\\tj"
        );
        assert!(!out.chars().any(|c| c.is_control()));
        assert_eq!(escaped("plain text, é, 字"), "plain text, é, 字");
    }
}
