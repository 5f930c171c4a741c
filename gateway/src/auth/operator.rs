//! The operator credential: a secret from a file (`--operator-token-file`, never a default)
//! that support tools, audits and backups send as `Authorization: Operator <secret>`. It reads
//! every aggregate (and watches every one) whatever the policy says, and writes nothing; every
//! use is logged. The SHA-256 digests of the secret and of the offer are compared in constant
//! time (`subtle`), so the time of a refusal says nothing of how much of a guess was right, nor
//! of the secret's length (a plain slice comparison returns at once on a length mismatch).

use std::path::Path;

use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

/// The shortest operator secret accepted, in bytes.
pub const MIN_OPERATOR_BYTES: usize = 32;
/// The largest operator secret file read, in bytes.
const MAX_FILE_BYTES: u64 = 4_096;

/// The operator secret's SHA-256 digest.
pub struct OperatorToken([u8; 32]);

impl OperatorToken {
    /// Reads `path`: at least [`MIN_OPERATOR_BYTES`] of visible ASCII, trailing whitespace (a
    /// newline an editor added) dropped.
    pub fn load(path: &Path) -> Result<Self, String> {
        let shown = path.display();
        let size = std::fs::metadata(path)
            .map_err(|e| format!("--operator-token-file {shown}: {e}"))?
            .len();
        if size > MAX_FILE_BYTES {
            return Err(format!(
                "--operator-token-file {shown}: {size} bytes; at most {MAX_FILE_BYTES} are read"
            ));
        }
        let mut bytes =
            std::fs::read(path).map_err(|e| format!("--operator-token-file {shown}: {e}"))?;
        while bytes.last().is_some_and(u8::is_ascii_whitespace) {
            bytes.pop();
        }
        if bytes.len() < MIN_OPERATOR_BYTES || !bytes.iter().all(u8::is_ascii_graphic) {
            return Err(format!(
                "--operator-token-file {shown}: the secret must be at least \
                 {MIN_OPERATOR_BYTES} visible ASCII characters (no spaces)"
            ));
        }
        Ok(OperatorToken(Sha256::digest(&bytes).into()))
    }

    /// Whether `offered` is the secret: digests compared in constant time.
    pub fn matches(&self, offered: &str) -> bool {
        let offered: [u8; 32] = Sha256::digest(offered.as_bytes()).into();
        self.0.ct_eq(&offered).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_must_hold_a_long_enough_secret_and_only_it_matches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("op");
        std::fs::write(&path, "short\n").unwrap();
        let Err(refused) = OperatorToken::load(&path) else {
            panic!("a short secret was accepted")
        };
        assert!(refused.contains("at least"), "{refused}");
        let secret = "o".repeat(40);
        std::fs::write(&path, format!("{secret}\n")).unwrap();
        let Ok(token) = OperatorToken::load(&path) else {
            panic!("a good secret was refused")
        };
        assert!(token.matches(&secret));
        assert!(!token.matches(&"o".repeat(39)));
        assert!(!token.matches(""));
    }
}
