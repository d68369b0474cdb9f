//! The namespace as the writer and the readers see it: the redb store of record under
//! up to two in-memory layers of changes that the metadata log (`wal.rs`) already holds
//! durably but the store does not yet.
//!
//! ```text
//!   newest   batch delta   (the writer's own, not yet durable: only the writer sees it)
//!            active        (durable in the current log file, visible to all)
//!            frozen        (durable in the previous log file, being checkpointed)
//!   oldest   redb          (the last checkpoint)
//! ```
//!
//! A lookup takes the newest layer that knows the key; a deleted key is a tombstone
//! (`None`) that hides older layers. Directory listings merge the layers in name order.
//!
//! Readers hold the [`Layers`] read lock for a whole request, and begin their redb read
//! inside it: the checkpoint drops the frozen layer only under the write lock, after its
//! redb commit, so a reader never misses a change that moved from a layer to redb.

use crate::store::{io, type_from_code, Inode, Rd, Tables, META_DIRS, META_FILES};
use redb::{ReadableTable, ReadableTableMetadata};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use stripefs_wire::{DirEntry, FileType, InodeId, Layout, WireError};

/// One layer of changes; `None` values are deletions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gen {
    pub inodes: HashMap<u64, Option<Inode>>,
    /// parent -> name -> (child, type)
    pub dirents: BTreeMap<u64, BTreeMap<String, Option<(u64, FileType)>>>,
    /// Counters are never deleted.
    pub counters: BTreeMap<String, u64>,
    pub purge: BTreeMap<u64, Option<Layout>>,
    /// true: marked as orphan; false: mark removed.
    pub orphans: BTreeMap<u64, bool>,
}

impl Gen {
    /// Number of keys changed.
    pub fn len(&self) -> usize {
        self.inodes.len()
            + self.dirents.values().map(|d| d.len()).sum::<usize>()
            + self.counters.len()
            + self.purge.len()
            + self.orphans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether only inodes changed (no entries, counters, purge or orphan marks).
    pub fn only_inodes(&self) -> bool {
        self.dirents.is_empty()
            && self.counters.is_empty()
            && self.purge.is_empty()
            && self.orphans.is_empty()
    }

    /// Takes in the changes of `newer`, which override ours.
    pub fn absorb(&mut self, newer: Gen) {
        self.inodes.extend(newer.inodes);
        for (parent, names) in newer.dirents {
            self.dirents.entry(parent).or_default().extend(names);
        }
        self.counters.extend(newer.counters);
        self.purge.extend(newer.purge);
        self.orphans.extend(newer.orphans);
    }
}

/// The shared layers above redb.
#[derive(Default)]
pub struct Layers {
    pub active: Gen,
    pub frozen: Option<Arc<Gen>>,
}

/// A consistent view: some layers, newest first, over a redb read snapshot.
pub struct Stack<'a> {
    /// At most: the batch delta, active, frozen (no allocation per lookup).
    gens: [Option<&'a Gen>; 3],
    rd: &'a Rd,
}

impl<'a> Stack<'a> {
    fn gens(&self) -> impl Iterator<Item = &'a Gen> + '_ {
        self.gens.iter().flatten().copied()
    }

    /// The whole purge queue in inode order, up to `limit` entries.
    pub fn purge_entries(&self, limit: usize) -> Result<Vec<(u64, Layout)>, WireError> {
        let mut srcs: Vec<Source<u64, Layout>> = self
            .gens()
            .map(|g| -> Source<u64, Layout> {
                Box::new(g.purge.iter().map(|(k, v)| Ok((*k, v.clone()))))
            })
            .collect();
        let iter = self
            .rd
            .purge
            .iter()
            .map_err(|e| io("listing the purge queue", e))?;
        srcs.push(Box::new(iter.map(|item| {
            let (k, v) = item.map_err(|e| io("listing the purge queue", e))?;
            let ino = k.value();
            Ok((ino, Some(crate::store::decode_layout(ino, v.value())?)))
        })));
        collect(srcs, limit)
    }

