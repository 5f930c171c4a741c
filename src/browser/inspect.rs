//! What `inspect()` needs from the browser: the outbox snapshot ([`crate::engine::inspect`])
//! read through this context's runtime, and which context drains, from the Web Locks
//! manager. Nothing is decided here.

use std::rc::Rc;

use super::locks;
use super::runtime::Runtime;
use crate::engine::inspect::{Snapshot, snapshot};
use crate::engine::outbox::StoreError;
use crate::engine::status::{Role, Status};

/// Which context drains the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Drainer {
    /// `"this"`, `"other"` (another tab or worker holds the drain lock) or `"none"` (nobody
    /// holds it now: a takeover is under way, or everything is closing).
    pub context: &'static str,
    /// The lock manager's `clientId` of the holder, when Web Locks can say.
    pub holder: Option<String>,
    /// Contexts waiting for the lock (`None` without Web Locks).
    pub waiting: Option<u32>,
    /// Whether Web Locks exist here (without them every context drains on its own).
    pub locks: bool,
}

/// Everything `inspect()` shows, read now.
pub(crate) struct Inspection {
    /// The outbox and this context's drain memory.
    pub snapshot: Snapshot,
    /// This context's status.
    pub status: Status,
    /// Who drains.
    pub drainer: Drainer,
}

/// Reads the outbox, the status and the lock manager's view.
pub(crate) async fn inspect(runtime: &Rc<Runtime>) -> Result<Inspection, StoreError> {
    let snapshot = snapshot(&*runtime.outbox, &runtime.inspector).await?;
    let status = runtime.hub.status();
    let (name, mine) = runtime.drain_lock();
    let drainer = match locks::query(&name).await {
        Some((holders, waiting)) => {
            let holder = holders.into_iter().next();
            let context = if status.role == Role::Drainer {
                "this"
            } else if holder.is_some() && holder != mine {
                "other"
            } else {
                "none"
            };
            Drainer {
                context,
                holder,
                waiting: Some(waiting),
                locks: true,
            }
        }
        None => Drainer {
            context: if status.role == Role::Drainer {
                "this"
            } else {
                "none"
            },
            holder: None,
            waiting: None,
            locks: false,
        },
    };
    Ok(Inspection {
        snapshot,
        status,
        drainer,
    })
}
