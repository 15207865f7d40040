//! Temporary directories: a test's files, and the `file:` store.

use std::path::PathBuf;

/// A private directory (mode 0700) removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `elect-test-NAME-PID` in the system's temp dir, made afresh. `name`
    /// must be unique among the tests of one test binary.
    pub fn new(name: &str) -> TempDir {
        use std::os::unix::fs::DirBuilderExt;
        let path = std::env::temp_dir().join(format!("elect-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .unwrap();
        TempDir(path)
    }

    /// The store URL for this directory.
    pub fn url(&self) -> String {
        format!("file:{}", self.0.display())
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