    /// Inodes marked as orphans.
    pub fn orphans(&self) -> Result<Vec<u64>, WireError> {
        let mut srcs: Vec<Source<u64, ()>> = self
            .gens()
            .map(|g| -> Source<u64, ()> {
                Box::new(g.orphans.iter().map(|(k, v)| Ok((*k, v.then_some(())))))
            })
            .collect();
        let iter = self
            .rd
            .orphans
            .iter()
            .map_err(|e| io("listing orphans", e))?;
        srcs.push(Box::new(iter.map(|item| {
            let (k, _) = item.map_err(|e| io("listing orphans", e))?;
            Ok((k.value(), Some(())))
        })));
        Ok(collect(srcs, usize::MAX)?
            .into_iter()
            .map(|(k, ())| k)
            .collect())
    }

    /// Number of inodes (for MetaStatus): redb's count corrected by the layers.
    pub fn inode_count(&self) -> Result<u64, WireError> {
        let mut count = self.rd.inodes.len().map_err(|e| io("counting inodes", e))?;
        let mut seen = std::collections::HashSet::new();
        for g in self.gens() {
            for (ino, v) in &g.inodes {
                if !seen.insert(*ino) {
                    continue; // a newer layer decided
                }
                let in_db = self
                    .rd
                    .inodes
                    .get(*ino)
                    .map_err(|e| io(format!("reading inode {ino}"), e))?
                    .is_some();
                match (in_db, v.is_some()) {
                    (false, true) => count += 1,
                    (true, false) => count = count.saturating_sub(1),
                    _ => {}
                }
            }
        }
        Ok(count)
    }
}

impl Tables for Stack<'_> {
    fn inode(&self, ino: u64) -> Result<Option<Inode>, WireError> {
        for g in self.gens() {
            if let Some(v) = g.inodes.get(&ino) {
                return Ok(v.clone());
            }
        }
        self.rd.inode(ino)
    }

    fn entry(&self, parent: u64, name: &str) -> Result<Option<(u64, FileType)>, WireError> {
        for g in self.gens() {
            if let Some(v) = g.dirents.get(&parent).and_then(|d| d.get(name)) {
                return Ok(*v);
            }
        }
        self.rd.entry(parent, name)
    }

    fn entries(
        &self,
        parent: u64,
        after: &str,
        limit: usize,
    ) -> Result<(Vec<DirEntry>, bool), WireError> {
        use std::ops::Bound::{Excluded, Unbounded};
        let mut srcs: Vec<Source<String, (u64, FileType)>> = Vec::new();
        for g in self.gens() {
            if let Some(d) = g.dirents.get(&parent) {
                let range = d.range::<str, _>((Excluded(after), Unbounded));
                srcs.push(Box::new(range.map(|(k, v)| Ok((k.clone(), *v)))));
            }
        }
        let what = move || format!("listing inode {parent}");
        // (parent, "") sorts before every real name, and (parent + 1, "") after all.
        let upper = match parent.checked_add(1) {
            Some(next) => Excluded((next, "")),
            None => Unbounded,
        };
        let range = self
            .rd
            .dirents
            .range::<(u64, &str)>((Excluded((parent, after)), upper))
            .map_err(|e| io(what(), e))?;
        srcs.push(Box::new(range.map(move |item| {
            let (k, v) = item.map_err(|e| io(what(), e))?;
            let (_, name) = k.value();
            let (child, code) = v.value();
            Ok((
                name.to_string(),
                Some((child, type_from_code(parent, name, code)?)),
            ))
        })));
        let mut out = Vec::new();
        let mut more = false;
        merge(srcs, |name, (ino, ftype)| {
            if out.len() == limit {
                more = true;
                return false;
            }
            out.push(DirEntry {
                name,
                ino: InodeId(ino),
                ftype,
            });
            true
        })?;
        Ok((out, !more))
    }

    fn counter(&self, key: &str) -> Result<u64, WireError> {
        for g in self.gens() {
            if let Some(v) = g.counters.get(key) {
                return Ok(*v);
            }
        }
        self.rd.counter(key)
    }
}

