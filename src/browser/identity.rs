//! The device's identity: an RSA-2048 key made with WebCrypto once per database, and the client
//! id Celeriant derives from it.
//!
//! The private key is **non-extractable**: no script can read it, not even this library; it can
//! only sign. The key pair lives in the outbox's own database (so the key and the events that
//! need it are evicted together), and the client id is
//! `u128::from_le_bytes(SHA-256(SPKI DER)[0..16])` — the same derivation Celeriant's
//! `celeriant_crypto` makes, so anyone can check it from `client.publicKey`.
//!
//! Two contexts opening a fresh database at once both make a key, but only one is stored:
//! [`IdbOutbox::adopt_device`] is a compare-and-set in one transaction, and the loser uses the
//! winner's.

use js_sys::{Promise, Uint8Array};
use uuid::Uuid;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use super::idb::outbox::{Device, IdbOutbox};
use crate::engine::outbox::{Cause, StoreError};
use celeriant_sync_protocol::encoding::encode_base64;

#[wasm_bindgen(module = "/src/browser/glue.js")]
extern "C" {
    fn subtle() -> JsValue;
    #[wasm_bindgen(js_name = generateDeviceKey)]
    fn generate_device_key() -> Promise;
    #[wasm_bindgen(js_name = exportSpki)]
    fn export_spki(key_pair: &JsValue) -> Promise;
    fn sha256(bytes: &Uint8Array) -> Promise;
    #[wasm_bindgen(js_name = signText)]
    fn sign_text(key_pair: &JsValue, text: &str) -> Promise;
}

/// This device's identity.
#[derive(Clone)]
pub(crate) struct Identity {
    /// The client id derived from the public key.
    pub client_id: Uuid,
    /// The public key's SPKI DER, standard base64.
    pub public_key: String,
    /// The `CryptoKeyPair` (its private key cannot be exported).
    pub key_pair: JsValue,
}

fn crypto_error(what: &str, e: JsValue) -> StoreError {
    StoreError::Failed {
        name: "CryptoError".into(),
        message: format!("{what}: {}", super::fetch::error_text(&e)),
        cause: Cause::new(e),
    }
}

/// Whether WebCrypto is here (it is only in secure contexts: `https:` or `localhost`).
pub(crate) fn supported() -> bool {
    !subtle().is_undefined()
}

/// The client id Celeriant derives from a public key's SPKI DER: the first 16 bytes of its
/// SHA-256, read as a little-endian `u128`.
pub(crate) async fn client_id_of(spki: &[u8]) -> Result<Uuid, StoreError> {
    let digest = JsFuture::from(sha256(&Uint8Array::from(spki)))
        .await
        .map_err(|e| crypto_error("SHA-256", e))?;
    let digest = Uint8Array::new(&digest).to_vec();
    let mut first = [0u8; 16];
    first.copy_from_slice(digest.get(..16).unwrap_or(&[0; 16]));
    Ok(Uuid::from_u128(u128::from_le_bytes(first)))
}

/// Signs `text` (its UTF-8 bytes) with the device's private key.
pub(crate) async fn sign(key_pair: &JsValue, text: &str) -> Result<Vec<u8>, StoreError> {
    let signature = JsFuture::from(sign_text(key_pair, text))
        .await
        .map_err(|e| crypto_error("signing", e))?;
    Ok(Uint8Array::new(&signature).to_vec())
}

fn identity_of(device: Device) -> Identity {
    Identity {
        client_id: device.client_id,
        public_key: encode_base64(&device.spki),
        key_pair: device.key_pair,
    }
}

/// The database's device identity: the stored one, or a new key made now and stored — unless
/// another context stored one first, which is then used.
pub(crate) async fn load_or_create(outbox: &IdbOutbox) -> Result<Identity, StoreError> {
    if let Some(device) = outbox.device().await? {
        outbox.bind_incarnation(&device.client_id);
        return Ok(identity_of(device));
    }
    let key_pair = JsFuture::from(generate_device_key())
        .await
        .map_err(|e| crypto_error("generating the device key", e))?;
    let spki = JsFuture::from(export_spki(&key_pair))
        .await
        .map_err(|e| crypto_error("exporting the public key", e))?;
    let spki = Uint8Array::new(&spki).to_vec();
    let client_id = client_id_of(&spki).await?;
    let device = outbox
        .adopt_device(Device {
            key_pair,
            spki,
            client_id,
        })
        .await?;
    outbox.bind_incarnation(&device.client_id);
    Ok(identity_of(device))
}
