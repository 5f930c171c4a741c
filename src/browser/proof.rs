//! The proof every request under a session carries (`DPoP` header; the gateway's
//! `auth::proof` says what it covers): a compact JWS signed with the device's own RSA key, so a
//! session token copied off this device is refused without it.
//!
//! The device key was chosen over a per-session P-256 key: it needs no change to how sessions
//! are opened, the gateway binds it to the token statelessly (the client id is the key's hash),
//! and WebCrypto signs with it in about a millisecond (docs/client.md, "Request proofs").
//! The private key stays non-extractable; the JSON and base64url around the signature are
//! made in `glue.js`, the hashes and the signature by WebCrypto.

use js_sys::Promise;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use super::fetch::error_text;

#[wasm_bindgen(module = "/src/browser/glue.js")]
extern "C" {
    #[wasm_bindgen(js_name = makeProof)]
    fn make_proof(
        key_pair: &JsValue,
        method: &str,
        url: &str,
        body: &str,
        token: &str,
        now_ms: f64,
    ) -> Promise;
}

/// A proof for `method url` with `body` (empty: none) under `token`, at the gateway's clock
/// `now_ms`, signed with `key_pair`.
pub(crate) async fn sign(
    key_pair: &JsValue,
    method: &str,
    url: &str,
    body: &str,
    token: &str,
    now_ms: f64,
) -> Result<String, String> {
    JsFuture::from(make_proof(key_pair, method, url, body, token, now_ms))
        .await
        .map_err(|e| format!("signing the request proof: {}", error_text(&e)))?
        .as_string()
        .ok_or_else(|| "signing the request proof: not a string".into())
}
