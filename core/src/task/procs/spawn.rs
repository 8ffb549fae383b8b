//! A child process as the pool holds it: started with its socket on fd 3
//! and waited for until it says `ready`, signalled by pid only while it is
//! not yet reaped, its exit read by a reaper thread of its own, and let go.
//! The pool's rules (who gets a run, limits, replacement) are `pool.rs`'s.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream as StdStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::watch;

use super::pool::ProcSpec;
use super::wire::{self, FromChild};

/// How long a child may take from its start to `ready` (importing the app):
/// 60 s, far above a large Django project's import time.
pub const STARTUP: Duration = Duration::from_secs(60);

/// How long a child signalled to terminate may outlive the signal before it
/// is killed: 2 s.
pub const KILL_AFTER: Duration = Duration::from_secs(2);

pub(super) struct Child {
    pub(super) tx: OwnedWriteHalf,
    pub(super) rx: OwnedReadHalf,
    pub(super) proc: Proc,
    pub(super) runs: u64,
}

impl Child {
    /// Whether an idle child's socket is as it should be: nothing to read.
    /// An idle child says nothing, so a readable socket is its end (it
    /// died, and its reaper has not seen the exit yet) or garbage — either
    /// way it gets no run.
    pub(super) fn quiet(&self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.rx.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

/// A started process and its exit, as its reaper thread saw it.
pub(super) struct Proc {
    pub(super) pid: u32,
    exit: watch::Receiver<Option<ExitStatus>>,
}

impl Proc {
    pub(super) fn exited(&self) -> bool {
        self.exit.borrow().is_some()
    }

    /// Sends `sig` unless the process was already reaped (its pid may be
    /// someone else's by now).
    pub(super) fn signal(&self, sig: i32) {
        if !self.exited() {
            signal(self.pid, sig);
        }
    }

    pub(super) async fn status(&mut self) -> ExitStatus {
        loop {
            if let Some(s) = *self.exit.borrow_and_update() {
                return s;
            }
            if self.exit.changed().await.is_err() {
                return ExitStatus::from_raw(0);
            }
        }
    }

    /// Waits for the exit in the background, killing it if it has not
    /// exited within [`KILL_AFTER`].
    pub(super) fn reap(mut self) {
        if tokio::runtime::Handle::try_current().is_err() {
            self.signal(libc::SIGKILL);
            return;
        }
        tokio::spawn(async move {
            if tokio::time::timeout(KILL_AFTER, self.status())
                .await
                .is_err()
            {
                self.signal(libc::SIGKILL);
                self.status().await;
            }
        });
    }
}

pub(super) fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a pid we started and have not reaped.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// How an exit reads in a failure: `signal 9 (SIGKILL)` or `exitcode 1`,
/// Celery's words.
pub fn describe(status: ExitStatus) -> String {
    match (status.signal(), status.code()) {
        (Some(sig), _) => format!("signal {sig} ({})", signal_name(sig)),
        (None, Some(code)) => format!("exitcode {code}"),
        (None, None) => "an unknown status".into(),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

/// Lets a child go: its socket closes, so it exits; killed if it lingers.
pub(super) fn retire(c: Child) {
    let Child { tx, rx, proc, .. } = c;
    drop((tx, rx));
    proc.reap();
}

/// The parent's Node flags a child of the process pool repeats: loaders
/// (`--import`, `--require`) and options are kept; the test runner's and
/// the watcher's (they would run the child as a test or watch it), the
/// inspector's (a port already taken), the REPL's, and code given on the
/// command line instead of a script (with its argument) are dropped.
pub fn node_flags(exec_argv: &[String]) -> Vec<String> {
    const UNSHARED: [&str; 6] = [
        "--test",
        "--watch",
        "--inspect",
        "--debug",
        "--eval=",
        "--print=",
    ];
    let mut out = Vec::new();
    let mut it = exec_argv.iter();
    while let Some(a) = it.next() {
        if matches!(a.as_str(), "-e" | "--eval" | "-p" | "--print") {
            it.next();
        } else if !(UNSHARED.iter().any(|p| a.starts_with(p)) || a == "-i" || a == "--interactive")
        {
            out.push(a.clone());
        }
    }
    out
}

/// The resident memory of `pid` in KiB (Linux: `VmRSS` in /proc).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Starts a child with its end of a socket pair as fd 3 and waits for its
/// `ready`.
pub(super) async fn launch(spec: &ProcSpec) -> Result<Child, String> {
    let (ours, theirs) = StdStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    let fd = theirs.as_raw_fd();
    let parent = std::process::id() as libc::pid_t;
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if fd == 3 {
                let flags = libc::fcntl(3, libc::F_GETFD);
                libc::fcntl(3, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
            } else if libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The child's stdout and stderr are the worker's: inherited,
            // even where the host marked them close-on-exec (Node does, and
            // a child would then start with /dev/null for both).
            for std_fd in [1, 2] {
                let flags = libc::fcntl(std_fd, libc::F_GETFD);
                if flags >= 0 && flags & libc::FD_CLOEXEC != 0 {
                    libc::fcntl(std_fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
                }
            }
            // Dies with the parent (a kill -9 of the worker leaves no
            // child), and not by a Ctrl-C meant for the parent, which
            // stops gracefully and ends its children itself (Celery's
            // children ignore SIGINT too).
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            Ok(())
        });
    }
    let mut proc = cmd
        .spawn()
        .map_err(|e| format!("{:?} could not be started: {e}", spec.program))?;
    drop(theirs);
    let pid = proc.id();
    let (exit_tx, exit) = watch::channel(None);
    std::thread::Builder::new()
        .name(format!("headway-reap-{pid}"))
        .spawn(move || {
            let status = proc.wait().unwrap_or_else(|_| ExitStatus::from_raw(0));
            let _ = exit_tx.send(Some(status));
        })
        .map_err(|e| format!("a reaper thread could not be started: {e}"))?;
    let mut proc = Proc { pid, exit };
    let stream = ours
        .set_nonblocking(true)
        .and_then(|()| UnixStream::from_std(ours))
        .map_err(|e| format!("socket: {e}"));
    let stream = match stream {
        Ok(s) => s,
        Err(e) => {
            proc.reap();
            return Err(e);
        }
    };
    let (mut rx, tx) = stream.into_split();
    let why = match tokio::time::timeout(STARTUP, wire::read::<_, FromChild>(&mut rx)).await {
        Ok(Ok(Some(FromChild::Ready { .. }))) => {
            return Ok(Child {
                tx,
                rx,
                proc,
                runs: 0,
            });
        }
        Ok(Ok(Some(other))) => format!("it said {other:?} before `ready`"),
        Ok(Ok(None)) | Ok(Err(_)) => {
            drop((tx, rx));
            match tokio::time::timeout(KILL_AFTER, proc.status()).await {
                Ok(s) => format!(
                    "it exited before it was ready ({}); its stderr says why",
                    describe(s)
                ),
                Err(_) => "it closed its socket before it was ready".into(),
            }
        }
        Err(_) => format!("it was not ready within {} s", STARTUP.as_secs()),
    };
    proc.signal(libc::SIGKILL);
    proc.reap();
    Err(why)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_child_repeats_the_loaders_not_the_runner_nor_code() {
        let argv: Vec<String> = [
            "--import",
            "tsx",
            "--test",
            "--test-only",
            "--watch-path=src",
            "--inspect-brk=9229",
            "-e",
            "1 + 1",
            "--print=2",
            "-i",
            "--max-old-space-size=512",
            "--require",
            "./r.js",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let kept = [
            "--import",
            "tsx",
            "--max-old-space-size=512",
            "--require",
            "./r.js",
        ];
        assert_eq!(super::node_flags(&argv), kept);
    }
}
