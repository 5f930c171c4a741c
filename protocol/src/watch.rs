//! The change stream, `POST /v1/watch` (Server-Sent Events): its request body, the names of its
//! events and the fields of their data — defined once, for the gateway that sends them and the
//! browser client that reads them (`docs/protocol.md`, "The change stream").
//!
//! The gateway parses [`WatchRequest`] and writes each event's data with serde ([`Ready`],
//! [`Changed`], [`Reset`]). The client carries no JSON library: it writes the body with
//! [`watch_body`] (the same bytes serde writes) and reads the events' data with
//! [`crate::json::Members`] (and the browser's `JSON` for `ready`), by the field names below.
//! The tests here write every event with serde and read it back by the client's rules, so
//! the two ends cannot drift apart.

use serde::{Deserialize, Serialize};

use crate::strict::object_only;
use crate::wire::AggregateRef;

/// The first event of every stream: the stream is registered, and what happens from now on
/// is notified. Data: [`Ready`].
pub const READY: &str = "ready";
/// An aggregate reached a version. Data: [`Changed`].
pub const CHANGED: &str = "changed";
/// An aggregate was trimmed or deleted: read it again from scratch. Data: [`Reset`].
pub const RESET: &str = "reset";
/// Notifications were lost (the client lagged): catch up everything the stream covers.
/// Data: `{}`.
pub const RESYNC: &str = "resync";

/// Sent every `--watch-heartbeat-secs` so a dead connection shows; the client ignores it
/// (like any event name it does not know). Data: `{}`.
pub const HEARTBEAT: &str = "heartbeat";

/// The field of an event's data naming the aggregate's type.
pub const TYPE_ID: &str = "typeId";
/// The field of an event's data naming the aggregate.
pub const ID: &str = "id";
/// [`Changed`]'s version field.
pub const VERSION: &str = "version";
/// [`Ready`]'s list of what the gateway refused to watch.
pub const REFUSED: &str = "refused";
/// [`Ready`]'s list of the aggregates' versions.
pub const TIPS: &str = "tips";
/// A refused entry's code field.
pub const CODE: &str = "code";
/// [`Reset`]'s field saying whether the aggregate was deleted (else trimmed).
pub const DELETED: &str = "deleted";
/// [`Ready`]'s field saying the stream forgets the versions it sent only on a deletion
/// ([`Ready::deleted_resets`]).
pub const DELETED_RESETS: &str = "deletedResets";

/// The `POST` body: the aggregates to watch, in the order `ready`'s [`Ready::tips`] follows.
///
/// Parsed by `WatchRequestDef` (strict: an unknown field is refused).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WatchRequest {
    /// The aggregates to watch.
    pub aggregates: Vec<AggregateRef>,
}

#[derive(Deserialize)]
#[serde(remote = "WatchRequest", rename = "WatchRequest", deny_unknown_fields)]
struct WatchRequestDef {
    aggregates: Vec<AggregateRef>,
}

object_only!(WatchRequest => WatchRequestDef);

/// [`WatchRequest`]'s JSON, written by hand for the browser client (which carries no JSON
/// library): byte for byte what serde writes (a test checks it). UUIDs are hex and hyphens,
/// so nothing needs escaping.
pub fn watch_body(aggregates: &[AggregateRef]) -> String {
    // 80 bytes per entry: `{"typeId":"<36>","id":"<36>"}` is 70, plus the comma.
    let mut out = String::with_capacity(16 + aggregates.len() * 80);
    let mut buffer = uuid::Uuid::encode_buffer();
    out.push_str("{\"aggregates\":[");
    for (i, a) in aggregates.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"typeId\":\"");
        out.push_str(a.type_id.hyphenated().encode_lower(&mut buffer));
        out.push_str("\",\"id\":\"");
        out.push_str(a.id.hyphenated().encode_lower(&mut buffer));
        out.push_str("\"}");
    }
    out.push_str("]}");
    out
}

/// `ready`'s data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Ready {
    /// The aggregates named but not watched, each with the gateway's code (the access policy's
    /// `AGGREGATE_FORBIDDEN`); left out when none is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<Refused>,
    /// Each named aggregate's version, read after the stream was registered, in the order the
    /// request named them (`null` for one not readable); left out when the gateway could not
    /// read them. A client at that version has nothing to catch up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tips: Option<Vec<Option<u64>>>,
    /// The stream forgets the highest version it sent of an aggregate only on a deletion (a
    /// trim keeps it), and its `reset`s say which they are ([`Reset::deleted`]): so on this
    /// stream a `changed` below one sent follows a deletion. Left out when false: a gateway
    /// from before it forgot on every `reset`, trims included, and a client must not take a
    /// lower version on such a stream for a recreation. A client from before it ignores it.
    #[serde(rename = "deletedResets", skip_serializing_if = "std::ops::Not::not")]
    pub deleted_resets: bool,
}

