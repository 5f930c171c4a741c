//! The subscriptions of every context (tab, worker) of a device, merged into what the one
//! change stream must cover.
//!
//! Each context counts its own subscriptions per aggregate; the draining context holds them all
//! (contexts tell it over the channel) and watches the union. A context that goes away without
//! saying so leaves its subscriptions until the drainer changes (the new one asks everyone
//! again) — it only keeps an aggregate watched a little longer than needed.

use super::machine::Input;
use crate::engine::model::AggregateRef;
use crate::engine::sorted::SortedMap;

/// Every context's subscriptions.
#[derive(Debug, Default)]
pub struct Subscriptions {
    by_context: SortedMap<u64, SortedMap<AggregateRef, u32>>,
}

impl Subscriptions {
    /// Context `context` now has `count` subscriptions to `aggregate`; returns what that changes
    /// for the union (one watcher more or less), for the read machine.
    pub fn set(&mut self, context: u64, aggregate: AggregateRef, count: u32) -> Option<Input> {
        let before = self.watched(&aggregate);
        let mine = self.by_context.get_or_default(context);
        if count == 0 {
            mine.remove(&aggregate);
        } else {
            mine.insert(aggregate, count);
        }
        if mine.is_empty() {
            self.by_context.remove(&context);
        }
        match (before, self.watched(&aggregate)) {
            (false, true) => Some(Input::Subscribe(aggregate)),
            (true, false) => Some(Input::Unsubscribe(aggregate)),
            _ => None,
        }
    }

    /// Replaces everything context `context` subscribes to (its answer to a new drainer, or its
    /// goodbye with an empty list).
    pub fn replace(&mut self, context: u64, now: &[(AggregateRef, u32)]) -> Vec<Input> {
        let old: Vec<AggregateRef> = self
            .by_context
            .get(&context)
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default();
        let mut changes = Vec::new();
        for aggregate in old {
            if !now.iter().any(|(a, _)| *a == aggregate) {
                changes.extend(self.set(context, aggregate, 0));
            }
        }
        for (aggregate, count) in now {
            changes.extend(self.set(context, *aggregate, *count));
        }
        changes
    }

    /// Whether any context watches `aggregate`.
    pub fn watched(&self, aggregate: &AggregateRef) -> bool {
        self.by_context.values().any(|m| m.contains_key(aggregate))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn agg(n: u128) -> AggregateRef {
        AggregateRef {
            type_id: Uuid::from_u128(1),
            id: Uuid::from_u128(n),
        }
    }

    #[test]
    fn the_union_changes_only_on_the_first_and_last_subscriber() {
        let mut s = Subscriptions::default();
        assert_eq!(s.set(1, agg(1), 1), Some(Input::Subscribe(agg(1))));
        assert_eq!(s.set(2, agg(1), 3), None, "watched already");
        assert_eq!(s.set(1, agg(1), 0), None, "context 2 still watches");
        assert_eq!(s.set(2, agg(1), 0), Some(Input::Unsubscribe(agg(1))));
        assert_eq!(
            s.replace(3, &[(agg(2), 1), (agg(3), 2)]),
            [Input::Subscribe(agg(2)), Input::Subscribe(agg(3))]
        );
        assert_eq!(s.replace(3, &[(agg(3), 1)]), [Input::Unsubscribe(agg(2))]);
        assert_eq!(s.replace(3, &[]), [Input::Unsubscribe(agg(3))]);
    }
}
