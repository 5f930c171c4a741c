//! What a reply to a catch-up page or a probe means for the read machine
//! ([`PageEnd`]), decided here so the browser's executor and the native model test
//! (`tests/read_model.rs`) read replies the same way.
//!
//! A page is `GET …/events?from=cursor+1`, a probe `GET …/events?from=1&limit=1`. A `200`
//! carries the aggregate's `tip`; a `410` the lowest version still available, `minVersion`.

use super::log::Cursor;
use super::machine::PageEnd;

/// Whether a `200`'s `tip` says the server holds less than the log that asked (read at
/// `cursor`): the aggregate was deleted, or recreated below the cursor — or the reply came
/// from a replica behind the cursor (the read machine keeps its floor on `Gone` for that).
/// Versions only grow otherwise, and a trim keeps the tip. A reply without a tip says nothing.
pub fn shrunk(tip: Option<u64>, cursor: Cursor) -> bool {
    tip.is_some_and(|tip| tip < cursor.version)
}

/// What a page asked for with a known tip ([`Action::FetchPageUnlessAt`]) ends as without a
/// request: caught up when the cursor is at the tip (`None`: read it). A cursor above the tip
/// is read, not skipped: the aggregate shrank, and the page says how.
///
/// [`Action::FetchPageUnlessAt`]: super::machine::Action::FetchPageUnlessAt
pub fn at_tip(cursor: Cursor, tip: u64) -> Option<PageEnd> {
    (cursor.version == tip).then_some(PageEnd::Stored {
        more: false,
        version: cursor.version,
    })
}

/// A probe's `200` (version 1 is still there): gone if it [`shrunk`], else read on from the
/// cursor.
pub fn probed(tip: Option<u64>, cursor: Cursor) -> PageEnd {
    if shrunk(tip, cursor) {
        PageEnd::Gone
    } else {
        PageEnd::Stored {
            more: true,
            version: cursor.version,
        }
    }
}

/// A page's `200` once its batches were offered to the log at `before`: `after` is the cursor
/// the log moved to (`None`: it had moved meanwhile, a reset — read again from where it is),
/// `next` whether the server said more follows. Read on only if this page moved the cursor (a
/// server that keeps saying "more" without giving any is not followed). The end carries the
/// version the log reaches, for the machine to compare with what the stream notified.
pub fn stored(before: Cursor, after: Option<Cursor>, next: bool) -> PageEnd {
    match after {
        None => PageEnd::Stored {
            more: true,
            version: before.version,
        },
        Some(after) => PageEnd::Stored {
            more: next && after.version > before.version,
            version: after.version,
        },
    }
}

/// A `410`'s `minVersion`: the versions asked for were trimmed (`None`: the reply is unusable,
/// a minimum of 1 trims nothing).
pub fn trimmed(min_version: Option<u64>) -> Option<PageEnd> {
    min_version
        .filter(|m| *m > 1)
        .map(|min_version| PageEnd::Trimmed { min_version })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(version: u64) -> Cursor {
        Cursor {
            version,
            ..Cursor::default()
        }
    }

    #[test]
    fn a_tip_below_the_cursor_means_gone() {
        assert!(shrunk(Some(0), at(3)));
        assert!(!shrunk(Some(3), at(3)) && !shrunk(None, at(3)));
        assert_eq!(probed(Some(2), at(3)), PageEnd::Gone);
        assert_eq!(
            probed(Some(9), at(3)),
            PageEnd::Stored {
                more: true,
                version: 3
            }
        );
    }

    #[test]
    fn more_is_followed_only_when_the_page_moved_the_cursor() {
        assert_eq!(
            stored(at(2), Some(at(4)), true),
            PageEnd::Stored {
                more: true,
                version: 4
            }
        );
        assert_eq!(
            stored(at(2), Some(at(2)), true),
            PageEnd::Stored {
                more: false,
                version: 2
            }
        );
        assert_eq!(
            stored(at(2), Some(at(4)), false),
            PageEnd::Stored {
                more: false,
                version: 4
            }
        );
        assert_eq!(
            stored(at(2), None, false),
            PageEnd::Stored {
                more: true,
                version: 2
            }
        );
        assert_eq!(
            at_tip(at(5), 5),
            Some(PageEnd::Stored {
                more: false,
                version: 5
            })
        );
        assert_eq!(at_tip(at(4), 5), None);
        assert_eq!(trimmed(Some(5)), Some(PageEnd::Trimmed { min_version: 5 }));
        assert_eq!(trimmed(Some(1)), None);
        assert_eq!(trimmed(None), None);
    }
}
