//! The MPI side: [`MpiComm`] is the MPI-IO layer's `Communicator` over MPI_COMM_WORLD,
//! and [`MpiRanks`] runs a benchmark's rank function on this process's rank.

use anyhow::{anyhow, Result};
use mpi::datatype::{Partition, PartitionMut};
use mpi::environment::Universe;
use mpi::topology::Communicator as _;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Count;
use std::sync::Mutex;
use stripefs_bench::ranks::{RankFn, Ranks};
use stripefs_mpiio::Communicator;

/// MPI_COMM_WORLD as a `Communicator`. Calls are serialised by a lock: the layer calls
/// its communicator from the rank's own thread, but the trait asks for `Sync`, and MPI
/// is initialised with `MPI_THREAD_FUNNELED` at most.
pub struct MpiComm {
    world: SimpleCommunicator,
    lock: Mutex<()>,
}

// SAFETY: MPI_COMM_WORLD is a process-wide handle; every use goes through `lock`, so no
// two threads are ever inside MPI at once, and in practice only the main thread calls.
unsafe impl Send for MpiComm {}
// SAFETY: as above.
unsafe impl Sync for MpiComm {}

fn count(n: usize) -> Count {
    // A rank's part of a collective call is at most a few hundred MiB; a message past
    // MPI's int counts would be a bug in the caller.
    Count::try_from(n).expect("an MPI message over 2 GiB")
}

fn displacements(counts: &[Count]) -> Vec<Count> {
    counts
        .iter()
        .scan(0, |at, &c| {
            let d = *at;
            *at += c;
            Some(d)
        })
        .collect()
}

/// `bytes` followed by one spare byte: a buffer MPI is handed must never be empty,
/// because an empty Rust buffer's address is 1, which is OpenMPI's `MPI_IN_PLACE` (an
/// empty send buffer would be read as "in place", or refused with MPI_ERR_ARG). The
/// spare byte is outside every count.
fn padded(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.push(0);
    bytes
}

/// Splits `buf` into the parts `counts` describe, in order.
fn split(buf: Vec<u8>, counts: &[Count]) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(counts.len());
    let mut at = 0usize;
    for &c in counts {
        let c = c as usize;
        out.push(buf[at..at + c].to_vec());
        at += c;
    }
    out
}

impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn size(&self) -> usize {
        self.world.size() as usize
    }

    fn barrier(&self) {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.world.barrier();
    }

    fn allgather(&self, mine: Vec<u8>) -> Vec<Vec<u8>> {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let n = self.world.size() as usize;
        let mut counts = vec![0 as Count; n];
        self.world
            .all_gather_into(&count(mine.len()), &mut counts[..]);
        let displs = displacements(&counts);
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let mut buf = vec![0u8; total + 1];
        let len = mine.len();
        let mine = padded(mine);
        {
            let mut part = PartitionMut::new(&mut buf[..], &counts[..], &displs[..]);
            self.world.all_gather_varcount_into(&mine[..len], &mut part);
        }
        split(buf, &counts)
    }

    fn alltoallv(&self, send: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let n = self.world.size() as usize;
        assert_eq!(send.len(), n, "alltoallv takes one message per rank");
        let send_counts: Vec<Count> = send.iter().map(|m| count(m.len())).collect();
        let mut recv_counts = vec![0 as Count; n];
        self.world
            .all_to_all_into(&send_counts[..], &mut recv_counts[..]);
        let send_displs = displacements(&send_counts);
        let recv_displs = displacements(&recv_counts);
        let flat = padded(send.concat());
        let total: usize = recv_counts.iter().map(|&c| c as usize).sum();
        let mut buf = vec![0u8; total + 1];
        {
            let part = Partition::new(&flat[..], &send_counts[..], &send_displs[..]);
            let mut into = PartitionMut::new(&mut buf[..], &recv_counts[..], &recv_displs[..]);
            self.world.all_to_all_varcount_into(&part, &mut into);
        }
        split(buf, &recv_counts)
    }
}

/// This process's rank of the MPI job, for the benchmarks of `stripefs bench`.
pub struct MpiRanks {
    // Dropped before the universe, which finalises MPI.
    comm: MpiComm,
    _universe: Universe,
}

impl MpiRanks {
    /// Initialises MPI; `None` if it cannot be (not under mpirun, or already done).
    pub fn init() -> Option<MpiRanks> {
        let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Funneled)?;
        Some(MpiRanks {
            comm: MpiComm {
                world: universe.world(),
                lock: Mutex::new(()),
            },
            _universe: universe,
        })
    }

    pub fn comm(&self) -> &MpiComm {
        &self.comm
    }

    /// Stops every rank of the job with `code` (MPI_Abort).
    pub fn abort(&self, code: i32) -> ! {
        self.comm.world.abort(code)
    }

    fn max(&self, v: f64) -> f64 {
        let _g = self.comm.lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = 0f64;
        self.comm
            .world
            .all_reduce_into(&v, &mut out, mpi::collective::SystemOperation::max());
        out
    }
}

impl Ranks for MpiRanks {
    fn size(&self) -> usize {
        self.comm.size()
    }

    fn is_root(&self) -> bool {
        self.comm.rank() == 0
    }

    fn each(&self, f: &RankFn<'_>) -> Result<f64> {
        match f(&self.comm) {
            Ok(v) => Ok(self.max(v)),
            Err(e) => {
                // The other ranks may be waiting in a collective call for this one.
                eprintln!("stripefs-mpi: rank {}: {e:#}", self.comm.rank());
                self.abort(1)
            }
        }
    }

    fn once(&self, f: &dyn Fn() -> Result<()>) -> Result<()> {
        let mine = if self.is_root() { f() } else { Ok(()) };
        let mut ok = mine.is_ok() as u8;
        {
            let _g = self.comm.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.comm.world.process_at_rank(0).broadcast_into(&mut ok);
        }
        match (mine, ok) {
            (Err(e), _) => Err(e),
            (Ok(()), 1) => Ok(()),
            (Ok(()), _) => Err(anyhow!("rank 0's part failed (see its message)")),
        }
    }

    fn root_value(&self, v: u64) -> u64 {
        let mut v = v;
        let _g = self.comm.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.comm.world.process_at_rank(0).broadcast_into(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displacements_and_split_agree() {
        let counts = [3, 0, 2];
        assert_eq!(displacements(&counts), vec![0, 3, 3]);
        let parts = split(vec![1, 2, 3, 4, 5], &counts);
        assert_eq!(parts, vec![vec![1, 2, 3], vec![], vec![4, 5]]);
    }
}
