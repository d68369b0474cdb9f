//! The MPI-IO layer's pure core (issue 15): derived datatypes as MPI builds them
//! (contiguous, vector, hvector, indexed, hindexed, subarray in C and Fortran order,
//! struct, any nesting), flattened to (offset, length) lists, and file views (displacement,
//! elementary type, file type) that map a range of a view's data bytes to file extents.
//! No MPI and no I/O here: the file handles, list I/O, collective buffering and
//! asynchronous requests build on these lists.

mod comm;
mod datatype;
mod describe;
mod file;
mod view;

pub use comm::{Communicator, ThreadComm};
pub use datatype::{Datatype, Order, TypeError};
pub use describe::MAX_DESCRIPTION_BYTES;
pub use file::{testany, waitall, File, Hints, IoError, Mode, Request, DEFAULT_SIEVE_BYTES};
pub use view::View;
