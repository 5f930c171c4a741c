//! Request and response bodies of protocol v1, exactly as they travel (camelCase JSON).
//!
//! Requests are parsed strictly: a misspelt field is an error, never a silently defaulted value
//! (`deny_unknown_fields`), and a JSON array in place of an object is refused (serde would
//! otherwise read it as the fields in declaration order; see `crate::strict`). Each request
//! type is therefore parsed through a private `...Def` twin that carries the parsing attributes.
//! Serialisation is deterministic (struct field order, no maps), which the client relies on to
//! resend a pinned batch byte for byte.
//!
//! UUIDs are parsed leniently (`uuid` also accepts uppercase, 32 hex digits without hyphens,
//! `{...}` braces and a `urn:uuid:` prefix) but always written lowercase and hyphenated.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::encoding::{base64_bytes, base64_len, base64_opt, safe_u64, safe_u64_opt};
use crate::strict::object_only;

/// `POST /v1/write`: one atomic write across the aggregates it names.
///
/// The gateway always forwards it with `enforce_client_idempotency = true` and each aggregate's
/// `expectedVersion` as sent; the organisation comes from the gateway's configuration, never
/// from the body.
///
/// Parsed by `WriteRequestDef` (strict; see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteRequest {
    /// The writing device's client id.
    pub client_id: Uuid,
    /// One entry per aggregate (at most `Limits::max_aggregates`, each aggregate at most once);
    /// all land or none does.
    pub writes: Vec<AggregateWrite>,
}

#[derive(Deserialize)]
#[serde(
    remote = "WriteRequest",
    rename = "WriteRequest",
    rename_all = "camelCase",
    deny_unknown_fields
)]
struct WriteRequestDef {
    client_id: Uuid,
    writes: Vec<AggregateWrite>,
}

object_only!(WriteRequest => WriteRequestDef);

/// An aggregate's identity within the gateway's organisation.
///
/// Parsed by `AggregateRefDef` (strict; see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AggregateRef {
    /// The aggregate type id.
    pub type_id: Uuid,
    /// The aggregate id.
    pub id: Uuid,
}

#[derive(Deserialize)]
#[serde(
    remote = "AggregateRef",
    rename = "AggregateRef",
    rename_all = "camelCase",
    deny_unknown_fields
)]
struct AggregateRefDef {
    type_id: Uuid,
    id: Uuid,
}

object_only!(AggregateRef => AggregateRefDef);

/// The events for one aggregate within a [`WriteRequest`].
///
/// Parsed by `AggregateWriteDef` (strict; see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AggregateWrite {
    /// Which aggregate.
    pub aggregate: AggregateRef,
    /// Whether the write may create the aggregate (default `true`).
    pub allow_create: bool,
    /// The version guard: the write lands only if the aggregate is at exactly this version
    /// (its batch count; `0`: only if it does not exist yet). Absent (or `null`): no guard.
    /// Left out of the JSON when `None`, so unconditional writes keep their bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    /// The events, `clientSeq` strictly increasing.
    pub events: Vec<Event>,
}

#[derive(Deserialize)]
#[serde(
    remote = "AggregateWrite",
    rename = "AggregateWrite",
    rename_all = "camelCase",
    deny_unknown_fields
)]
struct AggregateWriteDef {
    aggregate: AggregateRef,
    #[serde(default = "default_true")]
    allow_create: bool,
    #[serde(default, deserialize_with = "safe_u64_opt")]
    expected_version: Option<u64>,
    events: Vec<Event>,
}

object_only!(AggregateWrite => AggregateWriteDef);

fn default_true() -> bool {
    true
}

/// One event as it travels, both in writes and in reads.
///
/// Parsed by `EventDef` (strict; see the module documentation): `clientSeq`, `timestamp`,
/// `type` and `minor` must be at most 2^53 − 1, `eventId`, `minor` and `iv` may be left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// The writer's per-aggregate sequence, `>= 1`.
    pub client_seq: u64,
    /// The application's id for the event, opaque to the server.
    pub event_id: Option<Uuid>,
    /// Client-side Unix time in milliseconds.
    pub timestamp: u64,
    /// The event type (Celeriant's major type), never 0.
    #[serde(rename = "type")]
    pub event_type: u64,
    /// The minor type (default 0).
    pub minor: u64,
    /// The payload bytes, base64.
    #[serde(serialize_with = "base64_bytes::serialize")]
    pub data: Vec<u8>,
    /// The AES-GCM nonce when `data` is encrypted: exactly 12 bytes, base64.
    #[serde(serialize_with = "base64_opt::serialize")]
    pub iv: Option<Vec<u8>>,
}

