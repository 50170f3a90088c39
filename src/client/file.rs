//! Every file the crate reads (kubeconfigs, tokens, CA bundles, client
//! certificates and keys, the service-account namespace, OpenShift config
//! files) goes through one door: [`read_capped`].
//!
//! A path that names a FIFO would block a plain `open` until some writer
//! came (while the token mutex is held, every request of the client
//! waits); `/dev/zero` or a runaway file would grow a buffer without bound.
//! So the file is checked to be a regular file, opened without blocking,
//! checked again on the open handle (the path may have changed in
//! between), and read through a cap. client-go has no such limits; the
//! caps are far above what the files hold in practice.

use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::path::Path;

use crate::error::{Error, Result};

/// kubeconfigs: a few KiB each in practice; 8 MiB holds ~3,000 clusters
/// with inline CA data.
pub(crate) const MAX_KUBECONFIG: u64 = 8 << 20;

/// CA bundles, client certificates and keys: a system CA bundle is ~250 KiB.
pub(crate) const MAX_PEM: u64 = 1 << 20;

/// Bearer tokens: a service-account JWT is ~1 KiB, OIDC tokens a few KiB;
/// the API server refuses request heads past 1 MiB anyway.
pub(crate) const MAX_TOKEN: u64 = 64 << 10;

/// The service-account namespace file: a DNS label, 63 bytes at most.
pub(crate) const MAX_NAMESPACE: u64 = 4 << 10;

/// Configuration files (OpenShift's LeaderElection stanza).
pub(crate) const MAX_CONFIG: u64 = 1 << 20;

/// `O_NONBLOCK` as Linux defines it on x86, ARM, RISC-V, PowerPC and s390
/// (MIPS and SPARC differ): opening a FIFO for reading returns at
/// once instead of waiting for a writer. It changes nothing for the
/// regular files read afterwards. A constant rather than a `libc` call,
/// since the library takes no unsafe code and no new dependency.
#[cfg(unix)]
const O_NONBLOCK: i32 = if cfg!(any(target_arch = "mips", target_arch = "mips64")) {
    0o200
} else if cfg!(any(target_arch = "sparc", target_arch = "sparc64")) {
    0x4000
} else {
    0o4000
};

/// The whole of the regular file at `path`, at most `cap` bytes; `what`
/// names what it is for (`"kubeconfig"`, `"bearer token"`, ...) in the
/// error, which also says why: missing, not a regular file (and what it
/// is), or larger than `cap`.
pub(crate) fn read_capped(what: &'static str, path: &Path, cap: u64) -> Result<Vec<u8>> {
    let fail = |source: io::Error| Error::ReadFile {
        what,
        path: path.to_path_buf(),
        source,
    };
    // Follows symlinks: a mounted service-account token is one (`token ->
    // ..data/token`).
    let meta = std::fs::metadata(path).map_err(fail)?;
    check(&meta, cap).map_err(fail)?;
    let file = open(path).map_err(fail)?;
    // The path may have been swapped since the check: what counts is
    // what was opened.
    check(&file.metadata().map_err(fail)?, cap).map_err(fail)?;
    let mut data = Vec::with_capacity(usize::try_from(meta.len().min(cap)).unwrap_or(0));
    file.take(cap + 1).read_to_end(&mut data).map_err(fail)?;
    if data.len() as u64 > cap {
        return Err(fail(too_large(cap)));
    }
    Ok(data)
}

/// [`read_capped`] for text: invalid UTF-8 is replaced, as the token and
/// namespace readers have always done.
pub(crate) fn read_text(what: &'static str, path: &Path, cap: u64) -> Result<String> {
    Ok(String::from_utf8_lossy(&read_capped(what, path, cap)?).into_owned())
}

#[cfg(unix)]
fn open(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(path)
}

#[cfg(not(unix))]
fn open(path: &Path) -> io::Result<File> {
    File::open(path)
}

fn check(meta: &Metadata, cap: u64) -> io::Result<()> {
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file but {}", kind_of(meta)),
        ));
    }
    if meta.len() > cap {
        return Err(too_large(cap));
    }
    Ok(())
}

/// Every cap is a whole number of KiB.
fn too_large(cap: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("larger than {} KiB", cap >> 10),
    )
}

fn kind_of(meta: &Metadata) -> &'static str {
    let ft = meta.file_type();
    if ft.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO";
        }
        if ft.is_char_device() {
            return "a character device";
        }
        if ft.is_block_device() {
            return "a block device";
        }
        if ft.is_socket() {
            return "a socket";
        }
    }
    "a special file"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dir::TempDir;

    fn err(path: &Path, cap: u64) -> String {
        read_capped("bearer token", path, cap)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn regular_files_are_read_whole_up_to_the_cap() {
        let dir = TempDir::new();
        let p = dir.write("t", vec![b'x'; 2048]);
        assert_eq!(read_capped("bearer token", &p, 2048).unwrap().len(), 2048);
        let e = err(&p, 1024);
        assert!(
            e.contains("bearer token") && e.contains("larger than 1 KiB"),
            "{e}"
        );
        assert!(e.contains(&p.display().to_string()), "{e}");
    }

    #[test]
    fn what_is_not_a_regular_file_is_named() {
        let dir = TempDir::new();
        let e = err(&dir.0, 1 << 20);
        assert!(e.contains("not a regular file but a directory"), "{e}");
        let e = err(Path::new("/dev/zero"), 1 << 20);
        assert!(
            e.contains("not a regular file but a character device"),
            "{e}"
        );
        let e = err(&dir.0.join("absent"), 1 << 20);
        assert!(e.contains("No such file"), "{e}");
    }
}
