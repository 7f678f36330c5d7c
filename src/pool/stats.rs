//! What the pool counts, and the snapshot operators read (`Pool::stats`,
//! the Prometheus endpoint).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

use super::Pool;
use crate::outcome::{LeftBehind, Termination};

#[derive(Default)]
pub(super) struct Counters {
    pub(super) calls: AtomicU64,
    pub(super) succeeded: AtomicU64,
    pub(super) timeouts: AtomicU64,
    pub(super) worker_deaths: AtomicU64,
    pub(super) respawns: AtomicU64,
    pub(super) recycled: AtomicU64,
    /// Of those, workers retired for their resident memory
    /// (`--max-worker-rss`).
    pub(super) over_rss: AtomicU64,
    /// Workers retired for being idle past `--worker-idle`.
    pub(super) retired_idle: AtomicU64,
    /// Workers recycled because a call of another session came to them.
    pub(super) session_recycles: AtomicU64,
    /// Calls that resumed a worker parked for their session.
    pub(super) parked_resumes: AtomicU64,
    pub(super) queued: AtomicUsize,
    pub(super) busy: AtomicUsize,
    pub(super) errors_by_type: Mutex<BTreeMap<String, u64>>,
    /// Calls by tenant (`--auth-tokens`), and how many failed.
    pub(super) by_tenant: Mutex<BTreeMap<String, TenantCalls>>,
    pub(super) latency: Mutex<LatencyHistogram>,
    /// Workers that ended, by [`Termination::index`].
    pub(super) terminations: [AtomicU64; Termination::KINDS.len()],
    /// Workers retired after a call left something behind, by the
    /// position of its cause in [`LeftBehind::CAUSES`].
    pub(super) left_behind: [AtomicU64; LeftBehind::CAUSES.len()],
}

impl Counters {
    pub(super) fn count_end(&self, how: &Termination) {
        self.terminations[how.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn count_left_behind(&self, cause: &str) {
        if let Some(i) = LeftBehind::CAUSES.iter().position(|c| *c == cause) {
            self.left_behind[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A call of `tenant` ended, failed or not. Past [`MAX_TENANTS`]
    /// tenants, the calls of those not yet listed count as `other`'s, so
    /// that the series stay few whatever the tokens file holds.
    pub(super) fn count_tenant_call(&self, tenant: &str, failed: bool) {
        let Ok(mut by_tenant) = self.by_tenant.lock() else {
            return;
        };
        let key = if by_tenant.contains_key(tenant) || by_tenant.len() < MAX_TENANTS {
            tenant
        } else {
            OTHER_TENANTS
        };
        let calls = by_tenant.entry(key.to_string()).or_default();
        calls.calls += 1;
        calls.failed += u64::from(failed);
    }

    /// Workers that ended `how` (the variant's data aside).
    fn ended(&self, how: &Termination) -> u64 {
        self.terminations[how.index()].load(Ordering::Relaxed)
    }
}

/// Tenants counted by name in [`PoolStats::tenants`]; the rest are `other`.
pub(super) const MAX_TENANTS: usize = 100;
/// The tenant the calls of tenants past [`MAX_TENANTS`] are counted as.
const OTHER_TENANTS: &str = "other";

/// A tenant's calls (`--auth-tokens`).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct TenantCalls {
    /// Calls that ended.
    pub calls: u64,
    /// Those of them that failed.
    pub failed: u64,
}

/// Upper bounds (seconds) of the call latency histogram's buckets.
const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0, 300.0,
];

/// Call latencies (from the call's start, queueing included), cumulative
/// buckets as Prometheus counts them.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LatencyHistogram {
    /// `(upper bound in seconds, calls that took at most that long)`; the
    /// last bound is infinite and counts every call.
    pub buckets: Vec<(f64, u64)>,
    /// The latencies of all the calls counted, added up, in seconds.
    pub sum_seconds: f64,
    /// Calls counted.
    pub count: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        let mut buckets: Vec<(f64, u64)> = LATENCY_BUCKETS.iter().map(|b| (*b, 0)).collect();
        buckets.push((f64::INFINITY, 0));
        LatencyHistogram {
            buckets,
            sum_seconds: 0.0,
            count: 0,
        }
    }
}

impl LatencyHistogram {
    pub(super) fn record(&mut self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        for (bound, count) in &mut self.buckets {
            if secs <= *bound {
                *count += 1;
            }
        }
        self.sum_seconds += secs;
        self.count += 1;
    }
}

/// One live worker, for operators.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WorkerStats {
    /// The worker process's pid.
    pub pid: i32,
    /// Calls it had finished when it last came back to the pool.
    pub calls_served: u64,
    /// Resident memory of the worker process, when /proc tells it.
    pub rss_bytes: Option<u64>,
}

