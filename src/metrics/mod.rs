//! The pool's stats in the Prometheus text exposition format, and a small
//! HTTP endpoint serving them at `/metrics` (`serve --metrics ADDR`).

use std::fmt::Write as _;

use crate::pool::PoolStats;

#[cfg(feature = "metrics")]
mod endpoint;
#[cfg(feature = "metrics")]
pub use endpoint::serve;

/// Renders a stats snapshot as Prometheus text (version 0.0.4).
pub fn render(stats: &PoolStats) -> String {
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, value: f64| {
        let _ = write!(out, "# HELP toolpool_{name} {help}\n# TYPE toolpool_{name} gauge\ntoolpool_{name} {value}\n");
    };
    gauge("workers", "Configured pool size.", stats.size as f64);
    gauge(
        "workers_live",
        "Live worker processes, spares and parked ones included.",
        stats.live_workers as f64,
    );
    gauge("workers_busy", "Workers running a call.", stats.busy as f64);
    gauge(
        "workers_idle",
        "Workers waiting for a call.",
        stats.idle as f64,
    );
    gauge(
        "workers_spare",
        "Warm spares ready to replace a worker.",
        stats.spares as f64,
    );
    gauge(
        "workers_parked",
        "Idle workers kept for their sessions beyond the pool size (--parked-workers).",
        stats.parked as f64,
    );
    gauge(
        "calls_queued",
        "Calls waiting for a free worker.",
        stats.queued as f64,
    );

    let mut counter = |name: &str, help: &str, value: u64| {
        let _ = write!(out, "# HELP toolpool_{name} {help}\n# TYPE toolpool_{name} counter\ntoolpool_{name} {value}\n");
    };
    counter("calls_total", "Calls started.", stats.calls);
    counter(
        "calls_succeeded_total",
        "Calls that returned a result.",
        stats.succeeded,
    );
    counter(
        "timeouts_total",
        "Calls killed at their timeout.",
        stats.timeouts,
    );
    counter(
        "worker_deaths_total",
        "Workers that died during a call.",
        stats.worker_deaths,
    );
    counter(
        "respawns_total",
        "Replacement workers put in place.",
        stats.respawns,
    );
    counter(
        "recycled_total",
        "Workers retired after --max-calls-per-worker or --max-worker-rss.",
        stats.recycled,
    );
    counter(
        "retired_over_rss_total",
        "Workers retired after a call left them over --max-worker-rss.",
        stats.retired_over_rss,
    );
    counter(
        "retired_idle_total",
        "Workers retired after being idle past --worker-idle (the pool shrinking).",
        stats.retired_idle,
    );
    counter(
        "session_recycles_total",
        "Workers recycled before serving another session (--session-isolation process).",
        stats.session_recycles,
    );
    counter(
        "parked_resumes_total",
        "Calls that resumed a worker parked for their session.",
        stats.parked_resumes,
    );
    counter(
        "cancelled_total",
        "Calls abandoned by their caller mid-flight.",
        stats.cancelled,
    );
    counter(
        "kills_total",
        "Workers the supervisor killed (timeouts, abandoned calls).",
        stats.kills,
    );

    out.push_str("# HELP toolpool_worker_terminations_total Workers that ended, by how.\n# TYPE toolpool_worker_terminations_total counter\n");
    for (how, count) in &stats.terminations {
        let _ = writeln!(
            out,
            "toolpool_worker_terminations_total{{how=\"{how}\"}} {count}"
        );
    }

    out.push_str("# HELP toolpool_worker_left_running_total Workers retired because a call left them other than they were idle, by what.\n# TYPE toolpool_worker_left_running_total counter\n");
    for (cause, count) in &stats.left_running {
        let _ = writeln!(
            out,
            "toolpool_worker_left_running_total{{cause=\"{cause}\"}} {count}"
        );
    }

    out.push_str("# HELP toolpool_errors_total Failed calls by error type.\n# TYPE toolpool_errors_total counter\n");
    for (kind, count) in &stats.errors_by_type {
        let _ = writeln!(
            out,
            "toolpool_errors_total{{type=\"{}\"}} {count}",
            escape_label(kind)
        );
    }

    out.push_str("# HELP toolpool_call_duration_seconds Call latency, queueing included.\n# TYPE toolpool_call_duration_seconds histogram\n");
    for (bound, count) in &stats.latency.buckets {
        let le = if bound.is_infinite() {
            "+Inf".to_string()
        } else {
            bound.to_string()
        };
        let _ = writeln!(
            out,
            "toolpool_call_duration_seconds_bucket{{le=\"{le}\"}} {count}"
        );
    }
    let _ = writeln!(
        out,
        "toolpool_call_duration_seconds_sum {}",
        stats.latency.sum_seconds
    );
    let _ = writeln!(
        out,
        "toolpool_call_duration_seconds_count {}",
        stats.latency.count
    );

    // Per-worker series are labelled by slot — the worker's rank in pid
    // order (the order they started in), 0 the oldest — not by pid: a
    // respawned worker takes a slot over instead of adding a series, so
    // there are never more series than live workers (pool size + spares).
    let mut by_age: Vec<_> = stats.workers.iter().collect();
    by_age.sort_by_key(|w| w.pid);
    out.push_str("# HELP toolpool_worker_calls_served Calls each live worker has finished, by slot (0 the oldest worker).\n# TYPE toolpool_worker_calls_served gauge\n");
    for (slot, w) in by_age.iter().enumerate() {
        let _ = writeln!(
            out,
            "toolpool_worker_calls_served{{slot=\"{slot}\"}} {}",
            w.calls_served
        );
    }
    out.push_str("# HELP toolpool_worker_rss_bytes Resident memory of each live worker, by slot (0 the oldest worker).\n# TYPE toolpool_worker_rss_bytes gauge\n");
    for (slot, w) in by_age.iter().enumerate() {
        if let Some(rss) = w.rss_bytes {
            let _ = writeln!(out, "toolpool_worker_rss_bytes{{slot=\"{slot}\"}} {rss}");
        }
    }
    out
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
