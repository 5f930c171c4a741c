//! `SyncClient.open`'s options: parsed strictly (an unknown key is an error, so a typo is not
//! silently ignored) and range-checked.

use serde::Deserialize;
use wasm_bindgen::{JsCast, JsValue};

use super::errors::ClientError;
use crate::engine::drain::Policy;

/// The options as given.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    gateway_url: String,
    database_name: Option<String>,
    request_timeout_ms: Option<f64>,
    max_batch_events: Option<f64>,
    max_batch_bytes: Option<f64>,
    durability: Option<String>,
    persist: Option<bool>,
}

/// How committed writes reach the disk (IndexedDB transaction durability).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Committed means flushed to disk (the default).
    Strict,
    /// Committed means handed to the OS; faster, may be lost on power failure.
    Relaxed,
    /// The browser's default.
    Default,
}

/// The checked options.
#[derive(Debug, Clone)]
pub struct Options {
    /// The gateway's base URL, without a trailing slash.
    pub gateway_url: String,
    /// The IndexedDB database name.
    pub database_name: String,
    /// Per-request timeout.
    pub request_timeout_ms: u32,
    /// Batch cutting and backoff.
    pub policy: Policy,
    /// IndexedDB durability for writes.
    pub durability: Durability,
    /// Ask for persistent storage (`navigator.storage.persist()`) at open.
    pub persist: bool,
}

/// Default IndexedDB database name.
pub const DEFAULT_DATABASE: &str = "celeriant-sync";
/// Default request timeout.
pub const DEFAULT_TIMEOUT_MS: u32 = 10_000;

fn bad(message: impl Into<String>) -> ClientError {
    ClientError::new("INVALID_OPTIONS", message)
}

/// A number as JavaScript prints it (without pulling Rust's float formatting into the module).
fn number_text(v: f64) -> String {
    String::from(
        js_sys::Number::from(v)
            .to_string_with_radix(10)
            .unwrap_or_else(|_| "NaN".into()),
    )
}

fn integer(
    name: &str,
    value: Option<f64>,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ClientError> {
    let Some(v) = value else { return Ok(default) };
    if v.fract() != 0.0 || v < min as f64 || v > max as f64 {
        return Err(bad(format!(
            "{name} must be an integer in {min}..={max}, got {}",
            number_text(v)
        )));
    }
    Ok(v as u64)
}

/// Parses and checks the options object.
pub fn parse(value: JsValue) -> Result<Options, ClientError> {
    if !value.is_object() {
        return Err(bad(
            "SyncClient.open needs an options object with at least { gatewayUrl }",
        ));
    }
    // serde-wasm-bindgen reads only the declared fields, so unknown keys are checked here.
    const KEYS: [&str; 7] = [
        "gatewayUrl",
        "databaseName",
        "requestTimeoutMs",
        "maxBatchEvents",
        "maxBatchBytes",
        "durability",
        "persist",
    ];
    for key in js_sys::Object::keys(value.unchecked_ref::<js_sys::Object>()).iter() {
        let key = key.as_string().unwrap_or_default();
        if !KEYS.contains(&key.as_str()) {
            return Err(bad(format!(
                "unknown option \"{key}\" (options: {})",
                KEYS.join(", ")
            )));
        }
    }
    let raw: Raw =
        serde_wasm_bindgen::from_value(value).map_err(|e| bad(format!("invalid options: {e}")))?;
    let gateway_url = raw.gateway_url.trim_end_matches('/').to_owned();
    if !(gateway_url.starts_with("http://") || gateway_url.starts_with("https://"))
        || gateway_url.len() < 10
    {
        return Err(bad(format!(
            "gatewayUrl must be an absolute http(s) URL, got \"{}\"",
            raw.gateway_url
        )));
    }
    let database_name = raw
        .database_name
        .unwrap_or_else(|| DEFAULT_DATABASE.to_owned());
    if database_name.is_empty() {
        return Err(bad("databaseName must not be empty"));
    }
    let defaults = Policy::default();
    let policy = Policy {
        max_batch_events: integer(
            "maxBatchEvents",
            raw.max_batch_events,
            defaults.max_batch_events as u64,
            1,
            10_000,
        )? as usize,
        max_batch_bytes: integer(
            "maxBatchBytes",
            raw.max_batch_bytes,
            defaults.max_batch_bytes as u64,
            4_096,
            4 << 20,
        )? as usize,
        ..defaults
    };
    let durability = match raw.durability.as_deref() {
        None | Some("strict") => Durability::Strict,
        Some("relaxed") => Durability::Relaxed,
        Some("default") => Durability::Default,
        Some(other) => {
            return Err(bad(format!(
                "durability must be \"strict\", \"relaxed\" or \"default\", got \"{other}\""
            )));
        }
    };
    Ok(Options {
        gateway_url,
        database_name,
        request_timeout_ms: integer(
            "requestTimeoutMs",
            raw.request_timeout_ms,
            DEFAULT_TIMEOUT_MS.into(),
            100,
            600_000,
        )? as u32,
        policy,
        durability,
        persist: raw.persist.unwrap_or(false),
    })
}
