//! Reading the change stream: Server-Sent Events, parsed from text chunks as they arrive.
//!
//! The stream is read with `fetch` (so it can carry the session's `Authorization` header, which
//! `EventSource` cannot), so the parsing is ours: lines end with `\n`, `\r\n` or `\r`; an empty
//! line ends an event; `event:` names it, `data:` lines are joined with `\n`, lines starting
//! with `:` are comments; a chunk may end anywhere, even inside a line. Each event's data is one
//! JSON object ([`crate::engine::read::machine::Note`]s are made of them by [`note`]).
//! The buffer of an unfinished line is bounded: a stream that sends a longer line is broken.

use celeriant_sync_protocol::json::{Members, Scalar};
use celeriant_sync_protocol::watch;
use uuid::Uuid;

use super::machine::Note;
use crate::engine::model::AggregateRef;

/// Longest line accepted (a notification is a few hundred bytes).
pub(crate) const MAX_LINE: usize = 64 * 1024;
/// Most data one event may carry (its `data:` lines together).
pub(crate) const MAX_EVENT: usize = 64 * 1024;

/// One event of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Its `event:` name (`message` when none).
    pub name: String,
    /// Its `data:`.
    pub data: String,
}

/// Why a stream cannot be read further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLong;

/// A known event whose data does not read: the stream is not to be trusted further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreadable;

/// The parser's state between chunks.
#[derive(Debug, Default)]
pub struct Parser {
    line: String,
    /// A `\r` ended the last chunk: a `\n` starting the next one belongs to it.
    after_cr: bool,
    name: String,
    data: Option<String>,
}

impl Parser {
    /// Feeds a chunk; returns the events it completed.
    pub fn feed(&mut self, chunk: &str) -> Result<Vec<Event>, TooLong> {
        let mut events = Vec::new();
        let mut rest = chunk;
        if self.after_cr {
            self.after_cr = false;
            rest = rest.strip_prefix('\n').unwrap_or(rest);
        }
        // Split without indexing: a `str` index can panic, and its panic message links
        // `char::escape_debug` and Unicode tables into the module (docs/benchmarks.md, "Size").
        while let Some(end) = rest.find(['\n', '\r']) {
            let (line, ending) = rest.split_at_checked(end).unwrap_or((rest, ""));
            self.line.push_str(line);
            rest = match ending.strip_prefix('\r') {
                Some("") => {
                    self.after_cr = true;
                    ""
                }
                Some(after) => after.strip_prefix('\n').unwrap_or(after),
                None => ending.strip_prefix('\n').unwrap_or(ending),
            };
            let line = std::mem::take(&mut self.line);
            if let Some(event) = self.line_done(&line) {
                events.push(event);
            }
            if self.data.as_ref().is_some_and(|d| d.len() > MAX_EVENT) {
                return Err(TooLong);
            }
        }
        self.line.push_str(rest);
        if self.line.len() > MAX_LINE {
            return Err(TooLong);
        }
        Ok(events)
    }

    fn line_done(&mut self, line: &str) -> Option<Event> {
        if line.is_empty() {
            // An event ends here, with data or without (a name alone is dropped with it).
            let name = std::mem::take(&mut self.name);
            let data = self.data.take()?;
            return Some(Event {
                name: if name.is_empty() {
                    "message".into()
                } else {
                    name
                },
                data,
            });
        }
        if line.starts_with(':') {
            return None; // a comment
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.name = value.to_owned(),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            _ => {} // id, retry, unknown fields: not used
        }
        None
    }
}

fn aggregate_of(members: &Members) -> Option<AggregateRef> {
    let uuid = |name: &str| match members.get(name).ok()? {
        Some(Scalar::Str(s)) => Uuid::try_parse(s).ok(),
        _ => None,
    };
    Some(AggregateRef {
        type_id: uuid(watch::TYPE_ID)?,
        id: uuid(watch::ID)?,
    })
}

