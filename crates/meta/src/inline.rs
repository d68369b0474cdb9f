//! Inline files: the bytes of a small regular file kept with its inode, and their move
//! to the file's data servers when it outgrows its threshold (docs/objects.md, "Inline
//! files").
//!
//! Invariants of an inline inode: `size == bytes.len() <= max`; `crc` is the CRC32C of
//! `bytes`; its data objects hold nothing that is the file's (a move that died may have
//! left bytes in them, which `spilled` says and the next move removes first).
//!
//! A move (`uninline`) runs on the requesting connection's thread, one at a time per
//! inode (`Moving`); while it runs, changes of the inline bytes are refused with
//! `NotInline`, so the bytes it copies stay the file's until its final commit flips the
//! inode to its data servers. The bytes are durable on the data servers before that
//! commit; a crash before it leaves the file inline.

use crate::net::DataNet;
use crate::ops::Ctx;
use crate::perm;
use crate::store::{need, InlineData, Inode, Tables};
use crate::writer::{Job, Writer};
use crate::Core;
use std::collections::HashSet;
use std::sync::{Condvar, Mutex};
use stripefs_wire::{
    crc32c, piece_crcs, Cred, ErrorCode, FileType, InlinePiece, InodeId, Request, Response,
    WireError,
};

/// The inodes whose bytes are being moved to their data servers.
#[derive(Default)]
pub struct Moving {
    set: Mutex<HashSet<u64>>,
    done: Condvar,
}

impl Moving {
    pub fn contains(&self, ino: u64) -> bool {
        self.set
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&ino)
    }

    /// Claims `ino`, waiting while another move of it runs.
    fn claim(&self, ino: u64) -> Claim<'_> {
        let mut set = self.set.lock().unwrap_or_else(|p| p.into_inner());
        while set.contains(&ino) {
            set = self.done.wait(set).unwrap_or_else(|p| p.into_inner());
        }
        set.insert(ino);
        Claim { moving: self, ino }
    }
}

/// Releases its inode when dropped, also on an early return.
struct Claim<'a> {
    moving: &'a Moving,
    ino: u64,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut set = self.moving.set.lock().unwrap_or_else(|p| p.into_inner());
        set.remove(&self.ino);
        self.moving.done.notify_all();
    }
}

fn not_inline(ino: u64, why: &str) -> WireError {
    WireError::new(ErrorCode::NotInline, format!("inode {ino}: {why}"))
}

/// The inline bytes of a file the caller may write (open by anyone, as for ExtendSize,
/// or writable by the caller), refused with `NotInline` while a move runs.
fn writable_inline<'i>(
    ctx: &Ctx,
    ino: u64,
    inode: &'i mut Inode,
) -> Result<&'i mut InlineData, WireError> {
    if inode.ftype != FileType::File {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("inode {ino} is not a regular file"),
        ));
    }
    if !ctx.opens.lock().is_open(ino) {
        perm::check(ctx.cred, inode, ino, perm::W)?;
    }
    if ctx.moving.contains(ino) {
        return Err(not_inline(ino, "its bytes are moving to its data servers"));
    }
    let inline = inode
        .inline
        .as_mut()
        .ok_or_else(|| not_inline(ino, "its bytes are on its data servers"))?;
    inline.check(ino)?;
    Ok(inline)
}

/// Sets new inline bytes: size, CRC, change count, times (the mtime only grows, to
/// when the writes were made, as ExtendSize's), set-ID bits.
fn store_bytes(
    ctx: &mut Ctx,
    ino: u64,
    mut inode: Inode,
    bytes: Vec<u8>,
    mtime_ns: i64,
) -> Result<Response, WireError> {
    let now = ctx.now_ns;
    let size = bytes.len() as u64;
    {
        let i = inode
            .inline
            .as_mut()
            .expect("the caller checked the inode is inline");
        i.crc = crc32c(&bytes);
        i.gen += 1;
        i.bytes = bytes;
    }
    inode.size = size;
    inode.mtime_ns = inode.mtime_ns.max(mtime_ns);
    inode.ctime_ns = inode.ctime_ns.max(now);
    inode.mode = perm::strip_setid_on_write(ctx.cred, &inode);
    ctx.w.put_inode(ino, &inode)?;
    Ok(Response::Attr(inode.attr(ino)))
}

