//! The communicator the collective calls exchange data through. `ThreadComm` runs the
//! ranks as threads of one process (unit tests and `stripefs bench`); a real MPI
//! implementation lives outside this crate, so that nothing here needs MPI.

use std::sync::{Arc, Barrier, Condvar, Mutex};

/// What a collective needs of a communicator.
pub trait Communicator: Send + Sync {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    fn barrier(&self);
    /// Every rank's `mine`, by rank, at every rank.
    fn allgather(&self, mine: Vec<u8>) -> Vec<Vec<u8>>;
    /// `send[r]` goes to rank r; returns what each rank sent this one, by rank.
    fn alltoallv(&self, send: Vec<Vec<u8>>) -> Vec<Vec<u8>>;
}

/// Shared state of one group of thread ranks.
struct Group {
    size: usize,
    barrier: Barrier,
    /// slots[from][to]: a message in transit.
    slots: Mutex<Vec<Vec<Option<Vec<u8>>>>>,
    posted: Condvar,
}

/// One rank of a group of threads.
#[derive(Clone)]
pub struct ThreadComm {
    rank: usize,
    group: Arc<Group>,
}

impl ThreadComm {
    /// `size` ranks, to hand one to each thread.
    pub fn group(size: usize) -> Vec<ThreadComm> {
        assert!(size > 0, "a communicator has at least one rank");
        let group = Arc::new(Group {
            size,
            barrier: Barrier::new(size),
            slots: Mutex::new(vec![vec![None; size]; size]),
            posted: Condvar::new(),
        });
        (0..size)
            .map(|rank| ThreadComm {
                rank,
                group: group.clone(),
            })
            .collect()
    }
}

impl Communicator for ThreadComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.group.size
    }

    fn barrier(&self) {
        self.group.barrier.wait();
    }

    fn allgather(&self, mine: Vec<u8>) -> Vec<Vec<u8>> {
        self.alltoallv(vec![mine; self.group.size])
    }

    fn alltoallv(&self, send: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let g = &self.group;
        assert_eq!(send.len(), g.size, "alltoallv needs one buffer per rank");
        {
            let mut slots = g.slots.lock().unwrap_or_else(|p| p.into_inner());
            for (to, msg) in send.into_iter().enumerate() {
                debug_assert!(slots[self.rank][to].is_none());
                slots[self.rank][to] = Some(msg);
            }
        }
        g.posted.notify_all();
        let mut got = vec![Vec::new(); g.size];
        let mut slots = g.slots.lock().unwrap_or_else(|p| p.into_inner());
        for (from, out) in got.iter_mut().enumerate() {
            loop {
                if let Some(m) = slots[from][self.rank].take() {
                    *out = m;
                    break;
                }
                slots = g.posted.wait(slots).unwrap_or_else(|p| p.into_inner());
            }
        }
        drop(slots);
        // Nobody posts the next round's messages before everyone took this round's.
        g.barrier.wait();
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_ranks_exchange_in_every_direction() {
        let comms = ThreadComm::group(4);
        let threads: Vec<_> = comms
            .into_iter()
            .map(|c| {
                std::thread::spawn(move || {
                    let r = c.rank() as u8;
                    for round in 0..3u8 {
                        let got = c.alltoallv((0..4u8).map(|to| vec![r, to, round]).collect());
                        for (from, m) in got.iter().enumerate() {
                            assert_eq!(m, &vec![from as u8, r, round]);
                        }
                        let all = c.allgather(vec![r; r as usize]);
                        assert_eq!(all.iter().map(Vec::len).collect::<Vec<_>>(), [0, 1, 2, 3]);
                    }
                    c.barrier();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
