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

/// `mine` — the highest of this device's sequences the local log holds — after the log takes in
/// one of this device's confirmed events with sequence `seq`. It never passes `assigned`, the
/// highest sequence this device ever assigned in the aggregate: a server that reports a
/// sequence this device never wrote (a reset server, a forged page) must not hide, as
/// "confirmed", events the device has not written yet. Stored events above `mine` are pending.
pub fn mine_after(mine: u64, seq: u64, assigned: u64) -> u64 {
    mine.max(seq.min(assigned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mine_rises_with_the_log_but_never_past_what_was_assigned() {
        let mine = [3, 4, 2].into_iter().fold(0, |m, s| mine_after(m, s, 10));
        assert_eq!(mine, 4, "the highest seen, whatever the order");
        assert_eq!(mine_after(4, 50, 10), 10, "capped at the highest assigned");
        assert_eq!(
            mine_after(0, 5, 0),
            0,
            "nothing assigned: nothing of mine is confirmed"
        );
    }
}
