//! Flush, fsync and truncate: the size and mtime the metadata server records, the data
//! servers' fsyncs with their boot identities, and a new size on every server.

use super::*;
use stripefs_wire::op;

impl InodeIo {
    /// Waits for pending writes, optionally makes them durable on every server of the
    /// layout, then tells the metadata server the new size and mtime.
    /// Asks every server of the layout to drop its cached pages of this file.
    pub fn drop_server_cache(&self, cred: &Cred) -> Result<(), WireError> {
        if self.is_inline() {
            return Ok(());
        }
        self.on_all_servers(cred, "DropCache", |_| Request::DropCache { fid: self.ino })
    }

    pub fn flush(&self, cred: &Cred, data_sync: bool) -> Result<(), WireError> {
        // First: a file found moved meanwhile gets its inline writes queued for the data
        // servers, which the wait below covers.
        if self.flush_inline(cred, data_sync)? {
            return Ok(());
        }
        self.wait_all();
        self.take_latched()?;
        if data_sync {
            self.fsync_servers(cred)?;
        }
        let (end, mtime_ns) = {
            let mut st = lock(&self.state);
            (st.unflushed_end.take(), st.unflushed_mtime_ns)
        };
        let Some(end) = end else {
            if data_sync {
                self.sync_meta_after(cred, false)?;
            }
            return Ok(());
        };
        let session = self.inner.session.id();
        // Durable when answered only for an fsync: a close's or flush's size is answered
        // once visible, as the data servers answer its writes (docs/protocol.md).
        let req = if data_sync {
            Request::ExtendSize {
                ino: self.ino,
                size: end,
                mtime_ns,
            }
        } else {
            Request::ExtendSizeUnsynced {
                ino: self.ino,
                size: end,
                mtime_ns,
            }
        };
        // Both rows answer `Attr | Done`.
        match self.inner.meta_req::<Option<Attr>>(cred, req) {
            Ok(attr) => {
                if let Some(a) = attr {
                    self.note_meta_size(a.size);
                } else {
                    let mut st = lock(&self.state);
                    st.meta_size = st.meta_size.max(end);
                }
                if data_sync {
                    self.sync_meta_after(cred, true)?;
                } else {
                    self.note_unsynced(session);
                }
                Ok(())
            }
            Err(e) => {
                let mut st = lock(&self.state);
                st.unflushed_end = Some(st.unflushed_end.unwrap_or(0).max(end));
                Err(context(
                    e,
                    format!("recording the size {end} of {}", self.describe()),
                ))
            }
        }
    }

    /// Makes every change the metadata server answered so far durable (SyncMeta): what
    /// closes recorded without waiting for the disk (docs/protocol.md, "A close's inline
    /// bytes"). It names the session this inode's oldest such change of this client was
    /// answered under (`unsynced.rs`), so that a server restarted since, which may have
    /// lost it, answers `ServerRestarted` instead of reporting it durable.
    pub(super) fn sync_meta(&self, cred: &Cred) -> Result<(), WireError> {
        let mark = self.inner.unsynced.mark(self.ino);
        let session = mark.map_or(0, |m| m.session);
        let r = self.inner.meta_op(cred, op::SyncMeta { session });
        if let Some(m) = mark {
            // Confirmed, or its loss reported now: once.
            if r.is_ok()
                || r.as_ref()
                    .is_err_and(|e| e.code == ErrorCode::ServerRestarted)
            {
                self.inner.unsynced.checked(self.ino, m);
            }
        }
        r.map(|_| ())
            .map_err(|e| context(e, format!("syncing {}", self.describe())))
    }

    /// The end of an fsync's metadata part. With nothing sent durably (`sent` false), a
    /// change an earlier close recorded (from any handle, or another client) may not be
    /// durable yet: SyncMeta makes it so. After a durable request of its own everything
    /// the same server answered before is durable too, and SyncMeta is needed only if
    /// this client had a change of the inode answered unsynced, to check that the
    /// server which answered it is still the one running (`unsynced.rs`).
    pub(crate) fn sync_meta_after(&self, cred: &Cred, sent: bool) -> Result<(), WireError> {
        if sent && self.inner.unsynced.mark(self.ino).is_none() {
            return Ok(());
        }
        self.sync_meta(cred)
    }

    /// Notes a change answered before it was durable, under the session current when
    /// it was sent; past the bound, confirms them with one SyncMeta (`unsynced.rs`).
    pub(crate) fn note_unsynced(&self, session: u64) {
        if self.inner.unsynced.note(self.ino, session) {
            self.inner.confirm_unsynced();
        }
    }

