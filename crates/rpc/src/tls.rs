//! TLS on client connections (rustls on ring).
//!
//! A cluster's servers hold a certificate and its key (`tls_cert`, `tls_key` in the
//! cluster file); clients check it against the cluster's CA (`tls_ca`) and the name they
//! connected to (the address's host, or `tls_name`). `cluster up --tls` makes a CA and one
//! server certificate for every address of the cluster ([`make_cluster_certs`]); an
//! operator may supply their own instead.
//!
//! TLS wraps the whole connection: the TLS handshake comes first, then stripefs's own
//! handshake (Hello, challenge, Auth, with the cluster secret or a token) runs inside it,
//! so TLS adds confidentiality and server identity and takes nothing away. A server with
//! a certificate tells the two kinds of connection apart by their first byte (a TLS
//! record starts with 22, a stripefs frame never does) and, with `require_tls`, refuses
//! plain ones with an error that names TLS. Replies on a TLS connection are copied
//! through the cipher: zero-copy `sendfile` applies to plain connections only.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The first byte of a TLS handshake record (ContentType::Handshake).
pub const TLS_RECORD_HANDSHAKE: u8 = 22;

/// Plaintext a TLS connection buffers before writing it out: large enough that a 1 MiB
/// reply goes out in a few system calls.
const TLS_BUFFER_BYTES: usize = 256 << 10;

/// ring's provider with AES-128-GCM preferred: as safe for bulk data and about a third
/// cheaper per byte than AES-256-GCM with AES instructions.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    use rustls::crypto::ring::cipher_suite as cs;
    let mut p = rustls::crypto::ring::default_provider();
    p.cipher_suites = vec![
        cs::TLS13_AES_128_GCM_SHA256,
        cs::TLS13_AES_256_GCM_SHA384,
        cs::TLS13_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ];
    Arc::new(p)
}

/// What a client needs to open TLS connections: the CA it trusts and, optionally, the
/// name it checks in every server's certificate instead of the address's host.
#[derive(Clone)]
pub struct TlsClient {
    config: Arc<ClientConfig>,
    name: Option<String>,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClient")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl TlsClient {
    /// From the CA certificate(s) in PEM form.
    pub fn from_ca_pem(pem: &[u8], name: Option<String>) -> Result<TlsClient, String> {
        let mut roots = RootCertStore::empty();
        let mut n = 0;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| format!("bad CA certificate PEM: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("unusable CA certificate: {e}"))?;
            n += 1;
        }
        if n == 0 {
            return Err("no CERTIFICATE in the CA PEM".into());
        }
        if let Some(name) = &name {
            ServerName::try_from(name.clone())
                .map_err(|e| format!("tls_name {name:?} is not a DNS name or address: {e}"))?;
        }
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(TlsClient {
            config: Arc::new(config),
            name,
        })
    }

    /// The name checked in the certificate of the server at `addr` (host:port).
    fn server_name(&self, addr: &str) -> Result<ServerName<'static>, String> {
        let host = match &self.name {
            Some(n) => n.clone(),
            None => host_of(addr).to_string(),
        };
        ServerName::try_from(host.clone())
            .map_err(|e| format!("{host:?} cannot be checked in a certificate: {e}"))
    }

    /// Runs the TLS handshake on a connected socket (blocking, within the socket's
    /// timeouts). Errors say what failed, naming TLS.
    pub fn connect(&self, addr: &str, tcp: TcpStream) -> Result<Stream, String> {
        let name = self.server_name(addr)?;
        let mut conn =
            ClientConnection::new(self.config.clone(), name).map_err(|e| format!("TLS: {e}"))?;
        conn.set_buffer_limit(Some(TLS_BUFFER_BYTES));
        let mut tcp = tcp;
        while conn.is_handshaking() {
            if let Err(e) = conn.complete_io(&mut tcp) {
                return Err(handshake_error(&e));
            }
        }
        Ok(Stream::Client(Box::new(rustls::StreamOwned::new(
            conn, tcp,
        ))))
    }
}

/// Explains a failed client handshake.
fn handshake_error(e: &io::Error) -> String {
    let why = e.to_string();
    let hint = if e.kind() == io::ErrorKind::InvalidData && why.contains("corrupt") {
        " (the server answered without TLS: does it have a certificate? `cluster up --tls`, \
         or tls_cert and tls_key in its cluster file)"
    } else if e.kind() == io::ErrorKind::UnexpectedEof || e.kind() == io::ErrorKind::ConnectionReset
    {
        " (the server closed the connection: does it have a certificate? `cluster up --tls`, \
         or tls_cert and tls_key in its cluster file)"
    } else if why.contains("certificate") || why.contains("Certificate") {
        " (check tls_ca, and tls_name if the servers are reached through another name)"
    } else {
        ""
    };
    format!("TLS handshake failed: {why}{hint}")
}

