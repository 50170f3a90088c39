//! Random values from the operating system, through ring (linked for TLS
//! anyway): version-4 UUIDs for identities, Event names and the test
//! server's `uid`s. uuid's own `v4` feature would add a second `getrandom`
//! to the dependency tree.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// A random (version 4) UUID.
pub(crate) fn uuid_v4() -> uuid::Uuid {
    uuid::Builder::from_random_bytes(bytes()).into_uuid()
}

fn bytes() -> [u8; 16] {
    use ring::rand::SecureRandom as _;
    let mut b = [0u8; 16];
    if ring::rand::SystemRandom::new().fill(&mut b).is_ok() {
        return b;
    }
    // No getrandom(2) and no /dev/urandom: std's per-process random hash
    // keys (seeded from the OS too, where it can), never a panic.
    for (i, half) in b.chunks_mut(8).enumerate() {
        let mut h = RandomState::new().build_hasher();
        h.write_usize(i);
        h.write_u32(std::process::id());
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_version_4_and_differ() {
        let (a, b) = (uuid_v4(), uuid_v4());
        assert_ne!(a, b);
        assert_eq!(a.get_version_num(), 4);
        assert_eq!(a.get_variant(), uuid::Variant::RFC4122);
    }
}
