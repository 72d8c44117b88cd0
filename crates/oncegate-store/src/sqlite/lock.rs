//! One server per store file: the exclusive locks taken beside the canonical path and on
//! the file's device and inode, so no second `oncegate serve` races this one's chain heads.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::StoreError;

/// Takes the exclusive locks that make this process the file's only server: a second
/// `oncegate serve` on the same file would keep its own chain heads and race this one.
/// One file, whatever the path that reaches it: the lock is taken beside the canonical
/// path (a symlink, `..` or a relative path resolve to it), and again on a lock named by
/// the file's device and inode in the system's temporary directory (a hard link).
pub(super) fn lock_single_writer(path: &Path) -> Result<Vec<std::fs::File>, StoreError> {
    let canonical = canonical(path);
    let mut name = canonical.file_name().unwrap_or_default().to_owned();
    name.push(".lock");
    Ok(vec![lock_file(
        &canonical.with_file_name(name),
        path,
        true,
    )?])
}

/// The lock named by the store file's device and inode (taken once the file exists: a
/// store created now has no other name yet).
pub(super) fn lock_inode(path: &Path, locks: &mut Vec<std::fs::File>) -> Result<(), StoreError> {
    if let Ok(meta) = std::fs::metadata(canonical(path)) {
        let dir = std::env::temp_dir().join("oncegate-locks");
        if std::fs::create_dir_all(&dir).is_ok() {
            use std::os::unix::fs::PermissionsExt;
            // Shared by every user's gateways on this host, as /tmp is.
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777));
            let by_inode = dir.join(format!("{}-{}.lock", meta.dev(), meta.ino()));
            match lock_file(&by_inode, path, false) {
                Ok(file) => locks.push(file),
                Err(e @ StoreError::Locked(_)) => return Err(e),
                Err(e) => {
                    tracing::warn!(lock = %by_inode.display(), error = %e, "the store's inode lock could not be taken; a second path to the same file by a hard link would not be refused")
                }
            }
        }
    }
    Ok(())
}

/// `path` with symlinks and `..` resolved (its directory's, for a file not created yet).
pub(super) fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        match (std::fs::canonicalize(dir), path.file_name()) {
            (Ok(dir), Some(name)) => dir.join(name),
            _ => path.to_owned(),
        }
    })
}

/// Locks `lock_path` exclusively for the store at `path`, writing this process's id into
/// it when `write_pid` (the lock beside the file; the inode lock may be another user's
/// file, opened read-only).
fn lock_file(lock_path: &Path, path: &Path, write_pid: bool) -> Result<std::fs::File, StoreError> {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o666)
        .open(lock_path)
        .or_else(|e| {
            if write_pid || e.kind() != std::io::ErrorKind::PermissionDenied {
                return Err(e);
            }
            std::fs::File::open(lock_path)
        });
    let mut file = opened.map_err(|e| {
        StoreError::Unavailable(format!(
            "cannot open the lock file {}: {e}",
            lock_path.display()
        ))
    })?;
    match file.try_lock() {
        Ok(()) => {
            if write_pid {
                let _ = file.set_len(0);
                let _ = file.write_all(std::process::id().to_string().as_bytes());
            }
            Ok(file)
        }
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.rewind();
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => String::new(),
                pid => format!(" (pid {pid})"),
            };
            Err(StoreError::Locked(format!(
                "another oncegate process{holder} already serves the SQLite store {}; the embedded store is single-process: to run several gateway replicas, point every replica at one PostgreSQL (`[store] url = \"postgres://...\"`, docs/guide/replicas.md)",
                path.display()
            )))
        }
        Err(std::fs::TryLockError::Error(e)) => Err(StoreError::Unavailable(format!(
            "cannot lock {}: {e}",
            lock_path.display()
        ))),
    }
}
