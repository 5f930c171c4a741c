//! The storage interface of the local log — what the server confirmed, per aggregate, with a
//! cursor — and the rules every implementation keeps.
//!
//! Two implementations exist: [`super::memory_log::MemoryLog`] (native tests, the model test
//! `tests/read_model.rs`) and the IndexedDB one in `browser/idb/log.rs`. Both run the same
//! conformance suite ([`super::log_conformance`]). The pure parts of the rules (where a batch
//! of a page goes, what a reset does to the cursor, where a snapshot starts) are functions of
//! this module, so both implementations decide them the same way. The rules:
//!
//! 1. An aggregate has a log once it has a cursor: [`LocalLog::ensure_cursor`] creates it (at
//!    version 0) and never moves an existing one; [`LocalLog::logged`] lists exactly the
//!    aggregates with a cursor. An aggregate without one reads as [`Cursor::default`].
//! 2. A page of batches and the aggregate's cursor move in **one** atomic write, and only if
//!    the cursor is still the one the page was read from (compare-and-set: a page read across
//!    a reset or by a reader that has since stopped is not stored). Batches at or below the
//!    cursor are skipped (pages overlap); the others must follow it without a gap, hold events,
//!    and be well formed — or nothing of the page is stored.
//! 3. The cursor keeps `mine`: the highest of this device's sequences among the stored
//!    batches ([`super::view::mine_after`]: never above the highest sequence the device
//!    assigned in the aggregate, read in the same write). A snapshot's pending events are this
//!    device's stored events above `mine`, read in the same snapshot as the log: an event
//!    leaves "pending" exactly when its confirmed copy is in the log.
//! 4. A reset ([`LocalLog::reset_log`]) drops only the versions below `min_version` (all of
//!    them when the aggregate is gone); the cursor moves up to just below `min_version` if it
//!    was lower (to 0 when gone), `mine` rises to the landed watermark, and `epoch` + 1, so a
//!    view cached at another epoch is read again from scratch. Versions kept stay: a trim never
//!    makes a confirmed event vanish and reappear.
//! 5. [`LocalLog::snapshot`] reads the batches above a kept version (all of them when that was
//!    of another epoch or above the cursor), the cursor, the pending events and the park record
//!    together, in one read.

use std::future::Future;

use super::super::model::{AggregateRef, ParkRecord};
use super::super::outbox::StoreError;

/// How far an aggregate's local log reaches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The highest version stored (0: none).
    pub version: u64,
    /// The highest of this device's sequences among the stored batches.
    pub mine: u64,
    /// How many times the log was reset (a view cached at another epoch is stale).
    pub epoch: u64,
}

/// What a view of an aggregate is built from, read in one snapshot (rule 5).
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot<B, P> {
    /// The version the batches start after: the kept one if the log's epoch is the one given,
    /// else 0 (the log was reset: everything).
    pub from: u64,
    /// Confirmed batches above `from`, in version order (as the server sent them).
    pub batches: Vec<B>,
    /// The log's cursor.
    pub cursor: Cursor,
    /// The records holding this device's stored events not yet confirmed in the log, in
    /// sequence order (a record may hold several events; the first may also hold events at or
    /// below `cursor.mine`, which are not pending).
    pub pending: Vec<P>,
    /// The aggregate's park record, if it is parked.
    pub parked: Option<ParkRecord>,
}

/// The local log's storage. Every method is one atomic transaction.
pub trait LocalLog {
    /// A page of confirmed batches, as the gateway's reply hands it over.
    type Page;
    /// One confirmed batch, as stored.
    type Batch;
    /// One stored record of this device's events.
    type Pending;

    /// The aggregate's cursor ([`Cursor::default`] if it has no log).
    fn cursor(&self, aggregate: AggregateRef) -> impl Future<Output = Result<Cursor, StoreError>>;

    /// Gives the aggregate a cursor if it has none, so from now on the drain keeps its landed
    /// events until the log holds them (a view that showed one as pending never loses it before
    /// its confirmed copy arrives). Returns the cursor as it was (rule 1).
    fn ensure_cursor(
        &self,
        aggregate: AggregateRef,
    ) -> impl Future<Output = Result<Cursor, StoreError>>;

    /// Every aggregate with a local log.
    fn logged(&self) -> impl Future<Output = Result<Vec<AggregateRef>, StoreError>>;

    /// Stores a page (batches in version order) and moves the cursor, in one write, if the
    /// cursor is still `expected` (rule 2; `Ok(None)` when it moved). `me` is this device's
    /// client id as the server writes it (rule 3). A bad page is
    /// [`StoreError::Corrupt`] and stores nothing.
    fn store_page(
        &self,
        aggregate: AggregateRef,
        page: &Self::Page,
        me: &str,
        expected: Cursor,
    ) -> impl Future<Output = Result<Option<Cursor>, StoreError>>;

