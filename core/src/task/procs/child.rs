//! The child's side: take runs from the parent, one at a time, and answer.
//!
//! A host starts this after importing the app (so every task is registered)
//! and serves the app's calls as a worker's host would: the body runs through
//! the same [`HostQueue`](crate::task::HostQueue) as on the threads pool, so
//! arguments, results and failures cross the same way in both pools. When the
//! parent closes the socket (it retired this child, it stopped, or it died)
//! `serve` returns and the host exits.

use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixStream as StdStream;

use tokio::net::UnixStream;

use super::wire::{self, FromChild, ToChild};
use crate::task::app::App;
use crate::task::state::Failure;

/// The fd a child finds its socket on.
pub const CHILD_FD: RawFd = 3;

/// Serves the parent on fd [`CHILD_FD`] until it closes the socket.
///
/// # Safety
/// The fd must be the socket the parent passed and owned by nothing else.
pub async unsafe fn serve_fd(app: App) -> std::io::Result<()> {
    // SAFETY: the caller vouches that fd 3 is the parent's socket.
    let std = unsafe { StdStream::from_raw_fd(CHILD_FD) };
    std.set_nonblocking(true)?;
    serve(app, UnixStream::from_std(std)?).await
}

/// Serves the parent on `stream` until it closes it.
pub async fn serve(app: App, stream: UnixStream) -> std::io::Result<()> {
    let (mut rx, mut tx) = stream.into_split();
    wire::write(
        &mut tx,
        &FromChild::Ready {
            pid: std::process::id(),
        },
    )
    .await?;
    while let Some(msg) = wire::read::<_, ToChild>(&mut rx).await? {
        let ToChild::Call {
            seq,
            key,
            ctx,
            args,
        } = msg;
        let r = match app.registered(&key) {
            Some(reg) => reg.body.call(ctx, args).await,
            None => Err(Failure::new(
                "NotRegistered",
                format!("no task is registered as {key:?} in the child process"),
            )),
        };
        let (ok, err) = match r {
            Ok(v) => (Some(v), None),
            Err(f) => (None, Some(f)),
        };
        wire::write(&mut tx, &FromChild::Done { seq, ok, err }).await?;
    }
    Ok(())
}
