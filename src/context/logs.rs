//! A tool's log records (Python's `logging`, from any logger of the worker)
//! for a caller that asked for them at a level: the worker's handler sends
//! each record at or above the level as a `log.record` callback while the
//! call runs, and the supervisor checks it again (the worker is not trusted
//! to keep to the level) before the caller's [`LogListener`] hears it.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::params;
use crate::worker::CallbackError;

/// Longest message a record carries on; a longer one is cut (at a character
/// boundary) with `…`.
pub(crate) const MAX_LOG_MESSAGE: usize = 16 * 1024;

/// The severity of a log record, as MCP (and syslog) names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LogLevel {
    /// Python's `DEBUG`.
    Debug,
    /// Python's `INFO`.
    Info,
    /// Between `INFO` and `WARNING` (Python has no such level).
    Notice,
    /// Python's `WARNING`.
    Warning,
    /// Python's `ERROR`.
    Error,
    /// Python's `CRITICAL`.
    Critical,
    /// Above `CRITICAL`.
    Alert,
    /// Above everything.
    Emergency,
}

impl LogLevel {
    /// The level of a Python record of `levelno` (the highest level it
    /// reaches: 25 is `Notice`, 35 `Warning`).
    pub fn from_python(levelno: i64) -> LogLevel {
        match levelno {
            i64::MIN..=19 => LogLevel::Debug,
            20..=24 => LogLevel::Info,
            25..=29 => LogLevel::Notice,
            30..=39 => LogLevel::Warning,
            40..=49 => LogLevel::Error,
            50..=59 => LogLevel::Critical,
            60..=69 => LogLevel::Alert,
            _ => LogLevel::Emergency,
        }
    }

    /// The lowest Python `levelno` at this level: the worker's handler
    /// passes records from there up.
    pub fn python_threshold(self) -> u32 {
        match self {
            LogLevel::Debug => 0,
            LogLevel::Info => 20,
            LogLevel::Notice => 25,
            LogLevel::Warning => 30,
            LogLevel::Error => 40,
            LogLevel::Critical => 50,
            LogLevel::Alert => 60,
            LogLevel::Emergency => 70,
        }
    }
}

/// One log record of a running call.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRecord {
    /// Its severity.
    pub level: LogLevel,
    /// The logger's name (`root` for the root logger).
    pub logger: String,
    /// The formatted message (with the traceback, when the record has one).
    pub message: String,
}

/// Receives a call's log records, in the order the tool made them. Called
/// on the supervisor's runtime: it must not block.
pub trait LogListener: Send + Sync {
    /// One record at or above the subscription's level.
    fn record(&self, record: LogRecord);
}

impl std::fmt::Debug for dyn LogListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dyn LogListener")
    }
}

/// A caller's wish to hear a call's log records from `level` up.
#[derive(Debug, Clone)]
pub struct LogSubscription {
    /// The lowest level heard.
    pub level: LogLevel,
    /// Who hears them.
    pub listener: Arc<dyn LogListener>,
}

/// The parameters of `log.record` (docs/protocol.md, "Callbacks").
#[derive(Deserialize)]
struct RecordParams {
    level: i64,
    logger: String,
    message: String,
}

impl LogSubscription {
    /// Checks one `log.record` and hands it to the listener when its level
    /// is heard; a malformed one is a `TypeError` naming what is wrong.
    pub(super) fn record(&self, params: &Map<String, Value>) -> Result<(), CallbackError> {
        let method = super::methods::LOG;
        let params: RecordParams = params::from_params(params)
            .map_err(|e| CallbackError::new("TypeError", format!("{method}: {e}")))?;
        let level = LogLevel::from_python(params.level);
        if level >= self.level {
            self.listener.record(LogRecord {
                level,
                logger: params.logger,
                message: super::cut(params.message, MAX_LOG_MESSAGE),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Mutex;

    struct Seen(Mutex<Vec<LogRecord>>);
    impl LogListener for Seen {
        fn record(&self, record: LogRecord) {
            self.0.lock().unwrap().push(record);
        }
    }

    #[test]
    fn records_below_the_level_are_dropped_whatever_the_worker_sends() {
        let seen = Arc::new(Seen(Mutex::default()));
        let subscription = LogSubscription {
            level: LogLevel::Info,
            listener: seen.clone(),
        };
        for (level, message) in [(10, "debug"), (20, "info"), (30, "warning"), (25, "notice")] {
            let params = json!({"level": level, "logger": "tool", "message": message});
            subscription.record(params.as_object().unwrap()).unwrap();
        }
        let levels: Vec<(LogLevel, String)> = seen
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|r| (r.level, r.message.clone()))
            .collect();
        assert_eq!(
            levels,
            [
                (LogLevel::Info, "info".into()),
                (LogLevel::Warning, "warning".into()),
                (LogLevel::Notice, "notice".into())
            ]
        );
        let bad = subscription
            .record(json!({"level": "high"}).as_object().unwrap())
            .unwrap_err();
        assert_eq!(bad.kind, "TypeError");
    }

    #[test]
    fn python_levels_map_both_ways() {
        for level in [
            LogLevel::Debug,
            LogLevel::Info,
            LogLevel::Notice,
            LogLevel::Warning,
            LogLevel::Error,
            LogLevel::Critical,
        ] {
            assert_eq!(
                LogLevel::from_python(level.python_threshold().into()),
                level
            );
        }
    }
}