/// An aggregate `ready` says is not watched, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Refused {
    /// The aggregate's type.
    pub type_id: uuid::Uuid,
    /// The aggregate.
    pub id: uuid::Uuid,
    /// The gateway's code.
    pub code: u32,
}

/// `changed`'s data: the aggregate reached `version` (versions only grow: coalescing
/// notifications loses nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Changed {
    /// The aggregate's type.
    pub type_id: uuid::Uuid,
    /// The aggregate.
    pub id: uuid::Uuid,
    /// The version it reached.
    pub version: u64,
}

/// `reset`'s data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reset {
    /// The aggregate's type.
    pub type_id: uuid::Uuid,
    /// The aggregate.
    pub id: uuid::Uuid,
    /// Deleted (its versions may start again from 1), not trimmed (a trim keeps the tip, so
    /// the versions notified before still hold). Added after the first release: a client
    /// reads a `reset` without it as a deletion (what every `reset` was taken for before),
    /// and a client from before it ignores it (clients read events' data by field name, an
    /// unknown field is no error).
    pub deleted: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{Members, Scalar};
    use uuid::Uuid;

    fn agg(n: u128) -> AggregateRef {
        AggregateRef {
            type_id: Uuid::from_u128(n),
            id: Uuid::from_u128(u128::MAX - n),
        }
    }

    #[test]
    fn the_clients_body_is_the_body_serde_writes_and_the_gateway_parses() {
        for n in [0, 1, 2, 7, 1000] {
            let aggregates: Vec<AggregateRef> = (0..n).map(agg).collect();
            let request = WatchRequest { aggregates };
            let body = watch_body(&request.aggregates);
            assert_eq!(body, serde_json::to_string(&request).unwrap());
            assert_eq!(
                serde_json::from_str::<WatchRequest>(&body).unwrap(),
                request
            );
        }
        // Strict: an unknown field, or an array for the object, is refused.
        assert!(serde_json::from_str::<WatchRequest>(r#"{"aggregates":[],"x":1}"#).is_err());
        assert!(serde_json::from_str::<WatchRequest>("[[]]").is_err());
    }

    fn uuid_of(m: &Members, field: &str) -> Option<Uuid> {
        match m.get(field).ok()? {
            Some(Scalar::Str(s)) => Uuid::try_parse(s).ok(),
            _ => None,
        }
    }

    #[test]
    fn the_events_the_gateway_writes_read_back_by_the_clients_field_names() {
        let a = agg(5);
        let changed = serde_json::to_string(&Changed {
            type_id: a.type_id,
            id: a.id,
            version: 9_007_199_254_740_991,
        })
        .unwrap();
        let m = Members::parse(&changed).expect("an object of scalars");
        assert_eq!(uuid_of(&m, TYPE_ID), Some(a.type_id));
        assert_eq!(uuid_of(&m, ID), Some(a.id));
        assert!(matches!(
            m.get(VERSION),
            Ok(Some(Scalar::Int(9_007_199_254_740_991)))
        ));
        for deleted in [false, true] {
            let reset = serde_json::to_string(&Reset {
                type_id: a.type_id,
                id: a.id,
                deleted,
            })
            .unwrap();
            let m = Members::parse(&reset).expect("an object of scalars");
            assert_eq!(
                (uuid_of(&m, TYPE_ID), uuid_of(&m, ID)),
                (Some(a.type_id), Some(a.id))
            );
            assert_eq!(m.get(DELETED), Ok(Some(&Scalar::Bool(deleted))));
        }

        // `ready`: empty when there is nothing to say; else `refused`, `tips` and
        // `deletedResets` by name (the client reads `deletedResets` with `Members`).
        assert_eq!(serde_json::to_string(&Ready::default()).unwrap(), "{}");
        let says = Ready {
            deleted_resets: true,
            ..Ready::default()
        };
        let says = serde_json::to_string(&says).unwrap();
        let m = Members::parse(&says).expect("an object of scalars");
        assert_eq!(m.get(DELETED_RESETS), Ok(Some(&Scalar::Bool(true))));
        let ready = serde_json::to_value(Ready {
            refused: vec![Refused {
                type_id: a.type_id,
                id: a.id,
                code: 40302,
            }],
            tips: Some(vec![Some(3), None]),
            deleted_resets: true,
        })
        .unwrap();
        let entry = &ready[REFUSED][0];
        assert_eq!(entry[TYPE_ID], a.type_id.to_string());
        assert_eq!(entry[ID], a.id.to_string());
        assert_eq!(entry[CODE], 40302);
        assert_eq!(ready[TIPS], serde_json::json!([3, null]));
        assert_eq!(ready[DELETED_RESETS], true);
    }
}
