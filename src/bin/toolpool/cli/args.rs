//! The command line's definition: global options, subcommands and their
//! options (clap), and each subcommand's help cut to the options that
//! matter to it.

use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use toolpool::text::parse_seconds;

/// What `toolpool --help` says after the options.
const AFTER_HELP: &str = "\
Exit codes:
  0    success
  1    the call failed (the tool raised, its worker died, bad arguments, unknown function)
  124  the call timed out
  2    bad command line or setup, or a bad workflow file

Environment:
  RUST_LOG           log filter (info, toolpool=debug, ...) [default: info]; -q, -v win
  NO_COLOR           no colour in the log (--color always still colours it)
  MAC_FUNCTIONS_DIR  the functions directory, when TOOLPOOL_FUNCTIONS_DIR is not set
  TOOLPOOL_CACHE_DIR where the shim and the bundled tools are kept [default: ~/.cache/toolpool]
  OTEL_EXPORTER_OTLP_ENDPOINT  serve: export a span per MCP request there (OTLP/HTTP);
                     the other standard OTEL_* variables too (docs/mcp-clients.md)

stdout carries only results; logs go to stderr. A command's own options: toolpool help <COMMAND>";

#[derive(Debug, Parser)]
#[command(
    name = "toolpool",
    version,
    about = "Runs Python function tools in a pool of isolated python3 workers, with enforced timeouts",
    after_help = AFTER_HELP,
    next_help_heading = "Pool options"
)]
pub struct Cli {
    /// Directory of tool modules (also MAC_FUNCTIONS_DIR) [default: functions/function_calling, else the bundled tools]
    #[arg(
        long,
        env = "TOOLPOOL_FUNCTIONS_DIR",
        global = true,
        value_name = "DIR"
    )]
    pub functions_dir: Option<PathBuf>,
    /// Python interpreter (resolved once to the real executable)
    #[arg(
        long,
        env = "TOOLPOOL_PYTHON",
        global = true,
        default_value = "python3"
    )]
    pub python: String,
    /// Number of workers [default: number of CPUs]
    #[arg(long, env = "TOOLPOOL_WORKERS", global = true, value_name = "N", value_parser = crate::bench::parse_pool_sizes)]
    pub workers: Option<crate::bench::PoolSizes>,
    /// Workers kept however long they are idle (with --worker-idle) [default: --workers]
    #[arg(long, global = true, value_name = "N")]
    pub min_workers: Option<usize>,
    /// Retire a worker beyond --min-workers after it has been idle this long; calls that wait start it again [default: never]
    #[arg(long, global = true, value_name = "SECS", value_parser = parse_seconds)]
    pub worker_idle: Option<Duration>,
    /// Default per-call timeout in seconds
    #[arg(long, env = "TOOLPOOL_TIMEOUT", global = true, default_value = "60", value_parser = parse_seconds)]
    pub timeout: Duration,
    /// Seconds a timed-out tool may clean up (TimeoutError in its main thread, so `finally` runs) before its worker is killed [default: 0]
    #[arg(long, env = "TOOLPOOL_TIMEOUT_GRACE", global = true, value_name = "SECS", value_parser = parse_seconds)]
    pub timeout_grace: Option<Duration>,
    /// Session directory [default: .toolpool/sessions/<session-id>]
    // The text is also the option's --help, where `<session-id>` must stay as it is.
    #[allow(rustdoc::invalid_html_tags)]
    #[arg(long, env = "TOOLPOOL_SESSION_DIR", global = true, value_name = "DIR")]
    pub session_dir: Option<PathBuf>,
    /// Session id, passed to tools in _context
    #[arg(long, global = true, default_value = "default", value_name = "ID")]
    pub session_id: String,
    /// Recycle a worker after this many calls [default: unlimited]
    #[arg(long, global = true, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_calls_per_worker: Option<u64>,
    /// Retire a worker after a call that leaves it with more than MB of resident memory [default: never]
    #[arg(long, global = true, value_name = "MB", value_parser = clap::value_parser!(u64).range(1..=MAX_MEMORY_LIMIT_MB))]
    pub max_worker_rss: Option<u64>,
    /// Per-worker address-space limit in MB (16 to 4294967296) [default: none]
    #[arg(long, global = true, value_name = "MB", value_parser = clap::value_parser!(u64).range(16..=MAX_MEMORY_LIMIT_MB))]
    pub memory_limit: Option<u64>,
    /// Seconds one human wait may take before the tool gets HumanPromptUnavailable [default: unbounded]
    #[arg(long, global = true, value_name = "SECS", value_parser = parse_seconds)]
    pub human_timeout: Option<Duration>,
    /// Seconds one tool module's import may take before it is a catalog error [default: 10]
    #[arg(long, global = true, value_name = "SECS", value_parser = parse_seconds)]
    pub import_timeout: Option<Duration>,
    /// Pass these environment variables to workers: a name or a glob pattern such as 'SERPER_*' (repeatable)
    #[arg(long = "pass-env", global = true, value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// Set variables for workers from a dotenv file (NAME=value lines; repeatable, later files win)
    #[arg(long = "env-file", global = true, value_name = "FILE", value_parser = parse_env_file)]
    pub env_file: Vec<EnvFile>,
    /// Run workers sandboxed (namespaces, a read-only view, seccomp, Landlock); =best-effort: what the kernel has
    #[arg(long, global = true, value_enum, value_name = "MODE", num_args = 0..=1, require_equals = true, default_missing_value = "strict")]
    pub sandbox: Option<SandboxArg>,
    /// Under --sandbox, keep the host's network [default: loopback of its own only]
    #[arg(long, global = true)]
    pub allow_net: bool,
    /// Under --sandbox, processes and threads one worker may have [default: 256]
    #[arg(long, global = true, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_procs: Option<u32>,
    /// Warm spare workers that replace a killed or recycled one at once [default: 1]
    #[arg(long, global = true, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=64))]
    pub spare_workers: Option<u32>,
    /// Colour in the log; auto: on a terminal, unless NO_COLOR is set
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "auto",
        help_heading = "Log options"
    )]
    pub color: crate::logging::ColorChoice,
    /// Log errors only
    #[arg(
        short,
        long,
        global = true,
        conflicts_with = "verbose",
        help_heading = "Log options"
    )]
    pub quiet: bool,
    /// Log more: -v debug (a failed call's traceback, the bundled-tools notice), -vv everything
    #[arg(short, long, global = true, action = clap::ArgAction::Count, help_heading = "Log options")]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

