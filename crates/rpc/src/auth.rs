//! Challenge-response authentication on a cluster secret (HMAC-SHA256), mutual:
//!
//! 1. client -> server `Hello { nonce_c }`
//! 2. server -> client `Challenge { nonce_s, proof_s = HMAC(secret, "stripefs-server" | nonce_c | nonce_s) }`
//! 3. client checks `proof_s`, then -> server `Auth { proof_c = HMAC(secret, "stripefs-client" | nonce_s | nonce_c) }`
//! 4. server checks `proof_c` and answers `Done`, or `AuthFailed` and closes.
//!
//! The secret never crosses the wire; distinct labels stop a proof being reflected.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The cluster secret: 32 random bytes, kept as hex in cluster.toml (mode 0600).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; 32]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    pub fn generate() -> Secret {
        Secret(random_nonce())
    }

    pub fn from_hex(text: &str) -> Result<Secret, String> {
        let bytes =
            hex::decode(text.trim()).map_err(|e| format!("secret is not hexadecimal: {e}"))?;
        let arr: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
            format!("secret is {} bytes, needs 32 (64 hex digits)", b.len())
        })?;
        Ok(Secret(arr))
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// A key made elsewhere (a token's, see token.rs).
    pub fn from_bytes(b: [u8; 32]) -> Secret {
        Secret(b)
    }

    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    fn hmac(&self, label: &[u8], a: &[u8; 32], b: &[u8; 32]) -> Hmac<Sha256> {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes any key");
        m.update(label);
        m.update(a);
        m.update(b);
        m
    }

    fn mac(&self, label: &[u8], a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
        self.hmac(label, a, b).finalize().into_bytes().into()
    }

    pub fn server_proof(&self, nonce_c: &[u8; 32], nonce_s: &[u8; 32]) -> [u8; 32] {
        self.mac(b"stripefs-server", nonce_c, nonce_s)
    }

    pub fn client_proof(&self, nonce_s: &[u8; 32], nonce_c: &[u8; 32]) -> [u8; 32] {
        self.mac(b"stripefs-client", nonce_s, nonce_c)
    }
}

impl Secret {
    /// Whether `proof` is the server's proof for these nonces (the MAC crate's
    /// constant-time comparison).
    pub fn verify_server_proof(
        &self,
        nonce_c: &[u8; 32],
        nonce_s: &[u8; 32],
        proof: &[u8; 32],
    ) -> bool {
        self.hmac(b"stripefs-server", nonce_c, nonce_s)
            .verify_slice(proof)
            .is_ok()
    }

    /// Whether `proof` is the client's proof for these nonces (constant time).
    pub fn verify_client_proof(
        &self,
        nonce_s: &[u8; 32],
        nonce_c: &[u8; 32],
        proof: &[u8; 32],
    ) -> bool {
        self.hmac(b"stripefs-client", nonce_s, nonce_c)
            .verify_slice(proof)
            .is_ok()
    }
}

pub fn random_nonce() -> [u8; 32] {
    let mut n = [0u8; 32];
    getrandom::getrandom(&mut n).expect("the OS random source failed");
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_depend_on_secret_and_role() {
        let s = Secret::generate();
        let t = Secret::generate();
        let (a, b) = (random_nonce(), random_nonce());
        assert!(s.verify_client_proof(&a, &b, &s.client_proof(&a, &b)));
        assert!(s.verify_server_proof(&a, &b, &s.server_proof(&a, &b)));
        // Another secret, the other role, swapped nonces, one flipped bit: refused.
        assert!(!s.verify_client_proof(&a, &b, &t.client_proof(&a, &b)));
        assert!(!s.verify_client_proof(&a, &b, &s.server_proof(&a, &b)));
        assert!(!s.verify_server_proof(&a, &b, &s.client_proof(&a, &b)));
        assert!(!s.verify_client_proof(&b, &a, &s.client_proof(&a, &b)));
        let mut bent = s.client_proof(&a, &b);
        bent[31] ^= 1;
        assert!(!s.verify_client_proof(&a, &b, &bent));
        assert_eq!(Secret::from_hex(&s.to_hex()).unwrap(), s);
        assert!(Secret::from_hex("abcd").is_err());
        assert!(Secret::from_hex("zz").is_err());
    }
}
