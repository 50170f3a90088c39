//! A scratch folder for the crate's unit tests, removed on drop.

use std::path::PathBuf;

pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new() -> Self {
        let p =
            std::env::temp_dir().join(format!("lease-elector-unit-{}", crate::random::uuid_v4()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// Write `name` (parent folders created) and return its path.
    pub(crate) fn write(&self, name: &str, data: impl AsRef<[u8]>) -> PathBuf {
        let p = self.0.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, data).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