/// `--sandbox` and `--sandbox=best-effort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SandboxArg {
    // (No doc comments: clap would list the values one a line, and lay out
    // every option's help that way.)
    // Every piece, or refuse to start naming what is missing.
    Strict,
    // What this kernel has; what is missing is logged.
    BestEffort,
}

/// The variables of one `--env-file`, read when the command line is parsed
/// (so a bad line is a usage error naming the file and line).
#[derive(Debug, Clone)]
pub struct EnvFile(pub Vec<(String, String)>);

fn parse_env_file(path: &str) -> Result<EnvFile, String> {
    toolpool::env::read_env_file(std::path::Path::new(path))
        .map(EnvFile)
        .map_err(|e| e.to_string())
}

impl Cli {
    /// What the log shows, from `--color`, `-q` and `-v`.
    pub fn log_options(&self) -> crate::logging::LogOptions {
        crate::logging::LogOptions {
            color: self.color,
            quiet: self.quiet,
            verbose: self.verbose,
            // `call` prints a failed call's text on stdout: the log need not repeat it.
            calls_logged: !matches!(self.command, Command::Call { .. }),
        }
    }
}

/// What a command that only reads the catalog has no use for.
const CATALOG_ONLY_IDLE: &[&str] = &[
    "workers",
    "timeout",
    "timeout_grace",
    "min_workers",
    "worker_idle",
    "session_dir",
    "session_id",
    "max_calls_per_worker",
    "max_worker_rss",
    "memory_limit",
    "spare_workers",
];

