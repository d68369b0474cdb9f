//! The test kit: what every stripefs crate's tests share, written once.
//!
//! - [`seed`]: the seed of a randomised test, from `STRIPEFS_SEED` (to replay a failure)
//!   or fresh, always printed; a bad `STRIPEFS_SEED` stops the test instead of being
//!   replaced by a random seed unseen.
//! - [`pattern`]: deterministic test bytes that differ from byte to byte and block to
//!   block, so that misplaced or stale data shows.
//! - [`skip`]: a test whose environment is missing (FUSE, network namespaces, root, MPI)
//!   skips with a message, except under `STRIPEFS_REQUIRE_ENV=1` (which `.ci/run` sets),
//!   where it fails: CI's machine has every environment, and `.ci/run` counts the lines
//!   this prints.
//!
//! - [`cluster`] (feature `cluster`): an in-process cluster of the real services, for the
//!   tests of the client and the layers above it. The process clusters (the `stripefs`
//!   binary started as servers, and its mounts) are in crates/cli/tests/common: they need
//!   the binary Cargo builds for that crate's tests only.

#[cfg(feature = "cluster")]
pub mod cluster;

/// The variable that replays a randomised test.
pub const SEED_VAR: &str = "STRIPEFS_SEED";
/// The variable under which a missing environment fails a test instead of skipping it.
pub const REQUIRE_ENV_VAR: &str = "STRIPEFS_REQUIRE_ENV";

/// The seed of randomised test `test`: `STRIPEFS_SEED` if set, else random; printed
/// with the command that replays it. Panics, naming the variable, if it is set but not
/// a u64.
pub fn seed(test: &str) -> u64 {
    let s = seed_from(std::env::var(SEED_VAR).ok().as_deref()).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{test}: seed {s} (replay with {SEED_VAR}={s})");
    s
}

/// The seed `value` of `STRIPEFS_SEED` names (`None`: unset, a random one).
pub fn seed_from(value: Option<&str>) -> Result<u64, String> {
    match value {
        None => Ok(rand::random()),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| format!("{SEED_VAR}={v:?} is not a seed (a number 0 to 2^64-1)")),
    }
}

/// `len` deterministic bytes of stream `seed` (xorshift64): they differ from byte to
/// byte, so an offset error shows, and streams of different seeds differ everywhere.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A test, or part of one, that cannot run here (`why`): skipped with a message, except
/// where its environment is required (`STRIPEFS_REQUIRE_ENV=1`, which `.ci/run` sets):
/// there a missing environment fails the test instead of passing it unseen.
pub fn skip(why: &str) {
    if std::env::var(REQUIRE_ENV_VAR).is_ok_and(|v| v == "1") {
        panic!("this test's environment is missing ({why}); {REQUIRE_ENV_VAR}=1 requires it");
    }
    eprintln!("skipping: {why}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_seed_is_refused_by_name_and_a_good_one_kept() {
        assert_eq!(seed_from(Some("42")), Ok(42));
        assert_eq!(seed_from(Some(" 7\n")), Ok(7));
        let e = seed_from(Some("0x10")).unwrap_err();
        assert!(e.contains("STRIPEFS_SEED") && e.contains("0x10"), "{e}");
        assert!(seed_from(Some("-1")).is_err());
    }

    #[test]
    fn patterns_differ_by_offset_and_by_seed() {
        let a = pattern(1, 1 << 16);
        assert_eq!(a, pattern(1, 1 << 16));
        // No 4 KiB block repeats another, and another seed differs in most bytes.
        let blocks: std::collections::HashSet<&[u8]> = a.chunks(4096).collect();
        assert_eq!(blocks.len(), 16);
        let b = pattern(2, 1 << 16);
        let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
        assert!(same < a.len() / 64, "{same} equal bytes");
    }
}
