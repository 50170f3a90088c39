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

/// A seed for [`SplitMix64`] from the operating system.
pub(crate) fn seed() -> u64 {
    u64::from_le_bytes(bytes()[..8].try_into().unwrap_or_default())
}

/// Steele, Lea and Flood's SplitMix64: a small, fast, seedable sequence,
/// for the elector's jitter (seeded from the OS when it ships, from the
/// schedule's seed in the simulation) and the simulation's draws. Not for
/// secrets.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
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

    #[test]
    fn a_seed_gives_the_same_sequence() {
        let (mut a, mut b) = (SplitMix64::new(7), SplitMix64::new(7));
        let first: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        assert_eq!(first, (0..4).map(|_| b.next_u64()).collect::<Vec<_>>());
        assert_ne!(first[0], SplitMix64::new(8).next_u64());
        assert!((0..1000).all(|_| (0.0..1.0).contains(&a.unit())));
    }
}
