//! Scoped tokens: what a collaborator gets instead of the cluster secret.
//!
//! A token names a path prefix (the subtree it may touch), whether it is read-only, when
//! it expires, and the user and group its requests act as; it is signed with the
//! cluster secret, so any server can check it and nobody without the secret can make or
//! widen one. Its text form is `sft1.<payload hex>.<mac hex>` with
//! `mac = HMAC-SHA256(secret, "stripefs-token" | payload)`.
//!
//! The client authenticates with `TokenHello { nonce, token: payload }` instead of
//! `Hello`: the server recomputes the mac from the payload and uses it, in place of the
//! secret, as the key of the usual challenge-response (auth.rs). So the client proves it
//! holds the whole token (the mac never crosses the wire), and the server proves it
//! knows the secret. Revocation is by id, remembered by the metadata server.

use crate::auth::Secret;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::time::{SystemTime, UNIX_EPOCH};

/// Magic and version of the payload.
const MAGIC: &[u8; 4] = b"SFT1";
/// Prefix of the text form.
const PREFIX: &str = "sft1";
/// Longest path a token names.
pub const MAX_TOKEN_PATH: usize = 1024;
// The whole TokenHello must fit MAX_HANDSHAKE_BODY_BYTES.
const _: () = assert!(MAX_PAYLOAD + 200 < crate::limits::MAX_HANDSHAKE_BODY_BYTES as usize);
/// Longest payload a server reads before authentication.
pub const MAX_PAYLOAD: usize = 4 + 8 + 8 + 1 + 4 + 4 + MAX_TOKEN_PATH;

/// What a token allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// Chosen at random when made; `token revoke ID` names it.
    pub id: u64,
    /// The subtree: an absolute, normalised path ("/" for everything).
    pub path: String,
    pub read_only: bool,
    /// Seconds since the Unix epoch after which it is refused.
    pub expires_s: u64,
    /// The user and group every request made with it acts as.
    pub uid: u32,
    pub gid: u32,
}

/// Seconds since the Unix epoch now.
pub fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `path` normalised: absolute, no empty, `.` or `..` components, no trailing slash.
pub fn normalise(path: &str) -> Result<String, String> {
    if !path.starts_with('/') {
        return Err(format!("token path {path:?} is not absolute"));
    }
    let mut parts = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err(format!("token path {path:?} has a '..' component")),
            c => parts.push(c),
        }
    }
    let p = format!("/{}", parts.join("/"));
    if p.len() > MAX_TOKEN_PATH {
        return Err(format!("token path is longer than {MAX_TOKEN_PATH} bytes"));
    }
    Ok(p)
}

impl Token {
    /// Whether the absolute normalised path `p` lies in the token's subtree.
    pub fn covers(&self, p: &str) -> bool {
        self.path == "/"
            || p == self.path
            || (p.starts_with(&self.path) && p.as_bytes().get(self.path.len()) == Some(&b'/'))
    }

    pub fn expired(&self, now_s: u64) -> bool {
        now_s >= self.expires_s
    }

