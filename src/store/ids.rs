//! Random ids, made one way for every store: the kernel's randomness, else
//! (none to be had) the time and the pid, unique enough for one host's
//! tenures.

/// `N` random bytes.
pub fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    if getrandom::fill(&mut bytes).is_err() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
            .to_le_bytes();
        let pid = std::process::id().to_le_bytes();
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = now[i % now.len()] ^ pid[i % pid.len()].rotate_left(i as u32);
        }
    }
    bytes
}

/// `bytes` in lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A new session id: 128 random bits, in hex.
pub fn tenure() -> String {
    hex(&random::<16>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_hex_of_their_length_and_differ() {
        let (a, b) = (tenure(), tenure());
        assert_eq!(a.len(), 32);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(a, b);
        assert_eq!(hex(&[0, 0xab]), "00ab");
    }
}
