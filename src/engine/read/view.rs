//! One view of an aggregate: what the server confirmed, in server order, then this device's
//! events that are not confirmed yet, in sequence order.
//!
//! The seed documents' rule: the device keeps its unsent events to one side and re-applies
//! them on top of what the server confirmed until the server confirms their place. An event
//! stops being pending exactly when its confirmed copy is in the local log — matched by client
//! id and sequence, read in the same snapshot — never earlier (no flicker: it never vanishes
//! and reappears) and never both (no double). Landing alone does not end it: the outbox keeps
//! a landed event until the local log has it (see `Outbox::prune`'s rule for aggregates with a
//! log).

/// Which of this device's stored events are still pending in the view: those with a sequence
/// above the highest of this device's sequences the local log holds (`confirmed_mine`).
pub fn still_pending(seq: u64, confirmed_mine: u64) -> bool {
    seq > confirmed_mine
}

/// The highest sequence of `me`'s events among `confirmed` events (given as `(client, seq)`).
pub fn highest_confirmed<C: PartialEq>(
    me: &C,
    confirmed: impl IntoIterator<Item = (C, u64)>,
) -> u64 {
    confirmed
        .into_iter()
        .filter(|(client, _)| client == me)
        .map(|(_, seq)| seq)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_pending_until_the_log_holds_it() {
        let log = [("other", 9), ("me", 3), ("me", 4), ("other", 10)];
        let mine = highest_confirmed(&"me", log);
        assert_eq!(mine, 4);
        let pending: Vec<u64> = (3..=7).filter(|s| still_pending(*s, mine)).collect();
        assert_eq!(pending, [5, 6, 7]);
        assert_eq!(highest_confirmed(&"me", []), 0);
    }
}
