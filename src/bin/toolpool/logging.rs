//! The command's log on stderr: its level (`-q`, `-v`, `RUST_LOG`) and
//! whether it is coloured (`--color`, `NO_COLOR`, whether stderr is a
//! terminal).

use std::io::IsTerminal;

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Layer as _, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    // No doc comments on the variants: clap would turn them into a long
    // help that spreads every option of `--help` over several lines.
    Auto,
    Always,
    Never,
}

/// What the log shows.
#[derive(Debug, Clone, Copy)]
pub struct LogOptions {
    pub color: ColorChoice,
    /// `-q`: errors only.
    pub quiet: bool,
    /// `-v` count: 1 debug for toolpool, 2 debug for everything.
    pub verbose: u8,
    /// Whether each failed call gets a log line at the default level
    /// (`toolpool call` prints the text itself: its log says it at `-v`).
    pub calls_logged: bool,
}

impl LogOptions {
    /// Whether the log is coloured, given NO_COLOR and whether stderr is a terminal.
    pub fn ansi(&self, no_color: bool, stderr_is_terminal: bool) -> bool {
        match self.color {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => stderr_is_terminal && !no_color,
        }
    }

    /// The filter: `-q`/`-v` when given, else `RUST_LOG` when set, else `info`.
    /// `RUST_LOG` is a list of `target=level` directives and a bare default
    /// level (tracing's `Targets`, without `EnvFilter`'s span and field
    /// directives: no regular-expression engine in the binary).
    pub fn filter(&self, rust_log: Option<&str>) -> Targets {
        let base = match (self.quiet, self.verbose, rust_log) {
            (true, _, _) => "error".to_string(),
            (false, 0, Some(spec)) => spec.to_string(),
            // rmcp logs each stateless request's service start and end at
            // INFO: three lines per call over HTTP.
            (false, 0, None) => "info,rmcp=warn".to_string(),
            (false, 1, _) => "info,toolpool=debug,rmcp=warn".to_string(),
            (false, _, _) => "debug".to_string(),
        };
        let mut spec = base;
        let names_calls = spec.contains(toolpool::CALL_LOG_TARGET);
        if !self.calls_logged && self.verbose == 0 && !names_calls {
            spec.push(',');
            spec.push_str(toolpool::CALL_LOG_TARGET);
            spec.push_str("=off");
        }
        // A RUST_LOG that does not parse: say so, and log as by default.
        spec.parse().unwrap_or_else(|e| {
            eprintln!("toolpool: RUST_LOG={spec:?} is not a log filter ({e}); using info");
            Targets::new().with_default(tracing::Level::INFO)
        })
    }
}

/// Sets up the log on stderr for the rest of the process.
pub fn init(options: LogOptions) {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let rust_log = std::env::var("RUST_LOG").ok().filter(|s| !s.is_empty());
    let output = tracing_subscriber::fmt::layer()
        .with_ansi(options.ansi(no_color, std::io::stderr().is_terminal()))
        .with_writer(std::io::stderr);
    // The filter alone decides the level (`fmt()`'s builder would cap it at
    // INFO).
    tracing_subscriber::registry()
        .with(output.with_filter(options.filter(rust_log.as_deref())))
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(color: ColorChoice) -> LogOptions {
        LogOptions {
            color,
            quiet: false,
            verbose: 0,
            calls_logged: true,
        }
    }

    #[test]
    fn rust_log_sets_levels_by_target_and_the_flags_win() {
        use tracing::Level;
        let plain = options(ColorChoice::Never);
        let filter = plain.filter(Some("warn,toolpool::pool=debug"));
        assert!(filter.would_enable("toolpool::pool", &Level::DEBUG));
        assert!(filter.would_enable("toolpool::pool::queue", &Level::DEBUG));
        assert!(!filter.would_enable("toolpool::mcp", &Level::INFO));
        assert!(filter.would_enable("hyper", &Level::WARN));

        let default = plain.filter(None);
        assert!(default.would_enable("toolpool::mcp", &Level::INFO));
        assert!(!default.would_enable("rmcp::service", &Level::INFO));
        assert!(!default.would_enable("toolpool::pool", &Level::DEBUG));

        let quiet = LogOptions {
            quiet: true,
            ..plain
        };
        let filter = quiet.filter(Some("debug"));
        assert!(!filter.would_enable("toolpool::pool", &Level::WARN));
        assert!(filter.would_enable("toolpool::pool", &Level::ERROR));

        // Not a filter: the default, not nothing.
        let filter = plain.filter(Some("toolpool=loud"));
        assert!(filter.would_enable("toolpool::mcp", &Level::INFO));
        assert!(!filter.would_enable("toolpool::mcp", &Level::DEBUG));
    }

    #[test]
    fn calls_are_left_out_of_the_log_unless_asked_for() {
        use tracing::Level;
        let target = toolpool::CALL_LOG_TARGET;
        let quiet_calls = LogOptions {
            calls_logged: false,
            ..options(ColorChoice::Never)
        };
        assert!(!quiet_calls.filter(None).would_enable(target, &Level::ERROR));
        let asked = format!("info,{target}=info");
        assert!(quiet_calls
            .filter(Some(&asked))
            .would_enable(target, &Level::INFO));
        assert!(options(ColorChoice::Never)
            .filter(None)
            .would_enable(target, &Level::INFO));
    }

    #[test]
    fn colour_follows_the_terminal_unless_told() {
        assert!(options(ColorChoice::Auto).ansi(false, true));
        assert!(!options(ColorChoice::Auto).ansi(false, false));
        assert!(!options(ColorChoice::Auto).ansi(true, true));
        assert!(options(ColorChoice::Always).ansi(true, false));
        assert!(!options(ColorChoice::Never).ansi(false, true));
    }
}
