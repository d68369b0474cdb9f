//! How the ranks of an MPI-style benchmark run: as threads of this process
//! ([`Threads`], `stripefs bench ...`), or as the processes of an MPI job (the
//! `stripefs-mpi` binary implements [`Ranks`] over the `mpi` crate). The benchmarks are
//! written once against this trait, so both runs measure the same code.

use anyhow::{anyhow, Context, Result};
use stripefs_mpiio::{Communicator, ThreadComm};

/// A rank's part of a benchmark: it gets the rank's communicator and returns a number
/// (seconds, usually); the benchmark sees the largest over all ranks.
pub type RankFn<'a> = dyn Fn(&dyn Communicator) -> Result<f64> + Sync + 'a;

pub trait Ranks {
    /// Ranks in the job.
    fn size(&self) -> usize;
    /// Whether this process prints the table and writes the report (threads: yes; MPI:
    /// rank 0).
    fn is_root(&self) -> bool;
    /// Runs `f` on every rank this process holds (threads: all of them; MPI: its one
    /// rank) and returns the largest value over all ranks, at every rank. A rank's
    /// error is an error of the whole run (under MPI the job is aborted, as MPI
    /// programs do, so that no rank waits forever for one that failed).
    fn each(&self, f: &RankFn<'_>) -> Result<f64>;
    /// Runs `f` once for the job (set-up, clean-up; on rank 0 under MPI) and makes every
    /// rank wait until it is done; its error is every rank's error.
    fn once(&self, f: &dyn Fn() -> Result<()>) -> Result<()>;
    /// Rank 0's `v`, at every rank (a broadcast: the seed every rank must share).
    fn root_value(&self, v: u64) -> u64;
}

/// Ranks as threads of this process, each with its own client.
pub struct Threads(pub usize);

impl Ranks for Threads {
    fn size(&self) -> usize {
        self.0
    }

    fn is_root(&self) -> bool {
        true
    }

    fn each(&self, f: &RankFn<'_>) -> Result<f64> {
        let comms = ThreadComm::group(self.0);
        let results: Vec<Result<f64>> = std::thread::scope(|s| {
            let hs: Vec<_> = comms.iter().map(|c| s.spawn(move || f(c))).collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("a rank panicked"))))
                .collect()
        });
        let mut worst = 0f64;
        for (r, res) in results.into_iter().enumerate() {
            worst = worst.max(res.with_context(|| format!("rank {r}"))?);
        }
        Ok(worst)
    }

    fn once(&self, f: &dyn Fn() -> Result<()>) -> Result<()> {
        f()
    }

    fn root_value(&self, v: u64) -> u64 {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_give_the_largest_value_and_name_a_failing_rank() {
        let t = Threads(4);
        let max = t.each(&|c| {
            c.barrier();
            Ok(c.rank() as f64)
        });
        assert_eq!(max.unwrap(), 3.0);
        let err = t
            .each(&|c| match c.rank() {
                2 => Err(anyhow!("disk full")),
                _ => Ok(0.0),
            })
            .unwrap_err();
        assert!(format!("{err:#}").contains("rank 2: disk full"), "{err:#}");
    }
}
