//! What seals a handle a client holds and must not forge (a `requestState`,
//! a replica-bound id): HMAC-SHA256, keys from the kernel's random source,
//! and a comparison whose time does not tell how much of a guess matched.

use sha2::{Digest, Sha256};

/// HMAC-SHA256 (RFC 2104) of the concatenated `parts`.
pub(crate) fn hmac(key: &[u8; 32], parts: &[&[u8]]) -> [u8; 32] {
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(key);
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let mut inner = Sha256::new();
    inner.update(pad(0x36));
    for part in parts {
        inner.update(part);
    }
    let inner: [u8; 32] = inner.finalize().into();
    let mut outer = Sha256::new();
    outer.update(pad(0x5c));
    outer.update(inner);
    outer.finalize().into()
}

/// Bytes from the kernel's random source. If it cannot be read, a hash of
/// the time and process stands in: handles then are still checked, just
/// with a guessable key, which is logged.
pub(crate) fn random<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    let read = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut out));
    if let Err(e) = read {
        tracing::error!("cannot read /dev/urandom ({e}); the keys of requestState and of replicas' ids are weak");
        let seed = format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
        let digest: [u8; 32] = Sha256::digest(seed.as_bytes()).into();
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = digest[i % 32];
        }
    }
    out
}

/// Whether two MACs are equal, in constant time.
pub(crate) fn same_mac(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_is_python_s_hmac_sha256() {
        // hmac.new(bytes(range(32)), b"what do ya want for nothing?", "sha256")
        let key: [u8; 32] = std::array::from_fn(|i| i as u8);
        let mac = hmac(&key, &[b"what do ya want ", b"for nothing?"]);
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, PYTHON_HMAC);
    }

    const PYTHON_HMAC: &str = "099805f4ac310786968565c098db515cc50862b420ae31e20238312344bed36a";

    #[test]
    fn macs_compare_whole() {
        assert!(same_mac(b"abcd", b"abcd"));
        assert!(!same_mac(b"abcd", b"abce"));
        assert!(!same_mac(b"abc", b"abcd"));
    }
}