    /// Sends Fsync to every server of the layout; fails with `ServerRestarted` if a
    /// server answers with another boot identity than it answered this inode's writes
    /// with since the last fsync: it restarted in between, and what it acknowledged
    /// but had not made durable may be lost. The client does not hold acknowledged
    /// bytes to send again, so the loss is reported (once, as Linux reports a failed
    /// write-back at fsync), not repaired.
    pub(super) fn fsync_servers(&self, cred: &Cred) -> Result<(), WireError> {
        let reqs = (0..self.geo.width())
            .map(|place| (place, Request::Fsync { fid: self.ino }))
            .collect();
        let answers = self.on_places(cred, "Fsync", reqs, |pool, resp| match resp {
            Response::Written { boot_id } => Ok(boot_id),
            other => Err(unexpected(pool, "Fsync", &other)),
        })?;
        let mut boots = self.boots.lock().unwrap_or_else(|p| p.into_inner());
        let mut lost = None;
        for (place, boot) in answers.into_iter().enumerate() {
            let place = place as u32;
            if boots.get(&place).is_some_and(|b| *b != boot) {
                lost.get_or_insert(place);
            }
            boots.remove(&place);
        }
        drop(boots);
        match lost {
            None => Ok(()),
            Some(place) => {
                let pool = self.pool(place);
                Err(WireError::new(
                    ErrorCode::ServerRestarted,
                    format!(
                        "fsync of {}: {} restarted since it acknowledged writes to it; \
                         writes not yet durable may be lost",
                        self.describe(),
                        pool.name()
                    ),
                ))
            }
        }
    }

    /// Sets the size: waits for pending writes, cuts (or extends) every server's object,
    /// then records the size on the metadata server.
    /// Cuts or extends the file to `size`: the data servers first, then the size on the
    /// metadata server. `via_write_handle`: the caller holds this file open for writing
    /// (ftruncate); otherwise the caller's write permission is checked before any data
    /// server is touched, so that a refused truncate loses no bytes.
    pub fn truncate(
        &self,
        cred: &Cred,
        size: u64,
        via_write_handle: bool,
    ) -> Result<Attr, WireError> {
        if size > MAX_FILE_BYTES {
            return Err(WireError::new(
                ErrorCode::FileTooBig,
                format!(
                    "size {size} of {} exceeds {MAX_FILE_BYTES}",
                    self.describe()
                ),
            ));
        }
        if !via_write_handle {
            self.inner.meta_op(
                cred,
                op::Access {
                    ino: self.ino,
                    mask: 2,
                },
            )?;
        }
        let resize = Request::SetAttr {
            ino: self.ino,
            attrs: SetAttrs {
                size: Some(size),
                via_write_handle,
                ..SetAttrs::default()
            },
        };
        // Before the wait: a move queues the inline writes for the data servers.
        if let Some(attr) = self.truncate_inline(cred, resize, size)? {
            return Ok(attr);
        }
        self.wait_all();
        self.take_latched()?;
        let unflushed = {
            let mut st = lock(&self.state);
            st.drop_cells(|_| false);
            // Bytes written past the new size are cut off; the SetAttr below records
            // the size (and mtime) that stands.
            st.unflushed_end.take()
        };
        let (unit, stripe) = (self.geo.unit(), *self.geo.stripe());
        let r = self
            .on_all_servers(cred, "Truncate", |place| Request::Truncate {
                fid: self.ino,
                unit,
                local_size: stripe.local_size(size, place),
            })
            .and_then(|()| {
                let attrs = SetAttrs {
                    size: Some(size),
                    via_write_handle,
                    ..SetAttrs::default()
                };
                self.inner.meta_op(
                    cred,
                    stripefs_wire::op::SetAttr {
                        ino: self.ino,
                        attrs,
                    },
                )
            });
        match r {
            Ok(attr) => {
                self.note_meta_size(attr.size);
                Ok(attr)
            }
            Err(e) => {
                // The size may not have changed: the end of the writes before still has
                // to reach the metadata server, or acknowledged bytes would be cut off
                // by the size at close (found by the simulator, seed 100).
                if let Some(end) = unflushed {
                    let mut st = lock(&self.state);
                    st.unflushed_end = Some(st.unflushed_end.unwrap_or(0).max(end));
                }
                Err(e)
            }
        }
    }
}