/// A snapshot of the pool for operators.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PoolStats {
    /// The configured number of workers
    /// ([`PoolBuilder::workers`](crate::PoolBuilder::workers)).
    pub size: usize,
    /// Live worker processes, spares and parked ones included.
    pub live_workers: usize,
    /// Workers running a call.
    pub busy: usize,
    /// Workers waiting for a call (not counting spares and parked ones).
    pub idle: usize,
    /// Calls waiting for a free worker.
    pub queued: usize,
    /// Calls started.
    pub calls: u64,
    /// Calls that returned a result.
    pub succeeded: u64,
    /// Calls killed at their timeout.
    pub timeouts: u64,
    /// Calls whose worker died under them.
    pub worker_deaths: u64,
    /// Replacement workers put in place (a warm spare, or a new start).
    pub respawns: u64,
    /// Workers retired in good health: after their
    /// [`max_calls_per_worker`](crate::PoolBuilder::max_calls_per_worker)
    /// calls, or still running code from before a reload.
    pub recycled: u64,
    /// Of `recycled`, workers retired because a call left them with more
    /// resident memory than
    /// [`max_worker_rss_mb`](crate::PoolBuilder::max_worker_rss_mb).
    pub retired_over_rss: u64,
    /// Workers retired for being idle longer than
    /// [`worker_idle`](crate::PoolBuilder::worker_idle) beyond
    /// [`min_workers`](crate::PoolBuilder::min_workers) (not in `recycled`).
    pub retired_idle: u64,
    /// Workers the pool runs now, of [`size`](Self::size): fewer after idle
    /// ones were retired, until calls wait and it grows back.
    pub target_workers: usize,
    /// Workers recycled before serving another session
    /// ([`SessionIsolation::Process`](crate::SessionIsolation::Process)):
    /// parked ones that no longer fit
    /// ([`PoolBuilder::parked_workers`](crate::PoolBuilder::parked_workers)).
    pub session_recycles: u64,
    /// Idle workers kept for their sessions beyond [`size`](Self::size).
    pub parked: usize,
    /// Calls that resumed a worker parked for their session.
    pub parked_resumes: u64,
    /// Warm spares ready to replace a worker.
    pub spares: usize,
    /// Calls abandoned by their caller mid-flight (their workers killed).
    pub cancelled: u64,
    /// Workers the supervisor killed: at a timeout, or under an abandoned call.
    pub kills: u64,
    /// Workers that ended, by how: `exited`, `signalled`, `timed_out`,
    /// `cancelled`, `shut_down`, `retired`, `broke_protocol`, `hung_up`,
    /// `status_unknown`, `left_running`; every kind is listed.
    pub terminations: BTreeMap<String, u64>,
    /// Workers retired because a call left something behind (the
    /// `left_running` terminations), by what: `threads`, `processes`,
    /// `pending_signals`, `blocked_signals`, `signal_handlers`,
    /// `posix_timers`, `protocol_descriptors`, `unreadable`; every cause is
    /// listed.
    pub left_running: BTreeMap<String, u64>,
    /// Failed calls by error type
    /// ([`ErrorKind::type_name`](crate::ErrorKind::type_name)).
    pub errors_by_type: BTreeMap<String, u64>,
    /// Calls by tenant, for a server with `--auth-tokens` (empty otherwise):
    /// at most 100 tenants by name, the calls of any further ones as
    /// `other`'s.
    pub tenants: BTreeMap<String, TenantCalls>,
    /// Call latencies, queueing included.
    pub latency: LatencyHistogram,
    /// Every live worker (spares included), by pid.
    pub workers: Vec<WorkerStats>,
}

