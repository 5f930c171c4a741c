//! The one error type thrown to JavaScript.
//!
//! Every failure reaches JS as a real `Error` whose `name` is `"CeleriantSyncError"` and whose
//! `code` is one of the stable strings below (also a TypeScript union, `SyncErrorCode`). Extra
//! properties (`index`, `aggregate`, `parkCode`) say where, when that is known.

use js_sys::{Error, Reflect};
use wasm_bindgen::JsValue;

use crate::engine::append::AppendError;
use crate::engine::drain::FlushError;
use crate::engine::outbox::StoreError;
use celeriant_sync_protocol::validate::ValidationError;

/// The error name of everything the client throws.
pub const NAME: &str = "CeleriantSyncError";

/// A failure on its way to JS.
#[derive(Debug)]
pub struct ClientError {
    /// The stable code.
    pub code: &'static str,
    /// A message for humans.
    pub message: String,
    /// Extra properties.
    pub extra: Vec<(&'static str, JsValue)>,
}

impl ClientError {
    /// An error with a code and message.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        ClientError {
            code,
            message: message.into(),
            extra: Vec::new(),
        }
    }

    /// Adds a property.
    pub fn with(mut self, key: &'static str, value: impl Into<JsValue>) -> Self {
        self.extra.push((key, value.into()));
        self
    }

    /// The client was closed.
    pub fn closed() -> Self {
        ClientError::new("CLOSED", "the client is closed")
    }
}

impl From<ClientError> for JsValue {
    fn from(e: ClientError) -> JsValue {
        let error = Error::new(&e.message);
        error.set_name(NAME);
        let _ = Reflect::set(&error, &"code".into(), &e.code.into());
        for (key, value) in e.extra {
            let _ = Reflect::set(&error, &key.into(), &value);
        }
        error.into()
    }
}

impl From<StoreError> for ClientError {
    fn from(e: StoreError) -> Self {
        let code = match &e {
            StoreError::QuotaExceeded(_) => "QUOTA_EXCEEDED",
            StoreError::Closed => "CLOSED",
            StoreError::Failed { .. } | StoreError::Corrupt(_) => "STORAGE_FAILED",
        };
        ClientError::new(code, e.to_string())
    }
}

impl From<AppendError> for ClientError {
    fn from(e: AppendError) -> Self {
        let message = e.to_string();
        match e {
            AppendError::Empty => ClientError::new("EMPTY_EVENTS", message),
            AppendError::TooMany { .. } => ClientError::new("TOO_MANY_EVENTS", message),
            AppendError::Invalid { index, error } => {
                let code = match error {
                    ValidationError::EventTypeZero { .. } => "INVALID_EVENT_TYPE",
                    ValidationError::InvalidIv { .. } => "INVALID_IV",
                    ValidationError::EventTooLarge { .. } => "EVENT_TOO_LARGE",
                    _ => "INVALID_EVENT",
                };
                ClientError::new(code, message).with("index", index as u32)
            }
        }
    }
}

impl From<FlushError> for ClientError {
    fn from(e: FlushError) -> Self {
        let message = e.to_string();
        match e {
            FlushError::Parked {
                aggregate, code, ..
            } => ClientError::new("PARKED", message)
                .with("aggregate", crate::api::output::aggregate(&aggregate))
                .with("parkCode", code),
            FlushError::Discarded(_) => ClientError::new("DISCARDED", message),
            FlushError::Closed => ClientError::new("CLOSED", message),
            FlushError::Store(e) => e.into(),
        }
    }
}
