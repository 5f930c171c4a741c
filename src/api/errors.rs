//! The one error type thrown to JavaScript.
//!
//! Every failure reaches JS as a real `Error` whose `name` is `"CeleriantSyncError"` and whose
//! `code` is one of the stable [`ErrorCode`]s (also a TypeScript union, `SyncErrorCode`). Extra
//! properties (`index`, `aggregate`, `parkCode`) say where, when that is known; the platform's
//! own error, when there is one (a `DOMException` from IndexedDB), is kept as `cause`.

use js_sys::{Error, Reflect};
use wasm_bindgen::JsValue;

use crate::browser::convert::aggregate_to_js;
use crate::engine::append::AppendError;
use crate::engine::drain::FlushError;
use crate::engine::errors::ErrorCode;
use crate::engine::outbox::StoreError;

/// The error name of everything the client throws.
pub(crate) const NAME: &str = "CeleriantSyncError";

/// A failure on its way to JS.
#[derive(Debug)]
pub struct ClientError {
    /// The stable code.
    pub code: ErrorCode,
    /// A message for humans.
    pub message: String,
    /// Extra properties.
    pub extra: Vec<(&'static str, JsValue)>,
    /// The platform's error behind it.
    pub cause: Option<JsValue>,
}

impl ClientError {
    /// An error with a code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ClientError {
            code,
            message: message.into(),
            extra: Vec::new(),
            cause: None,
        }
    }

    /// Adds a property.
    pub fn with(mut self, key: &'static str, value: impl Into<JsValue>) -> Self {
        self.extra.push((key, value.into()));
        self
    }

    /// The client was closed.
    pub fn closed() -> Self {
        ClientError::new(ErrorCode::Closed, "the client is closed")
    }
}

impl From<ClientError> for JsValue {
    fn from(e: ClientError) -> JsValue {
        let error = Error::new(&e.message);
        error.set_name(NAME);
        let _ = Reflect::set(&error, &"code".into(), &e.code.as_str().into());
        for (key, value) in e.extra {
            let _ = Reflect::set(&error, &key.into(), &value);
        }
        if let Some(cause) = e.cause {
            let _ = Reflect::set(&error, &"cause".into(), &cause);
        }
        error.into()
    }
}

impl From<StoreError> for ClientError {
    fn from(e: StoreError) -> Self {
        let mut error = ClientError::new(ErrorCode::from(&e), e.to_string());
        error.cause = e.cause().get::<JsValue>().cloned();
        error
    }
}

impl From<AppendError> for ClientError {
    fn from(e: AppendError) -> Self {
        let error = ClientError::new(ErrorCode::from(&e), e.to_string());
        match e {
            AppendError::Invalid { index, .. } => error.with("index", index as u32),
            _ => error,
        }
    }
}

impl From<FlushError> for ClientError {
    fn from(e: FlushError) -> Self {
        match e {
            FlushError::Store(e) => e.into(),
            FlushError::Parked {
                aggregate, code, ..
            } => ClientError::new(ErrorCode::Parked, e.to_string())
                .with("aggregate", aggregate_to_js(&aggregate))
                .with("parkCode", code),
            other => ClientError::new(ErrorCode::from(&other), other.to_string()),
        }
    }
}
