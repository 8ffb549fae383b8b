//! What the parent and a child say to each other over the child's socket.
//!
//! One frame is a 4-byte big-endian length and that many bytes of JSON. JSON
//! because the arguments and results already are JSON values (a run's
//! message carries them so); the frame length because a stream has no
//! message boundaries. A frame over [`FRAME_MAX`] is refused as a broken
//! peer rather than allocated.
//!
//! The conversation is strictly one run at a time per child: the parent sends
//! `call`, the child answers `done` with the same `seq`. The child says
//! `ready` once, after it imported the app, so the parent never hands a run to
//! a child that would fail to find its task.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::task::body::Context;
use crate::task::state::Failure;

/// The largest frame either side accepts: 1 GiB, far above any message a
/// broker carries (Redis's own limit on a value is 512 MB).
pub const FRAME_MAX: usize = 1 << 30;

/// From the parent to a child.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum ToChild {
    /// Run the body registered as `key`.
    Call {
        seq: u64,
        key: String,
        ctx: Context,
        args: Vec<Value>,
    },
}

/// From a child to the parent.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum FromChild {
    /// Imported the app; ready for calls.
    Ready { pid: u32 },
    /// Run `id`'s body recorded a custom state (`ctx.update_state`):
    /// stored by the parent before it reads on.
    State {
        id: String,
        state: String,
        meta: Value,
    },
    /// What call `seq` came to.
    Done {
        seq: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ok: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        err: Option<Failure>,
    },
}

/// One frame's bytes (see [`frame`]).
pub(crate) fn frame_bytes<T: Serialize>(msg: &T) -> std::io::Result<Vec<u8>> {
    frame(msg)
}

/// One frame's bytes: its length, then `msg` as JSON.
fn frame<T: Serialize>(msg: &T) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 4];
    serde_json::to_writer(&mut buf, msg).map_err(std::io::Error::other)?;
    let n = buf.len() - 4;
    if n > FRAME_MAX {
        return Err(std::io::Error::other(format!(
            "a frame of {n} bytes is over the limit of {FRAME_MAX}"
        )));
    }
    buf[..4].copy_from_slice(&(n as u32).to_be_bytes());
    Ok(buf)
}

/// A frame's length from its first four bytes, refused past [`FRAME_MAX`].
fn length(len: [u8; 4]) -> std::io::Result<usize> {
    let n = u32::from_be_bytes(len) as usize;
    if n > FRAME_MAX {
        return Err(std::io::Error::other(format!(
            "a frame of {n} bytes is over the limit of {FRAME_MAX}"
        )));
    }
    Ok(n)
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> std::io::Result<T> {
    serde_json::from_slice(body)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Writes one frame.
pub async fn write<W: AsyncWrite + Unpin, T: Serialize>(w: &mut W, msg: &T) -> std::io::Result<()> {
    w.write_all(&frame(msg)?).await?;
    w.flush().await
}

/// Writes one frame, blocking (a child's main thread, the GIL released).
pub fn write_blocking<W: std::io::Write, T: Serialize>(w: &mut W, msg: &T) -> std::io::Result<()> {
    w.write_all(&frame(msg)?)?;
    w.flush()
}

/// Reads one frame, blocking; `None` at a clean end of stream.
pub fn read_blocking<R: std::io::Read, T: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> std::io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut body = vec![0u8; length(len)?];
    r.read_exact(&mut body)?;
    parse(&body).map(Some)
}

/// Reads one frame; `None` at a clean end of stream (the peer closed).
pub async fn read<R: AsyncRead + Unpin, T: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> std::io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut body = vec![0u8; length(len)?];
    r.read_exact(&mut body).await?;
    parse(&body).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_end_cleanly() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write(&mut a, &FromChild::Ready { pid: 7 }).await.unwrap();
        write(
            &mut a,
            &FromChild::Done {
                seq: 3,
                ok: None,
                err: Some(Failure::new("ValueError", "bad")),
            },
        )
        .await
        .unwrap();
        drop(a);
        match read::<_, FromChild>(&mut b).await.unwrap() {
            Some(FromChild::Ready { pid: 7 }) => {}
            other => panic!("{other:?}"),
        }
        match read::<_, FromChild>(&mut b).await.unwrap() {
            Some(FromChild::Done {
                seq: 3,
                ok: None,
                err: Some(f),
            }) => assert_eq!(f.kind, "ValueError"),
            other => panic!("{other:?}"),
        }
        assert!(read::<_, FromChild>(&mut b).await.unwrap().is_none());
    }

    #[test]
    fn blocking_frames_read_what_async_ones_write() {
        let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        write_blocking(&mut a, &FromChild::Ready { pid: 9 }).unwrap();
        drop(a);
        assert!(matches!(
            read_blocking::<_, FromChild>(&mut b).unwrap(),
            Some(FromChild::Ready { pid: 9 })
        ));
        assert!(read_blocking::<_, FromChild>(&mut b).unwrap().is_none());
    }

    #[tokio::test]
    async fn an_oversized_or_garbled_frame_is_an_error_not_an_allocation() {
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
        let e = read::<_, FromChild>(&mut b).await.unwrap_err();
        assert!(e.to_string().contains("over the limit"), "{e}");
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&3u32.to_be_bytes()).await.unwrap();
        a.write_all(b"{x}").await.unwrap();
        assert_eq!(
            read::<_, FromChild>(&mut b).await.unwrap_err().kind(),
            std::io::ErrorKind::InvalidData
        );
    }
}
