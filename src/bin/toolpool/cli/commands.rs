//! The subcommands: one function each, and [`run_command`], which checks
//! what they share and picks one.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::signals::StopSignals;
use super::{
    attachments_json, bench_command, build_unless_stopped, builder, call_draining_on_signal,
    command, pretty, print_out, read_args, terminal_width, CatalogFormat, Cli, CliError, Command,
    IsolationArg, ResolveFormat, ServeArgs,
};
use toolpool::content::result_text;
use toolpool::context::{PromptInput, TerminalPrompt};
use toolpool::workflow::{nodes_json, ToolFormat, Workflow};
use toolpool::{InvokeOptions, Pool, PoolBuilder, SessionIsolation};

/// What every subcommand starts from: the options, the stop signals
/// listened for since the start, and the scratch session of the read-only
/// commands.
struct Invocation<'a> {
    cli: &'a Cli,
    signals: Option<StopSignals>,
    /// Removed when the command ends.
    scratch_session: Option<tempfile::TempDir>,
}

impl Invocation<'_> {
    /// A pool builder from the global options (see [`builder`]), in the
    /// scratch session when there is one.
    fn pool_builder(&self, one_shot_workers: Option<usize>) -> PoolBuilder {
        let builder = builder(self.cli, one_shot_workers);
        match &self.scratch_session {
            Some(dir) => builder.session_dir(dir.path()),
            None => builder,
        }
    }

    /// A pool of one worker, for a command that makes one call or none,
    /// unless a stop signal comes first.
    async fn one_shot_pool(&mut self) -> Result<Pool, CliError> {
        build_unless_stopped(self.pool_builder(Some(1)), &mut self.signals).await
    }
}

pub(super) async fn run_command(cli: &Cli) -> Result<ExitCode, CliError> {
    if !matches!(cli.command, Command::Bench { .. })
        && cli.workers.as_ref().is_some_and(|w| w.0.len() > 1)
    {
        return Err(CliError::Usage(
            "--workers takes one number (a list of pool sizes is for bench)".into(),
        ));
    }
    let most = cli.workers.as_ref().and_then(|w| w.0.iter().min().copied());
    if let (Some(min), Some(most)) = (cli.min_workers, most) {
        if min > most {
            return Err(CliError::Usage(format!(
                "--min-workers {min} is more than --workers {most}"
            )));
        }
    }
    let mut run = Invocation {
        cli,
        signals: stop_signals(&cli.command),
        scratch_session: scratch_session(cli)?,
    };
    match &cli.command {
        Command::Completions { shell } => completions(*shell),
        Command::Bench {
            tool,
            args,
            calls,
            concurrency,
            json,
        } => {
            let base = run.pool_builder(Some(1));
            let args = read_args(args.as_deref(), None)?;
            let counts = (*calls, *concurrency);
            bench_command::bench(cli, base, tool.as_deref(), args, counts, *json).await
        }
        Command::Catalog { format } => catalog(&mut run, *format).await,
        Command::List { json } => list(&mut run, *json).await,
        Command::Call {
            name,
            args,
            args_file,
            json,
            grace,
        } => {
            let arguments = read_args(args.as_deref(), args_file.as_ref())?;
            // Tools that ask a human (call_user) ask here: the answer is a
            // line of stdin, or of /dev/tty when stdin carried the arguments.
            let input = match args_file {
                Some(file) if file.as_os_str() == "-" => PromptInput::Terminal,
                _ => PromptInput::Stdin,
            };
            call(&mut run, name, arguments, input, *json, *grace).await
        }
        Command::Resolve {
            workflow,
            node,
            format,
        } => resolve(&mut run, workflow, node.as_deref(), *format).await,
        Command::Serve(args) => serve(&mut run, args).await,
        Command::Doctor => doctor(&mut run).await,
        Command::Host => {
            let builder = run.pool_builder(None);
            super::host::host(builder, &mut run.signals).await
        }
        Command::Check { workflow } => check(&mut run, workflow).await,
    }
}