/// WriteInline: the pieces, each checked against its CRC, written into the bytes in
/// order; `NotInline` if the file is not inline or would pass its threshold.
pub fn write(
    ctx: &mut Ctx,
    ino: u64,
    pieces: &[InlinePiece],
    mtime_ns: i64,
) -> Result<Response, WireError> {
    stripefs_wire::validate_inline_pieces(pieces)?;
    for p in pieces {
        if crc32c(&p.data) != p.crc {
            return Err(WireError::new(
                ErrorCode::Checksum,
                format!(
                    "inline write of {} bytes at {} to inode {ino} arrived damaged",
                    p.data.len(),
                    p.offset
                ),
            ));
        }
    }
    let mut inode = need(ctx.w, ino)?;
    let inline = writable_inline(ctx, ino, &mut inode)?;
    let end = pieces
        .iter()
        .map(|p| p.offset + p.data.len() as u64)
        .max()
        .unwrap_or(0)
        .max(inline.bytes.len() as u64);
    if end > inline.max as u64 {
        return Err(not_inline(
            ino,
            &format!("{end} bytes pass its inline threshold of {}", inline.max),
        ));
    }
    let mut bytes = std::mem::take(&mut inline.bytes);
    bytes.resize(end as usize, 0);
    for p in pieces {
        let at = p.offset as usize;
        bytes[at..at + p.data.len()].copy_from_slice(&p.data);
    }
    store_bytes(ctx, ino, inode, bytes, mtime_ns)
}

/// A new size for an inline file (SetAttr, ExtendSize), cutting or zero-extending its
/// bytes: `Ok(None)` if the file is not inline, `NotInline` past the threshold or while
/// a move runs. Permissions are the caller's to check.
pub fn resize(ctx: &Ctx, ino: u64, inode: &mut Inode, size: u64) -> Result<(), WireError> {
    let Some(inline) = inode.inline.as_mut() else {
        return Ok(());
    };
    if ctx.moving.contains(ino) {
        return Err(not_inline(ino, "its bytes are moving to its data servers"));
    }
    if size > inline.max as u64 {
        return Err(not_inline(
            ino,
            &format!("size {size} passes its inline threshold of {}", inline.max),
        ));
    }
    inline.check(ino)?;
    if size != inline.bytes.len() as u64 {
        inline.bytes.resize(size as usize, 0);
        inline.crc = crc32c(&inline.bytes);
        inline.gen += 1;
    }
    Ok(())
}

/// ReadInline: the file's attributes with its inline bytes, for a caller who may read
/// it; without bytes once the file lives on its data servers.
pub fn read<T: Tables>(t: &T, cred: &Cred, ino: u64) -> Result<Response, WireError> {
    let inode = need(t, ino)?;
    if inode.ftype != FileType::File {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("inode {ino} is not a regular file"),
        ));
    }
    perm::check(cred, &inode, ino, perm::R)?;
    if let Some(i) = &inode.inline {
        i.check(ino)?;
    }
    Ok(Response::Attr(inode.attr_with_data(ino)))
}

/// Writer job: a move of `ino` is about to put bytes on its data servers.
pub fn begin_move(ctx: &mut Ctx, ino: u64) -> Result<Response, WireError> {
    let mut inode = need(ctx.w, ino)?;
    let Some(inline) = inode.inline.as_mut() else {
        return Ok(Response::Done);
    };
    if !inline.spilled && !inline.bytes.is_empty() {
        inline.spilled = true;
        ctx.w.put_inode(ino, &inode)?;
    }
    Ok(Response::Done)
}

/// Writer job: the move of `ino` is done; its bytes (change count `gen`) are durable on
/// its data servers, which hold the file from now on.
pub fn end_move(ctx: &mut Ctx, ino: u64, gen: u64) -> Result<Response, WireError> {
    let Some(mut inode) = ctx.w.inode(ino)? else {
        // Removed meanwhile (its purge may have run before the move's writes landed:
        // the mover removes them, see `uninline`).
        return Ok(Response::Done);
    };
    match &inode.inline {
        None => return Ok(Response::Attr(inode.attr(ino))),
        Some(i) if i.gen != gen => {
            return Err(WireError::new(
                ErrorCode::Busy,
                format!(
                    "inode {ino}: inline bytes changed (change {} -> {}) during their move",
                    gen, i.gen
                ),
            ))
        }
        Some(_) => {}
    }
    inode.inline = None;
    ctx.w.put_inode(ino, &inode)?;
    Ok(Response::Attr(inode.attr(ino)))
}