/// Pool options that change nothing for a command, hidden from its help
/// (still accepted, so a shared alias or script works for every command).
const IDLE_POOL_OPTIONS: &[(&str, &[&str])] = &[
    ("catalog", CATALOG_ONLY_IDLE),
    ("list", CATALOG_ONLY_IDLE),
    ("check", CATALOG_ONLY_IDLE),
    (
        "resolve",
        &[
            "workers",
            "session_dir",
            "session_id",
            "max_calls_per_worker",
            "max_worker_rss",
            "memory_limit",
            "spare_workers",
        ],
    ),
    (
        "call",
        &[
            "workers",
            "max_calls_per_worker",
            "max_worker_rss",
            "spare_workers",
        ],
    ),
];

/// The command line's definition: the derived one, with each subcommand's
/// help showing only the pool options that matter to it.
pub fn command() -> clap::Command {
    let mut command = Cli::command();
    let pool_options: Vec<clap::Arg> = command
        .get_arguments()
        .filter(|arg| arg.is_global_set())
        .cloned()
        .collect();
    let option = |id: &str| pool_options.iter().find(|arg| arg.get_id() == id).cloned();
    // A subcommand that already has an argument of a global's id keeps its
    // own copy: the copy is the global one, hidden or with its own help.
    for (name, idle) in IDLE_POOL_OPTIONS {
        command = command.mut_subcommand(*name, |mut sub| {
            for id in *idle {
                if let Some(arg) = option(id) {
                    sub = sub.arg(arg.hide(true));
                }
            }
            sub
        });
    }
    command = command.mut_subcommand("completions", |mut sub| {
        for arg in pool_options
            .iter()
            .filter(|arg| arg.get_help_heading() == Some("Pool options"))
        {
            sub = sub.arg(arg.clone().hide(true));
        }
        sub
    });
    if let Some(workers) = option("workers") {
        command = command.mut_subcommand("bench", |sub| {
            sub.arg(
                workers
                    .value_name("N,N,...")
                    .help("Pool sizes to measure, such as 1,2,4,8 [default: 1,2,4,8]"),
            )
        });
    }
    command
}

/// Parses the process's arguments (exits on a bad command line, or after
/// printing help or the version).
pub fn parse() -> Cli {
    let matches = command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // The original convention's variable, after toolpool's own.
    if cli.functions_dir.is_none() {
        cli.functions_dir = std::env::var_os("MAC_FUNCTIONS_DIR")
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from);
    }
    cli
}

