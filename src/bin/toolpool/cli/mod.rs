//! The command line: argument definitions and the commands (docs/cli.md).
//!
//! stdout carries only results; logs go to stderr. Exit codes: 0 success,
//! 1 the call failed, 124 the call timed out, 2 bad command line, setup or
//! workflow file.
//!
//! The files: the definition (`args.rs`), one function a subcommand
//! (`commands.rs`, `bench_command.rs`); here, the exit codes and what the
//! subcommands share.

mod args;
mod bench_command;
mod commands;
mod host;
mod signals;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Value};

use signals::{StopSignal, StopSignals};
use toolpool::content::ContentBlock;
use toolpool::workflow::WorkflowError;
use toolpool::PoolError;
use toolpool::{CallReport, Pool, PoolBuilder};

pub use args::{
    command, parse, CatalogFormat, Cli, Command, IsolationArg, ResolveFormat, SandboxArg, ServeArgs,
};

/// Exit code for a bad command line or setup.
const EXIT_USAGE: u8 = 2;

/// Runs a parsed command line; returns the process exit code.
pub async fn run(cli: Cli) -> ExitCode {
    // What a tool module said (an import error's text) can be in these:
    // shown, never obeyed, by the terminal.
    let say = |text: &dyn std::fmt::Display| {
        eprintln!(
            "toolpool: {}",
            toolpool::text::escape_controls(&text.to_string())
        )
    };
    match commands::run_command(&cli).await {
        Ok(code) => code,
        Err(CliError::Usage(message)) => {
            say(&message);
            ExitCode::from(EXIT_USAGE)
        }
        Err(CliError::Workflow(error)) => {
            say(&error);
            ExitCode::from(EXIT_USAGE)
        }
        Err(error @ CliError::Stopped(_)) => {
            say(&error);
            ExitCode::from(1)
        }
        Err(CliError::Pool(error)) => {
            say(&error);
            let code = match error {
                PoolError::FunctionsDir(_)
                | PoolError::Interpreter { .. }
                | PoolError::Setting(_)
                | PoolError::SessionDir { .. } => EXIT_USAGE,
                _ => 1,
            };
            ExitCode::from(code)
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A workflow file that cannot be used; exit code 2.
    #[error(transparent)]
    Workflow(#[from] WorkflowError),
    /// A stop signal arrived before the workers were ready; exit code 1.
    #[error("stopped by {0} before the workers were ready")]
    Stopped(StopSignal),
}

/// A pool builder from the global options. `one_shot_workers` is the size
/// for commands that make one call or none: they also skip the warm spare,
/// which would start a process only to stop it.
fn builder(cli: &Cli, one_shot_workers: Option<usize>) -> PoolBuilder {
    let default_spares = if one_shot_workers.is_some() { 0 } else { 1 };
    let spares = cli.spare_workers.map_or(default_spares, |n| n as usize);
    let mut builder = Pool::builder()
        .subreaper(true)
        .spare_workers(spares)
        .python(cli.python.clone())
        .timeout(cli.timeout)
        .timeout_grace(cli.timeout_grace.unwrap_or(Duration::ZERO))
        .session_id(cli.session_id.clone())
        .max_calls_per_worker(cli.max_calls_per_worker)
        .max_worker_rss_mb(cli.max_worker_rss)
        .memory_limit_mb(cli.memory_limit)
        .human_timeout(cli.human_timeout)
        .worker_idle(cli.worker_idle)
        .sandbox(match cli.sandbox {
            None => toolpool::SandboxMode::Off,
            Some(SandboxArg::Strict) => toolpool::SandboxMode::Strict,
            Some(SandboxArg::BestEffort) => toolpool::SandboxMode::BestEffort,
        })
        .allow_net(cli.allow_net)
        .max_procs(
            cli.max_procs
                .unwrap_or(toolpool::PoolBuilder::DEFAULT_MAX_PROCS),
        )
        .pass_env(cli.pass_env.iter().cloned())
        .set_env(cli.env_file.iter().flat_map(|file| file.0.iter().cloned()));
    if let Some(limit) = cli.import_timeout {
        builder = builder.import_timeout(Some(limit));
    }
    if let Some(min) = cli.min_workers {
        builder = builder.min_workers(min);
    }
    if let Some(dir) = &cli.functions_dir {
        builder = builder.functions_dir(dir);
    }
    if let Some(dir) = &cli.session_dir {
        builder = builder.session_dir(dir);
    }
    let workers = cli
        .workers
        .as_ref()
        .and_then(|sizes| sizes.0.first().copied());
    match workers.or(one_shot_workers) {
        Some(n) => builder.workers(n),
        None => builder,
    }
}

/// The next SIGTERM or SIGINT; never, when nothing listens for them (the
/// signals then keep their default action).
async fn next_stop_signal(signals: &mut Option<StopSignals>) -> StopSignal {
    match signals {
        Some(signals) => signals.recv().await,
        None => std::future::pending().await,
    }
}

/// Builds the pool, unless a stop signal comes first: then the workers
/// started so far are killed and the command fails.
async fn build_unless_stopped(
    builder: PoolBuilder,
    signals: &mut Option<StopSignals>,
) -> Result<Pool, CliError> {
    tokio::select! {
        built = builder.build() => Ok(built?),
        signal = next_stop_signal(signals) => Err(CliError::Stopped(signal)),
    }
}

/// Runs one call. A stop signal meanwhile drains the pool: the call may
/// finish within `grace`, then it is killed (and fails with `PoolClosed`);
/// a second signal kills it at once.
async fn call_draining_on_signal(
    pool: &Pool,
    call: impl std::future::Future<Output = CallReport>,
    signals: &mut Option<StopSignals>,
    grace: Duration,
) -> CallReport {
    tokio::pin!(call);
    let signal = tokio::select! {
        report = &mut call => {
            pool.shutdown_with_grace(Duration::from_secs(1)).await;
            return report;
        }
        signal = next_stop_signal(signals) => signal,
    };
    tracing::warn!(
        "{signal}: no new calls; the call in flight may finish within {} s",
        toolpool::text::format_secs(grace)
    );
    let drained = async { tokio::join!(&mut call, pool.shutdown_with_grace(grace)).0 };
    tokio::select! {
        report = drained => report,
        signal = next_stop_signal(signals) => {
            tracing::warn!("{signal} again: killing the call in flight");
            tokio::join!(&mut call, pool.shutdown_with_grace(Duration::ZERO)).0
        }
    }
}

/// `call --json`'s `attachments`: one entry per block that refers to a file.
fn attachments_json(blocks: &[ContentBlock]) -> Value {
    let attachments = blocks.iter().filter_map(|block| {
        let a = block.attachment.as_ref()?;
        Some(json!({
            "id": a.id,
            "kind": block.kind,
            "name": a.name,
            "mime_type": a.mime_type,
            "size": a.size,
            "path": a.path,
            "remote_file_id": a.remote_file_id,
        }))
    });
    Value::Array(attachments.collect())
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// The width of the terminal stdout is, or `None` when it is not one (a
/// pipe or a file gets every cell in full). `COLUMNS` wins when set.
fn terminal_width() -> Option<usize> {
    use std::io::IsTerminal;
    let stdout = std::io::stdout();
    if !stdout.is_terminal() {
        return None;
    }
    let columns = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok());
    columns
        .filter(|&c: &usize| c > 0)
        .or_else(|| terminal_size::terminal_size_of(&stdout).map(|(w, _)| usize::from(w.0)))
}

/// Prints to stdout with one trailing newline; a closed stdout is not an
/// error. On a terminal, control characters (a tool's escape sequences) are
/// shown as escapes; a pipe or a file gets the text as it is.
fn print_out(text: &str) {
    use std::io::IsTerminal;
    let mut out = std::io::stdout().lock();
    let text = if out.is_terminal() {
        toolpool::text::escape_controls(text)
    } else {
        std::borrow::Cow::Borrowed(text)
    };
    let _ = out.write_all(text.as_bytes());
    if !text.ends_with('\n') {
        let _ = out.write_all(b"\n");
    }
    let _ = out.flush();
}

fn read_args(inline: Option<&str>, file: Option<&PathBuf>) -> Result<Value, CliError> {
    let (source, text) = match (inline, file) {
        (Some(text), _) => ("--args".to_string(), text.to_string()),
        (None, Some(path)) if path.as_os_str() == "-" => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| CliError::Usage(format!("--args-file -: cannot read stdin: {e}")))?;
            ("--args-file -".to_string(), text)
        }
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| CliError::Usage(format!("--args-file {}: {e}", path.display())))?;
            (format!("--args-file {}", path.display()), text)
        }
        (None, None) => return Ok(json!({})),
    };
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| CliError::Usage(format!("{source}: not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(CliError::Usage(format!(
            "{source}: expected a JSON object of arguments, got {}",
            json_kind(&value)
        )));
    }
    Ok(value)
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