/// Listening from the start, so that a stop signal never kills the process
/// half-way; `bench` keeps the default action (Ctrl-C ends it).
fn stop_signals(command: &Command) -> Option<StopSignals> {
    match command {
        Command::Catalog { .. }
        | Command::List { .. }
        | Command::Call { .. }
        | Command::Resolve { .. }
        | Command::Check { .. }
        | Command::Serve(_)
        | Command::Doctor
        | Command::Host => StopSignals::new().ok(),
        _ => None,
    }
}

/// Read-only commands keep their session (nothing a tool writes: they make
/// no call, or only bench's) in a temporary directory, removed afterwards,
/// unless one is given: they leave nothing in the current directory.
fn scratch_session(cli: &Cli) -> Result<Option<tempfile::TempDir>, CliError> {
    let read_only = matches!(
        cli.command,
        Command::Catalog { .. }
            | Command::List { .. }
            | Command::Resolve { .. }
            | Command::Check { .. }
            | Command::Bench { .. }
    );
    if !read_only || cli.session_dir.is_some() {
        return Ok(None);
    }
    tempfile::Builder::new()
        .prefix("toolpool-session-")
        .tempdir()
        .map(Some)
        .map_err(|e| CliError::Usage(format!("cannot make a temporary session directory: {e}")))
}

fn completions(shell: clap_complete::Shell) -> Result<ExitCode, CliError> {
    // Into memory first: clap_complete panics on a failed write, and a
    // closed stdout (`| head`) is not an error.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command(), "toolpool", &mut script);
    print_out(&String::from_utf8_lossy(&script));
    Ok(ExitCode::SUCCESS)
}