/// A sorted source of (key, value or tombstone).
type Source<'a, K, V> = Box<dyn Iterator<Item = Result<(K, Option<V>), WireError>> + 'a>;

/// The first `limit` live entries of merged sources (see [`merge`]).
fn collect<K: Ord + Clone, V>(
    srcs: Vec<Source<K, V>>,
    limit: usize,
) -> Result<Vec<(K, V)>, WireError> {
    let mut out = Vec::new();
    merge(srcs, |k, v| {
        if out.len() == limit {
            return false;
        }
        out.push((k, v));
        true
    })?;
    Ok(out)
}

/// Merges sorted sources (newest first) in key order: for each key the newest source's
/// value wins, tombstones hide the key. `f` returns false to stop.
fn merge<K: Ord + Clone, V>(
    mut srcs: Vec<Source<K, V>>,
    mut f: impl FnMut(K, V) -> bool,
) -> Result<(), WireError> {
    let mut heads: Vec<Option<(K, Option<V>)>> = Vec::with_capacity(srcs.len());
    for s in srcs.iter_mut() {
        heads.push(s.next().transpose()?);
    }
    loop {
        let Some(min) = heads.iter().flatten().map(|(k, _)| k).min().cloned() else {
            return Ok(());
        };
        let mut value = None;
        let mut decided = false;
        for (head, src) in heads.iter_mut().zip(srcs.iter_mut()) {
            if head.as_ref().is_some_and(|(k, _)| *k == min) {
                let (_, v) = head.take().expect("checked above");
                if !decided {
                    value = v;
                    decided = true;
                }
                *head = src.next().transpose()?;
            }
        }
        if let Some(v) = value {
            if !f(min, v) {
                return Ok(());
            }
        }
    }
}

/// A reader's view: the shared layers (read-locked) over a redb snapshot.
pub struct View<'a> {
    layers: &'a Layers,
    rd: &'a Rd,
}

impl<'a> View<'a> {
    /// `rd` must be a snapshot begun while `layers` was already locked.
    pub fn new(layers: &'a Layers, rd: &'a Rd) -> View<'a> {
        View { layers, rd }
    }

    pub fn stack(&self) -> Stack<'_> {
        Stack {
            gens: [
                Some(&self.layers.active),
                self.layers.frozen.as_deref(),
                None,
            ],
            rd: self.rd,
        }
    }
}

/// Forwards every [`Tables`] call to the type's `stack()`.
macro_rules! tables_via_stack {
    ($t:ty) => {
        impl Tables for $t {
            fn inode(&self, ino: u64) -> Result<Option<Inode>, WireError> {
                self.stack().inode(ino)
            }
            fn entry(&self, parent: u64, name: &str) -> Result<Option<(u64, FileType)>, WireError> {
                self.stack().entry(parent, name)
            }
            fn entries(
                &self,
                parent: u64,
                after: &str,
                limit: usize,
            ) -> Result<(Vec<DirEntry>, bool), WireError> {
                self.stack().entries(parent, after, limit)
            }
            fn counter(&self, key: &str) -> Result<u64, WireError> {
                self.stack().counter(key)
            }
        }
    };
}

tables_via_stack!(View<'_>);

/// The writer's view of one batch: its own changes (`delta`) over a [`View`].
pub struct Wr<'t> {
    base: View<'t>,
    pub delta: Gen,
}

impl<'t> Wr<'t> {
    pub fn new(base: View<'t>) -> Wr<'t> {
        Wr {
            base,
            delta: Gen::default(),
        }
    }

    pub fn stack(&self) -> Stack<'_> {
        Stack {
            gens: [
                Some(&self.delta),
                Some(&self.base.layers.active),
                self.base.layers.frozen.as_deref(),
            ],
            rd: self.base.rd,
        }
    }

    pub fn put_inode(&mut self, ino: u64, inode: &Inode) -> Result<(), WireError> {
        assert!(ino != 0, "inode 0 is never used");
        self.delta.inodes.insert(ino, Some(inode.clone()));
        Ok(())
    }

