//! Sharing: `client.share(aggregate, principal, access)`, `client.unshare(aggregate, principal)`
//! and `client.members(aggregate)` (a third `impl SyncClient` block, like `inspect`).
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
use crate::browser::members::MembersFailure;
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
    let text = value.as_string().ok_or_else(|| {
        ClientError::new(
            ErrorCode::InvalidPrincipal,
            "principal must be a string: user:<subject> or device:<clientId>",
        )
    })?;
    check_principal(&text).map_err(|m| ClientError::new(ErrorCode::InvalidPrincipal, m))?;
    Ok(text)
}

impl SyncClient {
    /// `GET` (no body) or `PUT` `body` on `aggregate`'s members, after the checks already made.
    fn members_call(
        &self,
        aggregate: Result<AggregateRef, ClientError>,
        body: Result<Option<String>, ClientError>,
    ) -> Promise {
        let runtime = self.runtime();
        promise(async move {
            if runtime.hub.is_closed() {
                return Err(ClientError::closed());
            }
            let (aggregate, body) = (aggregate?, body?);
            Ok(runtime.members.call(aggregate, body).await?)
        })
    }
}

#[wasm_bindgen]
impl SyncClient {
    /// Grants `principal` (`user:<subject>` or `device:<clientId>`) `access` (`"read"`: read
    /// and watch; `"readWrite"`: also append) to `aggregate`, which this user must own.
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
            let access = access
                .as_string()
                .as_deref()
                .and_then(Access::parse)
                .ok_or_else(|| {
                    ClientError::new(
                        ErrorCode::InvalidAccess,
                        "access must be \"read\" or \"readWrite\"",
                    )
                })?;
            Ok(Some(put_body(&p, Some(access))))
        });
        self.members_call(aggregate, body)
    }

    /// Takes `principal`'s access to `aggregate` away (nothing happens if it had none).
    /// Resolves with the aggregate's members. Online only.
    #[wasm_bindgen(unchecked_return_type = "Promise<Members>")]
    pub fn unshare(
        &self,
        #[wasm_bindgen(unchecked_param_type = "AggregateRef")] aggregate: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] principal: JsValue,
    ) -> Promise {
        let aggregate = input::aggregate(&aggregate);
        let body = principal_of(&principal).map(|p| Some(put_body(&p, None)));
        self.members_call(aggregate, body)
    }

    /// The aggregate's owner and members: all of them for the owner; for a member, the owner
    /// and its own grant. Online only.
    #[wasm_bindgen(unchecked_return_type = "Promise<Members>")]
    pub fn members(
        &self,
        #[wasm_bindgen(unchecked_param_type = "AggregateRef")] aggregate: JsValue,
    ) -> Promise {
        self.members_call(input::aggregate(&aggregate), Ok(None))
    }
}
