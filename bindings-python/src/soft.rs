//! Soft time limits for sync Python bodies: `SoftTimeLimitExceeded` raised
//! inside the body's thread.
//!
//! The core times the limit and reports the calls past it
//! (`HostQueue::softened`); this file only delivers the exception. CPython
//! can raise an exception in another thread (`PyThreadState_SetAsyncExc`); it
//! fires at that thread's next bytecode, so a body in pure Python is
//! interrupted at once, while one blocked in C (a `time.sleep`, a socket
//! read) sees it when that call returns. The main thread can be woken out of
//! a blocking call by a signal, so a process-pool child, whose bodies run on
//! its main thread, asks for `SIGUSR1` as well (`wake_with`): its handler
//! runs, the pending exception fires in it, and the sleep ends there.
//!
//! An exception still pending when the body returns would fire in the next
//! body on that thread; the runner clears it (`ran`) before the thread runs
//! anything else, while it still holds the GIL.

use std::collections::{HashMap, HashSet};
use std::os::raw::{c_long, c_ulong};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

use pyo3::prelude::*;

/// The threads running sync calls now, and the calls softened.
#[derive(Default)]
pub(crate) struct Soft {
    running: Mutex<HashMap<u64, c_ulong>>,
    softened: Mutex<HashSet<u64>>,
    /// A signal to raise in this process with each soft limit (0: none).
    wake: AtomicI32,
}

impl Soft {
    /// This thread starts running call `seq`.
    pub(crate) fn running(&self, seq: u64) {
        // SAFETY: reads the calling thread's id; no state touched.
        let tid = unsafe { pyo3::ffi::PyThread_get_thread_ident() };
        lock(&self.running).insert(seq, tid);
    }

    /// Call `seq` returned on this thread (the GIL held): a soft limit
    /// that has not fired yet is cleared, so it cannot hit the next body.
    pub(crate) fn ran(&self, _py: Python<'_>, seq: u64) {
        let tid = lock(&self.running).remove(&seq);
        if lock(&self.softened).remove(&seq)
            && let Some(tid) = tid
        {
            // SAFETY: the GIL is held; a null exception clears.
            unsafe {
                pyo3::ffi::PyThreadState_SetAsyncExc(tid as c_long, std::ptr::null_mut());
            }
        }
    }

    pub(crate) fn wake_with(&self, sig: i32) {
        self.wake.store(sig, Ordering::SeqCst);
    }

    /// Raises `exc` in the threads running `seqs` (the GIL held).
    pub(crate) fn soften(&self, py: Python<'_>, seqs: &[u64], exc: &Bound<'_, PyAny>) {
        let mut hit = false;
        for seq in seqs {
            let tid = lock(&self.running).get(seq).copied();
            if let Some(tid) = tid {
                lock(&self.softened).insert(*seq);
                // SAFETY: the GIL is held and `exc` is a live class.
                unsafe {
                    pyo3::ffi::PyThreadState_SetAsyncExc(tid as c_long, exc.as_ptr());
                }
                hit = true;
            }
        }
        let sig = self.wake.load(Ordering::SeqCst);
        if hit
            && sig != 0
            && let Ok(os) = py.import("os")
        {
            let _ = os.call_method1("kill", (std::process::id(), sig));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