#[derive(Deserialize)]
#[serde(
    remote = "Event",
    rename = "Event",
    rename_all = "camelCase",
    deny_unknown_fields
)]
struct EventDef {
    #[serde(deserialize_with = "safe_u64")]
    client_seq: u64,
    #[serde(default)]
    event_id: Option<Uuid>,
    #[serde(deserialize_with = "safe_u64")]
    timestamp: u64,
    #[serde(rename = "type", deserialize_with = "safe_u64")]
    event_type: u64,
    #[serde(default, deserialize_with = "safe_u64")]
    minor: u64,
    #[serde(deserialize_with = "base64_bytes::deserialize")]
    data: Vec<u8>,
    #[serde(default, deserialize_with = "base64_opt::deserialize")]
    iv: Option<Vec<u8>>,
}

object_only!(Event => EventDef);

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
    /// The aggregate's highest version when it was read (0: unknown or deleted). Always sent
    /// by this gateway; absent from older gateways' answers (then 0).
    #[serde(default)]
    pub tip: u64,
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
    /// `"ok"` when the backend answers and can take writes, `"degraded"` otherwise (the answer
    /// is then not 200, and also carries an outcome body).
    pub status: String,
    /// `"embedded"` or `"celeriant"`.
    pub backend: String,
    /// The protocol version served.
    pub protocol: u32,
    /// Whether fault injection is enabled on this gateway.
    pub faults: bool,
    /// Why the gateway is degraded (with `status: "degraded"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The embedded store's own state (embedded backend only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreHealth>,
}

