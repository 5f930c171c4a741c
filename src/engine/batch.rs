//! Cutting requests and encoding them.
//!
//! A request carries a run of consecutive pending events of **one** aggregate (a 2002 or 2013
//! does not say which aggregate it is about, so a multi-aggregate request could not be settled
//! safely). The run is cut by a count and a byte budget and always holds at least one event.
//! A conditional append (one carrying a [`Guard`](super::model::Guard)) is always a request of its
//! own, exactly its events, whatever the limits ([`cut_at_guards`]): its guard judges the whole
//! request, so nothing else may ride with it.
//! An atomic write (`appendAtomic`) is the one request that names several aggregates: always
//! exactly its legs, whole, never cut by the limits nor joined with anything else, so a 2002 or
//! 2013 on it can only be about it ([`encode_atomic`]; `docs/client.md`, "Atomic writes").
//! Encoding is deterministic: the same events always give the same bytes, which is what makes a
//! resend of a pinned batch byte-identical, also after a reload.

use celeriant_sync_protocol::wire::WRITE_JSON_OVERHEAD;
use uuid::Uuid;

use super::model::{AggregateRef, Batch, StoredEvent};

/// How many of the leading `sizes` (encoded event sizes, in order) form one request: at most
/// `max_events`, a body of at most `max_bytes` — and at least one when there is any.
pub fn take_within(
    sizes: impl IntoIterator<Item = usize>,
    max_events: usize,
    max_bytes: usize,
) -> usize {
    let mut total = WRITE_JSON_OVERHEAD;
    let mut taken = 0;
    for size in sizes {
        if taken >= max_events.max(1) || (taken > 0 && total + size > max_bytes) {
            break;
        }
        total += size;
        taken += 1;
    }
    taken
}

/// The batch covering `events` (consecutive pending events of one aggregate, in order; or an
/// atomic write's events, whole: then the batch is that write).
pub(crate) fn batch_of(events: &[StoredEvent]) -> Option<Batch> {
    let (first, last) = (events.first()?, events.last()?);
    if let Some(legs) = &first.atomic {
        return Batch::of_atomic(legs);
    }
    Some(Batch::plain(
        first.aggregate,
        first.client_seq,
        last.client_seq,
        events.len() as u32,
    ))
}

/// Cuts `head` (an aggregate's lowest pending events, in order, as far as they were read) at
/// guard boundaries: when the first event belongs to a conditional append, the batch is that
/// append's events and nothing else (`rest` then reads any of them `head` lacks: a conditional
/// append is never split by the count or byte limits); otherwise the unconditional events before
/// the first conditional one or the first leg of an atomic write. (A head that starts with an
/// atomic write's leg is not cut here: the whole write is read across its aggregates.)
pub(crate) fn cut_at_guards(head: &mut Vec<StoredEvent>) -> Option<super::model::Guard> {
    let first = head.first()?.guard;
    match first {
        Some(g) => head.retain(|e| e.guard == Some(g) && e.atomic.is_none()),
        None => {
            let end = head
                .iter()
                .position(|e| e.guard.is_some() || e.atomic.is_some())
                .unwrap_or(head.len());
            head.truncate(end);
        }
    }
    first
}

