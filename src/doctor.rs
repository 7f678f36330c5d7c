//! `toolpool doctor`: what the workers run on and how they are kept in check.

use crate::pool::Pool;
use crate::process::KillMechanism;
use crate::worker::StartMethod;

/// The report `toolpool doctor` prints, one `name: value` a line.
pub fn report(pool: &Pool) -> String {
    let info = pool.worker_info();
    let limits = pool.limits();
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
    let mut lines = vec![
        format!(
            "interpreter: {} (Python {})",
            info.executable, info.python_version
        ),
        format!("codec: {codec}"),
        format!("kill mechanism: {kill}"),
        format!(
            "worker start: {}",
            match info.started {
                StartMethod::Template => "template (each worker cloned from a process that started the interpreter and imported the shim once)",
                _ => "spawned (a fresh interpreter for each worker)",
            }
        ),
        format!(
            "subreaper: {}",
            if limits["subreaper"].as_bool() == Some(true) {
                "on (what a killed guardian leaves becomes toolpool's child, and is killed)"
            } else {
                "off"
            }
        ),
    ];
    let show = |value: &serde_json::Value, unit: &str, none: &str| match value {
        serde_json::Value::Null => none.to_string(),
        value => format!("{value}{unit}"),
    };
    lines.push(format!("workers: {}", limits["workers"]));
    lines.push(format!(
        "timeout: {}",
        show(&limits["timeout_secs"], " s", "none")
    ));
    lines.push(format!(
        "import timeout: {}",
        show(
            &limits["import_timeout_secs"],
            " s per module",
            "none (only the start timeout)"
        )
    ));
    lines.push(format!(
        "human timeout: {}",
        show(&limits["human_timeout_secs"], " s per wait", "none")
    ));
    lines.push(format!(
        "memory limit: {}",
        show(
            &limits["memory_limit_bytes"],
            " bytes of address space per worker",
            "none"
        )
    ));
    lines.push(format!(
        "max calls per worker: {}",
        show(&limits["max_calls_per_worker"], "", "unlimited")
    ));
    lines.push(format!("max frame: {} bytes", limits["max_frame_bytes"]));
    lines.push(format!(
        "shim: installed afresh for this pool in {} (mode 0700, removed with it; nothing is reused from an earlier run)",
        limits["private_dir"].as_str().unwrap_or("?")
    ));
    lines.extend(crate::sandbox::doctor_lines(
        pool.sandbox(),
        limits["allow_net"].as_bool() == Some(true),
    ));
    lines.join("\n")
}