    /// The server no longer has the aggregate's versions below `min_version` (trimmed), or,
    /// with `gone`, none of them (deleted): rule 4.
    fn reset_log(
        &self,
        aggregate: AggregateRef,
        min_version: u64,
        gone: bool,
    ) -> impl Future<Output = Result<(), StoreError>>;

    /// The snapshot of an aggregate's view; `kept` is the `(epoch, version)` a cached view
    /// reaches (rule 5).
    fn snapshot(
        &self,
        aggregate: AggregateRef,
        kept: Option<(u64, u64)>,
    ) -> impl Future<Output = Result<Snapshot<Self::Batch, Self::Pending>, StoreError>>;
}

/// Where a batch of a page goes, given the version the log reaches so far (rule 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// At or below the cursor: already stored, skipped.
    Skip,
    /// The next version: stored.
    Next,
}

/// Places a batch of `version` after a log at `cursor_version`; an error says why the page is
/// refused.
pub fn place(cursor_version: u64, version: u64) -> Result<Place, StoreError> {
    if version <= cursor_version {
        Ok(Place::Skip)
    } else if version == cursor_version + 1 {
        Ok(Place::Next)
    } else {
        Err(bad_page("versions with a gap"))
    }
}

/// The error of a page that is refused whole.
pub fn bad_page(why: &str) -> StoreError {
    StoreError::Corrupt(format!("the gateway sent a bad page: {why}"))
}

/// Whether an event's `data` is what the server sends: standard base64, in groups of four with
/// `=` padding only at the end of the last one — as `checkEvents` in `browser/glue.js` checks
/// it (`"AA=A"` or `"===="` would pass a check of the alphabet alone and then not decode). By
/// hand: a decode by a base64 crate would allocate the bytes only to drop them.
pub fn is_base64(s: &str) -> bool {
    let b = s.as_bytes();
    let alphabet = |c: &u8| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/';
    let body = match b {
        [rest @ .., c, b'=', b'='] if alphabet(c) => rest,
        [rest @ .., c, d, b'='] if alphabet(c) && alphabet(d) => rest,
        _ => b,
    };
    b.len() % 4 == 0 && body.iter().all(alphabet)
}

/// What a reset does (rule 4): the cursor after it, and the highest version dropped (`None`:
/// every version).
pub fn after_reset(
    old: Cursor,
    min_version: u64,
    gone: bool,
    landed: u64,
) -> (Cursor, Option<u64>) {
    let (through, version) = if gone {
        (None, 0)
    } else {
        let below = min_version.saturating_sub(1);
        (Some(below), old.version.max(below))
    };
    let cursor = Cursor {
        version,
        mine: old.mine.max(landed),
        epoch: old.epoch + 1,
    };
    (cursor, through)
}

/// The version a snapshot's batches start after (rule 5): the kept one if it is of the log's
/// epoch and not above its cursor, else 0.
pub fn snapshot_from(kept: Option<(u64, u64)>, cursor: Cursor) -> u64 {
    match kept {
        Some((epoch, version)) if epoch == cursor.epoch && version <= cursor.version => version,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_goes_on_without_a_gap_and_skips_what_is_stored() {
        assert_eq!(place(3, 2).unwrap(), Place::Skip);
        assert_eq!(place(3, 3).unwrap(), Place::Skip);
        assert_eq!(place(3, 4).unwrap(), Place::Next);
        assert!(place(3, 5).is_err());
    }

    #[test]
    fn a_reset_keeps_what_is_above_the_minimum_and_bumps_the_epoch() {
        let old = Cursor {
            version: 7,
            mine: 2,
            epoch: 4,
        };
        let (c, through) = after_reset(old, 5, false, 3);
        assert_eq!((c.version, c.mine, c.epoch, through), (7, 3, 5, Some(4)));
        let (c, through) = after_reset(old, 12, false, 0);
        assert_eq!((c.version, c.mine, through), (11, 2, Some(11)));
        let (c, through) = after_reset(old, 1, true, 0);
        assert_eq!((c.version, c.epoch, through), (0, 5, None));
    }

    #[test]
    fn a_snapshot_starts_after_a_kept_view_of_the_same_epoch_only() {
        let cursor = Cursor {
            version: 9,
            mine: 0,
            epoch: 2,
        };
        assert_eq!(snapshot_from(Some((2, 5)), cursor), 5);
        assert_eq!(snapshot_from(Some((1, 5)), cursor), 0);
        assert_eq!(snapshot_from(Some((2, 10)), cursor), 0);
        assert_eq!(snapshot_from(None, cursor), 0);
        assert!(is_base64("AAE=") && !is_base64("AAE") && !is_base64("A!E="));
        assert!(is_base64("") && is_base64("AA==") && is_base64("AAAA") && is_base64("AAAAAA=="));
        assert!(
            !is_base64("AA=A") && !is_base64("====") && !is_base64("A===") && !is_base64("A=A=")
        );
        assert!(!is_base64("AA==AAAA") && !is_base64("=AAA"));
    }
}