/// The host part of host:port (IPv6 in brackets allowed).
fn host_of(addr: &str) -> &str {
    let host = match addr.rfind(':') {
        Some(i) => &addr[..i],
        None => addr,
    };
    host.trim_start_matches('[').trim_end_matches(']')
}

/// A server's certificate and key, and whether it refuses plain connections.
#[derive(Clone)]
pub struct TlsServer {
    config: Arc<ServerConfig>,
    pub required: bool,
}

impl TlsServer {
    /// From the certificate chain and private key in PEM form.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8], required: bool) -> Result<TlsServer, String> {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("bad certificate PEM: {e}"))?;
        if chain.is_empty() {
            return Err("no CERTIFICATE in the certificate PEM".into());
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| format!("bad private key PEM: {e}"))?;
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| format!("the certificate and key do not make a server identity: {e}"))?;
        // No session tickets: a client never resumes (connections are long-lived), and
        // unsolicited bytes after the handshake would make an idle pooled connection
        // look closed by the server.
        config.send_tls13_tickets = 0;
        Ok(TlsServer {
            config: Arc::new(config),
            required,
        })
    }

    /// From PEM files; errors name the file.
    pub fn load(cert: &Path, key: &Path, required: bool) -> Result<TlsServer, String> {
        let read = |p: &Path, what: &str| {
            std::fs::read(p).map_err(|e| format!("cannot read the TLS {what} {}: {e}", p.display()))
        };
        TlsServer::from_pem(&read(cert, "certificate")?, &read(key, "key")?, required).map_err(
            |e| {
                format!(
                    "TLS certificate {} / key {}: {e}",
                    cert.display(),
                    key.display()
                )
            },
        )
    }

    /// A server-side TLS session for a new connection.
    pub fn session(&self) -> Result<ServerConnection, String> {
        let mut c = ServerConnection::new(self.config.clone()).map_err(|e| e.to_string())?;
        c.set_buffer_limit(Some(TLS_BUFFER_BYTES));
        Ok(c)
    }
}

/// A connection's byte stream: plain TCP, or TLS over it (server or client side).
pub enum Stream {
    Plain(TcpStream),
    Server(Box<rustls::StreamOwned<ServerConnection, TcpStream>>),
    Client(Box<rustls::StreamOwned<ClientConnection, TcpStream>>),
}

impl Stream {
    /// The TCP socket under the stream (timeouts, shutdown, polling).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Server(s) => &s.sock,
            Stream::Client(s) => &s.sock,
        }
    }

    pub fn is_tls(&self) -> bool {
        !matches!(self, Stream::Plain(_))
    }

    /// Plaintext already decrypted and not yet read (TLS only): readiness of the socket
    /// does not show it.
    pub fn buffered(&mut self) -> bool {
        let n = match self {
            Stream::Plain(_) => return false,
            Stream::Server(s) => s
                .conn
                .process_new_packets()
                .map(|st| st.plaintext_bytes_to_read()),
            Stream::Client(s) => s
                .conn
                .process_new_packets()
                .map(|st| st.plaintext_bytes_to_read()),
        };
        n.map_or(true, |n| n > 0)
    }

    /// Ends the TLS session cleanly (close_notify), best effort.
    pub fn close_notify(&mut self) {
        match self {
            Stream::Plain(_) => {}
            Stream::Server(s) => {
                s.conn.send_close_notify();
                let _ = s.conn.complete_io(&mut s.sock);
            }
            Stream::Client(s) => {
                s.conn.send_close_notify();
                let _ = s.conn.complete_io(&mut s.sock);
            }
        }
    }
}

/// A TCP end without close_notify is a plain end of stream to stripefs: every frame
/// carries its own length, so a cut-off frame is still seen as cut off.
fn eof_is_end(r: io::Result<usize>) -> io::Result<usize> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
        r => r,
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Server(s) => eof_is_end(s.read(buf)),
            Stream::Client(s) => eof_is_end(s.read(buf)),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Server(s) => s.write(buf),
            Stream::Client(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write_vectored(bufs),
            Stream::Server(s) => s.write_vectored(bufs),
            Stream::Client(s) => s.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Server(s) => s.flush(),
            Stream::Client(s) => s.flush(),
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        self.tcp().as_raw_fd()
    }
}

