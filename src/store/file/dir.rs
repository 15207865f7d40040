//! The store's directory and the file operations in it: which files a
//! lock has, how they are opened (never through a symlink), replaced (a new
//! file and a rename) and made durable, and whether the directory is safe
//! to lock in at all.
//!
//! Every other part of the file store goes through [`Dir`], so that one
//! place decides the modes, the flags and the order of syncs.

use std::fs::File;
use std::io::{ErrorKind as IoKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::store::{NameError, StoreError};

/// The store directory and the file operations in it.
#[derive(Clone)]
pub(super) struct Dir(pub(super) PathBuf);

/// Longest file name most filesystems allow.
const NAME_MAX: usize = 255;
/// The longest suffix elect adds to a lock's file name.
const LONGEST_SUFFIX: &str = ".holder.tmp";

/// The file-name stem for a lock name. Lock names are checked to contain
/// only `[A-Za-z0-9._/-]` and no `.`/`..` segments, so this cannot escape.
pub fn stem(lock: &str) -> String {
    lock.replace('/', "%2F")
}

/// Store-specific limits on lock names.
pub fn check_name(lock: &str) -> Result<(), NameError> {
    let len = stem(lock).len() + LONGEST_SUFFIX.len();
    if len > NAME_MAX {
        return Err(NameError::TooLongFor {
            name: lock.into(),
            store: "a file store",
            what: "file names",
            len,
            max: NAME_MAX,
        });
    }
    Ok(())
}

/// Filesystems whose locks are leases without fencing, by statfs magic.
fn network_filesystem(magic: i64) -> Option<&'static str> {
    Some(match magic {
        0x6969 => "NFS",
        0x517B => "SMB",
        0xFF53_4D42 => "CIFS",
        0xFE53_4D42 => "SMB2",
        0x00C3_6400 => "CephFS",
        0x6573_5546 => "FUSE (sshfs, s3fs and the like)",
        0x5346_414F => "AFS",
        0x0102_1997 => "9P",
        0x0116_1970 => "GFS2",
        0x7461_636F => "OCFS2",
        0x0BD0_0BD0 => "Lustre",
        0x4750_4653 => "GPFS",
        0x564C => "NCP",
        _ => return None,
    })
}

impl Dir {
    /// Create the directory (0700) if it is missing, and check it.
    pub(super) fn create(&self, network_fs_ok: bool) -> Result<(), StoreError> {
        let dir = &self.0;
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| {
                    StoreError::config(format!(
                        "cannot create the store directory {}: {e}",
                        dir.display()
                    ))
                })?;
        }
        self.check(network_fs_ok)
    }

    /// Is the directory safe to lock in?
    pub(super) fn check(&self, network_fs_ok: bool) -> Result<(), StoreError> {
        let dir = &self.0;
        let shown = dir.display();
        let meta = std::fs::metadata(dir)
            .map_err(|e| StoreError::config(format!("store directory {shown}: {e}")))?;
        if !meta.is_dir() {
            return Err(StoreError::config(format!(
                "store path {shown} is not a directory"
            )));
        }
        if meta.permissions().mode() & 0o002 != 0 {
            return Err(StoreError::config(format!(
                "store directory {shown} is writable by everyone, so anyone could take or fake a lock; \
                 use a directory of your own (mode 0700, or 0770 for a group)"
            )));
        }
        let fs = nix::sys::statfs::statfs(dir)
            .map_err(|e| StoreError::config(format!("store directory {shown}: {e}")))?;
        if let Some(kind) = network_filesystem(fs.filesystem_type().0 as i64)
            && !network_fs_ok
        {
            return Err(StoreError::config(format!(
                "store directory {shown} is on {kind}, where file locks are leases without fencing; \
                 use a local directory, or etcd, or add ?network-fs=ok to the URL if you accept that"
            )));
        }
        Ok(())
    }

    pub(super) fn path(&self, stem: &str, suffix: &str) -> PathBuf {
        self.0.join(format!("{stem}{suffix}"))
    }

    /// Mode for new files: what the directory grants its owner and group,
    /// never more, never to others.
    fn file_mode(&self) -> u32 {
        let dir_mode = std::fs::metadata(&self.0).map_or(0o700, |m| m.permissions().mode());
        (dir_mode & 0o660) | 0o600
    }

    /// A file that must not exist yet (no symlink can stand in for it).
    pub(super) fn create_new(&self, path: &Path) -> std::io::Result<File> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(self.file_mode())
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    }

    pub(super) fn open_lock(&self, path: &Path) -> std::io::Result<File> {
        let open = |write: bool| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(write)
                .create(write)
                .mode(self.file_mode())
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path)
        };
        // flock works on a read-only descriptor: enough for a lock file that
        // another user of a group-shared directory created.
        open(true).or_else(|e| {
            if e.kind() == IoKind::PermissionDenied {
                open(false)
            } else {
                Err(e)
            }
        })
    }

    /// Write `content` to `stem+suffix` by a new file and a rename.
    pub(super) fn replace(
        &self,
        stem: &str,
        suffix: &str,
        content: &[u8],
        durable: bool,
    ) -> std::io::Result<()> {
        let target = self.path(stem, suffix);
        let tmp = self.path(stem, &format!("{suffix}.tmp"));
        match std::fs::remove_file(&tmp) {
            Err(e) if e.kind() != IoKind::NotFound => return Err(e),
            _ => {}
        }
        let mut file = self.create_new(&tmp)?;
        let written = (|| {
            file.write_all(content)?;
            if durable {
                file.sync_all()?;
            }
            std::fs::rename(&tmp, &target)
        })();
        if let Err(e) = written {
            // A full disk, say: nothing half-written is left behind.
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        if durable {
            File::open(&self.0)?.sync_all()?;
        }
        Ok(())
    }
}

/// Open for reading, never through a symlink planted in the directory.
pub(super) fn open_nofollow(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

pub(super) fn read_nofollow(path: &Path) -> std::io::Result<String> {
    let mut text = String::new();
    open_nofollow(path)?.read_to_string(&mut text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_names_map_to_file_names_that_stay_in_the_directory() {
        assert_eq!(stem("nightly"), "nightly");
        assert_eq!(stem("jobs/nightly"), "jobs%2Fnightly");
        assert_eq!(stem("/locks/x"), "%2Flocks%2Fx");
        assert!(!stem("a/b/c").contains('/'));
        assert!(check_name(&"x".repeat(200)).is_ok());
        assert!(check_name("x/".repeat(90).trim_end_matches('/')).is_err());
    }

    #[test]
    fn network_filesystems_are_recognised() {
        assert_eq!(network_filesystem(0x6969), Some("NFS"));
        assert!(network_filesystem(0xFF53_4D42).is_some());
        assert!(network_filesystem(0xEF53).is_none(), "ext4 is local");
        assert!(network_filesystem(0x0102_1994).is_none(), "tmpfs is local");
        assert!(network_filesystem(0x5846_5342).is_none(), "xfs is local");
    }
}
