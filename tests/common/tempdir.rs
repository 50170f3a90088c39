//! A scratch folder for files a test hands to the crate, removed on drop.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

pub struct TempDir(pub PathBuf);

/// A name no other test (of this or another process) is using.
pub fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

impl TempDir {
    pub fn new() -> Self {
        let p = std::env::temp_dir().join(format!("lease-elector-test-{}", unique()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// Write `name` (parent folders created) and return its path.
    pub fn write(&self, name: &str, data: impl AsRef<[u8]>) -> PathBuf {
        let p = self.0.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, data).unwrap();
        p
    }

    /// The text of `name`, empty when it does not exist.
    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.0.join(name)).unwrap_or_default()
    }

    /// An executable shell script.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        let p = self.write(name, format!("#!/bin/sh\n{body}\n"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
