//! The pool's stats in the Prometheus text exposition format, and a small
//! HTTP endpoint serving them at `/metrics` (`serve --metrics ADDR`).

use std::fmt::Write as _;

use crate::pool::PoolStats;

#[cfg(feature = "metrics")]
mod endpoint;
#[cfg(feature = "metrics")]
pub use endpoint::serve;

/// One unlabelled series: its name (after `toolpool_`), help and value.
type Series = (&'static str, &'static str, fn(&PoolStats) -> u64);

const GAUGES: &[Series] = &[
    ("workers", "Configured pool size.", |s| s.size as u64),
    (
        "workers_live",
        "Live worker processes, spares and parked ones included.",
        |s| s.live_workers as u64,
    ),
    ("workers_busy", "Workers running a call.", |s| s.busy as u64),
    ("workers_idle", "Workers waiting for a call.", |s| {
        s.idle as u64
    }),
    (
        "workers_spare",
        "Warm spares ready to replace a worker.",
        |s| s.spares as u64,
    ),
    (
        "workers_parked",
        "Idle workers kept for their sessions beyond the pool size (--parked-workers).",
        |s| s.parked as u64,
    ),
    ("calls_queued", "Calls waiting for a free worker.", |s| {
        s.queued as u64
    }),
];

const COUNTERS: &[Series] = &[
    ("calls_total", "Calls started.", |s| s.calls),
    (
        "calls_succeeded_total",
        "Calls that returned a result.",
        |s| s.succeeded,
    ),
    ("timeouts_total", "Calls killed at their timeout.", |s| {
        s.timeouts
    }),
    (
        "worker_deaths_total",
        "Workers that died during a call.",
        |s| s.worker_deaths,
    ),
    ("respawns_total", "Replacement workers put in place.", |s| {
        s.respawns
    }),
    (
        "recycled_total",
        "Workers retired after --max-calls-per-worker or --max-worker-rss.",
        |s| s.recycled,
    ),
    (
        "retired_over_rss_total",
        "Workers retired after a call left them over --max-worker-rss.",
        |s| s.retired_over_rss,
    ),
    (
        "retired_idle_total",
        "Workers retired after being idle past --worker-idle (the pool shrinking).",
        |s| s.retired_idle,
    ),
    (
        "session_recycles_total",
        "Workers recycled before serving another session (--session-isolation process).",
        |s| s.session_recycles,
    ),
    (
        "parked_resumes_total",
        "Calls that resumed a worker parked for their session.",
        |s| s.parked_resumes,
    ),
    (
        "cancelled_total",
        "Calls abandoned by their caller mid-flight.",
        |s| s.cancelled,
    ),
    (
        "kills_total",
        "Workers the supervisor killed (timeouts, abandoned calls).",
        |s| s.kills,
    ),
];

/// Renders a stats snapshot as Prometheus text (version 0.0.4).
pub fn render(stats: &PoolStats) -> String {
    let mut out = String::new();
    for (kind, series) in [("gauge", GAUGES), ("counter", COUNTERS)] {
        for (name, help, value) in series {
            let value = value(stats);
            let _ = write!(
                out,
                "# HELP toolpool_{name} {help}\n# TYPE toolpool_{name} {kind}\ntoolpool_{name} {value}\n"
            );
        }
    }
    let labelled = [
        (
            "worker_terminations_total",
            "Workers that ended, by how.",
            "how",
            &stats.terminations,
        ),
        (
            "worker_left_running_total",
            "Workers retired because a call left them other than they were idle, by what.",
            "cause",
            &stats.left_running,
        ),
        (
            "errors_total",
            "Failed calls by error type.",
            "type",
            &stats.errors_by_type,
        ),
    ];
    for (name, help, label, counts) in labelled {
        let _ = writeln!(
            out,
            "# HELP toolpool_{name} {help}\n# TYPE toolpool_{name} counter"
        );
        for (value, count) in counts {
            let value = escape_label(value);
            let _ = writeln!(out, "toolpool_{name}{{{label}=\"{value}\"}} {count}");
        }
    }
    render_tenants(stats, &mut out);
    render_latency(stats, &mut out);
    render_workers(stats, &mut out);
    out
}

/// Calls by tenant (`--auth-tokens`): a series per tenant and outcome, for
/// at most 100 tenants by name (`other` beyond), none without tenants.
fn render_tenants(stats: &PoolStats, out: &mut String) {
    if stats.tenants.is_empty() {
        return;
    }
    out.push_str(
        "# HELP toolpool_tenant_calls_total Calls by tenant (--auth-tokens) and outcome.
# TYPE toolpool_tenant_calls_total counter
",
    );
    for (tenant, calls) in &stats.tenants {
        let tenant = escape_label(tenant);
        let _ = writeln!(
            out,
            "toolpool_tenant_calls_total{{tenant=\"{tenant}\",outcome=\"ok\"}} {}\ntoolpool_tenant_calls_total{{tenant=\"{tenant}\",outcome=\"failed\"}} {}",
            calls.calls - calls.failed,
            calls.failed
        );
    }
}

/// The call latency histogram.
fn render_latency(stats: &PoolStats, out: &mut String) {
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
}

/// Per-worker series, labelled by slot — the worker's rank in pid order
/// (the order they started in), 0 the oldest — not by pid: a respawned
/// worker takes a slot over instead of adding a series, so there are never
/// more series than live workers (pool size + spares).
fn render_workers(stats: &PoolStats, out: &mut String) {
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
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
