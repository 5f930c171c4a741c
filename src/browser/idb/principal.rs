//! Which user an outbox belongs to: the `meta` record `"principal"`.
//!
//! A browser may be shared by several users of one app. The events in an outbox were appended
//! by one of them, and must only ever be sent under that user's session: otherwise user A's
//! offline edits land as user B's when B signs in on the same browser. So the database is
//! bound to one principal (the gateway's `principal` of a session, `user:<sub>` with app
//! tokens): set at `SyncClient.open({ user })` or, without that option, by the first session
//! the gateway opens; compared, inside the same transaction, on every later session. The
//! record is never changed, only deleted with the database (`signOut`, `deleteDatabase`).
//!
//! The comparison is this small module's only decision, so it lives here beside its record
//! rather than in `engine`: the drain only needs to know that a session was refused as
//! someone else's ([`crate::engine::auth::AuthFailure::wrong_user`]).

use wasm_bindgen::JsValue;

use super::db::{Commit, Durability, Js, stores};
use super::outbox::{IdbOutbox, get, store};
use super::schema::META;
use crate::engine::outbox::StoreError;

/// `meta` key of the principal the database is bound to.
const PRINCIPAL_KEY: &str = "principal";

/// What [`IdbOutbox::bind_principal`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    /// The database belongs to this principal (it was bound now, or before).
    Same,
    /// The database belongs to another principal, named here.
    Other(String),
}

impl IdbOutbox {
    /// Binds the database to `principal` unless it is bound already, in one transaction, and
    /// says whether it belongs to `principal`. Always `strict`: a binding lost to an OS crash
    /// would let the next session, whoever's, bind the events. Once per session opening.
    pub async fn bind_principal(&self, principal: &str) -> Result<Binding, StoreError> {
        self.db()
            .write(
                &stores(&[META]),
                Durability::Strict,
                Commit::Early,
                async |tx| {
                    let meta = store(tx, META)?;
                    let bound = get(&meta, &PRINCIPAL_KEY.into()).await?;
                    match bound.as_string() {
                        Some(bound) if bound == principal => Ok(Binding::Same),
                        Some(bound) => Ok(Binding::Other(bound)),
                        None => {
                            meta.put_with_key(&JsValue::from_str(principal), &PRINCIPAL_KEY.into())
                                .js()?;
                            Ok(Binding::Same)
                        }
                    }
                },
            )
            .await
    }
}
