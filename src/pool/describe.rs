//! What the workers run on and how they are kept in check, as
//! `toolpool doctor` prints it.

use std::time::Duration;

use crate::pool::{Limits, Pool};
use crate::process::KillMechanism;
use crate::worker::StartMethod;

impl Pool {
    /// What the workers run on and how they are kept in check (the
    /// interpreter, the kill, the human wait, every limit, each sandbox
    /// piece): the report `toolpool doctor` prints, one `name: value` a line.
    pub fn describe(&self) -> String {
        let limits = self.limits();
        let mut lines = mechanisms(self);
        lines.extend(limit_lines(&limits));
        lines.extend(crate::sandbox::doctor_lines(
            self.sandbox(),
            limits.allow_net,
        ));
        lines.join("\n")
    }
}

/// How the workers run and are kept in check: the interpreter, the codec,
/// the kill, the human wait, the start.
fn mechanisms(pool: &Pool) -> Vec<String> {
    let info = pool.worker_info();
    let codec = match info.codec.as_str() {
        "msgpack" => "msgpack (the C extension)".to_string(),
        "builtin" => {
            "builtin (the shim's pure-Python codec; install msgpack for speed)".to_string()
        }
        other => other.to_string(),
    };
    let kill = match info.kill_mechanism {
        KillMechanism::PidNamespace => {
            "pid-namespace (each worker is init of its own PID namespace: killing it kills every process of the call)"
        }
        KillMechanism::ProcessTree => {
            "process-tree (no PID namespace could be made: the worker's group, then every descendant of its guardian, are killed)"
        }
    };
    vec![
        format!(
            "interpreter: {} (Python {})",
            info.executable, info.python_version
        ),
        format!("codec: {codec}"),
        format!("kill mechanism: {kill}"),
        format!(
            "human wait: {}",
            if pool.sandbox().is_some_and(|s| s.freezes_by_cgroup()) {
                "cgroup freezer (each worker's cgroup frozen, and the timer stopped once cgroup.events says frozen)"
            } else {
                "stop and re-scan (the worker's tree stopped by signals, its groups too, and the timer stopped once two scans of /proc in a row find it all stopped)"
            }
        ),
        format!(
            "leftovers: after every call, the worker's threads by id, signals, POSIX timers and protocol descriptors, and its processes by {}",
            if crate::worker::kernel_lists_children() {
                "the kernel's children lists"
            } else {
                "a scan of /proc (this kernel has no children lists)"
            }
        ),
        format!(
            "worker start: {}",
            match info.started {
                StartMethod::Template => "template (each worker cloned from a process that started the interpreter and imported the shim once)",
                _ => "spawned (a fresh interpreter for each worker)",
            }
        ),
        format!(
            "subreaper: {}",
            if pool.limits().subreaper {
                "on (what a killed guardian leaves becomes toolpool's child, and is killed)"
            } else {
                "off"
            }
        ),
    ]
}

/// The limits the pool was built with, one a line.
fn limit_lines(limits: &Limits) -> Vec<String> {
    let mut lines = Vec::new();
    // Seconds as `30.0`, `0.5`.
    let secs = |d: Duration| format!("{:?}", d.as_secs_f64());
    let or = |value: Option<String>, none: &str| value.unwrap_or_else(|| none.to_string());
    lines.push(format!("workers: {}", limits.workers));
    lines.push(format!("timeout: {} s", secs(limits.timeout)));
    lines.push(match limits.timeout_grace.is_zero() {
        true => "timeout grace: none (killed at the deadline)".to_string(),
        false => format!(
            "timeout grace: {} s (TimeoutError in the tool, then the kill)",
            secs(limits.timeout_grace)
        ),
    });
    lines.push(format!(
        "import timeout: {}",
        or(
            limits
                .import_timeout
                .map(|d| format!("{} s per module", secs(d))),
            "none (only the start timeout)"
        )
    ));
    lines.push(format!(
        "human timeout: {}",
        or(
            limits
                .human_timeout
                .map(|d| format!("{} s per wait", secs(d))),
            "none"
        )
    ));
    lines.push(format!(
        "memory limit: {}",
        or(
            limits
                .memory_limit_bytes
                .map(|b| format!("{b} bytes of address space per worker")),
            "none"
        )
    ));
    lines.push(format!(
        "max calls per worker: {}",
        or(
            limits.max_calls_per_worker.map(|n| n.to_string()),
            "unlimited"
        )
    ));
    lines.push(format!(
        "max worker rss: {}",
        or(
            limits
                .max_worker_rss_bytes
                .map(|b| format!("{b} bytes (a worker over it is retired after its call)")),
            "none"
        )
    ));
    lines.push(match limits.worker_idle {
        Some(idle) => format!(
            "pool size: {} to {} workers (one idle {} s beyond the minimum is retired; calls that wait start it again)",
            limits.min_workers,
            limits.workers,
            secs(idle)
        ),
        None => format!("pool size: {} workers, kept however long they are idle", limits.workers),
    });
    lines.push(format!("max frame: {} bytes", limits.max_frame_bytes));
    lines.push(format!(
        "shim: installed afresh for this pool in {} (mode 0700, removed with it; nothing is reused from an earlier run)",
        limits.private_dir.display()
    ));
    lines
}
