//! End-to-end encryption of event `data` (`SyncClient.open({ encryption })`), with WebCrypto's
//! AES-GCM and Celeriant's documented layout: `iv` the 12-byte nonce, `data` the ciphertext
//! followed by its 16-byte tag (what `subtle.encrypt({ name: "AES-GCM", iv })` returns), so any
//! reader holding the key decrypts it.
//!
//! Why it sits at the API's edge: `append` encrypts after parsing and before the runtime opens
//! its one IndexedDB transaction (a failure rejects the append with nothing stored, and the
//! ciphertext is what the outbox pins and resends byte for byte); views, projections and
//! `parkedEvents()` decrypt the events they show, through [`Encryption::decrypt_all`], which
//! the views get as a callback (the browser layer does not use the API's types).
//!
//! The option is a `CryptoKey`, a function from aggregate to key (for per-aggregate keys and
//! rotation: it may return a promise, or `null` for "not encrypted"), or `{ key, types }` to
//! encrypt only some event types. No crypto is written here: WebCrypto does all of it.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use js_sys::{Array, Function, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{AesGcmParams, Crypto, CryptoKey};

use super::errors::ClientError;
use crate::browser::convert::aggregate_to_js;
use crate::browser::js;
use crate::engine::errors::ErrorCode;
use crate::engine::model::{AggregateRef, NewEvent};

/// The most event types `encryption.types` may name.
const MAX_TYPES: usize = 1024;

/// AES-GCM's nonce, as Celeriant's `iv` holds it.
pub(crate) const NONCE_BYTES: usize = 12;

/// Where the key comes from.
#[derive(Debug, Clone)]
enum KeySource {
    /// One key for every aggregate.
    Key(CryptoKey),
    /// `(aggregate) => CryptoKey | null | Promise<CryptoKey | null>`.
    Function(Function),
}

/// The checked `encryption` option.
#[derive(Debug, Clone)]
pub(crate) struct Encryption {
    key: KeySource,
    /// The event types encrypted (`None`: every type).
    types: Option<Vec<u64>>,
}

const KEYS: [&str; 2] = ["key", "types"];

fn bad(message: &str) -> ClientError {
    ClientError::new(ErrorCode::InvalidOptions, format!("encryption: {message}"))
}

/// A key given as such must be an AES-GCM key that may encrypt and decrypt (a key function's
/// keys are checked by WebCrypto at each use). Read by the platform's getters in glue.js: an
/// own `usages` or `algorithm` accessor an app put on the key is never run (web-sys' `usages()`
/// would run it without catching, and a throw would cross the module's frames).
fn check_key(key: &CryptoKey) -> Result<(), ClientError> {
    if js::aes_gcm_key_usable(key) != Some(true) {
        return Err(bad(
            "the key must be an AES-GCM CryptoKey with the usages \"encrypt\" and \"decrypt\"",
        ));
    }
    Ok(())
}

fn key_source(value: JsValue) -> Result<KeySource, ClientError> {
    if let Some(key) = value.dyn_ref::<CryptoKey>() {
        check_key(key)?;
        return Ok(KeySource::Key(key.clone()));
    }
    value
        .dyn_into::<Function>()
        .map(KeySource::Function)
        .map_err(|_| {
            bad("the key must be an AES-GCM CryptoKey or a function (aggregate) => key | null")
        })
}

/// Parses the option: a key, a key function, or `{ key, types? }`.
pub(crate) fn parse(value: JsValue) -> Result<Encryption, ClientError> {
    if value.is_instance_of::<CryptoKey>() || value.is_function() {
        return Ok(Encryption {
            key: key_source(value)?,
            types: None,
        });
    }
    if !value.is_object() || js::is_array(&value) != Some(false) {
        return Err(bad(
            "must be a CryptoKey, a function (aggregate) => key | null, or { key, types? }",
        ));
    }
    let own = js::own_keys(&value).ok_or_else(|| bad("its keys cannot be read"))?;
    for key in own {
        if !KEYS.contains(&key.as_str()) {
            return Err(bad(&format!(
                "unknown field \"{key}\" (fields: {})",
                KEYS.join(", ")
            )));
        }
    }
    let field = |name: &str| {
        super::input::read(&value, name, ErrorCode::InvalidOptions)
            .map_err(|_| bad(&format!("reading encryption.{name} threw")))
    };
    let key = key_source(field("key")?)?;
    let types = match field("types")? {
        v if v.is_undefined() => None,
        v => {
            // At most MAX_TYPES, refused above it without copying them all (a sparse
            // `new Array(2 ** 32 - 1)` would fill the tab's memory).
            let copy = match js::own_array(&v, MAX_TYPES + 1) {
                js::Own::Got((copy, n)) if n <= MAX_TYPES => Some(copy),
                _ => None,
            };
            let list = copy
                .and_then(|copy| {
                    copy.iter()
                        .map(|t| {
                            t.as_f64().filter(|n| {
                                n.fract() == 0.0 && (1.0..=9_007_199_254_740_991.0).contains(n)
                            })
                        })
                        .collect::<Option<Vec<f64>>>()
                })
                .filter(|l| !l.is_empty())
                .ok_or_else(|| {
                    bad("types must be a non-empty array of at most 1,024 event types (integers ≥ 1)")
                })?;
            Some(list.into_iter().map(|n| n as u64).collect())
        }
    };
    Ok(Encryption { key, types })
}