    pub fn del_inode(&mut self, ino: u64) -> Result<(), WireError> {
        assert!(
            ino != InodeId::ROOT.0,
            "the root directory is never deleted"
        );
        self.delta.inodes.insert(ino, None);
        Ok(())
    }

    pub fn put_entry(
        &mut self,
        parent: u64,
        name: &str,
        child: u64,
        t: FileType,
    ) -> Result<(), WireError> {
        self.delta
            .dirents
            .entry(parent)
            .or_default()
            .insert(name.to_string(), Some((child, t)));
        Ok(())
    }

    pub fn del_entry(&mut self, parent: u64, name: &str) -> Result<(), WireError> {
        self.delta
            .dirents
            .entry(parent)
            .or_default()
            .insert(name.to_string(), None);
        Ok(())
    }

    pub fn set_counter(&mut self, key: &str, v: u64) -> Result<(), WireError> {
        self.delta.counters.insert(key.to_string(), v);
        Ok(())
    }

    /// Adds `delta` to a counter; counters never go below zero.
    pub fn bump(&mut self, key: &str, delta: i64) -> Result<(), WireError> {
        assert!(
            key == META_FILES || key == META_DIRS,
            "only counts are bumped"
        );
        let v = self.counter(key)?;
        let next = v.checked_add_signed(delta).unwrap_or(0);
        self.set_counter(key, next)
    }

    pub fn enqueue_purge(&mut self, ino: u64, layout: &Layout) -> Result<(), WireError> {
        self.delta.purge.insert(ino, Some(layout.clone()));
        Ok(())
    }

    pub fn del_purge(&mut self, ino: u64) -> Result<(), WireError> {
        self.delta.purge.insert(ino, None);
        Ok(())
    }

    pub fn set_orphan(&mut self, ino: u64, orphan: bool) -> Result<(), WireError> {
        self.delta.orphans.insert(ino, orphan);
        Ok(())
    }
}

tables_via_stack!(Wr<'_>);

#[cfg(test)]
mod tests {
    use super::*;

    fn src(v: Vec<(u32, Option<char>)>) -> Source<'static, u32, char> {
        Box::new(v.into_iter().map(Ok))
    }

    #[test]
    fn merge_prefers_newest_and_hides_tombstones() {
        let newest = src(vec![(1, None), (4, Some('n'))]);
        let middle = src(vec![(2, Some('m')), (4, Some('x')), (6, None)]);
        let oldest = src(vec![
            (1, Some('o')),
            (3, Some('o')),
            (6, Some('o')),
            (7, Some('o')),
        ]);
        let mut out = Vec::new();
        merge(vec![newest, middle, oldest], |k, v| {
            out.push((k, v));
            true
        })
        .unwrap();
        assert_eq!(out, vec![(2, 'm'), (3, 'o'), (4, 'n'), (7, 'o')]);
    }

    #[test]
    fn merge_stops_when_asked() {
        let a = src(vec![(1, Some('a')), (2, Some('a')), (3, Some('a'))]);
        let mut out = Vec::new();
        merge(vec![a], |k, _| {
            out.push(k);
            out.len() < 2
        })
        .unwrap();
        assert_eq!(out, vec![1, 2]);
    }

    #[test]
    fn absorb_overrides_older_changes() {
        let mut old = Gen::default();
        old.counters.insert("a".into(), 1);
        old.dirents
            .entry(1)
            .or_default()
            .insert("x".into(), Some((5, FileType::File)));
        let mut new = Gen::default();
        new.counters.insert("a".into(), 2);
        new.dirents.entry(1).or_default().insert("x".into(), None);
        new.dirents
            .entry(1)
            .or_default()
            .insert("y".into(), Some((6, FileType::Dir)));
        old.absorb(new);
        assert_eq!(old.counters["a"], 2);
        assert_eq!(old.dirents[&1]["x"], None);
        assert_eq!(old.dirents[&1]["y"], Some((6, FileType::Dir)));
        assert_eq!(old.len(), 3);
    }
}
