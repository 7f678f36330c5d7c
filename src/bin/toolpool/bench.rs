//! `toolpool bench`: runs one tool at a given concurrency over several pool
//! sizes and reports throughput, latency and queue wait for each, so an
//! operator can choose a pool size from evidence.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use toolpool::PoolError;
use toolpool::{CallReport, InvokeOptions, PoolBuilder};

/// The built-in tool `bench` runs when no `--tool` is given.
pub const BUILTIN_NOOP: &str = "noop";
const BUILTIN_MODULE: &str = "\"\"\"toolpool bench's built-in tool.\"\"\"\n\n\ndef noop() -> None:\n    \"\"\"Do nothing: measures the pool's own overhead.\"\"\"\n    return None\n";

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    pub tool: String,
    pub args: Value,
    pub calls: usize,
    pub concurrency: usize,
    pub pool_sizes: Vec<usize>,
}

/// What `bench --json` prints: the plan, then each pool size's figures.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport<'a> {
    pub tool: &'a str,
    pub args: &'a Value,
    pub concurrency: usize,
    /// Calls per pool size.
    pub calls: usize,
    pub results: &'a [BenchRow],
}

impl<'a> BenchReport<'a> {
    pub fn new(plan: &'a BenchPlan, results: &'a [BenchRow]) -> Self {
        BenchReport {
            tool: &plan.tool,
            args: &plan.args,
            concurrency: plan.concurrency,
            calls: plan.calls,
            results,
        }
    }
}

/// What [`run`] tells its progress callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The pool of this size is warm: `calls` measured calls start now.
    Measuring { workers: usize, calls: usize },
    /// One measured call finished.
    Called,
    /// Every call of this pool size finished.
    Measured { workers: usize },
}

/// One pool size's figures.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    pub workers: usize,
    pub calls: usize,
    pub failed: usize,
    pub calls_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub queue_wait_p50_ms: f64,
    pub queue_wait_p99_ms: f64,
    /// Workers retired in good health during the measured calls, by cause.
    pub retired: Retired,
}

/// Workers retired while a bench ran, by cause (`pool.stats()`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Retired {
    /// After `--max-calls-per-worker` calls (or a reload).
    pub max_calls: u64,
    /// Over `--max-worker-rss` after a call.
    pub over_rss: u64,
    /// Idle past `--worker-idle`.
    pub idle: u64,
    /// A call left something running in them.
    pub left_running: u64,
}

impl Retired {
    fn since(before: &toolpool::stats::PoolStats, after: &toolpool::stats::PoolStats) -> Retired {
        let left = |stats: &toolpool::stats::PoolStats| stats.left_running.values().sum::<u64>();
        Retired {
            max_calls: (after.recycled - after.retired_over_rss)
                .saturating_sub(before.recycled - before.retired_over_rss),
            over_rss: after.retired_over_rss - before.retired_over_rss,
            idle: after.retired_idle - before.retired_idle,
            left_running: left(after).saturating_sub(left(before)),
        }
    }

    fn total(&self) -> u64 {
        self.max_calls + self.over_rss + self.idle + self.left_running
    }
}

/// A functions directory holding only the built-in no-op tool.
pub fn builtin_functions_dir() -> std::io::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("toolpool-bench-")
        .tempdir()?;
    std::fs::write(dir.path().join("toolpool_bench.py"), BUILTIN_MODULE)?;
    Ok(dir)
}

