//! Open object handles, kept so that a stream of 1 MiB requests does not pay an open and
//! a close each. Bounded by [`MAX_OPEN_OBJECTS`]; the least recently used is closed first
//! (an evicted handle still in use stays open until its last user drops it).

use crate::intent::IntentLog;
use crate::store::ObjectFile;
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

/// Most objects (each a data file and a checksum sidecar, so two descriptors, and a third
/// once the object has logged an intent) kept open.
pub const MAX_OPEN_OBJECTS: usize = 1024;

/// One object on one target: its data file, its checksum sidecar and its log of
/// intents (`intent.rs`).
pub struct Object {
    pub data: Arc<dyn ObjectFile>,
    pub crcs: Arc<dyn ObjectFile>,
    pub intents: IntentLog,
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
    tick: u64,
}

impl ObjectCache {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached handle for `key`, or the result of `open` (which runs under the cache
    /// mutex, so that a handle is never opened twice or cached after a removal that
    /// raced with it).
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
        let Some(obj) = open()? else {
            return Ok(None);
        };
        if inner.map.len() >= MAX_OPEN_OBJECTS {
            inner.evict_oldest();
        }
        let obj = Arc::new(obj);
        inner.map.insert(key, (obj.clone(), tick));
        assert!(inner.map.len() <= MAX_OPEN_OBJECTS);
        Ok(Some(obj))
    }

    pub fn evict(&self, key: Key) {
        self.lock().map.remove(&key);
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
            self.map.remove(&k);
        }
    }
}