/// The request body for `events` (an atomic write's events, every leg's in the order of its
/// legs), sent by `client_id`: one `AggregateWrite` per leg, each with its guard if it has one.
/// `None` when the events are not exactly the write's legs, whole (never sent then: a part of
/// an atomic write must never travel alone).
pub fn encode_atomic(client_id: Uuid, events: &[StoredEvent]) -> Option<String> {
    let legs = events.first()?.atomic.clone()?;
    let mut at = 0;
    let mut writes = Vec::with_capacity(legs.len());
    for leg in legs.iter() {
        let n = (leg.last_seq - leg.first_seq + 1) as usize;
        let part = events.get(at..at + n)?;
        let exact = part.iter().zip(leg.first_seq..).all(|(e, seq)| {
            e.aggregate == leg.aggregate && e.client_seq == seq && e.atomic.as_ref() == Some(&legs)
        });
        if !exact || part.iter().any(|e| e.guard != part[0].guard) {
            return None;
        }
        writes.push(part);
        at += n;
    }
    if at != events.len() {
        return None;
    }
    let size = WRITE_JSON_OVERHEAD * legs.len()
        + events.iter().map(StoredEvent::encoded_len).sum::<usize>();
    let mut body = String::with_capacity(size);
    let mut buffer = Uuid::encode_buffer();
    body.push_str(r#"{"clientId":""#);
    body.push_str(client_id.hyphenated().encode_lower(&mut buffer));
    body.push_str(r#"","writes":["#);
    for (i, part) in writes.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        push_write(&mut body, part[0].aggregate, part);
    }
    body.push_str("]}");
    Some(body)
}

/// The request body for `events`, sent by `client_id`: the stored wire fragments joined into
/// the protocol's `WriteRequest` (field for field what serde would write for it, as a test
/// checks), so the same events always give the same bytes. The events of a conditional append
/// carry its guard, written as the write's `expectedVersion` (left out otherwise, so an
/// unconditional batch keeps its bytes).
pub fn encode(client_id: Uuid, aggregate: AggregateRef, events: &[StoredEvent]) -> String {
    let size = WRITE_JSON_OVERHEAD + events.iter().map(StoredEvent::encoded_len).sum::<usize>();
    let mut body = String::with_capacity(size);
    let mut buffer = Uuid::encode_buffer();
    body.push_str(r#"{"clientId":""#);
    body.push_str(client_id.hyphenated().encode_lower(&mut buffer));
    body.push_str(r#"","writes":["#);
    push_write(&mut body, aggregate, events);
    body.push_str("]}");
    body
}

/// One `AggregateWrite` of `events` (one aggregate's, in order) onto `body`.
fn push_write(body: &mut String, aggregate: AggregateRef, events: &[StoredEvent]) {
    let mut buffer = Uuid::encode_buffer();
    body.push_str(r#"{"aggregate":{"typeId":""#);
    body.push_str(aggregate.type_id.hyphenated().encode_lower(&mut buffer));
    body.push_str(r#"","id":""#);
    body.push_str(aggregate.id.hyphenated().encode_lower(&mut buffer));
    body.push_str(r#""},"allowCreate":true,"#);
    if let Some(guard) = events.first().and_then(|e| e.guard) {
        body.push_str(r#""expectedVersion":"#);
        body.push_str(&guard.expected_version.to_string());
        body.push(',');
    }
    body.push_str(r#""events":["#);
    for (i, event) in events.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&event.wire);
    }
    body.push_str("]}");
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    #[test]
    fn cutting_respects_both_limits_and_takes_at_least_one() {
        let base = WRITE_JSON_OVERHEAD;
        assert_eq!(take_within([10, 10, 10], 2, usize::MAX), 2);
        assert_eq!(take_within([10, 10, 10], 10, base + 20), 2);
        assert_eq!(take_within([10, 10, 10], 10, base + 19), 1);
        assert_eq!(
            take_within([1_000_000, 10], 10, 100),
            1,
            "an oversize event goes alone"
        );
        assert_eq!(take_within([], 10, 100), 0);
        assert_eq!(take_within([5; 3], 0, usize::MAX), 1);
    }

    #[test]
    fn the_body_fits_the_budget_it_was_cut_for() {
        use celeriant_sync_protocol::validate::{Limits, validate_write};
        let aggregate = AggregateRef {
            type_id: Uuid::from_u128(1),
            id: Uuid::from_u128(2),
        };
        let events: Vec<StoredEvent> = (1..=50)
            .map(|seq| {
                let new = crate::engine::model::NewEvent {
                    event_id: Uuid::from_u128(u128::MAX - seq as u128),
                    timestamp: 1_790_000_000_000,
                    event_type: 9_007_199_254_740_991,
                    minor: 12,
                    data: vec![0xAB; (seq * 37 % 300) as usize],
                    iv: (seq % 2 == 0).then(|| vec![1; 12]),
                };
                StoredEvent::new(aggregate, seq, &new)
            })
            .collect();
        for budget in [300, 1_000, 4_096, 20_000] {
            let n = take_within(events.iter().map(StoredEvent::encoded_len), 1000, budget);
            let body = encode(Uuid::from_u128(3), aggregate, &events[..n]);
            assert!(
                n == 1 || body.len() <= budget,
                "{} > {budget} with {n}",
                body.len()
            );
            let parsed: celeriant_sync_protocol::WriteRequest =
                serde_json::from_str(&body).unwrap();
            validate_write(&parsed, &Limits::default()).unwrap();
            assert_eq!(
                serde_json::to_string(&parsed).unwrap(),
                body,
                "what serde writes"
            );
            assert_eq!(parsed.writes[0].events[0], events[0].decode().unwrap());
            assert_eq!(
                encode(Uuid::from_u128(3), aggregate, &events[..n]),
                body,
                "deterministic"
            );
        }
    }
}
