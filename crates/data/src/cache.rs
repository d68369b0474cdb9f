//! Open object handles, kept so that a stream of 1 MiB requests does not pay an open and
//! a close each. Bounded by [`MAX_OPEN_OBJECTS`]; the least recently used is closed first
//! (an evicted handle still in use stays open until its last user drops it).

use crate::intent::IntentLog;
use crate::store::ObjectFile;
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Most objects (each a data file and a checksum sidecar, so two descriptors, and a third
/// once the object has logged an intent) kept open.
pub const MAX_OPEN_OBJECTS: usize = 1024;

/// One object on one target: its data file, its checksum sidecar and its log of
/// intents (`intent.rs`).
pub struct Object {
    pub data: Arc<dyn ObjectFile>,
    pub crcs: Arc<dyn ObjectFile>,
    pub intents: IntentLog,
    /// Partial-block writes in the log on top of their blocks (`pieces.rs`).
    pub pieces: crate::pieces::Pieces,
    /// Partial blocks whose unwritten bytes are known zeros (`zeros.rs`).
    pub zeros: crate::zeros::KnownZeros,
    /// Bytes written since the last flush behind on an emulated disk (`throttle.rs`).
    pub unflushed: std::sync::atomic::AtomicU64,
}

/// Target index and file id.
pub type Key = (u32, u64);

#[derive(Default)]
pub struct ObjectCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    map: HashMap<Key, (Arc<Object>, u64)>,
    /// Handles evicted while possibly still in use: a miss takes one back if it lives,
    /// so that an object never has two live handles (two would keep two logs' states
    /// apart, and opening the second would replay the log under the first's writes).
    evicted: HashMap<Key, Weak<Object>>,
    tick: u64,
}

impl ObjectCache {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached handle for `key` (or an evicted one still in use), or the result of
    /// `open`, which runs under the cache mutex, so that a handle is never opened twice
    /// or cached after a removal that raced with it, and runs only when no handle of the
    /// object is alive anywhere (no write is using one).
    pub fn get_or_open(
        &self,
        key: Key,
        open: impl FnOnce() -> io::Result<Option<Object>>,
    ) -> io::Result<Option<Arc<Object>>> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        if let Some((obj, used)) = inner.map.get_mut(&key) {
            *used = tick;
            return Ok(Some(obj.clone()));
        }
        let alive = inner.evicted.remove(&key).and_then(|w| w.upgrade());
        let obj = match alive {
            Some(obj) => obj,
            None => match open()? {
                Some(obj) => Arc::new(obj),
                None => return Ok(None),
            },
        };
        if inner.map.len() >= MAX_OPEN_OBJECTS {
            inner.evict_oldest();
        }
        inner.map.insert(key, (obj.clone(), tick));
        assert!(inner.map.len() <= MAX_OPEN_OBJECTS);
        Ok(Some(obj))
    }

    /// Forgets `key`'s handle, also an evicted one (its object is being removed).
    pub fn evict(&self, key: Key) {
        let mut inner = self.lock();
        inner.map.remove(&key);
        inner.evicted.remove(&key);
    }

    pub fn len(&self) -> usize {
        self.lock().map.len()
    }
}

impl Inner {
    /// A linear scan, paid only on a miss with a full cache: cheap next to an open(2).
    fn evict_oldest(&mut self) {
        let oldest = self
            .map
            .iter()
            .min_by_key(|(_, (_, used))| *used)
            .map(|(k, _)| *k);
        if let Some(k) = oldest {
            if let Some((obj, _)) = self.map.remove(&k) {
                if self.evicted.len() >= MAX_OPEN_OBJECTS {
                    self.evicted.retain(|_, w| w.strong_count() > 0);
                }
                self.evicted.insert(k, Arc::downgrade(&obj));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Storage;
    use crate::MemStore;
    use std::path::{Path, PathBuf};

    fn object(store: &Arc<MemStore>, n: u64) -> Object {
        let f = |s: &str| {
            store
                .open(Path::new(&format!("/o/{n}{s}")), true)
                .unwrap()
                .unwrap()
        };
        Object {
            data: f(""),
            crcs: f(".crc"),
            intents: IntentLog::new(PathBuf::from(format!("/o/{n}.log")), store.clone(), None),
            pieces: Default::default(),
            zeros: Default::default(),
            unflushed: Default::default(),
        }
    }

    /// A handle evicted while a request still holds it is taken back on the next miss,
    /// not opened a second time (which would replay its log under its writes); once
    /// nobody holds it, a miss opens anew.
    #[test]
    fn an_evicted_handle_in_use_is_taken_back() {
        let store = Arc::new(MemStore::new());
        let cache = ObjectCache::default();
        let opened = std::cell::Cell::new(0);
        let get = |n: u64| {
            cache
                .get_or_open((0, n), || {
                    opened.set(opened.get() + 1);
                    Ok(Some(object(&store, n)))
                })
                .unwrap()
                .unwrap()
        };
        let held = get(0);
        for n in 1..=MAX_OPEN_OBJECTS as u64 {
            get(n);
        }
        assert_eq!(cache.len(), MAX_OPEN_OBJECTS, "object 0 was evicted");
        let before = opened.get();
        let again = get(0);
        assert!(Arc::ptr_eq(&held, &again), "a second handle was opened");
        assert_eq!(opened.get(), before);
        drop((held, again));
        // Evict it again, now unused: the next miss opens it.
        for n in 1000..1000 + MAX_OPEN_OBJECTS as u64 {
            get(n);
        }
        let before = opened.get();
        get(0);
        assert_eq!(opened.get(), before + 1);
    }
}