/// `serve --session-isolation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IsolationArg {
    Shared,
    Process,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CatalogFormat {
    Json,
    Openai,
    Table,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ResolveFormat {
    /// {name, description, parameters, function, timeout}
    Json,
    /// {type: "function", function: {name, description, parameters}}
    Openai,
}

// Parsed once per process: `serve`'s many options make its variant large,
// which costs nothing here.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// All tools, with their schemas and the modules that failed to load
    #[command(next_help_heading = "Catalog options")]
    Catalog {
        /// json: the catalog; openai: a tools list; table: one line a tool, cut to the terminal's width
        #[arg(long, value_enum, default_value = "json")]
        format: CatalogFormat,
    },
    /// Dropdown options: every module:All first, then module:function
    #[command(next_help_heading = "List options")]
    List {
        /// Print [{label, value, description}]; value is what a workflow file names
        #[arg(long)]
        json: bool,
    },
    /// Call one tool and print its result as the agent sees it
    #[command(next_help_heading = "Call options")]
    Call {
        /// Function name
        #[arg(help_heading = "Arguments")]
        name: String,
        /// Arguments as a JSON object
        #[arg(long, conflicts_with = "args_file")]
        args: Option<String>,
        /// Read the arguments (a JSON object) from a file, or - for stdin
        #[arg(long, value_name = "FILE")]
        args_file: Option<PathBuf>,
        /// Print a JSON envelope {ok, result|error, text, elapsed_ms, worker_pid}
        #[arg(long)]
        json: bool,
        /// Seconds the call may run on after SIGTERM or SIGINT before it is killed
        #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_seconds)]
        grace: Duration,
    },
    /// The tools of each agent node of a workflow file, with schemas and timeouts
    #[command(next_help_heading = "Resolve options")]
    Resolve {
        /// Workflow YAML file
        workflow: PathBuf,
        /// Only this node
        #[arg(long, value_name = "ID")]
        node: Option<String>,
        /// How each tool is printed
        #[arg(long, value_enum, default_value = "json")]
        format: ResolveFormat,
    },
    /// Validate a workflow file: exit 0, or print every error and exit 2
    Check {
        /// Workflow YAML file
        workflow: PathBuf,
    },
    /// Measure throughput, latency and queue wait of one tool over pool sizes (--workers 1,2,4,8)
    #[command(next_help_heading = "Bench options")]
    Bench {
        /// Tool to call [default: a built-in no-op, in a functions directory of its own]
        #[arg(long)]
        tool: Option<String>,
        /// Arguments for each call, as a JSON object
        #[arg(long)]
        args: Option<String>,
        /// Calls per pool size
        #[arg(long, default_value = "2000", value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
        calls: u64,
        /// Calls in flight at once
        #[arg(long, default_value = "32", value_parser = clap::value_parser!(u64).range(1..=100_000))]
        concurrency: u64,
        /// Print the figures as JSON
        #[arg(long)]
        json: bool,
    },
    /// Serve the tools over MCP (stdio by default) until stdin closes or SIGTERM
    #[command(next_help_heading = "Serve options")]
    Serve(ServeArgs),
    /// Interpreter, codec, kill mechanism, subreaper and limits in force
    Doctor,
    /// Serve the pool to the program that started it, JSON lines on stdin and stdout (the channel of `import toolpool`)
    Host,
    /// Print a shell completion script: toolpool completions bash > /etc/bash_completion.d/toolpool
    Completions {
        /// The shell
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `serve`'s options.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Offer only one node's tools from this workflow file (with --node)
    #[arg(long, value_name = "WORKFLOW.yaml", requires = "node")]
    pub config: Option<PathBuf>,
    /// The node whose tools to offer (with --config)
    #[arg(long, value_name = "ID", requires = "config")]
    pub node: Option<String>,
    /// Serve streamable HTTP at ADDR (PORT or HOST:PORT; a bare port is loopback) instead of stdio
    #[arg(long, value_name = "ADDR", value_parser = toolpool::mcp::parse_http_addr)]
    pub http: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub http_access: toolpool::mcp::HttpArgs,
    /// Seconds calls in flight may run on at shutdown before they are killed
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_seconds)]
    pub grace: Duration,
    /// Serve Prometheus metrics at http://ADDR/metrics (PORT or HOST:PORT; a bare port is loopback)
    #[arg(long, value_name = "ADDR", value_parser = toolpool::mcp::parse_http_addr)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Rebuild the catalog and recycle the workers when a tool module changes
    #[arg(long)]
    pub watch: bool,
    /// Answer a call still running after SECS with a task the client polls (protocol 2026-07-28, clients that declare the tasks extension)
    #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
    pub task_after: Option<Duration>,
    /// While a call runs for a client that gave a progressToken, send a progress notification every SECS in which the tool reported none
    #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
    pub progress_heartbeat: Option<Duration>,
    /// Seconds a finished or cancelled task is kept for `tasks/get` (with --task-after)
    #[arg(long, value_name = "SECS", default_value = "300", value_parser = parse_seconds, requires = "task_after")]
    pub task_keep: Duration,
    /// shared: any worker serves any session; process: a worker serves one session and is parked (or recycled) before it serves another [default: process with --http, else shared]
    #[arg(long, value_enum, value_name = "MODE")]
    pub session_isolation: Option<IsolationArg>,
    /// With --session-isolation process: idle workers kept for their sessions beyond --workers, so a session resumes its own instead of starting a new one (a few MB each; 0: recycle instead)
    #[arg(long, value_name = "N", default_value_t = toolpool::PoolBuilder::DEFAULT_PARKED_WORKERS)]
    pub parked_workers: usize,
}

/// 4 PiB: more than any address space, far below where MB → bytes overflows.
const MAX_MEMORY_LIMIT_MB: u64 = 1 << 32;