/// What an event means for the read side; `Ok(None)` for a heartbeat (or an event this version
/// does not know), `Err` for a known event that does not read (the stream is not to be trusted
/// further).
pub fn note(event: &Event) -> Result<Option<Note>, Unreadable> {
    let members = || Members::parse(&event.data).ok_or(Unreadable);
    Ok(Some(match event.name.as_str() {
        // Read leniently: `ready`'s data matters to the floors only when it says
        // `deletedResets: true`; anything else (absent, an older gateway; unreadable) is false,
        // the side that keeps the higher floor.
        watch::READY => Note::Ready {
            deleted_resets: members().is_ok_and(|m| {
                matches!(m.get(watch::DELETED_RESETS), Ok(Some(Scalar::Bool(true))))
            }),
        },
        watch::RESYNC => Note::Resync,
        watch::CHANGED => {
            let m = members()?;
            let version = match m.get(watch::VERSION).map_err(|_| Unreadable)? {
                Some(Scalar::Int(v)) => *v,
                _ => return Err(Unreadable),
            };
            Note::Changed {
                aggregate: aggregate_of(&m).ok_or(Unreadable)?,
                version,
            }
        }
        watch::RESET => {
            let m = members()?;
            // Absent (a gateway from before the field): a deletion, as every `reset` was.
            let deleted = match m.get(watch::DELETED).map_err(|_| Unreadable)? {
                None => true,
                Some(Scalar::Bool(deleted)) => *deleted,
                Some(_) => return Err(Unreadable),
            };
            Note::Reset {
                aggregate: aggregate_of(&m).ok_or(Unreadable)?,
                deleted,
            }
        }
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&str]) -> Vec<Event> {
        let mut p = Parser::default();
        chunks.iter().flat_map(|c| p.feed(c).unwrap()).collect()
    }

    #[test]
    fn events_are_read_whatever_the_chunking_and_line_ends() {
        let text = "event: ready\ndata: {}\n\n: a comment\nevent: changed\r\ndata: {\"a\":1}\r\n\r\nevent: resync\rdata: {}\r\rdata: line one\ndata: line two\n\n";
        let want = vec![
            Event {
                name: "ready".into(),
                data: "{}".into(),
            },
            Event {
                name: "changed".into(),
                data: "{\"a\":1}".into(),
            },
            Event {
                name: "resync".into(),
                data: "{}".into(),
            },
            Event {
                name: "message".into(),
                data: "line one\nline two".into(),
            },
        ];
        assert_eq!(events(&[text]), want);
        // Every split point, including inside "\r\n".
        for at in 0..text.len() {
            if text.is_char_boundary(at) {
                assert_eq!(events(&[&text[..at], &text[at..]]), want, "split at {at}");
            }
        }
        // One byte at a time.
        let bytes: Vec<String> = text.chars().map(String::from).collect();
        let refs: Vec<&str> = bytes.iter().map(String::as_str).collect();
        assert_eq!(events(&refs), want);
    }

    #[test]
    fn an_endless_event_is_refused_and_a_name_without_data_is_dropped() {
        let mut p = Parser::default();
        let line = format!("data: {}\n", "x".repeat(1000));
        let mut refused = false;
        for _ in 0..100 {
            if p.feed(&line).is_err() {
                refused = true;
                break;
            }
        }
        assert!(refused, "data lines beyond MAX_EVENT end the stream");
        assert_eq!(
            events(&["event: changed\n\ndata: {}\n\n"]),
            [Event {
                name: "message".into(),
                data: "{}".into()
            }]
        );
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut p = Parser::default();
        assert!(p.feed(&"x".repeat(MAX_LINE)).is_ok());
        assert_eq!(p.feed("y"), Err(TooLong));
    }

    #[test]
    fn notes() {
        let a = "00000000-0000-0000-0000-000000000007";
        let b = "00000000-0000-0000-0000-000000000009";
        let ev = |name: &str, data: String| Event {
            name: name.into(),
            data,
        };
        let agg = AggregateRef {
            type_id: Uuid::from_u128(7),
            id: Uuid::from_u128(9),
        };
        // `deletedResets` says the stream forgets what it sent only on a deletion; absent (an
        // older gateway), false, or not a boolean: it does not.
        let ready = |data: &str| note(&ev("ready", data.into()));
        let says = |deleted_resets| Ok(Some(Note::Ready { deleted_resets }));
        assert_eq!(ready("{}"), says(false));
        assert_eq!(ready(r#"{"deletedResets":false}"#), says(false));
        assert_eq!(ready(r#"{"deletedResets":"yes"}"#), says(false));
        assert_eq!(ready("not json"), says(false));
        assert_eq!(ready(r#"{"deletedResets":true}"#), says(true));
        // Beside `refused` and `tips` (arrays, skipped).
        let refused = format!(r#"[{{"typeId":"{a}","id":"{b}","code":40302}}]"#);
        let full = format!(r#"{{"refused":{refused},"tips":[7,null],"deletedResets":true}}"#);
        assert_eq!(ready(&full), says(true));
        assert_eq!(
            note(&ev(
                "changed",
                format!(r#"{{"typeId":"{a}","id":"{b}","version":12}}"#)
            )),
            Ok(Some(Note::Changed {
                aggregate: agg,
                version: 12
            }))
        );
        // `deleted` says a trim from a deletion; without it (an older gateway), a deletion.
        assert_eq!(
            note(&ev("reset", format!(r#"{{"typeId":"{a}","id":"{b}"}}"#))),
            Ok(Some(Note::Reset {
                aggregate: agg,
                deleted: true
            }))
        );
        for deleted in [false, true] {
            assert_eq!(
                note(&ev(
                    "reset",
                    format!(r#"{{"typeId":"{a}","id":"{b}","deleted":{deleted}}}"#)
                )),
                Ok(Some(Note::Reset {
                    aggregate: agg,
                    deleted
                }))
            );
        }
        for bad in [
            r#""deleted":1"#,
            r#""deleted":"no""#,
            r#""deleted":false,"deleted":false"#,
        ] {
            assert_eq!(
                note(&ev(
                    "reset",
                    format!(r#"{{"typeId":"{a}","id":"{b}",{bad}}}"#)
                )),
                Err(Unreadable),
                "{bad}"
            );
        }
        assert_eq!(note(&ev("resync", "{}".into())), Ok(Some(Note::Resync)));
        assert_eq!(note(&ev("heartbeat", "{}".into())), Ok(None));
        assert_eq!(
            note(&ev(
                "changed",
                format!(r#"{{"typeId":"{a}","id":"x","version":1}}"#)
            )),
            Err(Unreadable)
        );
        assert_eq!(note(&ev("changed", "not json".into())), Err(Unreadable));
    }
}
