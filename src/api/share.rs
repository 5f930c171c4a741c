//! Sharing: `client.share(aggregate, principal, access)`, `client.unshare(aggregate, principal)`,
//! `client.acceptShare(aggregate)` and `client.members(aggregate)` (a third `impl SyncClient`
//! block, like `inspect`).
//!
//! A share is an invitation: it gives nothing until the invited user accepts it with
//! `acceptShare`. Otherwise someone could create an aggregate id this user's app will use later,
//! share it with this user, and read what the app then wrote "creating" it.
//!
//! They call the gateway's members endpoint at once, with a session of this device
//! ([`crate::browser::members`]); they are online only and never queued
//! ([`crate::engine::members`] says why). Input is checked before anything is sent; every
//! failure is a `CeleriantSyncError` with its code and, when the gateway answered with one,
//! `serverCode`.

use js_sys::Promise;
use wasm_bindgen::prelude::*;

use super::client::{SyncClient, promise};
use super::errors::ClientError;
use super::input;
use crate::browser::js;
use crate::browser::members::{MembersCall, MembersFailure};
use crate::engine::errors::ErrorCode;
use crate::engine::members::{Access, check_principal, put_body};
use crate::engine::model::AggregateRef;

impl From<MembersFailure> for ClientError {
    fn from(f: MembersFailure) -> Self {
        let error = ClientError::new(f.code, f.message);
        match f.server_code {
            Some(code) => error.with("serverCode", code),
            None => error,
        }
    }
}

fn principal_of(value: &JsValue) -> Result<String, ClientError> {
    let text = js::short_string(value, super::options::MAX_STRING).ok_or_else(|| {
        ClientError::new(
            ErrorCode::InvalidPrincipal,
            "principal must be a string of at most 4096 characters: user:<subject> or device:<clientId>",
        )
    })?;
    check_principal(&text).map_err(|m| ClientError::new(ErrorCode::InvalidPrincipal, m))?;
    Ok(text)
}

impl SyncClient {
    /// `call` on `aggregate`'s members, after the checks already made.
    fn members_call(
        &self,
        aggregate: Result<AggregateRef, ClientError>,
        call: Result<MembersCall, ClientError>,
    ) -> Promise {
        let runtime = self.runtime();
        promise(async move {
            if runtime.hub.is_closed() {
                return Err(ClientError::closed());
            }
            let (aggregate, call) = (aggregate?, call?);
            Ok(runtime.members.call(aggregate, call).await?)
        })
    }
}

#[wasm_bindgen]
impl SyncClient {
    /// Grants `principal` (`user:<subject>` or `device:<clientId>`) `access` (`"read"`: read
    /// and watch; `"readWrite"`: also append) to `aggregate`, which this user must own. To a
    /// principal that is not a member yet this is an invitation (listed in `invited`): it gives
    /// nothing until that principal calls `acceptShare`; a member's access changes at once.
    /// Resolves with the aggregate's members as the gateway stored them. Online only.
    #[wasm_bindgen(unchecked_return_type = "Promise<Members>")]
    pub fn share(
        &self,
        #[wasm_bindgen(unchecked_param_type = "AggregateRef")] aggregate: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] principal: JsValue,
        #[wasm_bindgen(unchecked_param_type = "MemberAccess")] access: JsValue,
    ) -> Promise {
        let aggregate = input::aggregate(&aggregate);
        let body = principal_of(&principal).and_then(|p| {
            let access = js::short_string(&access, 16)
                .as_deref()
                .and_then(Access::parse)
                .ok_or_else(|| {
                    ClientError::new(
                        ErrorCode::InvalidAccess,
                        "access must be \"read\" or \"readWrite\"",
                    )
                })?;
            Ok(MembersCall::Change(put_body(&p, Some(access))))
        });
        self.members_call(aggregate, body)
    }

    /// Takes `principal`'s access (or invitation) to `aggregate` away (nothing happens if it had
    /// none). Resolves with the aggregate's members. Online only.
    #[wasm_bindgen(unchecked_return_type = "Promise<Members>")]
    pub fn unshare(
        &self,
        #[wasm_bindgen(unchecked_param_type = "AggregateRef")] aggregate: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] principal: JsValue,
    ) -> Promise {
        let aggregate = input::aggregate(&aggregate);
        let body = principal_of(&principal).map(|p| MembersCall::Change(put_body(&p, None)));
        self.members_call(aggregate, body)
    }

    /// Accepts this user's invitation to `aggregate` (another user's `share`): from then on the
    /// granted access holds. Resolves with the aggregate's members as this user sees them
    /// (again for a member: accepting twice changes nothing); `NOT_FOUND` when there is no
    /// invitation. Online only.
    #[wasm_bindgen(js_name = acceptShare, unchecked_return_type = "Promise<Members>")]
    pub fn accept_share(
        &self,
        #[wasm_bindgen(unchecked_param_type = "AggregateRef")] aggregate: JsValue,
    ) -> Promise {
        self.members_call(input::aggregate(&aggregate), Ok(MembersCall::Accept))
    }

    /// The aggregate's owner, members and invitations: all of them for the owner; for a member
    /// or an invited user, the owner and its own grant or invitation. Online only.
    #[wasm_bindgen(unchecked_return_type = "Promise<Members>")]
    pub fn members(
        &self,
        #[wasm_bindgen(unchecked_param_type = "AggregateRef")] aggregate: JsValue,
    ) -> Promise {
        self.members_call(input::aggregate(&aggregate), Ok(MembersCall::List))
    }
}
