//! The `file:` store as the shared suites see it: a directory of its own.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use crate::suites::{Held, StoreUnderTest};
use crate::support::TempDir;

/// The `file:` store in a directory of its own.
pub struct FileStore(pub TempDir);

impl FileStore {
    pub fn lock_file(&self, lock: &str) -> PathBuf {
        self.0.join(&format!("{}.lock", lock.replace('/', "%2F")))
    }

    /// Where [`StoreUnderTest::save_state`] keeps its copy.
    fn backup(&self) -> PathBuf {
        let mut name = self.0.0.clone().into_os_string();
        name.push(".backup");
        PathBuf::from(name)
    }
}

impl Drop for FileStore {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.backup());
    }
}

impl StoreUnderTest for FileStore {
    const NAME: &'static str = "file";
    const OUTSIDE_ENDS: &'static [&'static str] =
        &["remove the lock file", "replace the lock file"];
    const CONSECUTIVE_TOKENS: bool = true;

    fn start(scenario: &str) -> FileStore {
        FileStore(TempDir::new(&format!("file-{scenario}")))
    }

    fn url(&self) -> String {
        self.0.url()
    }

    /// The flock(2) locks on the lock file, held or waited for, from
    /// /proc/locks: elect and its guard share one.
    fn contenders(&self, lock: &str) -> usize {
        let Ok(meta) = std::fs::metadata(self.lock_file(lock)) else {
            return 0;
        };
        let (dev, ino) = (meta.dev(), meta.ino());
        let id = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
        std::fs::read_to_string("/proc/locks")
            .unwrap()
            .lines()
            .filter(|line| line.split_whitespace().any(|field| field == id))
            .count()
    }

    fn unrelated_write(&self) {
        std::fs::write(self.0.join("unrelated"), "x").unwrap();
        std::fs::remove_file(self.0.join("unrelated")).unwrap();
    }

    fn assert_empty(&self) {
        let names: Vec<_> = std::fs::read_dir(&self.0.0)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(names.is_empty(), "nothing was created: {names:?}");
    }

    /// The lock file.
    fn key_fits(&self, lock: &str, _lease: &str, key: &str) -> bool {
        key == self.lock_file(lock).display().to_string()
    }

    /// elect's pid.
    fn lease_id_fits(lease: &str, elect: i32) -> bool {
        lease == elect.to_string()
    }

    fn end_lease_from_outside(&self, lock: &str, _holder: &Held, how: &str) {
        let file = self.lock_file(lock);
        match how {
            "remove the lock file" => std::fs::remove_file(&file).unwrap(),
            "replace the lock file" => {
                let other = self.0.join(&format!("{lock}.other"));
                std::fs::write(&other, "").unwrap();
                std::fs::rename(&other, &file).unwrap();
            }
            _ => unreachable!("{how}"),
        }
    }

    /// At the next look at the lock file, which comes every second.
    fn notices_outside_end_within(_ttl: Duration) -> Duration {
        Duration::from_millis(1500)
    }

    fn restart(&mut self) {}

    /// A copy of the directory, as a backup (`cp -a`).
    const RESTORES: bool = true;

    fn save_state(&mut self) {
        let backup = self.backup();
        let _ = std::fs::remove_dir_all(&backup);
        let out = std::process::Command::new("cp")
            .arg("-a")
            .arg(&self.0.0)
            .arg(&backup)
            .output()
            .unwrap();
        assert!(out.status.success(), "cp: {out:?}");
    }

    /// Every file removed and the backup's copied in, as a restore into
    /// an emptied directory does: new files, the counters the backup's.
    fn restore_state(&mut self, _bump: bool) {
        for entry in std::fs::read_dir(&self.0.0).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
        let out = std::process::Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", self.backup().display()))
            .arg(&self.0.0)
            .output()
            .unwrap();
        assert!(out.status.success(), "cp: {out:?}");
    }

    /// The holder looks at its lock file once a second.
    fn restore_noticed_within(_ttl: Duration) -> Duration {
        Duration::from_millis(1500)
    }

    const HAS_LINK: bool = false;
    const HAS_SERVER: bool = false;
    /// flock(2): held while a descriptor is open, no clock at all.
    const JUDGES_BY_ITS_CLOCK: bool = false;
    const REPLICAS: usize = 1;

    /// The old holder's elect looks at its lock file every second.
    fn forced_break_overlap(_ttl: Duration) -> Duration {
        Duration::from_millis(1100)
    }

    /// A directory: nothing to connect to, nothing to go unanswered.
    const HAS_ENDPOINT: bool = false;
    const SPEAKS: &'static str = "";

    fn url_at(host_port: &str) -> String {
        unreachable!("the file store has no address: {host_port}")
    }

    /// The lock file's descriptor, which the command inherits.
    fn held_by_the_commands_descriptors() -> bool {
        true
    }
}