/// One unit of a gauge (calls queued, workers busy), given back on drop so
/// that a call abandoned mid-flight does not leave it counted.
pub(super) struct Gauge<'a>(&'a AtomicUsize);

impl<'a> Gauge<'a> {
    pub(super) fn up(gauge: &'a AtomicUsize) -> Gauge<'a> {
        gauge.fetch_add(1, Ordering::Relaxed);
        Gauge(gauge)
    }
}

impl Drop for Gauge<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Pool {
    /// A snapshot of the pool's counters and live workers (each worker's
    /// memory read from /proc).
    pub fn stats(&self) -> PoolStats {
        let c = &self.shared.counters;
        // /proc is read outside the dispatcher's lock.
        let mut workers: Vec<WorkerStats> = self
            .shared
            .workers
            .live()
            .into_iter()
            .map(|worker| {
                let pid = worker.pid;
                WorkerStats {
                    pid,
                    calls_served: worker.calls_served,
                    rss_bytes: crate::procfs::rss_bytes(pid),
                }
            })
            .collect();
        workers.sort_by_key(|w| w.pid);
        let live = workers.len();
        let busy = c.busy.load(Ordering::Relaxed);
        let spares = self.shared.workers.spare_count();
        let parked = self.shared.workers.parked_count();
        PoolStats {
            size: self.shared.size,
            live_workers: live,
            busy,
            idle: live.saturating_sub(busy + spares + parked),
            queued: c.queued.load(Ordering::Relaxed),
            calls: c.calls.load(Ordering::Relaxed),
            succeeded: c.succeeded.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
            worker_deaths: c.worker_deaths.load(Ordering::Relaxed),
            respawns: c.respawns.load(Ordering::Relaxed),
            recycled: c.recycled.load(Ordering::Relaxed),
            retired_over_rss: c.over_rss.load(Ordering::Relaxed),
            retired_idle: c.retired_idle.load(Ordering::Relaxed),
            target_workers: self.shared.size - self.shared.sizing.shrunk(),
            session_recycles: c.session_recycles.load(Ordering::Relaxed),
            parked,
            parked_resumes: c.parked_resumes.load(Ordering::Relaxed),
            spares,
            cancelled: c.ended(&Termination::Cancelled),
            kills: c.ended(&Termination::TimedOut) + c.ended(&Termination::Cancelled),
            terminations: Termination::KINDS
                .iter()
                .zip(&c.terminations)
                .map(|(kind, count)| (kind.to_string(), count.load(Ordering::Relaxed)))
                .collect(),
            left_running: LeftBehind::CAUSES
                .iter()
                .zip(&c.left_behind)
                .map(|(cause, count)| (cause.to_string(), count.load(Ordering::Relaxed)))
                .collect(),
            errors_by_type: c
                .errors_by_type
                .lock()
                .map(|m| m.clone())
                .unwrap_or_default(),
            tenants: c.by_tenant.lock().map(|m| m.clone()).unwrap_or_default(),
            latency: c.latency.lock().map(|h| h.clone()).unwrap_or_default(),
            workers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_past_the_cap_are_counted_as_other_and_known_ones_by_name() {
        let counters = Counters::default();
        for i in 0..MAX_TENANTS + 5 {
            counters.count_tenant_call(&format!("t{i}"), i % 2 == 1);
        }
        // A tenant already listed keeps its own series.
        counters.count_tenant_call("t0", true);
        let by_tenant = counters.by_tenant.lock().unwrap();
        assert_eq!(by_tenant.len(), MAX_TENANTS + 1);
        assert_eq!(
            by_tenant["other"],
            TenantCalls {
                calls: 5,
                failed: 2
            }
        );
        assert_eq!(
            by_tenant["t0"],
            TenantCalls {
                calls: 2,
                failed: 1
            }
        );
    }
}
