//! The secret every `/v1/faults` request must present.
//!
//! Fault injection can stall every write for minutes and trim acknowledged events, and the
//! gateway that runs it (`npm start`, the test scripts) listens on loopback, where any page the
//! user opens (`http://localhost:3000`, a DNS-rebinding name) or any local process can reach it.
//! So `GET`/`PUT /v1/faults` and `POST /v1/faults/trim` need a secret on every request, sent in
//! the [`HEADER`] header and compared in constant time; without it, or with another value, the
//! answer is 401 with code 40190 (`FAULTS_SECRET_REQUIRED`) and nothing is read or changed.
//!
//! The secret comes from `--faults-secret-file` (at least 32 bytes, read like the session secret
//! file) or, without one, is generated at start (32 random bytes in hex) and handed to whoever
//! started the gateway: written to `--faults-secret-out` (mode 0600) before the port file, or
//! else printed once on standard output. It is never logged.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use celeriant_sync_protocol::codes::gateway as g;
use subtle::ConstantTimeEq as _;

use crate::auth::secret;
use crate::config::Config;
use crate::error::ApiError;

/// The request header carrying the secret.
pub const HEADER: &str = "celeriant-faults-secret";

/// The faults secret in use.
pub struct FaultsSecret {
    value: String,
    generated: bool,
}

impl std::fmt::Debug for FaultsSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultsSecret")
            .field("generated", &self.generated)
            .finish_non_exhaustive()
    }
}

impl FaultsSecret {
    /// The secret of `config`: its `--faults-secret-file`, or a fresh random one.
    pub fn load(config: &Config) -> Result<Self, String> {
        match &config.faults_secret_file {
            Some(path) => {
                let bytes = secret::read(path, "faults secret")?;
                let value = String::from_utf8(bytes).map_err(|_| {
                    format!(
                        "the faults secret {} is not text (it travels in a header)",
                        path.display()
                    )
                })?;
                if !value.bytes().all(|b| b.is_ascii_graphic()) {
                    return Err(format!(
                        "the faults secret {} must be printable ASCII without spaces (it travels in a header)",
                        path.display()
                    ));
                }
                Ok(FaultsSecret {
                    value,
                    generated: false,
                })
            }
            None => Ok(FaultsSecret {
                value: secret::random_hex()?,
                generated: true,
            }),
        }
    }

    /// Whether the secret was generated at start (so it must be handed out).
    pub fn generated(&self) -> bool {
        self.generated
    }

    /// The secret itself (for handing it out, and for tests).
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// Whether `presented` is the secret, in time that does not depend on where they differ.
    pub fn matches(&self, presented: &[u8]) -> bool {
        bool::from(self.value.as_bytes().ct_eq(presented))
    }

    /// Writes the secret to `path` (replaced, mode 0600), for the scripts that start the
    /// gateway.
    pub fn write_to(&self, path: &Path) -> Result<(), String> {
        let shown = path.display();
        // A leftover file (another mode, another owner's link) is replaced, never written through.
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot replace {shown}: {e}")),
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| format!("cannot create {shown}: {e}"))?;
        file.write_all(self.value.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| format!("cannot write {shown}: {e}"))
    }
}

/// The middleware on the faults routes: 401 (40190) unless the request carries the secret.
pub async fn require(
    State(secret): State<Arc<FaultsSecret>>,
    request: Request,
    next: Next,
) -> Response {
    let mut values = request.headers().get_all(HEADER).iter();
    let presented = match (values.next(), values.next()) {
        (Some(value), None) => Some(value.as_bytes()),
        _ => None,
    };
    if presented.is_some_and(|p| secret.matches(p)) {
        return next.run(request).await;
    }
    ApiError::code(
        g::FAULTS_SECRET_REQUIRED,
        format!(
            "the fault-injection endpoints need the gateway's faults secret in the {HEADER} header"
        ),
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn a_file_secret_must_be_long_printable_text() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("faults");
        let mut config = Config::defaults();
        config.faults_secret_file = Some(file.clone());
        assert!(
            FaultsSecret::load(&config)
                .unwrap_err()
                .contains("cannot read")
        );
        std::fs::write(&file, "short\n").unwrap();
        assert!(
            FaultsSecret::load(&config)
                .unwrap_err()
                .contains("at least 32")
        );
        std::fs::write(&file, format!("{} {}\n", "a".repeat(20), "b".repeat(20))).unwrap();
        assert!(
            FaultsSecret::load(&config)
                .unwrap_err()
                .contains("printable")
        );
        std::fs::write(&file, format!("{}\n", "k".repeat(40))).unwrap();
        let s = FaultsSecret::load(&config).unwrap();
        assert!(!s.generated());
        assert!(s.matches("k".repeat(40).as_bytes()));
        assert!(!s.matches("k".repeat(39).as_bytes()));
        assert!(!s.matches(b""));
    }

    #[test]
    fn a_generated_secret_is_random_and_written_privately() {
        let config = Config::defaults();
        let a = FaultsSecret::load(&config).unwrap();
        let b = FaultsSecret::load(&config).unwrap();
        assert!(a.generated());
        assert_eq!(a.expose().len(), 64);
        assert_ne!(a.expose(), b.expose());
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        std::fs::write(&out, "old").unwrap();
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o644)).unwrap();
        a.write_to(&out).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), a.expose());
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!format!("{a:?}").contains(a.expose()), "never in a log");
    }
}
