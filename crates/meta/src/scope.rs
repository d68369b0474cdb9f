//! Scoped tokens on the metadata server: what a token's requests may touch, and which
//! tokens are revoked (see `stripefs_rpc::token`).
//!
//! A token names a subtree by path. Its root directory is resolved once; a directory is
//! in scope when following recorded parents from it reaches the root. Files have no
//! recorded parent (hard links give them several), so a file is in scope once the token
//! has reached it from inside: an answer to one of its in-scope requests named it
//! (lookup, create, readdir, readdirplus, resolve). Those inode numbers are kept per
//! token in memory; after a restart a client finds them again by path. Data servers ask here
//! (`TokenAllows`) before serving a token's request for a file.
//!
//! Revoked token ids are kept in `<db>.revoked` beside the database, one hex id a line,
//! written and synced (with its directory when the file is new) through the server's
//! `MetaDisk` before the revocation is acknowledged, so that the simulated disk's power
//! cuts reach it too.

use crate::disk::MetaDisk;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use stripefs_rpc::token::Token;
use stripefs_wire::{ErrorCode, Reach, Request, Response, Scope, WireError};

/// Most file inodes remembered per token; past it the set starts again (clients then
/// look paths up again).
const MAX_KNOWN: usize = 1 << 20;
/// Deepest directory chain walked to find a scope's root.
const MAX_DEPTH: usize = 4096;

#[derive(Default)]
struct State {
    /// The root inode of each token's subtree, once resolved.
    roots: HashMap<u64, u64>,
    /// File inodes each token has reached from inside its subtree.
    known: HashMap<u64, HashSet<u64>>,
}

pub struct Scopes {
    state: Mutex<State>,
    revoked: Mutex<HashSet<u64>>,
    revoked_file: PathBuf,
    disk: Arc<dyn MetaDisk>,
    /// Whether the revocation file's name is known durable (it was there at start, or a
    /// directory sync after creating it succeeded). Until then every revocation syncs the
    /// directory, so a failed sync is retried, not forgotten. Guarded by `revoked`'s lock.
    name_durable: std::sync::atomic::AtomicBool,
}

/// The token ids of a revocation file. A last line without its newline is a write a
/// power cut tore, never acknowledged: ignored. Any other line that is not a hex id is
/// returned as the error.
fn parse_revoked(text: &[u8]) -> Result<HashSet<u64>, String> {
    let text = String::from_utf8_lossy(text);
    let complete = match text.rfind('\n') {
        Some(i) => &text[..i],
        None => "",
    };
    let mut ids = HashSet::new();
    for line in complete.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let id = u64::from_str_radix(line, 16).map_err(|_| line.to_string())?;
        ids.insert(id);
    }
    Ok(ids)
}

pub fn denied(t: &Token, why: impl std::fmt::Display) -> WireError {
    WireError::new(
        ErrorCode::PermissionDenied,
        format!("token {:016x} (for {}): {why}", t.id, t.path),
    )
}

/// What the scope check needs from the namespace.
pub trait Namespace {
    /// A directory's recorded parent, or `None` if `ino` is not a directory.
    fn dir_parent(&self, ino: u64) -> Result<Option<u64>, WireError>;
    /// The inode `path` resolves to (following symlinks).
    fn resolve(&self, path: &str) -> Result<u64, WireError>;
    /// The inode of `name` in directory `parent`, without following a symlink.
    fn lookup(&self, parent: u64, name: &str) -> Result<u64, WireError>;
}