async fn catalog(run: &mut Invocation<'_>, format: CatalogFormat) -> Result<ExitCode, CliError> {
    let pool = run.one_shot_pool().await?;
    let catalog = pool.catalog();
    let text = match format {
        CatalogFormat::Json => pretty(&catalog.to_json()),
        CatalogFormat::Openai => pretty(&catalog.to_openai()),
        CatalogFormat::Table => catalog.to_table_within(terminal_width()),
    };
    print_out(&text);
    pool.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

async fn list(run: &mut Invocation<'_>, json: bool) -> Result<ExitCode, CliError> {
    let pool = run.one_shot_pool().await?;
    let options = pool.catalog().list_options();
    let text = if json {
        pretty(&serde_json::to_value(&options).unwrap_or(Value::Null))
    } else {
        options
            .iter()
            .map(|o| o.label.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    };
    print_out(&text);
    pool.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

async fn call(
    run: &mut Invocation<'_>,
    name: &str,
    args: Value,
    input: PromptInput,
    json: bool,
    grace: Duration,
) -> Result<ExitCode, CliError> {
    let builder = run
        .pool_builder(Some(1))
        .human_prompt(Arc::new(TerminalPrompt::new(input)));
    let pool = build_unless_stopped(builder, &mut run.signals).await?;
    // `call NAME --timeout S` is the global --timeout: for one call the
    // pool's default and the call's timeout are the same thing.
    let options = InvokeOptions::default();
    let report = call_draining_on_signal(
        &pool,
        pool.invoke_report(name, args, options),
        &mut run.signals,
        grace,
    )
    .await;
    let code = match &report.result {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) if e.is_timeout() => ExitCode::from(124),
        Err(_) => ExitCode::from(1),
    };
    let text = match &report.result {
        Ok(value) => result_text(value, report.content.as_deref()),
        Err(error) => error.to_string(),
    };
    if json {
        let mut envelope = json!({"ok": report.result.is_ok()});
        match &report.result {
            Ok(value) => envelope["result"] = value.clone(),
            Err(error) => envelope["error"] = error.to_json(),
        }
        if let Some(blocks) = &report.content {
            envelope["attachments"] = attachments_json(blocks);
        }
        envelope["text"] = Value::String(text);
        envelope["elapsed_ms"] = json!((report.elapsed.as_secs_f64() * 1e4).round() / 10.0);
        envelope["worker_pid"] = json!(report.worker_pid);
        print_out(&pretty(&envelope));
    } else {
        print_out(&text);
    }
    Ok(code)
}

async fn resolve(
    run: &mut Invocation<'_>,
    workflow: &Path,
    node: Option<&str>,
    format: ResolveFormat,
) -> Result<ExitCode, CliError> {
    // The file is read before any worker starts: a missing file or broken
    // YAML needs no Python to be reported.
    let workflow = Workflow::load(workflow)?;
    let pool = run.one_shot_pool().await?;
    let resolved = workflow.resolve(&pool.catalog());
    let default_timeout = pool.default_timeout();
    pool.shutdown().await;
    let resolved = resolved?;
    let format = match format {
        ResolveFormat::Json => ToolFormat::Json,
        ResolveFormat::Openai => ToolFormat::OpenAi,
    };
    let value = match node {
        Some(id) => nodes_json(
            std::iter::once(resolved.node_tools(id)?),
            default_timeout,
            format,
        ),
        None => resolved.to_json(default_timeout, format),
    };
    print_out(&pretty(&value));
    Ok(ExitCode::SUCCESS)
}

async fn check(run: &mut Invocation<'_>, workflow: &PathBuf) -> Result<ExitCode, CliError> {
    let workflow = Workflow::load(workflow)?;
    let pool = run.one_shot_pool().await?;
    let resolved = workflow.resolve(&pool.catalog());
    pool.shutdown().await;
    let resolved = resolved?;
    let tools: usize = resolved.nodes.iter().map(|n| n.tools.len()).sum();
    let nodes = resolved.nodes.len();
    print_out(&format!(
        "{}: ok ({nodes} agent {} with function tooling, {tools} {})",
        resolved.source,
        if nodes == 1 { "node" } else { "nodes" },
        if tools == 1 { "tool" } else { "tools" },
    ));
    Ok(ExitCode::SUCCESS)
}

async fn doctor(run: &mut Invocation<'_>) -> Result<ExitCode, CliError> {
    let pool = run.one_shot_pool().await?;
    let report = pool.describe();
    pool.shutdown().await;
    print_out(&report);
    Ok(ExitCode::SUCCESS)
}

async fn serve(run: &mut Invocation<'_>, args: &ServeArgs) -> Result<ExitCode, CliError> {
    let http = http_options(run, args)?;
    // The workflow file is read before any worker starts, as in `resolve`.
    let workflow = args.config.as_ref().map(Workflow::load).transpose()?;
    // HTTP serves many clients: by default none sees another's worker
    // memory. stdio has one.
    let isolation = match (args.session_isolation, &http) {
        (Some(IsolationArg::Shared), _) | (None, None) => SessionIsolation::Shared,
        (Some(IsolationArg::Process), _) | (None, Some(_)) => SessionIsolation::Process,
    };
    let mut builder = run
        .pool_builder(None)
        .session_isolation(isolation)
        .parked_workers(args.parked_workers);
    if http.is_some() && run.cli.sandbox.is_some() && run.cli.spare_workers.is_none() {
        // A spare is started for the pool's own session, which no HTTP
        // session is: under --sandbox it could replace no session's worker
        // (each is started for its session).
        builder = builder.spare_workers(0);
    }
    let pool = build_unless_stopped(builder, &mut run.signals).await?;
    let reloads = args.watch.then(|| toolpool::watch::spawn(&pool));
    let _metrics = match args.metrics {
        Some(addr) => {
            let listener = match tokio::net::TcpListener::bind(addr).await {
                Ok(listener) => listener,
                Err(e) => {
                    pool.shutdown_with_grace(Duration::ZERO).await;
                    return Err(CliError::Usage(format!(
                        "--metrics {addr}: cannot listen: {e}"
                    )));
                }
            };
            let endpoint = tokio::spawn(toolpool::metrics::serve(listener, pool.clone()));
            Some(tokio_util::task::AbortOnDropHandle::new(endpoint))
        }
        None => None,
    };
    let tools = match served_tools(&pool, workflow.as_ref(), args.node.as_deref()) {
        Ok(tools) => tools,
        Err(error) => {
            pool.shutdown_with_grace(Duration::ZERO).await;
            return Err(error);
        }
    };
    let options = toolpool::mcp::ServeOptions {
        tools,
        http,
        grace: args.grace,
        reloads,
        workflow,
        task_after: args.task_after,
        task_keep: args.task_keep,
        progress_heartbeat: args.progress_heartbeat,
        #[cfg(feature = "otel")]
        telemetry: telemetry(),
    };
    let (stop, requests) = toolpool::stop::stop_channel();
    // The one signal listener: each SIGTERM or SIGINT is a stop request
    // (the first drains, the second kills what still runs).
    let _listener = run.signals.take().map(|mut signals| {
        tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
            loop {
                let signal = signals.recv().await;
                tracing::info!("{signal} received");
                stop.request_stop();
            }
        }))
    });
    toolpool::mcp::serve(pool, options, requests)
        .await
        .map_err(|e| CliError::Usage(e.to_string()))?;
    Ok(ExitCode::SUCCESS)
}