/// `globalThis.crypto` (a window's or a worker's).
fn crypto() -> Result<Crypto, JsValue> {
    let crypto = js::get(&js_sys::global(), "crypto");
    if crypto.is_object() {
        Ok(crypto.unchecked_into())
    } else {
        Err(JsValue::from_str("crypto is missing"))
    }
}

fn params(iv: &[u8]) -> AesGcmParams {
    AesGcmParams::new("AES-GCM", &Uint8Array::from(iv))
}

/// Why no key was had for an aggregate.
enum NoKey {
    /// The function gave `null`: the aggregate is not encrypted.
    None,
    /// It threw, rejected, or gave something that is not a `CryptoKey`.
    Failed(JsValue),
}

impl Encryption {
    /// Whether events of this type are encrypted (given a key for their aggregate).
    fn applies_to(&self, event_type: u64) -> bool {
        self.types
            .as_ref()
            .is_none_or(|types| types.contains(&event_type))
    }

    /// The aggregate's key.
    async fn key(&self, aggregate: &AggregateRef) -> Result<CryptoKey, NoKey> {
        let function = match &self.key {
            KeySource::Key(key) => return Ok(key.clone()),
            KeySource::Function(function) => function,
        };
        let given = function
            .call1(&JsValue::NULL, &aggregate_to_js(aggregate))
            .map_err(NoKey::Failed)?;
        let given = JsFuture::from(js::adopt(&given))
            .await
            .map_err(NoKey::Failed)?;
        // Only an explicit null means "not encrypted": undefined is a cache miss or a
        // forgotten return, which must not send plaintext by accident.
        if given.is_null() {
            return Err(NoKey::None);
        }
        if given.is_undefined() {
            return Err(NoKey::Failed(JsValue::from(js_sys::Error::new(
                "the key function gave undefined (return null for \"not encrypted\")",
            ))));
        }
        given.dyn_into::<CryptoKey>().map_err(|v| {
            NoKey::Failed(JsValue::from(js_sys::Error::new(&format!(
                "the key function gave {}, not a CryptoKey",
                js_sys::JsString::from(v.js_typeof())
            ))))
        })
    }

    /// Encrypts, in place, the `data` of every event the encryption applies to, giving each a
    /// fresh random nonce as its `iv`. All or nothing: on any failure the events are left to be
    /// dropped by the caller (nothing is stored).
    pub(crate) async fn encrypt_all(
        &self,
        aggregate: &AggregateRef,
        events: &mut [NewEvent],
    ) -> Result<(), ClientError> {
        if !events.iter().any(|e| self.applies_to(e.event_type)) {
            return Ok(());
        }
        let failed = |index: usize, message: String, cause: Option<JsValue>| {
            let mut error = ClientError::new(
                ErrorCode::EncryptionFailed,
                format!("events[{index}]: {message}; nothing was stored"),
            )
            .with("index", index as u32);
            error.cause = cause;
            error
        };
        let key = match self.key(aggregate).await {
            Ok(key) => Some(key),
            Err(NoKey::None) => None,
            Err(NoKey::Failed(cause)) => {
                let index = events.iter().position(|e| self.applies_to(e.event_type));
                return Err(failed(
                    index.unwrap_or(0),
                    "the encryption key function failed".into(),
                    Some(cause),
                ));
            }
        };
        let Some(key) = key else {
            return Ok(());
        };
        let crypto = crypto().map_err(|e| failed(0, "WebCrypto is missing".into(), Some(e)))?;
        for (index, event) in events.iter_mut().enumerate() {
            if !self.applies_to(event.event_type) {
                continue;
            }
            if event.iv.is_some() {
                return Err(ClientError::new(
                    ErrorCode::IvNotAllowed,
                    format!(
                        "events[{index}]: iv given for an event the client encrypts (type {}): \
                         the client makes a fresh nonce for each; pass plaintext data and no iv",
                        event.event_type
                    ),
                )
                .with("index", index as u32));
            }
            let mut iv = [0u8; NONCE_BYTES];
            let sealed = async {
                crypto.get_random_values_with_u8_array(&mut iv)?;
                let promise = crypto.subtle().encrypt_with_object_and_u8_array(
                    &params(&iv),
                    &key,
                    &event.data,
                )?;
                JsFuture::from(promise).await
            }
            .await
            .map_err(|e| failed(index, "WebCrypto refused to encrypt".into(), Some(e)))?;
            event.data = Uint8Array::new(&sealed).to_vec();
            event.iv = Some(iv.to_vec());
        }
        Ok(())
    }

