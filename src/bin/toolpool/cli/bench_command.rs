//! `bench`: one tool over several pool sizes, with a progress bar a size.

use std::process::ExitCode;

use serde_json::Value;

use super::{pretty, print_out, Cli, CliError};
use toolpool::PoolBuilder;

/// `bench`'s progress on stderr: one bar per pool size, started when its
/// measured calls start (so the rate and the time left are those of the
/// calls, not of starting Python), and left in place when it is done.
/// The bars share one `MultiProgress`, so each new one is drawn below the
/// finished ones.
#[derive(Default)]
struct SizeProgress {
    bars: indicatif::MultiProgress,
    current: std::sync::Mutex<Option<indicatif::ProgressBar>>,
}

impl SizeProgress {
    fn tell(&self, event: crate::bench::Progress) {
        use crate::bench::Progress;
        let Ok(mut bar) = self.current.lock() else {
            return;
        };
        match event {
            Progress::Measuring { workers, calls } => {
                let new = indicatif::ProgressBar::new(calls as u64);
                let style = indicatif::ProgressStyle::with_template(
                    "{prefix} {bar:30} {pos}/{len} calls ({rate}, {eta} left)",
                )
                .map(|style| {
                    style.with_key(
                        "rate",
                        |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                            let _ = write!(w, "{:.0} calls/s", state.per_sec());
                        },
                    )
                })
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
                new.set_style(style);
                new.set_prefix(format!(
                    "{workers} {}",
                    if workers == 1 { "worker " } else { "workers" }
                ));
                *bar = Some(self.bars.add(new));
            }
            Progress::Called => {
                if let Some(bar) = bar.as_ref() {
                    bar.inc(1);
                }
            }
            Progress::Measured { .. } => {
                if let Some(bar) = bar.take() {
                    bar.finish();
                }
            }
        }
    }
}

/// `bench`: `calls` calls of `tool` (the built-in no-op when none is named)
/// with `args`, `concurrency` at once, over each pool size of `--workers`.
pub(super) async fn bench(
    cli: &Cli,
    base: PoolBuilder,
    tool: Option<&str>,
    args: Value,
    (calls, concurrency): (u64, u64),
    json: bool,
) -> Result<ExitCode, CliError> {
    use crate::bench::{BenchPlan, BUILTIN_NOOP};

    let builtin =
        match tool {
            Some(_) => None,
            None => Some(crate::bench::builtin_functions_dir().map_err(|e| {
                CliError::Usage(format!("cannot write the built-in bench tool: {e}"))
            })?),
        };
    let spares = cli.spare_workers.map_or(1, |n| n as usize);
    let mut base = base.spare_workers(spares);
    if let Some(dir) = &builtin {
        base = base.functions_dir(dir.path());
    }
    let plan = BenchPlan {
        tool: tool.unwrap_or(BUILTIN_NOOP).to_string(),
        args,
        calls: calls as usize,
        concurrency: concurrency as usize,
        pool_sizes: cli
            .workers
            .clone()
            .map_or_else(|| vec![1, 2, 4, 8], |sizes| sizes.0),
    };
    let progress = SizeProgress::default();
    let rows = crate::bench::run(&base, &plan, move |event| progress.tell(event)).await?;
    if json {
        let report = crate::bench::BenchReport::new(&plan, &rows);
        print_out(&pretty(
            &serde_json::to_value(&report).unwrap_or(Value::Null),
        ));
    } else {
        print_out(&crate::bench::table(&plan.tool, plan.concurrency, &rows));
    }
    let failed: usize = rows.iter().map(|r| r.failed).sum();
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
