//! Host ids: which machine a server or client runs on (issue 14).
//!
//! A host id names a machine (or an emulated one: `cluster up --hosts K` makes
//! `host0..hostK-1` on one machine). Servers and clients take theirs from their config
//! (`host`), else from the machine's hostname. Clients announce theirs to every server
//! they connect to (`ClientHost`, protocol version 4), which lets data servers tell
//! same-host from cross-host bytes (`--host-net`) and the metadata server place a file on
//! the creating client's host (the local policy).

/// The environment variable that sets a client's host id (`--host` overrides it).
pub const HOST_ENV: &str = "STRIPEFS_HOST";

/// The machine's hostname as a host id: the part before the first dot, with characters a
/// host id does not allow replaced by `-`; `localhost` if it cannot be read.
pub fn hostname() -> String {
    let uname = rustix::system::uname();
    let name: String = uname
        .nodename()
        .to_string_lossy()
        .split('.')
        .next()
        .unwrap_or("")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.is_empty() {
        "localhost".into()
    } else {
        name
    }
}

/// Checks a host id from a config file or a flag; the message names `what`.
pub fn check_host(host: &str, what: &str) -> Result<(), String> {
    stripefs_wire::validate_host(host).map_err(|e| format!("{what}: {}", e.message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostname_is_a_valid_host_id() {
        check_host(&hostname(), "hostname").unwrap();
    }

    #[test]
    fn bad_host_ids_are_refused() {
        assert!(check_host("", "host").is_err());
        assert!(check_host("a b", "host")
            .unwrap_err()
            .contains("bad host id"));
        assert!(check_host(&"h".repeat(256), "host").is_err());
        assert!(check_host("host0", "host").is_ok());
    }
}