impl Scopes {
    /// The scopes of the server whose database is `db` on `disk`, with the revocations
    /// recorded there.
    pub fn new(disk: Arc<dyn MetaDisk>, db: &std::path::Path) -> Result<Scopes, String> {
        let revoked_file = db.with_extension("revoked");
        let text = crate::disk::read_all(&*disk, &revoked_file)
            .map_err(|e| format!("cannot read {}: {e}", revoked_file.display()))?;
        let name_durable = text.is_some().into();
        let text = text.unwrap_or_default();
        let revoked = parse_revoked(&text)
            .map_err(|line| format!("{}: {line:?} is not a token id", revoked_file.display()))?;
        Ok(Scopes {
            state: Mutex::default(),
            revoked: Mutex::new(revoked),
            revoked_file,
            disk,
            name_durable,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn check_revoked(&self, t: &Token) -> Result<(), WireError> {
        if self
            .revoked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&t.id)
        {
            return Err(denied(t, "revoked"));
        }
        Ok(())
    }

    /// Revokes token `id` for good: on disk (synced) before it returns.
    pub fn revoke(&self, id: u64) -> Result<(), WireError> {
        let mut set = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
        if set.contains(&id) {
            return Ok(());
        }
        let io = |e: std::io::Error| {
            WireError::new(
                ErrorCode::Io,
                format!(
                    "cannot record the revocation in {}: {e}",
                    self.revoked_file.display()
                ),
            )
        };
        let f = self
            .disk
            .open(&self.revoked_file, true)
            .map_err(io)?
            .ok_or_else(|| io(std::io::ErrorKind::NotFound.into()))?;
        let end = f.size_bytes().map_err(io)?;
        f.write_at(format!("{id:016x}\n").as_bytes(), end)
            .map_err(io)?;
        f.sync_all().map_err(io)?;
        use std::sync::atomic::Ordering::Relaxed;
        if !self.name_durable.load(Relaxed) {
            // The file's name is as durable as its contents only once its directory is.
            self.disk
                .sync_dir(crate::disk::dir_of(&self.revoked_file))
                .map_err(io)?;
            self.name_durable.store(true, Relaxed);
        }
        set.insert(id);
        self.state().known.remove(&id);
        Ok(())
    }

    /// The root inode of `t`'s subtree.
    fn root(&self, t: &Token, ns: &dyn Namespace) -> Result<u64, WireError> {
        if let Some(&r) = self.state().roots.get(&t.id) {
            return Ok(r);
        }
        let r = ns
            .resolve(&t.path)
            .map_err(|e| denied(t, format!("its directory cannot be found: {e}")))?;
        if ns.dir_parent(r)?.is_none() {
            return Err(denied(t, "its path is not a directory"));
        }
        self.state().roots.insert(t.id, r);
        Ok(r)
    }

    /// Whether directory `ino` lies in `t`'s subtree (false for other types).
    fn dir_in(&self, t: &Token, ns: &dyn Namespace, ino: u64) -> Result<bool, WireError> {
        let root = self.root(t, ns)?;
        let mut d = ino;
        for _ in 0..MAX_DEPTH {
            if d == root {
                return Ok(true);
            }
            match ns.dir_parent(d)? {
                Some(p) if p != d => d = p,
                _ => return Ok(false), // not a directory, or the namespace's root
            }
        }
        Ok(false)
    }

    /// Whether inode `ino` is in scope: a directory when its parents lead to the root,
    /// anything else when the token reached it from inside.
    fn ino_in(&self, t: &Token, ns: &dyn Namespace, ino: u64) -> Result<bool, WireError> {
        if ns.dir_parent(ino)?.is_some() {
            return self.dir_in(t, ns, ino);
        }
        Ok(self
            .state()
            .known
            .get(&t.id)
            .is_some_and(|k| k.contains(&ino)))
    }

    fn need_dir(&self, t: &Token, ns: &dyn Namespace, ino: u64) -> Result<(), WireError> {
        if self.dir_in(t, ns, ino)? {
            Ok(())
        } else {
            Err(denied(t, format!("inode {ino} is outside its tree")))
        }
    }

    fn need_ino(&self, t: &Token, ns: &dyn Namespace, ino: u64) -> Result<(), WireError> {
        if self.ino_in(t, ns, ino)? {
            Ok(())
        } else {
            Err(denied(t, format!("inode {ino} is outside its tree")))
        }
    }

    /// Whether `path`, resolved to `ino`, is reachable from inside `t`'s tree: a
    /// directory in the tree (`false`: directories need no entry in `known`, they are
    /// judged by their parents), or a file whose entry lies in a directory of the tree
    /// (`true`: to be remembered). Refused otherwise (a symlink leading out).
    fn reached_inside(
        &self,
        t: &Token,
        ns: &dyn Namespace,
        path: &str,
        ino: u64,
    ) -> Result<bool, WireError> {
        if self.dir_in(t, ns, ino)? {
            return Ok(false);
        }
        let p = stripefs_rpc::token::normalise(path).map_err(|e| denied(t, e))?;
        let (dir, name) = p.rsplit_once('/').unwrap_or(("", &p));
        let dir = if dir.is_empty() { "/" } else { dir };
        let parent = ns.resolve(dir)?;
        if !self.dir_in(t, ns, parent)? || ns.lookup(parent, name)? != ino {
            return Err(denied(t, format!("{path} leads out of its tree")));
        }
        Ok(true)
    }

    /// Checks a request made with token `t` before it runs: what its row of the
    /// operation table says it reaches must be inside the token's tree.
    pub fn authorize(&self, t: &Token, ns: &dyn Namespace, req: &Request) -> Result<(), WireError> {
        let Scope { reach, writes } = req.scope();
        if t.read_only && writes {
            return Err(denied(
                t,
                format!("read-only: {} refused", req.opcode().name()),
            ));
        }
        match reach {
            Reach::Nothing => Ok(()),
            Reach::Dir(d) => self.need_dir(t, ns, d.0),
            Reach::Dirs(a, b) => {
                self.need_dir(t, ns, a.0)?;
                self.need_dir(t, ns, b.0)
            }
            Reach::Ino(i) => self.need_ino(t, ns, i.0),
            Reach::InoAndDir(i, d) => {
                self.need_ino(t, ns, i.0)?;
                self.need_dir(t, ns, d.0)
            }
            Reach::Path(path) => {
                let p = stripefs_rpc::token::normalise(path).map_err(|e| denied(t, e))?;
                if t.covers(&p) {
                    Ok(())
                } else {
                    Err(denied(t, format!("{path} is outside its tree")))
                }
            }
            // An open counts as it runs, so its target is judged first, as a Resolve's
            // answer would be: the path inside the tree and not leading out of it.
            Reach::OpenPath(path) => {
                let p = stripefs_rpc::token::normalise(path).map_err(|e| denied(t, e))?;
                if !t.covers(&p) {
                    return Err(denied(t, format!("{path} is outside its tree")));
                }
                let ino = ns.resolve(&p)?;
                self.reached_inside(t, ns, path, ino).map(|_| ())
            }
            // A file's objects are a data server's; the secret's holders ask the rest.
            Reach::Fid(_) | Reach::Secret => Err(denied(
                t,
                format!("{} needs the cluster secret", req.opcode().name()),
            )),
        }
    }

    /// Checks an answer to a request made with `t`, and remembers the files it names.
    /// A path resolved through a symlink that leads out of the tree is refused here.
    pub fn admit(
        &self,
        t: &Token,
        ns: &dyn Namespace,
        req: &Request,
        answer: &Response,
    ) -> Result<(), WireError> {
        let mut found: Vec<u64> = Vec::new();
        match (req, answer) {
            (Request::Resolve { path, .. } | Request::OpenPath { path, .. }, Response::Attr(a)) => {
                let remember = self.reached_inside(t, ns, path, a.ino.0)?;
                found.extend(remember.then_some(a.ino.0));
            }
            // A directory answered (a lookup of "..", say) must lie in the tree itself.
            (_, Response::Attr(a)) if a.ftype == stripefs_wire::FileType::Dir => {
                let inside = self.dir_in(t, ns, a.ino.0)?;
                if !inside {
                    return Err(denied(t, format!("inode {} is outside its tree", a.ino.0)));
                }
            }
            (_, Response::Attr(a)) => found.push(a.ino.0),
            // Files listed in a directory of the tree are reached; directories are judged
            // by their parents when used.
            (_, Response::Entries { entries, .. }) => found.extend(
                entries
                    .iter()
                    .filter(|e| e.ftype != stripefs_wire::FileType::Dir)
                    .map(|e| e.ino.0),
            ),
            (_, Response::EntriesPlus { entries, .. }) => found.extend(
                entries
                    .iter()
                    .filter(|(_, a)| a.ftype != stripefs_wire::FileType::Dir)
                    .map(|(_, a)| a.ino.0),
            ),
            _ => {}
        }
        if !found.is_empty() {
            let mut st = self.state();
            let known = st.known.entry(t.id).or_default();
            if known.len() + found.len() > MAX_KNOWN {
                known.clear();
            }
            known.extend(found);
        }
        Ok(())
    }

    /// A data server's question: may `t` touch file `fid` (for writing if `write`)?
    pub fn allows(
        &self,
        t: &Token,
        ns: &dyn Namespace,
        fid: u64,
        write: bool,
    ) -> Result<(), WireError> {
        if t.expired(stripefs_rpc::token::now_s()) {
            return Err(denied(t, "expired"));
        }
        self.check_revoked(t)?;
        if write && t.read_only {
            return Err(denied(t, "read-only: writes refused"));
        }
        if self.ino_in(t, ns, fid)? {
            Ok(())
        } else {
            Err(denied(t, format!("file {fid} is outside its tree")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DiskFault, DiskOp, MemDisk};
    use std::path::Path;

    #[test]
    fn revocation_file_lines() {
        let ids = parse_revoked(b"00000000000000ff\n\n  10 \n").unwrap();
        assert_eq!(ids, HashSet::from([0xff, 0x10]));
        // A torn last line (no newline) was never acknowledged: ignored.
        let ids = parse_revoked(b"0000000000000001\n00000000000").unwrap();
        assert_eq!(ids, HashSet::from([1]));
        assert!(parse_revoked(b"").unwrap().is_empty());
        assert!(parse_revoked(b"0000").unwrap().is_empty());
        assert_eq!(parse_revoked(b"1\nnot-hex\n2\n").unwrap_err(), "not-hex");
    }

    #[test]
    fn acknowledged_revocations_survive_a_power_cut() {
        let disk = Arc::new(MemDisk::with_seed(7));
        let db = Path::new("/srv/meta/meta.redb");
        let scopes = Scopes::new(disk.clone(), db).unwrap();
        scopes.revoke(0xabc).unwrap();
        scopes.revoke(0xdef).unwrap();
        scopes.revoke(0xabc).unwrap(); // twice is once
        for seed in 0..20 {
            disk.power_cut(seed);
            let again = Scopes::new(disk.clone(), db).unwrap();
            let set = again.revoked.lock().unwrap().clone();
            assert_eq!(set, HashSet::from([0xabc, 0xdef]), "power cut seed {seed}");
        }
    }

    #[test]
    fn a_failed_directory_sync_fails_the_revocation() {
        let disk = Arc::new(MemDisk::with_seed(3));
        let db = Path::new("/srv/meta/meta.redb");
        let scopes = Scopes::new(disk.clone(), db).unwrap();
        disk.fail_next(DiskOp::SyncDir, "", 1, DiskFault::Io);
        let err = scopes.revoke(5).unwrap_err();
        assert_eq!(err.code, ErrorCode::Io, "{err:?}");
        assert!(!scopes.revoked.lock().unwrap().contains(&5));
        // Tried again once the disk works, it is recorded and survives a cut.
        scopes.revoke(5).unwrap();
        disk.power_cut(1);
        let again = Scopes::new(disk.clone(), db).unwrap();
        assert!(again.revoked.lock().unwrap().contains(&5));
    }
}
