//! What kind of broker failure a Redis error is.
//!
//! A caller told only "broker error: ..." cannot tell a Redis that is away
//! (wait and try again) from one that refuses every write (out of memory,
//! read-only: page somebody) or from a bug (a script that failed). So every
//! Redis error becomes a [`BrokerError`] whose [`BrokerErrorKind`] is
//! decided here, in [`kind_of`], and nowhere else: both Redis layouts and
//! the shared plumbing ([`super::link`]) refuse through [`refused`], and a
//! script that reports a per-key error as text (the store script's
//! `redis.pcall`) is read by [`kind_of_reply`] with the same table.

use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::task::state::{BrokerError, BrokerErrorKind, Refused};

/// The kind of `e`.
///
/// - Connection: I/O (refused, reset, closed, timed out) and a cluster
///   node that cannot be reached.
/// - Script: a reply of a shape the caller did not expect, a script Redis
///   does not know, and an `ERR` raised while running a script.
/// - Server: every other refusal from the server ([`kind_of_reply`]'s
///   table), and a failed authentication.
/// - Data: `WRONGTYPE` (a key holds a value of another type).
/// - Other: what the client itself refused (its configuration, a command
///   it would not send) and codes Redis does not use.
pub fn kind_of(e: &RedisError) -> BrokerErrorKind {
    match e.kind() {
        ErrorKind::Io | ErrorKind::ClusterConnectionNotFound => BrokerErrorKind::Connection,
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => BrokerErrorKind::Script,
        ErrorKind::AuthenticationFailed => BrokerErrorKind::Server,
        ErrorKind::Server(ServerErrorKind::NoScript) => BrokerErrorKind::Script,
        // A pipeline's failure is its first failed command's (as
        // `tests/broker_errors.rs` meets it: OOM on a publish).
        ErrorKind::Server(_) | ErrorKind::Extension => match e.clone().into_server_errors() {
            Some(errs) if !errs.is_empty() => {
                let first = &errs[0].1;
                kind_of_reply(first.code(), first.details().unwrap_or(""))
            }
            _ => kind_of_reply(e.code().unwrap_or(""), e.detail().unwrap_or("")),
        },
        _ => BrokerErrorKind::Other,
    }
}

/// The kind of an error reply from Redis: its `code` (the first word,
/// `"OOM"`) and the rest of its text.
pub fn kind_of_reply(code: &str, detail: &str) -> BrokerErrorKind {
    match code {
        // Raised by a script's own code (Redis 7: `user_script:3: ...`;
        // Redis 6: `Error running script ...`), or a script that does not
        // compile. Any other ERR is the server refusing a command.
        "ERR" if detail.contains("script") => BrokerErrorKind::Script,
        "NOSCRIPT" => BrokerErrorKind::Script,
        "WRONGTYPE" => BrokerErrorKind::Data,
        "ERR" | "OOM" | "READONLY" | "NOAUTH" | "WRONGPASS" | "NOPERM" | "MISCONF" | "BUSY"
        | "BUSYKEY" | "LOADING" | "MASTERDOWN" | "NOMASTERLINK" | "NOREPLICAS" | "CLUSTERDOWN"
        | "TRYAGAIN" | "MOVED" | "ASK" | "CROSSSLOT" | "EXECABORT" | "NOPROTO" | "UNKILLABLE"
        | "NOTBUSY" | "NOSUB" => BrokerErrorKind::Server,
        _ => BrokerErrorKind::Other,
    }
}

/// [`kind_of_reply`] of a whole error text (`"OOM command not allowed
/// ..."`), as a script hands one back.
pub fn kind_of_text(text: &str) -> BrokerErrorKind {
    let (code, detail) = text.split_once(' ').unwrap_or((text, ""));
    kind_of_reply(code, detail)
}

