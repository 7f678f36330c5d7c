//! The limits a pool enforces, as the pool was built (`toolpool doctor`).

use std::path::PathBuf;
use std::time::Duration;

/// What [`super::Pool::limits`] reports. `None` means no limit of that kind.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Limits {
    /// Workers kept running (spares not counted).
    pub workers: usize,
    /// Idle workers kept for their sessions beyond `workers` (under
    /// per-session workers, [`super::PoolBuilder::parked_workers`]).
    pub parked_workers: usize,
    /// A call's timeout when it names none.
    pub timeout: Duration,
    /// How long a timed-out tool may clean up, when it names none.
    pub timeout_grace: Duration,
    /// Workers kept however long they are idle (`--min-workers`).
    pub min_workers: usize,
    /// How long a worker beyond the minimum may be idle (`--worker-idle`).
    pub worker_idle: Option<Duration>,
    /// How long importing one tool module may take.
    pub import_timeout: Option<Duration>,
    /// How long one wait for a human's answer may take.
    pub human_timeout: Option<Duration>,
    /// How long a worker may take to start.
    pub start_timeout: Duration,
    /// How long a call may wait for a free worker.
    pub queue_wait: Option<Duration>,
    /// Address space per worker (`RLIMIT_AS`, or the memory cgroup's limit
    /// under the sandbox).
    pub memory_limit_bytes: Option<u64>,
    /// Calls a worker serves before it is replaced.
    pub max_calls_per_worker: Option<u64>,
    /// Resident memory past which a worker is retired after its call.
    pub max_worker_rss_bytes: Option<u64>,
    /// The largest message on a worker's channel.
    pub max_frame_bytes: usize,
    /// Whether toolpool is the subreaper of what killed guardians leave.
    pub subreaper: bool,
    /// Whether the workers run in the sandbox (`--sandbox`).
    pub sandbox: bool,
    /// Whether sandboxed workers may use the network (`--allow-net`).
    pub allow_net: bool,
    /// The pool's private directory (the shim, the code cache).
    pub private_dir: PathBuf,
    /// Where compiled tool modules are cached, if anywhere.
    pub code_cache: Option<PathBuf>,
}