/// The HTTP transport's options, checked before any worker starts: a
/// public address without a token is refused here.
fn http_options(
    run: &Invocation<'_>,
    args: &ServeArgs,
) -> Result<Option<toolpool::mcp::HttpOptions>, CliError> {
    let http = args
        .http
        .map(|addr| {
            let token = std::env::var(toolpool::mcp::AUTH_TOKEN_ENV).ok();
            toolpool::mcp::HttpOptions::new(addr, &args.http_access, token)
        })
        .transpose()
        .map_err(CliError::Usage)?;
    let tenants = http.as_ref().is_some_and(|h| h.has_tenants());
    if tenants && args.session_isolation == Some(IsolationArg::Shared) {
        // Tenants' sessions are apart on disk; in one worker's memory they
        // would not be.
        return Err(CliError::Usage(
            "--session-isolation shared cannot be used with tenants (--auth-tokens, \
             --trusted-proxy, --jwks): a worker would serve several tenants, whose calls \
             would meet in its memory; each worker serves one session of one tenant \
             (--session-isolation process, the default with --http)"
                .into(),
        ));
    }
    if http.is_some()
        && run.cli.sandbox.is_some()
        && args.session_isolation == Some(IsolationArg::Shared)
    {
        // A sandboxed worker's view holds one session's folders: it cannot
        // serve another session's files.
        return Err(CliError::Usage(
            "--session-isolation shared cannot be used with --sandbox over --http: a sandboxed \
             worker sees only the folders of the session it was started for, so each serves \
             one session (--session-isolation process, the default with --http)"
                .into(),
        ));
    }
    Ok(http)
}

/// The tools `serve` offers: a workflow node's, else the catalog's.
fn served_tools(
    pool: &Pool,
    workflow: Option<&Workflow>,
    node: Option<&str>,
) -> Result<toolpool::mcp::ToolSet, CliError> {
    let (Some(workflow), Some(node)) = (workflow, node) else {
        return Ok(toolpool::mcp::ToolSet::Catalog);
    };
    let resolved = workflow
        .resolve(&pool.catalog())
        .and_then(|resolved| resolved.node_tools(node).cloned())?;
    Ok(toolpool::mcp::ToolSet::Node(resolved))
}

/// The exporter of the MCP requests' spans the `OTEL_*` variables ask for;
/// one that cannot be built is told and left out (the tools are served all
/// the same).
#[cfg(feature = "otel")]
fn telemetry() -> Option<toolpool::telemetry::Telemetry> {
    toolpool::telemetry::Telemetry::from_env().unwrap_or_else(|error| {
        tracing::warn!("{error}; no traces are exported");
        None
    })
}