/// `e` as a refusal saying `text`, of `e`'s kind.
pub fn refused(e: &RedisError, text: impl Into<String>) -> Refused {
    Refused::Broker(BrokerError::new(kind_of(e), text))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error Redis answers with `reply` (`"OOM command not allowed"`).
    fn reply(reply: &str) -> RedisError {
        redis::parse_redis_value(format!("-{reply}\r\n").as_bytes())
            .unwrap()
            .extract_error()
            .unwrap_err()
    }

    fn io(kind: std::io::ErrorKind) -> RedisError {
        std::io::Error::new(kind, "gone").into()
    }

    #[test]
    fn connection() {
        for k in [
            std::io::ErrorKind::ConnectionRefused,
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::UnexpectedEof,
            std::io::ErrorKind::TimedOut,
        ] {
            assert_eq!(kind_of(&io(k)), BrokerErrorKind::Connection, "{k:?}");
        }
        let dropped = RedisError::from((ErrorKind::Io, "Connection dropped"));
        assert_eq!(kind_of(&dropped), BrokerErrorKind::Connection);
    }

    #[test]
    fn script() {
        let e = reply(
            "ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: 1f0e, on @user_script:1.",
        );
        assert_eq!(kind_of(&e), BrokerErrorKind::Script);
        let e = reply("ERR Error running script (call to f_1f0e): @user_script:1: oops");
        assert_eq!(kind_of(&e), BrokerErrorKind::Script);
        let e = reply("NOSCRIPT No matching script. Please use EVAL.");
        assert_eq!(kind_of(&e), BrokerErrorKind::Script);
        let e = RedisError::from((ErrorKind::UnexpectedReturnType, "not an array"));
        assert_eq!(kind_of(&e), BrokerErrorKind::Script);
        let e: RedisError = redis::ParsingError::from("not an integer").into();
        assert_eq!(kind_of(&e), BrokerErrorKind::Script);
    }

    #[test]
    fn server() {
        for r in [
            "OOM command not allowed when used memory > 'maxmemory'.",
            "OOM command not allowed when used memory > 'maxmemory'. script: 1f0e, on @user_script:3.",
            "READONLY You can't write against a read only replica.",
            "NOAUTH Authentication required.",
            "WRONGPASS invalid username-password pair or user is disabled.",
            "NOPERM this user has no permissions to run the 'eval' command",
            "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.",
            "LOADING Redis is loading the dataset in memory",
            "BUSY Redis is busy running a script.",
            "ERR unknown command 'FCALL'",
            "EXECABORT Transaction discarded because of previous errors.",
        ] {
            assert_eq!(kind_of(&reply(r)), BrokerErrorKind::Server, "{r}");
        }
        let e = RedisError::from((
            ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        assert_eq!(kind_of(&e), BrokerErrorKind::Server);
    }

    #[test]
    fn data() {
        let e = reply("WRONGTYPE Operation against a key holding the wrong kind of value");
        assert_eq!(kind_of(&e), BrokerErrorKind::Data);
    }

    #[test]
    fn other() {
        let e = RedisError::from((ErrorKind::InvalidClientConfig, "bad URL"));
        assert_eq!(kind_of(&e), BrokerErrorKind::Other);
        let e = RedisError::from((ErrorKind::Client, "refused before sending"));
        assert_eq!(kind_of(&e), BrokerErrorKind::Other);
        assert_eq!(kind_of(&reply("HEADWAY something")), BrokerErrorKind::Other);
    }

    #[test]
    fn a_reply_text_reads_like_the_error() {
        assert_eq!(
            kind_of_text("OOM command not allowed when used memory > 'maxmemory'."),
            BrokerErrorKind::Server
        );
        assert_eq!(
            kind_of_text("ERR user_script:1: boom"),
            BrokerErrorKind::Script
        );
        assert_eq!(kind_of_text("WRONGTYPE x"), BrokerErrorKind::Data);
        assert_eq!(kind_of_text("no answer"), BrokerErrorKind::Other);
        assert_eq!(kind_of_text(""), BrokerErrorKind::Other);
    }

    #[test]
    fn a_refusal_keeps_the_text_and_takes_the_kind() {
        let r = refused(&reply("READONLY no"), "redis://h:6379/0: READONLY: no");
        assert_eq!(
            r.to_string(),
            "broker error: redis://h:6379/0: READONLY: no"
        );
        assert_eq!(r.broker_kind(), Some(BrokerErrorKind::Server));
    }
}
