//! Mutation fuzzing of the decoders, deterministic and bounded: seeds from
//! `fixtures/decoders`, mutated by a fixed-seed generator. Every input must
//! decode or fail with an error, never panic, and whatever decodes must
//! survive an encode/decode round trip unchanged.
//!
//! (A libFuzzer target would need a `fuzz/` folder outside the project's
//! fixed layout; this runs in plain `cargo test` instead.)

use std::fs;
use std::path::Path;

use lease_elector::{Lease, MicroTime, Status};

const ROUNDS_PER_SEED: usize = 3000;

/// xorshift64*: tiny, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const TOKENS: &[&[u8]] = &[
    b"null",
    b"-1",
    b"2147483648",
    b"-2147483649",
    b"1e400",
    b"\"\"",
    b"{}",
    b"[]",
    b"true",
    b"\"2026-12-02T10:00:00Z\"",
    b"\"2026-02-30T10:00:00.000000Z\"",
    b"\"\\u0000\"",
    b"\"\xff\xfe\"",
    b"9999999999999999999999",
    b"\"spec\"",
    b"\"Lease\"",
    b"{\"a\":",
];

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(6) {
            0 => v.truncate(at),
            1 if at < v.len() => v[at] ^= 1 << rng.below(8),
            2 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                v.splice(at..at, t.iter().copied());
            }
            3 if at < v.len() => {
                let end = (at + rng.below(16)).min(v.len());
                v.drain(at..end);
            }
            4 => {
                // Replace a JSON value after a colon with a token.
                if let Some(colon) = v[at..].iter().position(|&b| b == b':') {
                    let start = at + colon + 1;
                    let end = v[start..]
                        .iter()
                        .position(|&b| b == b',' || b == b'}')
                        .map_or(v.len(), |p| start + p);
                    let t = TOKENS[rng.below(TOKENS.len())];
                    v.splice(start..end, t.iter().copied());
                }
            }
            _ if at < v.len() => {
                let b = v[at];
                v.insert(at, b);
            }
            _ => {}
        }
    }
    v
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/decoders");
    let mut out: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                fs::read(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    assert!(out.len() >= 4, "seed corpus missing from {}", dir.display());
    out
}

#[test]
fn lease_decoder_never_panics_and_round_trips() {
    let mut rng = Rng(0x5eed_1ea5e);
    let mut decoded = 0;
    for (name, seed) in seeds() {
        for _ in 0..ROUNDS_PER_SEED {
            let input = mutate(&mut rng, &seed);
            if let Ok(lease) = serde_json::from_slice::<Lease>(&input) {
                decoded += 1;
                let again: Lease = serde_json::from_slice(&serde_json::to_vec(&lease).unwrap())
                    .unwrap_or_else(|e| panic!("{name}: re-decode failed: {e}"));
                assert_eq!(again, lease, "{name}: round trip changed the object");
                // Reading the record must be total too.
                let _ = lease.record().lease_duration();
            }
        }
    }
    // The mutator must leave plenty of inputs decodable or it tests nothing.
    assert!(decoded > 1000, "only {decoded} mutated inputs decoded");
}

#[test]
fn status_decoder_never_panics() {
    let mut rng = Rng(0xdead_beef);
    for (_, seed) in seeds() {
        for _ in 0..ROUNDS_PER_SEED {
            let input = mutate(&mut rng, &seed);
            if let Ok(s) = serde_json::from_slice::<Status>(&input) {
                let again: Status =
                    serde_json::from_slice(&serde_json::to_vec(&s).unwrap()).unwrap();
                assert_eq!(again, s);
            }
        }
    }
}

#[test]
fn microtime_parser_never_panics_and_normalises() {
    let mut rng = Rng(42);
    let seed = b"2026-12-02T10:00:00.123456+05:30";
    let mut ok = 0;
    for _ in 0..50_000 {
        let input = mutate(&mut rng, seed);
        let Ok(s) = std::str::from_utf8(&input) else {
            continue;
        };
        if let Ok(t) = s.parse::<MicroTime>() {
            ok += 1;
            let written = t.to_string();
            assert_eq!(written.len(), 27, "{written}");
            assert_eq!(
                MicroTime::parse_strict(&written),
                Ok(t),
                "{s:?} -> {written}"
            );
        }
    }
    assert!(ok > 1000, "only {ok} mutated times parsed");
}
