//! The task queue: apps, tasks, workers, retries, canvas and beat.
//!
//! One message model ([`message`]) travels through four seams ([`spec`]):
//! a broker, a result store, a chord counter and an inspector. The app owns
//! them and the registry; the worker claims, runs and settles; the canvas
//! plans chains, groups and chords into messages; the beat and the in-process
//! scheduler fire on rhythms. Time comes only from the app's [`clock`], so a
//! virtual clock runs an hour of retries and beats in milliseconds.

pub mod app;
pub mod ask;
pub mod banner;
pub mod beat;
pub mod body;
pub mod canvas;
pub mod celery_conf;
pub mod cli;
pub mod clock;
pub mod control;
pub mod crew;
pub mod dead;
pub mod dead_listed;
pub mod deck;
pub mod dedupe;
pub mod depth;
mod direct;
pub mod handle;
pub mod host;
pub mod limits;
pub mod message;
pub mod metrics;
pub mod policy;
pub mod procs;
pub mod progress;
pub mod remote;
pub mod request;
pub mod rhythm;
pub mod runners;
pub mod schedule;
pub mod signal;
pub mod spec;
pub mod specs;
pub mod state;
pub mod terminate;
pub mod timetable;
pub mod trace;
pub mod value_path;
pub mod worker;

pub use app::{App, Registered, Seams};
pub use beat::{Beat, Fired};
pub use body::{Body, Context, SharedBody, body};
pub use canvas::Canvas;
pub use clock::{BoxFuture, Clock, SystemClock, VirtualClock};
pub use crew::{Crew, Next};
pub use dead::{
    DEAD_KEPT, DEAD_LISTED, DeadLetter, MAX_DELIVERIES, MAX_MESSAGE_BYTES, Undecodable,
};
pub use handle::Handle;
pub use host::{Call, HostQueue, Idle, Taker};
pub use message::{Carried, Chord, Join, Message, Options, Sig, new_id};
pub use policy::{Policy, PolicyError, Rate, RateScope, RetryBackoff};
pub use procs::{ProcSpec, Procs};
pub use rhythm::{Cron, Every, Rhythm, RhythmError};
pub use runners::{ABANDONED_PER_RUNNER, RunnerHealth, Runners, WorkerHealth};
pub use schedule::{Job, Scheduler, Stats, Tally};
pub use signal::{SIGTERM, SignalSpec};
pub use spec::{
    Backend, Broker, ConsumerInfo, Counter, Delivery, Detail, EVENT_TEXT_MAX, Inspector, Joined,
    QueueInfo, Receipt, RunEvent, RunNote,
};
pub use specs::{
    BackoffSpec, ChildCommand, Host, PolicySpec, RateSpec, SendSpec, SpecError, WorkerSpec,
};
pub use state::{BrokerError, BrokerErrorKind, Failure, Outcome, Refused, State};
pub use timetable::Timetable;
pub use worker::{Pool, RunInfo, Worker, WorkerConfig};
