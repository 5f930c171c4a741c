//! Request and response bodies of protocol v1, exactly as they travel (camelCase JSON).
//!
//! Requests are parsed strictly (`deny_unknown_fields`): a misspelt field is an error, never a
//! silently defaulted value. Serialisation is deterministic (struct field order, no maps), which
//! the client relies on to resend a pinned batch byte for byte.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::encoding::{base64_bytes, base64_len, base64_opt, safe_u64};

/// `POST /v1/write`: one atomic write across the aggregates it names.
///
/// The gateway always forwards it with `enforce_client_idempotency = true` and no expected
/// version; the organisation comes from the gateway's configuration, never from the body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WriteRequest {
    /// The writing device's client id.
    pub client_id: Uuid,
    /// One entry per aggregate; the celeriant-sync client always sends exactly one.
    pub writes: Vec<AggregateWrite>,
}

/// An aggregate's identity within the gateway's organisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AggregateRef {
    /// The aggregate type id.
    pub type_id: Uuid,
    /// The aggregate id.
    pub id: Uuid,
}

/// The events for one aggregate within a [`WriteRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AggregateWrite {
    /// Which aggregate.
    pub aggregate: AggregateRef,
    /// Whether the write may create the aggregate (default `true`).
    #[serde(default = "default_true")]
    pub allow_create: bool,
    /// The events, `clientSeq` strictly increasing.
    pub events: Vec<Event>,
}

fn default_true() -> bool {
    true
}

/// One event as it travels, both in writes and in reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Event {
    /// The writer's per-aggregate sequence, `>= 1`.
    #[serde(deserialize_with = "safe_u64")]
    pub client_seq: u64,
    /// The application's id for the event, opaque to the server.
    #[serde(default)]
    pub event_id: Option<Uuid>,
    /// Client-side Unix time in milliseconds.
    #[serde(deserialize_with = "safe_u64")]
    pub timestamp: u64,
    /// The event type (Celeriant's major type), never 0.
    #[serde(rename = "type", deserialize_with = "safe_u64")]
    pub event_type: u64,
    /// The minor type (default 0).
    #[serde(default, deserialize_with = "safe_u64")]
    pub minor: u64,
    /// The payload bytes, base64.
    #[serde(with = "base64_bytes")]
    pub data: Vec<u8>,
    /// The AES-GCM nonce when `data` is encrypted: exactly 12 bytes, base64.
    #[serde(default, with = "base64_opt")]
    pub iv: Option<Vec<u8>>,
}

/// Fixed JSON overhead of one event besides its base64 payload, generous: field names, a UUID,
/// three maximal integers, punctuation.
pub const EVENT_JSON_OVERHEAD: usize = 192;

/// Fixed JSON overhead of a write request holding one aggregate, besides its events.
pub const WRITE_JSON_OVERHEAD: usize = 256;

impl Event {
    /// An upper bound on this event's size inside a JSON body, used to cut batches under a
    /// byte limit without serialising them first.
    pub fn encoded_len(&self) -> usize {
        EVENT_JSON_OVERHEAD
            + base64_len(self.data.len())
            + self.iv.as_ref().map_or(0, |iv| base64_len(iv.len()))
    }
}

/// `GET /v1/aggregates/{typeId}/{id}/events?from=N`: one page of an aggregate's batches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadResponse {
    /// Batches in version order, starting at the requested version (or the first after it).
    pub batches: Vec<ReadBatch>,
    /// The `from` to ask for next, or `null` when this page reached the end.
    pub next: Option<u64>,
}

/// One stored batch: what one write appended to one aggregate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadBatch {
    /// The aggregate version this batch created (1-based batch count).
    pub version: u64,
    /// The client that wrote it.
    pub client_id: Uuid,
    /// Server time of the write, Unix milliseconds.
    pub server_timestamp: u64,
    /// The events, as written.
    pub events: Vec<Event>,
}

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// `"ok"` when the backend answers.
    pub status: String,
    /// `"embedded"` or `"celeriant"`.
    pub backend: String,
    /// The protocol version served.
    pub protocol: u32,
    /// Whether fault injection is enabled on this gateway.
    pub faults: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> WriteRequest {
        WriteRequest {
            client_id: Uuid::from_u128(1),
            writes: vec![AggregateWrite {
                aggregate: AggregateRef {
                    type_id: Uuid::from_u128(2),
                    id: Uuid::from_u128(3),
                },
                allow_create: true,
                events: vec![Event {
                    client_seq: 1,
                    event_id: None,
                    timestamp: 1_700_000_000_000,
                    event_type: 3,
                    minor: 0,
                    data: b"hello".to_vec(),
                    iv: Some(vec![0; 12]),
                }],
            }],
        }
    }

    #[test]
    fn write_request_round_trips_with_the_documented_names() {
        let json = serde_json::to_string(&sample()).unwrap();
        assert_eq!(
            json,
            concat!(
                r#"{"clientId":"00000000-0000-0000-0000-000000000001","writes":[{"aggregate":"#,
                r#"{"typeId":"00000000-0000-0000-0000-000000000002","id":"00000000-0000-0000-0000-000000000003"},"#,
                r#""allowCreate":true,"events":[{"clientSeq":1,"eventId":null,"timestamp":1700000000000,"#,
                r#""type":3,"minor":0,"data":"aGVsbG8=","iv":"AAAAAAAAAAAAAAAA"}]}]}"#
            )
        );
        assert_eq!(
            serde_json::from_str::<WriteRequest>(&json).unwrap(),
            sample()
        );
    }

    #[test]
    fn unknown_fields_are_refused() {
        let json = serde_json::to_string(&sample())
            .unwrap()
            .replace("\"minor\"", "\"minro\"");
        let err = serde_json::from_str::<WriteRequest>(&json)
            .unwrap_err()
            .to_string();
        assert!(err.contains("minro"), "{err}");
    }

    #[test]
    fn encoded_len_bounds_the_real_encoding() {
        let mut req = sample();
        for n in [0usize, 1, 2, 3, 100, 4096] {
            let e = &mut req.writes[0].events[0];
            e.data = vec![0xff; n];
            e.event_id = Some(Uuid::from_u128(u128::MAX));
            e.client_seq = crate::encoding::MAX_SAFE_INTEGER;
            e.timestamp = crate::encoding::MAX_SAFE_INTEGER;
            e.event_type = crate::encoding::MAX_SAFE_INTEGER;
            e.minor = crate::encoding::MAX_SAFE_INTEGER;
            let one = serde_json::to_string(e).unwrap().len();
            assert!(one <= e.encoded_len(), "{one} > {}", e.encoded_len());
        }
    }
}
