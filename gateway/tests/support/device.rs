//! Devices for the auth tests: the fixed test keys of `tests/keys/`, signing nonces with
//! `celeriant_crypto` (Celeriant's own client-side signing), the bodies of
//! `POST /v1/session`, and the `DPoP` request proofs every request under a session carries
//! ([`Device::proof`]; [`proof_for`] signs for any token issued to a device loaded here, so the
//! request helpers add proofs by themselves).

use std::collections::HashMap;
use std::sync::Mutex;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use celeriant_sync_protocol::encoding::encode_base64;
use jsonwebtoken::jwk::{AlgorithmParameters, CommonParameters, Jwk, RSAKeyParameters, RSAKeyType};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rsa::pkcs1::EncodeRsaPrivateKey;
use rsa::pkcs8::{DecodePrivateKey, EncodePrivateKey, EncodePublicKey};
use rsa::traits::PublicKeyParts;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Every device loaded so far, by client id: [`proof_for`] signs with them.
static LOADED: Mutex<Option<HashMap<String, Device>>> = Mutex::new(None);

/// The directory of the test keys.
pub fn keys_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/keys")
}

/// A device with an RSA key from `tests/keys/`.
#[derive(Clone)]
pub struct Device {
    private_b64: String,
    /// PKCS#1 DER of the private key (for RS256 proofs).
    pkcs1: Vec<u8>,
    /// The public key as a JWK.
    jwk: Jwk,
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
        let public = key.to_public_key();
        let jwk = Jwk {
            common: CommonParameters::default(),
            algorithm: AlgorithmParameters::RSA(RSAKeyParameters {
                key_type: RSAKeyType::RSA,
                n: URL_SAFE_NO_PAD.encode(public.n().to_bytes_be()),
                e: URL_SAFE_NO_PAD.encode(public.e().to_bytes_be()),
            }),
        };
        let device = Device {
            private_b64: encode_base64(key.to_pkcs8_der().unwrap().as_bytes()),
            pkcs1: key.to_pkcs1_der().unwrap().as_bytes().to_vec(),
            jwk,
            public_key: encode_base64(spki.as_bytes()),
            client_id: uuid::Uuid::from_u128(id).to_string(),
        };
        LOADED
            .lock()
            .unwrap()
            .get_or_insert_with(HashMap::new)
            .insert(device.client_id.clone(), device.clone());
        device
    }

    /// A fresh `DPoP` proof for `method target` (path and query) with `body` under `token`.
    pub fn proof(&self, method: &str, target: &str, token: &str, body: &[u8]) -> String {
        self.proof_of(&ProofClaims::new(method, target, token, body))
    }

    /// A proof with exactly these claims (for the tests of refusals).
    pub fn proof_of(&self, claims: &ProofClaims) -> String {
        let mut header = Header::new(Algorithm::RS256);
        header.typ = Some("dpop+jwt".into());
        header.jwk = Some(self.jwk.clone());
        jsonwebtoken::encode(&header, claims, &EncodingKey::from_rsa_der(&self.pkcs1)).unwrap()
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

/// The claims of a request proof.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProofClaims {
    pub jti: String,
    pub htm: String,
    pub htu: String,
    pub iat: u64,
    pub ath: String,
    pub bh: String,
}

impl ProofClaims {
    /// Fresh claims (now, a new `jti`) for `method target` with `body` under `token`.
    pub fn new(method: &str, target: &str, token: &str, body: &[u8]) -> ProofClaims {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        ProofClaims {
            jti: format!("{}-{}", now_ms(), N.fetch_add(1, Ordering::SeqCst)),
            htm: method.to_owned(),
            htu: target.to_owned(),
            iat: now_ms() / 1000,
            ath: hash_b64(token.as_bytes()),
            bh: hash_b64(body),
        }
    }
}

/// base64url SHA-256.
pub fn hash_b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(bytes))
}

/// The client id a session token was issued to (its `sub`, read without verifying).
pub fn token_client_id(token: &str) -> Option<String> {
    let payload = URL_SAFE_NO_PAD.decode(token.split('.').nth(1)?).ok()?;
    let claims: Value = serde_json::from_slice(&payload).ok()?;
    claims["sub"].as_str().map(str::to_owned)
}

/// A proof for `method target` with `body` under `token`, signed by the loaded device the
/// token was issued to; `None` when no loaded device holds it (a forged or foreign token).
pub fn proof_for(token: &str, method: &str, target: &str, body: &[u8]) -> Option<String> {
    let id = token_client_id(token)?;
    let device = LOADED.lock().unwrap().as_ref()?.get(&id)?.clone();
    Some(device.proof(method, target, token, body))
}
