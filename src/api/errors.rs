//! The one error type thrown to JavaScript.
//!
//! Every failure reaches JS as a real `Error` whose `name` is `"CeleriantSyncError"` and whose
//! `code` is one of the stable [`ErrorCode`]s (also a TypeScript union, `SyncErrorCode`). Extra
//! properties (`index`, `aggregate`, `parkCode`) say where, when that is known; the platform's
//! own error, when there is one (a `DOMException` from IndexedDB), is kept as `cause`.
//!
//! Each is also an instance of the exported class [`CeleriantSyncError`], so `e instanceof
//! CeleriantSyncError` holds for the class the package's entry exports: the class is the one
//! wasm-bindgen generates for the (empty) Rust struct, its prototype chained to
//! `Error.prototype` once, and every error made here gets that prototype. The platform still
//! creates the error (`new Error`), so `stack` and `message` are the engine's own.

use std::cell::OnceCell;

use js_sys::{Error, Object, Reflect};
use wasm_bindgen::JsValue;
use wasm_bindgen::prelude::*;

use crate::browser::convert::aggregate_to_js;
use crate::engine::append::AppendError;
use crate::engine::drain::FlushError;
use crate::engine::errors::ErrorCode;
use crate::engine::outbox::StoreError;

/// The error name of everything the client throws.
pub(crate) const NAME: &str = "CeleriantSyncError";

/// The class of every error the client throws or rejects with (`instanceof` works); its
/// TypeScript declaration (`extends Error`, with `code` and the rest) is written in
/// `typescript.rs`. Not constructible from JS: only the client makes them.
#[wasm_bindgen(skip_typescript)]
pub struct CeleriantSyncError {
    _private: (),
}

impl CeleriantSyncError {
    /// The JS class itself (what the package exports), for Rust code and tests that check
    /// `instanceof` against it.
    pub fn class() -> JsValue {
        Reflect::get(&prototype(), &"constructor".into()).unwrap_or(JsValue::UNDEFINED)
    }
}

thread_local! {
    /// `CeleriantSyncError.prototype`, chained to `Error.prototype`.
    static PROTOTYPE: OnceCell<Object> = const { OnceCell::new() };
}

/// The class's prototype (made ready on first use).
fn prototype() -> Object {
    PROTOTYPE.with(|cell| {
        cell.get_or_init(|| {
            let instance = JsValue::from(CeleriantSyncError { _private: () });
            let prototype = Object::get_prototype_of(&instance);
            let error_prototype = Object::get_prototype_of(&Error::new(""));
            Object::set_prototype_of(&prototype, &error_prototype);
            prototype
        })
        .clone()
    })
}

/// Whether `value` is a `CeleriantSyncError`: an instance of the class, or (another copy of
/// the package loaded beside this one) an `Error` named `"CeleriantSyncError"` with a string
/// `code`.
#[wasm_bindgen(js_name = isCeleriantSyncError, skip_typescript)]
pub fn is_celeriant_sync_error(value: &JsValue) -> bool {
    // In glue.js, catching: js-sys' `isPrototypeOf` does not catch, and a revoked Proxy (or a
    // throwing `getPrototypeOf` trap) threw through the module (each throw leaked its stack).
    crate::browser::js::is_sync_error(value, &prototype(), NAME)
}

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
        Object::set_prototype_of(&error, &prototype());
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
                aggregate,
                code,
                may_have_landed,
                ..
            } => ClientError::new(ErrorCode::Parked, e.to_string())
                .with("aggregate", aggregate_to_js(&aggregate))
                .with("parkCode", code)
                .with("mayHaveLanded", may_have_landed),
            other => ClientError::new(ErrorCode::from(&other), other.to_string()),
        }
    }
}