/// The TLS part of a cluster file: `tls_ca` (a PEM file, or the PEM text itself, as in a
/// client file for a collaborator), `tls_cert` and `tls_key` (servers), `require_tls`,
/// `tls_name`.
#[derive(Clone, Debug, Default)]
pub struct TlsSettings {
    /// Clients use TLS to every server when set.
    pub ca: Option<String>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub require: bool,
    pub name: Option<String>,
    /// Built from `ca` when the file was read.
    pub client: Option<TlsClient>,
}

impl TlsSettings {
    /// Checks the settings and builds the client side (reads the CA).
    pub fn check(&mut self) -> Result<(), String> {
        if self.cert.is_some() != self.key.is_some() {
            return Err("tls_cert and tls_key go together".into());
        }
        if self.require && self.cert.is_none() {
            return Err("require_tls needs tls_cert and tls_key (the servers' certificate)".into());
        }
        self.client = match &self.ca {
            None => None,
            Some(ca) => {
                let pem = ca_pem(ca)?;
                Some(
                    TlsClient::from_ca_pem(&pem, self.name.clone())
                        .map_err(|e| format!("tls_ca: {e}"))?,
                )
            }
        };
        Ok(())
    }

    /// The server side, if the file gives a certificate.
    pub fn server(&self) -> Result<Option<TlsServer>, String> {
        match (&self.cert, &self.key) {
            (Some(c), Some(k)) => TlsServer::load(c, k, self.require).map(Some),
            _ => Ok(None),
        }
    }

    /// The CA as PEM text (to hand to a collaborator's client file).
    pub fn ca_pem_text(&self) -> Result<Option<String>, String> {
        match &self.ca {
            None => Ok(None),
            Some(ca) => {
                let pem = ca_pem(ca)?;
                String::from_utf8(pem)
                    .map(Some)
                    .map_err(|_| "tls_ca is not PEM text".into())
            }
        }
    }
}

/// Whether a `tls_ca` value is PEM text itself rather than a file's path.
pub fn is_pem_text(ca: &str) -> bool {
    ca.trim_start().starts_with("-----BEGIN")
}

/// `tls_ca`'s PEM: the value itself when it is PEM text, else the file it names.
fn ca_pem(ca: &str) -> Result<Vec<u8>, String> {
    if is_pem_text(ca) {
        return Ok(ca.as_bytes().to_vec());
    }
    std::fs::read(ca).map_err(|e| format!("cannot read tls_ca {ca}: {e}"))
}

/// Files written by [`make_cluster_certs`].
pub struct ClusterCerts {
    pub ca: PathBuf,
    pub ca_key: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Makes a cluster CA and one server certificate signed by it, valid for `names` (host
/// names and IP addresses) and ten years, in `dir`: ca.pem, ca.key, server.pem,
/// server.key (keys mode 0600).
pub fn make_cluster_certs(dir: &Path, names: &[String]) -> Result<ClusterCerts, String> {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
        KeyUsagePurpose,
    };
    let e = |e: rcgen::Error| format!("making TLS certificates: {e}");
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let now = time_now();
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "stripefs cluster CA");
    ca_params.distinguished_name = dn;
    ca_params.not_before = now.0;
    ca_params.not_after = now.1;
    let ca_key = KeyPair::generate().map_err(e)?;
    let ca_cert = ca_params.self_signed(&ca_key).map_err(e)?;
    let ca_pem = ca_cert.pem();
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca_params, ca_key);

    let mut names: Vec<String> = names.to_vec();
    names.sort();
    names.dedup();
    let mut params = CertificateParams::new(names.clone()).map_err(e)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "stripefs server");
    params.distinguished_name = dn;
    params.not_before = now.0;
    params.not_after = now.1;
    let key = KeyPair::generate().map_err(e)?;
    let cert = params.signed_by(&key, &issuer).map_err(e)?;

    let out = ClusterCerts {
        ca: dir.join("ca.pem"),
        ca_key: dir.join("ca.key"),
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
    };
    write_file(&out.ca, ca_pem.as_bytes(), 0o644)?;
    write_file(&out.ca_key, ca_key_pem.as_bytes(), 0o600)?;
    write_file(&out.cert, cert.pem().as_bytes(), 0o644)?;
    write_file(&out.key, key.serialize_pem().as_bytes(), 0o600)?;
    Ok(out)
}

/// From an hour ago (clocks of a cluster differ a little) to ten years on.
fn time_now() -> (time::OffsetDateTime, time::OffsetDateTime) {
    let now = time::OffsetDateTime::now_utc();
    (
        now - time::Duration::hours(1),
        now + time::Duration::days(3650),
    )
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_of_takes_the_host_part() {
        assert_eq!(host_of("127.0.0.1:7000"), "127.0.0.1");
        assert_eq!(host_of("[::1]:7000"), "::1");
        assert_eq!(host_of("node3:7000"), "node3");
    }
}