    /// The bytes that are signed and sent in `TokenHello`.
    pub fn payload(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(29 + self.path.len());
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&self.id.to_le_bytes());
        b.extend_from_slice(&self.expires_s.to_le_bytes());
        b.push(u8::from(self.read_only));
        b.extend_from_slice(&self.uid.to_le_bytes());
        b.extend_from_slice(&self.gid.to_le_bytes());
        b.extend_from_slice(self.path.as_bytes());
        b
    }

    /// Reads a payload (not yet trusted: check it with [`key`] and a proof).
    pub fn from_payload(b: &[u8]) -> Result<Token, String> {
        if b.len() < 29 || b.len() > MAX_PAYLOAD || &b[..4] != MAGIC {
            return Err("not a stripefs token (or a token of another version)".into());
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let flags = b[20];
        if flags > 1 {
            return Err(format!("token flags {flags} are unknown"));
        }
        let path = std::str::from_utf8(&b[29..])
            .map_err(|_| "token path is not UTF-8".to_string())?
            .to_string();
        if normalise(&path)? != path {
            return Err(format!("token path {path:?} is not normalised"));
        }
        Ok(Token {
            id: u64_at(4),
            expires_s: u64_at(12),
            read_only: flags == 1,
            uid: u32_at(21),
            gid: u32_at(25),
            path,
        })
    }

    /// The text form, signed with the cluster secret.
    pub fn sign(&self, secret: &Secret) -> String {
        let payload = self.payload();
        format!(
            "{PREFIX}.{}.{}",
            hex::encode(&payload),
            hex::encode(key(secret, &payload).bytes())
        )
    }

    /// Reads a token's text form: the token and the key it authenticates with. Whether
    /// it was signed with the cluster's secret only the servers can tell.
    pub fn parse(text: &str) -> Result<(Token, Secret), String> {
        let bad = || "not a stripefs token: expected sft1.HEX.HEX".to_string();
        let mut parts = text.trim().split('.');
        let (Some(PREFIX), Some(p), Some(m), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let payload = hex::decode(p).map_err(|_| bad())?;
        let mac: [u8; 32] = hex::decode(m)
            .ok()
            .and_then(|m| m.try_into().ok())
            .ok_or_else(bad)?;
        Ok((Token::from_payload(&payload)?, Secret::from_bytes(mac)))
    }
}

/// What a client authenticates with instead of the secret: a token read from its text.
#[derive(Clone, Debug)]
pub struct TokenCred {
    pub token: Token,
    pub payload: Vec<u8>,
    pub key: Secret,
}

impl TokenCred {
    pub fn parse(text: &str) -> Result<TokenCred, String> {
        let (token, key) = Token::parse(text)?;
        Ok(TokenCred {
            payload: token.payload(),
            token,
            key,
        })
    }
}

/// The key of a token's challenge-response: its mac under the cluster secret.
pub fn key(secret: &Secret, payload: &[u8]) -> Secret {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret.bytes()).expect("HMAC takes any key");
    m.update(b"stripefs-token");
    m.update(payload);
    Secret::from_bytes(m.finalize().into_bytes().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Token {
        Token {
            id: 0x1234_5678_9abc_def0,
            path: "/shared/proj".into(),
            read_only: true,
            expires_s: 2_000_000_000,
            uid: 1000,
            gid: 100,
        }
    }

    #[test]
    fn a_signed_token_reads_back_with_the_key_only_the_secret_gives() {
        let s = Secret::generate();
        let t = sample();
        let text = t.sign(&s);
        assert!(text.starts_with("sft1."));
        let (back, k) = Token::parse(&text).unwrap();
        assert_eq!(back, t);
        assert_eq!(k, key(&s, &t.payload()));
        assert_ne!(k, key(&Secret::generate(), &t.payload()));
        // A widened token (other path, writable, later expiry) has another key.
        let mut wide = t.clone();
        wide.read_only = false;
        assert_ne!(key(&s, &wide.payload()), k);
    }

    #[test]
    fn bad_tokens_and_paths_are_refused() {
        for bad in ["", "sft1", "sft1.zz.00", "sft2.00.00", "sft1.00.00.00"] {
            assert!(Token::parse(bad).is_err(), "{bad:?}");
        }
        let mut p = sample().payload();
        p[20] = 7;
        assert!(Token::from_payload(&p).is_err());
        assert!(Token::from_payload(&p[..10]).is_err());
        assert_eq!(normalise("/a//b/./c/").unwrap(), "/a/b/c");
        assert_eq!(normalise("/").unwrap(), "/");
        assert!(normalise("a/b").is_err());
        assert!(normalise("/a/../b").is_err());
    }

    #[test]
    fn the_subtree_is_a_path_prefix_by_components() {
        let t = sample();
        assert!(t.covers("/shared/proj"));
        assert!(t.covers("/shared/proj/x/y"));
        assert!(!t.covers("/shared/project"));
        assert!(!t.covers("/shared"));
        assert!(!t.covers("/"));
        let all = Token {
            path: "/".into(),
            ..sample()
        };
        assert!(all.covers("/anything"));
        assert!(sample().expired(2_000_000_000) && !sample().expired(1_999_999_999));
    }
}
