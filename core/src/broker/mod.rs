//! Brokers: where messages wait, who holds them, where results are kept.
//!
//! Each implements the seams of [`crate::task::spec`]. `memory` is in-process
//! (tests, a single service that wants a queue without a server).

pub mod memory;

pub use memory::MemoryBroker;