    /// Decrypts, in place, the events (view or parked events of one aggregate) whose type is
    /// encrypted: `data` becomes the plaintext; one that cannot be decrypted keeps its stored
    /// `data` and gets `decryptError`, a `CeleriantSyncError` with code `DECRYPT_FAILED` or
    /// `KEY_UNAVAILABLE`. An event of an encrypted type that arrives without an `iv` while the
    /// aggregate has a key is flagged `NOT_ENCRYPTED`: without the check, anyone who can write
    /// to the aggregate (a compromised gateway, another writer) could pass plaintext off as
    /// authenticated data, bypassing the tag. Never throws, never drops an event.
    pub(crate) async fn decrypt_all(&self, aggregate: AggregateRef, events: Array) {
        let mut key: Option<Result<CryptoKey, Option<String>>> = None;
        let subtle = crypto().ok().map(|c| c.subtle());
        for event in events.iter() {
            let event_type = js::get(&event, "type").as_f64().unwrap_or(0.0) as u64;
            if !self.applies_to(event_type) || !js::get(&event, "decryptError").is_undefined() {
                continue;
            }
            if key.is_none() {
                // Err(None): the function gave no key, the aggregate is not encrypted.
                key = Some(self.key(&aggregate).await.map_err(|e| match e {
                    NoKey::None => None,
                    NoKey::Failed(e) => Some(format!(
                        "the key function failed: {}",
                        crate::browser::fetch::error_text(&e)
                    )),
                }));
            }
            let flag = |code: ErrorCode, message: String, cause: Option<JsValue>| {
                let mut error = ClientError::new(code, message);
                error.cause = cause;
                js::set(event.unchecked_ref(), "decryptError", JsValue::from(error));
            };
            let iv = js::get(&event, "iv");
            let Some(iv) = iv.dyn_ref::<Uint8Array>() else {
                // Plaintext where the aggregate has a key: flagged. With no key (or a key
                // function that failed) the event cannot be told from a legitimately clear one.
                if let Some(Ok(_)) = key {
                    flag(
                        ErrorCode::NotEncrypted,
                        format!(
                            "the event (type {event_type}) was stored without encryption \
                             although its aggregate has a key: its data is unauthenticated"
                        ),
                        None,
                    );
                }
                continue;
            };
            let key = match key.as_ref() {
                Some(Ok(key)) => key,
                Some(Err(why)) => {
                    let why = why.clone().unwrap_or_else(|| {
                        "the key function gave no key for this aggregate".into()
                    });
                    flag(ErrorCode::KeyUnavailable, why, None);
                    continue;
                }
                None => continue,
            };
            let Some(subtle) = subtle.as_ref() else {
                flag(
                    ErrorCode::DecryptFailed,
                    "WebCrypto is missing".into(),
                    None,
                );
                continue;
            };
            let data = Uint8Array::new(&js::get(&event, "data")).to_vec();
            let opened = async {
                let promise =
                    subtle.decrypt_with_object_and_u8_array(&params(&iv.to_vec()), key, &data)?;
                JsFuture::from(promise).await
            }
            .await;
            match opened {
                Ok(plain) => js::set(event.unchecked_ref(), "data", Uint8Array::new(&plain)),
                Err(e) => flag(
                    ErrorCode::DecryptFailed,
                    "the event does not decrypt with the aggregate's key (another key, or \
                     changed bytes)"
                        .into(),
                    Some(e),
                ),
            }
        }
    }

    /// [`Self::decrypt_all`] as the views' callback.
    pub(crate) fn decryptor(self: Rc<Self>) -> crate::browser::views::Decryptor {
        Rc::new(move |aggregate, events| {
            let this = self.clone();
            let future: Pin<Box<dyn Future<Output = ()>>> =
                Box::pin(async move { this.decrypt_all(aggregate, events).await });
            future
        })
    }
}