/// Runs the plan on a fresh pool per size; `progress` is told when the
/// measured calls of a size start, after each of them, and at its end (the
/// pool's start and warm-up are not part of it).
pub async fn run(
    base: &PoolBuilder,
    plan: &BenchPlan,
    progress: impl Fn(Progress) + Send + Sync + 'static,
) -> Result<Vec<BenchRow>, PoolError> {
    let progress = Arc::new(progress);
    let mut rows = Vec::new();
    for &workers in &plan.pool_sizes {
        let pool = base.clone().workers(workers).build().await?;
        // Warm every worker before measuring.
        for _ in 0..workers * 2 {
            let _ = pool
                .invoke(&plan.tool, plan.args.clone(), InvokeOptions::default())
                .await;
        }
        progress(Progress::Measuring {
            workers,
            calls: plan.calls,
        });
        let before = pool.stats();
        let limit = Arc::new(Semaphore::new(plan.concurrency.max(1)));
        let mut calls = JoinSet::new();
        let started = Instant::now();
        let mut latencies = Vec::with_capacity(plan.calls);
        let mut waits = Vec::with_capacity(plan.calls);
        let mut failed = 0;
        let mut record = |done: Result<CallReport, tokio::task::JoinError>| match done {
            Ok(report) => {
                failed += usize::from(report.result.is_err());
                latencies.push(report.elapsed);
                waits.push(report.queue_wait);
            }
            Err(_) => failed += 1,
        };
        for _ in 0..plan.calls {
            let Ok(permit) = limit.clone().acquire_owned().await else {
                break;
            };
            // Collected as they finish, so finished calls do not pile up.
            while let Some(done) = calls.try_join_next() {
                record(done);
            }
            let (pool, tool, args, progress) = (
                pool.clone(),
                plan.tool.clone(),
                plan.args.clone(),
                progress.clone(),
            );
            calls.spawn(async move {
                let report = pool
                    .invoke_report(&tool, args, InvokeOptions::default())
                    .await;
                drop(permit);
                progress(Progress::Called);
                report
            });
        }
        while let Some(done) = calls.join_next().await {
            record(done);
        }
        let elapsed = started.elapsed();
        let retired = Retired::since(&before, &pool.stats());
        progress(Progress::Measured { workers });
        pool.shutdown().await;
        rows.push(BenchRow {
            workers,
            calls: plan.calls,
            failed,
            calls_per_s: plan.calls as f64 / elapsed.as_secs_f64(),
            p50_ms: percentile_ms(&mut latencies, 0.5),
            p99_ms: percentile_ms(&mut latencies, 0.99),
            queue_wait_p50_ms: percentile_ms(&mut waits, 0.5),
            queue_wait_p99_ms: percentile_ms(&mut waits, 0.99),
            retired,
        });
    }
    Ok(rows)
}

fn percentile_ms(samples: &mut [Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort();
    let index = ((samples.len() - 1) as f64 * p).round() as usize;
    samples[index].as_secs_f64() * 1e3
}

/// The table `toolpool bench` prints.
pub fn table(tool: &str, concurrency: usize, rows: &[BenchRow]) -> String {
    let mut out = format!("tool {tool}, {concurrency} calls in flight\n");
    out.push_str(
        "workers  calls/s    p50 ms   p99 ms   queue p50 ms  queue p99 ms  failed  retired\n",
    );
    for r in rows {
        out.push_str(&format!(
            "{:<8} {:<10.0} {:<8.2} {:<8.2} {:<13.2} {:<13.2} {:<7} {}\n",
            r.workers,
            r.calls_per_s,
            r.p50_ms,
            r.p99_ms,
            r.queue_wait_p50_ms,
            r.queue_wait_p99_ms,
            r.failed,
            r.retired.total()
        ));
    }
    // Why, where any was: each retirement costs a worker's start.
    for r in rows.iter().filter(|r| r.retired.total() > 0) {
        let Retired {
            max_calls,
            over_rss,
            idle,
            left_running,
        } = &r.retired;
        out.push_str(&format!(
            "{} workers retired: {max_calls} after --max-calls-per-worker, {over_rss} over --max-worker-rss, {idle} idle past --worker-idle, {left_running} left something running\n",
            r.workers
        ));
    }
    out
}

/// Pool sizes from `--workers 1,2,4,8` (one number for every other command).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSizes(pub Vec<usize>);

/// Parses `1,2,4,8`.
pub fn parse_pool_sizes(text: &str) -> Result<PoolSizes, String> {
    let sizes: Result<Vec<usize>, _> = text
        .split(',')
        .map(|part| part.trim().parse::<usize>())
        .collect();
    match sizes {
        Ok(sizes) if !sizes.is_empty() && sizes.iter().all(|n| (1..=1024).contains(n)) => {
            Ok(PoolSizes(sizes))
        }
        // One number is what every command but bench takes: say that.
        _ if !text.contains(',') => Err(format!(
            "'{text}' is not a number of workers from 1 to 1024"
        )),
        _ => Err(format!(
            "'{text}' is not a list of pool sizes such as 1,2,4 (each 1 to 1024; for bench)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_sizes_parse_and_refuse_nonsense() {
        assert_eq!(parse_pool_sizes("1,2, 4").unwrap().0, [1, 2, 4]);
        assert!(parse_pool_sizes("0").is_err());
        assert!(parse_pool_sizes("two").is_err());
        assert!(parse_pool_sizes("").is_err());
    }

    #[test]
    fn percentiles_pick_the_nearest_rank() {
        let mut samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile_ms(&mut samples, 0.5), 51.0);
        assert_eq!(percentile_ms(&mut samples, 0.99), 99.0);
    }
}
