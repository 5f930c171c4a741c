//! Where the session-token secret comes from, and how a fresh one is kept.
//!
//! A fleet shares one secret (a file mounted from a secret store, or an environment variable),
//! so a token issued by one replica is accepted by all. A single gateway needs no setup: on first
//! start it generates 32 random bytes from the operating system into `<data-dir>/session-secret`
//! (created with mode 0600, never overwritten) and reuses them on every restart, so sessions
//! survive restarts. Starting with a different secret invalidates every token issued before,
//! which is how a secret is rotated: clients get 401 and open new sessions.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use rand::TryRngCore as _;

use crate::config::Config;

/// The shortest secret accepted, in bytes.
pub const MIN_SECRET_BYTES: usize = 32;
/// The largest secret file read, in bytes.
const MAX_SECRET_FILE_BYTES: u64 = 4_096;
/// The generated secret's file name inside the data directory.
pub const GENERATED_SECRET_FILE: &str = "session-secret";

/// Where the secret in use came from (logged; the value never is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// `--session-secret` / `CELERIANT_GATEWAY_SESSION_SECRET`.
    Variable,
    /// `--session-secret-file`.
    File(PathBuf),
    /// Generated into (or reused from) the data directory.
    Generated(PathBuf),
}

/// The secret the configuration names, or the data directory's generated one.
pub fn load(config: &Config) -> Result<(Vec<u8>, SecretSource), String> {
    if let Some(value) = &config.session_secret {
        return Ok((
            checked(value.as_bytes().to_vec(), "--session-secret")?,
            SecretSource::Variable,
        ));
    }
    if let Some(path) = &config.session_secret_file {
        return Ok((
            read(path, "session secret")?,
            SecretSource::File(path.clone()),
        ));
    }
    let path = config.data_dir.join(GENERATED_SECRET_FILE);
    Ok((generated(&path)?, SecretSource::Generated(path)))
}

fn checked(secret: Vec<u8>, what: &str) -> Result<Vec<u8>, String> {
    checked_as(secret, what, "session secret")
}

fn checked_as(secret: Vec<u8>, what: &str, kind: &str) -> Result<Vec<u8>, String> {
    if secret.len() < MIN_SECRET_BYTES {
        return Err(format!(
            "{what}: the {kind} is {} bytes; at least {MIN_SECRET_BYTES} are required",
            secret.len()
        ));
    }
    Ok(secret)
}

/// A secret file's contents without trailing whitespace (a newline an editor added); `kind`
/// names the secret in messages ("session secret", "faults secret"). At least
/// [`MIN_SECRET_BYTES`] must remain.
pub fn read(path: &Path, kind: &str) -> Result<Vec<u8>, String> {
    let shown = path.display();
    let size = std::fs::metadata(path)
        .map_err(|e| format!("cannot read the {kind} {shown}: {e}"))?
        .len();
    if size > MAX_SECRET_FILE_BYTES {
        return Err(format!(
            "the {kind} {shown} is {size} bytes; at most {MAX_SECRET_FILE_BYTES} are read"
        ));
    }
    let mut bytes =
        std::fs::read(path).map_err(|e| format!("cannot read the {kind} {shown}: {e}"))?;
    while bytes.last().is_some_and(u8::is_ascii_whitespace) {
        bytes.pop();
    }
    checked_as(bytes, &shown.to_string(), kind)
}

/// 32 random bytes from the operating system, in lowercase hex (64 characters).
pub fn random_hex() -> Result<String, String> {
    let mut raw = [0u8; 32];
    rand::rngs::OsRng
        .try_fill_bytes(&mut raw)
        .map_err(|e| format!("no randomness from the operating system: {e}"))?;
    Ok(raw.iter().map(|b| format!("{b:02x}")).collect())
}

/// Reuses `path`, or creates it (mode 0600, exclusively) with 32 random bytes in hex.
fn generated(path: &Path) -> Result<Vec<u8>, String> {
    if path.exists() {
        warn_if_readable_by_others(path);
        return read(path, "session secret");
    }
    if let Some(dir) = path.parent() {
        crate::private::private_dir(dir)?;
    }
    let hex = random_hex()?;
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    match created {
        Ok(mut file) => {
            file.write_all(hex.as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            tracing::info!(path = %path.display(), "generated a new session secret");
            Ok(hex.into_bytes())
        }
        // Another process created it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(path, "session secret"),
        Err(e) => Err(format!("cannot create {}: {e}", path.display())),
    }
}

fn warn_if_readable_by_others(path: &Path) {
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(path = %path.display(), "the session secret is readable by other users; chmod 600 it");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_secret_is_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::defaults();
        config.data_dir = dir.path().join("nested");
        let (first, source) = load(&config).unwrap();
        let path = config.data_dir.join(GENERATED_SECRET_FILE);
        assert_eq!(source, SecretSource::Generated(path.clone()));
        assert_eq!(first.len(), 64);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load(&config).unwrap().0, first, "reused on restart");
    }

    #[test]
    fn configured_secrets_win_and_short_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::defaults();
        config.data_dir = dir.path().to_owned();
        let file = dir.path().join("secret");
        std::fs::write(&file, format!("{}\n", "s".repeat(40))).unwrap();
        config.session_secret_file = Some(file.clone());
        assert_eq!(
            load(&config).unwrap(),
            (vec![b's'; 40], SecretSource::File(file.clone()))
        );
        std::fs::write(&file, "short\n").unwrap();
        assert!(load(&config).unwrap_err().contains("at least 32"));
        config.session_secret_file = None;
        config.session_secret = Some("v".repeat(32));
        assert_eq!(load(&config).unwrap().1, SecretSource::Variable);
        config.session_secret = Some("v".repeat(31));
        assert!(load(&config).is_err());
        assert!(
            !dir.path().join(GENERATED_SECRET_FILE).exists(),
            "nothing generated"
        );
    }
}
