//! Devices for the auth tests: the fixed test keys of `tests/keys/`, signing nonces with
//! `celeriant_crypto` (Celeriant's own client-side signing), and the bodies of
//! `POST /v1/session`.

use celeriant_sync_protocol::encoding::encode_base64;
use rsa::pkcs8::{DecodePrivateKey, EncodePrivateKey, EncodePublicKey};
use serde_json::{Value, json};

/// The directory of the test keys.
pub fn keys_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/keys")
}

/// A device with an RSA key from `tests/keys/`.
#[derive(Clone)]
pub struct Device {
    private_b64: String,
    /// Standard base64 of the SPKI DER.
    pub public_key: String,
    /// The client id Celeriant derives from the key, canonical UUID form.
    pub client_id: String,
}

impl Device {
    /// `name` is a PKCS#8 PEM file of `tests/keys/` (`device-a`, `device-b`, `rsa-1024`).
    pub fn load(name: &str) -> Device {
        let pem = std::fs::read_to_string(keys_dir().join(format!("{name}.pem"))).unwrap();
        let key = rsa::RsaPrivateKey::from_pkcs8_pem(&pem).unwrap();
        let spki = key.to_public_key().to_public_key_der().unwrap();
        let id = celeriant_crypto::Crypto::generate_short_client_identity(spki.as_bytes());
        Device {
            private_b64: encode_base64(key.to_pkcs8_der().unwrap().as_bytes()),
            public_key: encode_base64(spki.as_bytes()),
            client_id: uuid::Uuid::from_u128(id).to_string(),
        }
    }

    /// The victim of the tests.
    pub fn a() -> Device {
        Device::load("device-a")
    }

    /// Another device (the attacker in the spoofing test).
    pub fn b() -> Device {
        Device::load("device-b")
    }

    /// Base64 of the signature over `nonce`'s UTF-8 bytes.
    pub fn sign(&self, nonce: &str) -> String {
        celeriant_crypto::Crypto::sign_nonce(&self.private_b64, nonce).unwrap()
    }

    /// A `POST /v1/session` body for nonce `nonce_ms`.
    pub fn session_body(&self, nonce_ms: u64) -> Value {
        let nonce = nonce_ms.to_string();
        json!({"publicKey": self.public_key, "signature": self.sign(&nonce), "nonce": nonce})
    }
}

/// Now, Unix milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A unique fresh nonce per call (the clock, nudged forward so two calls in the same
/// millisecond differ).
pub fn fresh_nonce() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = now_ms();
    let prev = LAST.fetch_max(now, Ordering::SeqCst);
    if prev >= now {
        LAST.fetch_add(1, Ordering::SeqCst) + 1
    } else {
        now
    }
}