/// The embedded store's state, in `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreHealth {
    /// `"ok"`, `"lowSpace"` (free space under the floor: writes refused) or `"failed"` (an I/O
    /// error; the store is reopening itself).
    pub state: String,
    /// Free bytes on the store's file system, when known.
    pub free_bytes: Option<u64>,
    /// The free-space floor under which writes are refused.
    pub min_free_bytes: u64,
    /// Stored records that failed their checksum since the gateway started.
    pub checksum_failures: u64,
    /// Which aggregate and version failed last. No longer sent (the gateway logs it instead:
    /// `/healthz` is public); kept so that answers of older gateways still parse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checksum_failure: Option<String>,
    /// Times the store reopened itself after an I/O error since the gateway started.
    pub recoveries: u64,
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
                expected_version: None,
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
    fn positional_arrays_are_refused_at_every_level() {
        let err = |json: &str| {
            serde_json::from_str::<WriteRequest>(json)
                .unwrap_err()
                .to_string()
        };
        let c = "00000000-0000-0000-0000-000000000001";
        // The whole body (this exact form parsed, and landed, with derived parsers).
        let e = err(&format!(
            r#"["{c}", [[["{c}", "{c}"], true, [[1, null, 1, 1, 0, "AQID", null]]]]]"#
        ));
        assert!(
            e.contains("invalid type: array, expected a JSON object for struct WriteRequest"),
            "{e}"
        );
        // An aggregate write, an aggregate reference, an event.
        let e = err(&format!(
            r#"{{"clientId":"{c}","writes":[[{{"typeId":"{c}","id":"{c}"}}, true, []]]}}"#
        ));
        assert!(
            e.contains("expected a JSON object for struct AggregateWrite"),
            "{e}"
        );
        let e = err(&format!(
            r#"{{"clientId":"{c}","writes":[{{"aggregate":["{c}","{c}"],"events":[]}}]}}"#
        ));
        assert!(
            e.contains("expected a JSON object for struct AggregateRef"),
            "{e}"
        );
        let mut ok = serde_json::to_value(sample()).unwrap();
        ok["writes"][0]["events"][0] = serde_json::json!([1, null, 1, 1, 0, "AQID", null]);
        let e = serde_json::from_value::<WriteRequest>(ok)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected a JSON object for struct Event"), "{e}");
        // Other non-objects are refused with the same expectation.
        let e = err(r#""hello""#);
        assert!(
            e.contains(
                "invalid type: string \"hello\", expected a JSON object for struct WriteRequest"
            ),
            "{e}"
        );
        assert!(serde_json::from_str::<AggregateRef>(&format!(r#"["{c}","{c}"]"#)).is_err());
        assert!(serde_json::from_str::<Event>("[1, null, 1, 1, 0, \"AQID\", null]").is_err());
    }

    #[test]
    fn defaults_still_apply_when_fields_are_left_out() {
        let json = r#"{"clientId":"00000000-0000-0000-0000-000000000001","writes":[{"aggregate":
            {"typeId":"00000000-0000-0000-0000-000000000002","id":"00000000-0000-0000-0000-000000000003"},
            "events":[{"clientSeq":1,"timestamp":1700000000000,"type":3,"data":"aGVsbG8=","iv":"AAAAAAAAAAAAAAAA"}]}]}"#;
        assert_eq!(
            serde_json::from_str::<WriteRequest>(json).unwrap(),
            sample()
        );
    }

    #[test]
    fn expected_version_is_optional_strict_and_written_only_when_set() {
        let base = serde_json::to_value(sample()).unwrap();
        let with = |v: serde_json::Value| {
            let mut body = base.clone();
            body["writes"][0]["expectedVersion"] = v;
            serde_json::from_value::<WriteRequest>(body).map(|r| r.writes[0].expected_version)
        };
        assert_eq!(with(serde_json::json!(0)).unwrap(), Some(0));
        assert_eq!(with(serde_json::json!(7)).unwrap(), Some(7));
        assert_eq!(with(serde_json::Value::Null).unwrap(), None);
        assert_eq!(
            with(serde_json::json!(crate::encoding::MAX_SAFE_INTEGER)).unwrap(),
            Some(crate::encoding::MAX_SAFE_INTEGER)
        );
        for bad in [
            serde_json::json!(crate::encoding::MAX_SAFE_INTEGER + 1),
            serde_json::json!(u64::MAX),
            serde_json::json!(-1),
            serde_json::json!(1.5),
            serde_json::json!("3"),
            serde_json::json!(true),
            serde_json::json!([3]),
        ] {
            assert!(with(bad.clone()).is_err(), "{bad}");
        }
        // A misspelling is refused, never read as "no guard".
        let mut body = base.clone();
        body["writes"][0]["expectedversion"] = serde_json::json!(3);
        assert!(serde_json::from_value::<WriteRequest>(body).is_err());
        // Written after allowCreate when set, left out when not (unconditional bytes unchanged).
        let mut guarded = sample();
        guarded.writes[0].expected_version = Some(0);
        let json = serde_json::to_string(&guarded).unwrap();
        assert!(
            json.contains(r#""allowCreate":true,"expectedVersion":0,"events":"#),
            "{json}"
        );
        assert_eq!(
            serde_json::from_str::<WriteRequest>(&json).unwrap(),
            guarded
        );
        assert!(
            !serde_json::to_string(&sample())
                .unwrap()
                .contains("expectedVersion")
        );
    }

    #[test]
    fn uuids_are_read_leniently_and_written_lowercase_hyphenated() {
        let canonical = "5f0c6b2e-8a3d-4c1e-9b7a-2d4e6f8a0b1c";
        for spelling in [
            canonical,
            "5F0C6B2E-8A3D-4C1E-9B7A-2D4E6F8A0B1C",
            "5f0c6b2e8a3d4c1e9b7a2d4e6f8a0b1c",
            "{5f0c6b2e-8a3d-4c1e-9b7a-2d4e6f8a0b1c}",
            "urn:uuid:5f0c6b2e-8a3d-4c1e-9b7a-2d4e6f8a0b1c",
        ] {
            let json = format!(r#"{{"typeId":"{spelling}","id":"{spelling}"}}"#);
            let parsed: AggregateRef = serde_json::from_str(&json).unwrap();
            assert_eq!(
                serde_json::to_string(&parsed).unwrap(),
                format!(r#"{{"typeId":"{canonical}","id":"{canonical}"}}"#),
                "{spelling}"
            );
        }
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
