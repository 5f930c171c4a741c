//! Signing out: `client.signOut(...)` and `SyncClient.deleteDatabase(name)` (a second
//! `impl SyncClient` block, like `inspect`).
//!
//! One browser may be used by several users of an app. The pattern the docs show is a
//! database per user (`databaseName: "app-" + userId`, `user: userId`): each user's outbox,
//! local log and device key stay apart, and signing out deletes that user's database so the
//! next person at the keyboard finds none of it. Deleting pending events is the one thing
//! here that loses data, so it is refused unless the app says so (`discardPending: true`).

use js_sys::Promise;
use wasm_bindgen::prelude::*;

use super::client::{SyncClient, promise};
use super::errors::ClientError;
use crate::browser::idb::db::delete_database;
use crate::browser::js;
use crate::engine::errors::ErrorCode;
use crate::engine::outbox::Outbox;

/// `signOut`'s options: `undefined`, or `{ discardPending?: boolean }` and nothing else.
fn discard_pending(options: &JsValue) -> Result<bool, ClientError> {
    let bad = |m: &str| ClientError::new(ErrorCode::InvalidOptions, m.to_owned());
    if options.is_undefined() {
        return Ok(false);
    }
    if !options.is_object() {
        return Err(bad("signOut takes { discardPending?: boolean } or nothing"));
    }
    let own = js::own_keys(options).ok_or_else(|| bad("signOut's options cannot be read"))?;
    for key in own {
        if key != "discardPending" {
            return Err(bad(&format!(
                "unknown signOut option \"{key}\" (options: discardPending)"
            )));
        }
    }
    let value = super::input::read(options, "discardPending", ErrorCode::InvalidOptions)?;
    if value.is_undefined() {
        return Ok(false);
    }
    value
        .as_bool()
        .ok_or_else(|| bad("discardPending must be a boolean"))
}

#[wasm_bindgen]
impl SyncClient {
    /// Signs this database's user out of this browser: closes the client and deletes its
    /// database (outbox, local log, device key, the user it is bound to). Rejects with
    /// `PENDING_EVENTS`, and changes nothing, while events are pending or parked — unless
    /// `discardPending: true`, which deletes them unsent.
    #[wasm_bindgen(js_name = signOut, unchecked_return_type = "Promise<void>")]
    pub fn sign_out(
        &self,
        #[wasm_bindgen(unchecked_param_type = "SignOutOptions | undefined")] options: JsValue,
    ) -> Promise {
        let runtime = self.runtime();
        let name = self.database_name();
        let discard = discard_pending(&options);
        promise(async move {
            let discard = discard?;
            if runtime.hub.is_closed() {
                return Err(ClientError::closed());
            }
            if !discard {
                let counted = runtime.outbox.counts().await?;
                if counted.events > 0 {
                    return Err(ClientError::new(
                        ErrorCode::PendingEvents,
                        format!(
                            "{} events are pending or parked: sync them first (flush), or sign \
                             out with {{ discardPending: true }} to delete them unsent",
                            counted.events
                        ),
                    ));
                }
            }
            runtime.close().await;
            delete_database(&name).await?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Deletes the database `name` (every user's data in it: pending events included), e.g.
    /// to clear a signed-out user's leftovers. Clients open on it, in any tab, close
    /// themselves (their calls then reject with `STORAGE_LOST`).
    #[wasm_bindgen(js_name = deleteDatabase, unchecked_return_type = "Promise<void>")]
    pub fn delete_database_named(
        #[wasm_bindgen(unchecked_param_type = "string")] name: JsValue,
    ) -> Promise {
        // Taken as a `JsValue`: see `input::string`.
        let name = js::short_string(&name, super::options::MAX_STRING).unwrap_or_default();
        promise(async move {
            if name.is_empty() {
                return Err(ClientError::new(
                    ErrorCode::InvalidOptions,
                    "deleteDatabase needs a database name (a non-empty string of at most 4,096 characters)",
                ));
            }
            delete_database(&name).await?;
            Ok(JsValue::UNDEFINED)
        })
    }
}