/// Uninline: moves the bytes of inline file `ino` to its data servers, durably, then
/// makes them the file's; answers the file's attributes.
pub fn uninline(
    core: &Core,
    net: &dyn DataNet,
    cred: &Cred,
    ino: u64,
) -> Result<Response, WireError> {
    let _claim = core.moving.claim(ino);
    let inode = core.with_view(|v| need(v, ino))?;
    if inode.ftype != FileType::File {
        return Err(WireError::new(
            ErrorCode::InvalidArgument,
            format!("inode {ino} is not a regular file"),
        ));
    }
    if !core.opens.lock().is_open(ino) {
        perm::check(cred, &inode, ino, perm::W)?;
    }
    let Some(before) = inode.inline.as_ref() else {
        return Ok(Response::Attr(inode.attr(ino)));
    };
    // Only moves change `spilled`, and this one holds the claim: whether an earlier
    // move may have left bytes in the objects.
    let spilled = before.spilled;
    if before.bytes.is_empty() && !spilled {
        // Nothing to move and nothing left behind (a file that starts with a large
        // write): one commit, unless an inline write slipped in before the claim.
        let end = Job::EndMove {
            ino,
            gen: before.gen,
        };
        match Writer::submit(core, end) {
            Err(e) if e.code == ErrorCode::Busy => {}
            Ok(Response::Done) => {
                return Err(WireError::new(
                    ErrorCode::StaleHandle,
                    format!("inode {ino} was removed"),
                ))
            }
            answer => return answer,
        }
    }
    // Ordered after every inline write the writer took before the claim (later ones
    // are refused), so the bytes read after it stay the file's until the end.
    Writer::submit(core, Job::BeginMove(ino))?;
    let inode = core.with_view(|v| need(v, ino))?;
    let Some(inline) = inode.inline else {
        return Ok(Response::Attr(inode.attr(ino)));
    };
    // Damaged bytes are not moved: the data servers would store them with fresh CRCs.
    inline.check(ino)?;
    let layout = inode.layout.clone().ok_or_else(|| {
        WireError::new(
            ErrorCode::Internal,
            format!("inline inode {ino} has no layout"),
        )
    })?;
    let root = Cred::root();
    let fid = InodeId(ino);
    let unit = layout.stripe_size_bytes;
    let stripe = stripefs_layout::Stripe::new(unit as u64, layout.servers.len() as u32)
        .map_err(|e| WireError::new(ErrorCode::Internal, format!("inode {ino}: {e}")))?;
    // Per place: whether this move sent it anything, and the boot identity its writes
    // were answered with (a restart before the fsync may have lost them).
    let mut touched = vec![false; layout.servers.len()];
    let mut boots: Vec<Option<u64>> = vec![None; layout.servers.len()];
    if spilled {
        // A move that died may have left bytes in the objects: gone first, so that no
        // byte of theirs outlives this move.
        for (place, server) in layout.servers.iter().enumerate() {
            call(net, server.0, &root, Request::Remove { fid }, &[])?;
            touched[place] = true;
        }
    }
    for piece in stripe.split(0, inline.bytes.len() as u64) {
        let data = &inline.bytes[piece.global as usize..(piece.global + piece.len) as usize];
        let req = Request::Write {
            fid,
            unit,
            offset: piece.local,
            crcs: piece_crcs(piece.local, data),
        };
        let place = piece.place as usize;
        let boot = call(net, layout.servers[place].0, &root, req, data)?;
        if boots[place].is_some_and(|b| Some(b) != boot) {
            return Err(restarted(ino, layout.servers[place].0));
        }
        boots[place] = boot;
        touched[place] = true;
    }
    for (place, server) in layout.servers.iter().enumerate() {
        if touched[place] {
            let boot = call(net, server.0, &root, Request::Fsync { fid }, &[])?;
            if boots[place].is_some_and(|b| Some(b) != boot) {
                return Err(restarted(ino, server.0));
            }
        }
    }
    let end = Job::EndMove {
        ino,
        gen: inline.gen,
    };
    match Writer::submit(core, end)? {
        Response::Done => {
            // The file was removed during the move: what the move wrote goes too.
            for (place, server) in layout.servers.iter().enumerate() {
                if touched[place] {
                    let _ = call(net, server.0, &root, Request::Remove { fid }, &[]);
                }
            }
            Err(WireError::new(
                ErrorCode::StaleHandle,
                format!("inode {ino} was removed while its bytes moved to its data servers"),
            ))
        }
        answer => Ok(answer),
    }
}

fn restarted(ino: u64, server: u32) -> WireError {
    WireError::new(
        ErrorCode::ServerRestarted,
        format!("moving the inline bytes of inode {ino}: data server {server} restarted meanwhile"),
    )
}

/// One request with data to a data server, as the metadata server; the boot identity
/// of a Write or Fsync answer.
fn call(
    net: &dyn DataNet,
    server: u32,
    cred: &Cred,
    req: Request,
    data: &[u8],
) -> Result<Option<u64>, WireError> {
    let op = req.opcode().name();
    let what = |e: WireError| {
        WireError::new(
            e.code,
            format!(
                "moving inline bytes to data server {server} ({op}): {}",
                e.message
            ),
        )
    };
    match net.call_data(server, cred, req, data).map_err(what)? {
        Response::Written { boot_id } => Ok(Some(boot_id)),
        _ => Ok(None),
    }
}
