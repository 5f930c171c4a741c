//! `SyncClient.open`'s options: parsed strictly (an unknown key is an error, so a typo is not
//! silently ignored) and range-checked.

use wasm_bindgen::{JsCast, JsValue};

use super::errors::ClientError;
use crate::browser::idb::db::Durability;
use crate::browser::js;
use crate::engine::backoff::Backoff;
use crate::engine::drain::Policy;
use crate::engine::errors::ErrorCode;

/// The checked options.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// The gateway's base URL, without a trailing slash.
    pub gateway_url: String,
    /// The IndexedDB database name.
    pub database_name: String,
    /// Per-request timeout.
    pub request_timeout_ms: u32,
    /// Batch cutting and backoff.
    pub policy: Policy,
    /// IndexedDB durability for appends and discards.
    pub durability: Durability,
    /// Ask for persistent storage (`navigator.storage.persist()`) at open.
    pub persist: bool,
    /// The app's own authentication: `() => Promise<string | null>`, sent with each session
    /// request.
    pub auth: Option<js_sys::Function>,
    /// Start with the network switched off (`setOffline(true)` before anything is sent).
    pub offline: bool,
    /// The app's user (its app token's `sub`): the database is bound to `user:<user>` at open.
    pub user: Option<String>,
    /// End-to-end encryption of `data` (`encryption`).
    pub encryption: Option<super::encryption::Encryption>,
}

/// Default IndexedDB database name.
pub(crate) const DEFAULT_DATABASE: &str = "celeriant-sync";
/// Default request timeout.
pub(crate) const DEFAULT_TIMEOUT_MS: u32 = 10_000;

/// Every option's key.
const KEYS: [&str; 12] = [
    "gatewayUrl",
    "databaseName",
    "requestTimeoutMs",
    "maxBatchEvents",
    "maxBatchBytes",
    "maxBackoffMs",
    "durability",
    "persist",
    "auth",
    "offline",
    "user",
    "encryption",
];

/// The longest `user` accepted (an app token's `sub` is an id, not a document).
const MAX_USER_CHARS: usize = 256;

fn bad(message: impl Into<String>) -> ClientError {
    ClientError::new(ErrorCode::InvalidOptions, message)
}

/// A number as JavaScript prints it (without pulling Rust's float formatting into the module).
fn number_text(v: f64) -> String {
    String::from(
        js_sys::Number::from(v)
            .to_string_with_radix(10)
            .unwrap_or_else(|_| "NaN".into()),
    )
}

/// The option `name`: absent (`undefined`) gives `None`; a getter that throws is refused.
fn field(options: &JsValue, name: &str) -> Result<Option<JsValue>, ClientError> {
    let value = super::input::read(options, name, ErrorCode::InvalidOptions)?;
    Ok(Some(value).filter(|v| !v.is_undefined()))
}

/// The longest string option (and database name) taken: a longer one is refused before it is
/// copied into the module, whose memory never shrinks.
pub(crate) const MAX_STRING: u32 = 4096;

fn string(options: &JsValue, name: &str) -> Result<Option<String>, ClientError> {
    field(options, name)?
        .map(|v| {
            js::short_string(&v, MAX_STRING).ok_or_else(|| {
                bad(format!(
                    "{name} must be a string of at most {MAX_STRING} characters"
                ))
            })
        })
        .transpose()
}

fn integer(
    options: &JsValue,
    name: &str,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ClientError> {
    let Some(value) = field(options, name)? else {
        return Ok(default);
    };
    let v = value
        .as_f64()
        .ok_or_else(|| bad(format!("{name} must be a number")))?;
    if v.fract() != 0.0 || v < min as f64 || v > max as f64 {
        return Err(bad(format!(
            "{name} must be an integer in {min}..={max}, got {}",
            number_text(v)
        )));
    }
    Ok(v as u64)
}

/// Parses and checks the options object.
pub(crate) fn parse(value: &JsValue) -> Result<Options, ClientError> {
    if !value.is_object() {
        return Err(bad(
            "SyncClient.open needs an options object with at least { gatewayUrl }",
        ));
    }
    let own = js::own_keys(value).ok_or_else(|| bad("the options' keys cannot be read"))?;
    for key in own {
        if !KEYS.contains(&key.as_str()) {
            return Err(bad(format!(
                "unknown option \"{key}\" (options: {})",
                KEYS.join(", ")
            )));
        }
    }
    let raw_url = string(value, "gatewayUrl")?.ok_or_else(|| bad("gatewayUrl is required"))?;
    let gateway_url = raw_url.trim_end_matches('/').to_owned();
    if !(gateway_url.starts_with("http://") || gateway_url.starts_with("https://"))
        || gateway_url.len() < 10
    {
        return Err(bad(format!(
            "gatewayUrl must be an absolute http(s) URL, got \"{raw_url}\""
        )));
    }
    let database_name =
        string(value, "databaseName")?.unwrap_or_else(|| DEFAULT_DATABASE.to_owned());
    if database_name.is_empty() {
        return Err(bad("databaseName must not be empty"));
    }
    let defaults = Policy::default();
    let policy = Policy {
        max_batch_events: integer(
            value,
            "maxBatchEvents",
            defaults.max_batch_events as u64,
            1,
            10_000,
        )? as usize,
        max_batch_bytes: integer(
            value,
            "maxBatchBytes",
            defaults.max_batch_bytes as u64,
            4_096,
            4 << 20,
        )? as usize,
        backoff: Backoff {
            cap_ms: integer(
                value,
                "maxBackoffMs",
                defaults.backoff.cap_ms,
                1_000,
                3_600_000,
            )?,
            ..defaults.backoff
        },
        ..defaults
    };
    let durability = match string(value, "durability")?.as_deref() {
        None | Some("strict") => Durability::Strict,
        Some("relaxed") => Durability::Relaxed,
        Some("default") => Durability::Default,
        Some(other) => {
            return Err(bad(format!(
                "durability must be \"strict\", \"relaxed\" or \"default\", got \"{other}\""
            )));
        }
    };
    let flag = |name: &str| match field(value, name)? {
        None => Ok(false),
        Some(v) => v
            .as_bool()
            .ok_or_else(|| bad(format!("{name} must be a boolean"))),
    };
    let persist = flag("persist")?;
    let offline = flag("offline")?;
    let auth = match field(value, "auth")? {
        None => None,
        Some(v) => Some(
            v.dyn_into::<js_sys::Function>()
                .map_err(|_| bad("auth must be a function returning a token (or null)"))?,
        ),
    };
    let user = string(value, "user")?;
    if let Some(user) = &user
        && (user.is_empty()
            || user.chars().count() > MAX_USER_CHARS
            || user.chars().any(char::is_control))
    {
        return Err(bad(format!(
            "user must be 1..={MAX_USER_CHARS} characters without control characters"
        )));
    }
    // With app tokens the database must know its user before the first append: bound only at
    // the first session, events appended offline by one user would be sent as whoever's session
    // came first (found by review).
    if auth.is_some() && user.is_none() {
        return Err(bad(
            "auth needs user: the signed-in user (the sub of the tokens auth returns), so that \
             this database's events are only ever sent under that user's sessions",
        ));
    }
    let encryption = field(value, "encryption")?
        .map(super::encryption::parse)
        .transpose()?;
    Ok(Options {
        encryption,
        auth,
        user,
        gateway_url,
        database_name,
        request_timeout_ms: integer(
            value,
            "requestTimeoutMs",
            DEFAULT_TIMEOUT_MS.into(),
            100,
            600_000,
        )? as u32,
        policy,
        durability,
        persist,
        offline,
    })
}
