//! Open object handles, kept so that a stream of 1 MiB requests does not pay an open and
//! a close each. Bounded by [`MAX_OPEN_OBJECTS`]; the least recently used is closed first
//! (an evicted handle still in use stays open until its last user drops it).

use crate::intent::IntentLog;
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use stripefs_sys::storage::ObjectFile;

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
    /// Signalled when an open in progress ends (see [`Opening`]).
    opened: Condvar,
}

/// An open of one object in progress, outside the cache mutex: requests for the same
/// object wait for it (so it is never opened twice), requests for others go on.
#[derive(Default)]
struct Opening {
    /// The object was removed meanwhile: its handle is not cached when the open ends.
    cancelled: bool,
}

#[derive(Default)]
struct Inner {
    map: HashMap<Key, (Arc<Object>, u64)>,
    /// Handles evicted while possibly still in use: a miss takes one back if it lives,
    /// so that an object never has two live handles (two would keep two logs' states
    /// apart, and opening the second would replay the log under the first's writes).
    evicted: HashMap<Key, Weak<Object>>,
    /// Opens in progress.
    opening: HashMap<Key, Opening>,
    tick: u64,
}

impl ObjectCache {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached handle for `key` (or an evicted one still in use), or the result of
    /// `open`. `open` runs without the cache mutex (a slow open of one object, a log
    /// replay, stalls no request for another), only when no handle of the object is
    /// alive anywhere (no write is using one), and once at a time per object: a request
    /// for an object being opened waits for that open. A handle opened while its object
    /// was removed ([`ObjectCache::evict`]) is given to its caller but not cached.
    pub fn get_or_open(
        &self,
        key: Key,
        open: impl FnOnce() -> io::Result<Option<Object>>,
    ) -> io::Result<Option<Arc<Object>>> {
        let mut inner = self.lock();
        loop {
            inner.tick += 1;
            let tick = inner.tick;
            if let Some((obj, used)) = inner.map.get_mut(&key) {
                *used = tick;
                return Ok(Some(obj.clone()));
            }
            if !inner.opening.contains_key(&key) {
                break;
            }
            inner = self.opened.wait(inner).unwrap_or_else(|p| p.into_inner());
        }
        if let Some(obj) = inner.evicted.remove(&key).and_then(|w| w.upgrade()) {
            inner.cache(key, obj.clone());
            return Ok(Some(obj));
        }
        inner.opening.insert(key, Opening::default());
        drop(inner);
        // Should `open` panic, the waiters for this object are let go all the same.
        struct Unregister<'a>(&'a ObjectCache, Key, bool);
        impl Drop for Unregister<'_> {
            fn drop(&mut self) {
                if !self.2 {
                    self.0.lock().opening.remove(&self.1);
                    self.0.opened.notify_all();
                }
            }
        }
        let mut unregister = Unregister(self, key, false);
        let r = open();
        unregister.2 = true;
        let mut inner = self.lock();
        let slot = inner.opening.remove(&key).expect("our open is registered");
        self.opened.notify_all();
        match r? {
            Some(obj) => {
                let obj = Arc::new(obj);
                if !slot.cancelled {
                    inner.cache(key, obj.clone());
                }
                Ok(Some(obj))
            }
            None => Ok(None),
        }
    }

    /// Forgets `key`'s handle, also an evicted one, and one being opened (its object is
    /// being removed).
    pub fn evict(&self, key: Key) {
        let mut inner = self.lock();
        inner.map.remove(&key);
        inner.evicted.remove(&key);
        if let Some(o) = inner.opening.get_mut(&key) {
            o.cancelled = true;
        }
    }

    pub fn len(&self) -> usize {
        self.lock().map.len()
    }
}

impl Inner {
    fn cache(&mut self, key: Key, obj: Arc<Object>) {
        if self.map.len() >= MAX_OPEN_OBJECTS {
            self.evict_oldest();
        }
        self.map.insert(key, (obj, self.tick));
        assert!(self.map.len() <= MAX_OPEN_OBJECTS);
    }

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
    use crate::MemStore;
    use std::path::{Path, PathBuf};
    use stripefs_sys::storage::Storage;

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

    /// A slow open of one object (a long log replay, a slow disk) leaves requests for
    /// another unaffected, and a second request for the object being opened waits for
    /// that open instead of opening it again.
    #[test]
    fn a_slow_open_stalls_only_its_own_object() {
        let store = Arc::new(MemStore::new());
        let cache = Arc::new(ObjectCache::default());
        let opens = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let (started_tx, started) = std::sync::mpsc::channel::<()>();
        let slow = {
            let (cache, store, opens) = (cache.clone(), store.clone(), opens.clone());
            std::thread::spawn(move || {
                cache
                    .get_or_open((0, 1), || {
                        opens.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        started_tx.send(()).unwrap();
                        wait.recv().unwrap();
                        Ok(Some(object(&store, 1)))
                    })
                    .unwrap()
                    .unwrap()
            })
        };
        started.recv().unwrap();
        // Another object, while the first is still being opened.
        let (done_tx, done) = std::sync::mpsc::channel();
        {
            let (cache, store) = (cache.clone(), store.clone());
            std::thread::spawn(move || {
                let o = cache.get_or_open((0, 2), || Ok(Some(object(&store, 2))));
                done_tx.send(o.unwrap().is_some()).unwrap();
            });
        }
        assert_eq!(
            done.recv_timeout(std::time::Duration::from_secs(10)),
            Ok(true),
            "a request for another object waited for the slow open"
        );
        // The same object: waits, then shares the handle the slow open made.
        let same = {
            let (cache, opens) = (cache.clone(), opens.clone());
            std::thread::spawn(move || {
                cache
                    .get_or_open((0, 1), || {
                        opens.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        panic!("opened twice")
                    })
                    .unwrap()
                    .unwrap()
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        release.send(()).unwrap();
        let (a, b) = (slow.join().unwrap(), same.join().unwrap());
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(opens.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// An object removed while it is being opened is not cached afterwards.
    #[test]
    fn an_object_removed_during_its_open_is_not_cached() {
        let store = Arc::new(MemStore::new());
        let cache = ObjectCache::default();
        let o = cache
            .get_or_open((0, 7), || {
                cache.evict((0, 7));
                Ok(Some(object(&store, 7)))
            })
            .unwrap();
        assert!(o.is_some());
        assert_eq!(cache.len(), 0);
    }
}
