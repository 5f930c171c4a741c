//! The data directory and the store file are private to the gateway's user.
//!
//! The store holds every event's payload and every writer's client id; the data directory also
//! holds the session secret. So the directory is created with mode 0700 and the store file with
//! mode 0600, whatever the umask. A directory or store file found looser than that (created by an
//! older gateway, which left them 0755 / 0644, or by hand) is tightened at start, with a warning
//! saying what was changed: nobody else on the machine has a reason to read them, and a backup
//! tool that needs to runs as the gateway's user (or as root).

use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

/// The data directory's mode.
pub const DIR_MODE: u32 = 0o700;
/// The store file's mode.
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` (and missing parents) with mode 0700, or tightens it to 0700.
pub fn private_dir(dir: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    tighten(dir, DIR_MODE)
}

/// Creates `path` empty with mode 0600 when it does not exist (redb initialises an empty file),
/// or tightens it to 0600.
pub fn private_file(path: &Path) -> Result<(), String> {
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => tighten(path, FILE_MODE),
        Err(e) => Err(format!("cannot create {}: {e}", path.display())),
    }
}

fn tighten(path: &Path, mode: u32) -> Result<(), String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let old = meta.permissions().mode() & 0o777;
    if old & !mode == 0 {
        return Ok(());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| {
        format!(
            "cannot make {} private (chmod {mode:o}): {e}",
            path.display()
        )
    })?;
    tracing::warn!(
        path = ?path.display().to_string(),
        from = format!("{old:o}"),
        to = format!("{mode:o}"),
        "the store was readable by other users: tightened"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn new_ones_are_private_and_loose_ones_are_tightened() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        private_dir(&dir).unwrap();
        assert_eq!((mode(&root.path().join("a")), mode(&dir)), (0o700, 0o700));
        let file = dir.join("store");
        private_file(&file).unwrap();
        assert_eq!(mode(&file), 0o600);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(&file, b"kept").unwrap();
        private_dir(&dir).unwrap();
        private_file(&file).unwrap();
        assert_eq!((mode(&dir), mode(&file)), (0o700, 0o600));
        assert_eq!(std::fs::read(&file).unwrap(), b"kept", "never truncated");
        // Already tighter than required: left alone.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400)).unwrap();
        private_file(&file).unwrap();
        assert_eq!(mode(&file), 0o400);
    }
}
