//! Where a worker's code was: its `faulthandler` stack dump, asked for at a
//! timeout (or written by the import watchdog), and the tool's frame in it.

use std::path::Path;

use tokio::time::{timeout_at, Instant};

use super::actor::Actor;
use super::{DUMP_FIRST_BYTE_WAIT, DUMP_IDLE};

impl Actor {
    /// Asks the worker for a stack dump and returns where the tool's code was.
    pub(super) async fn stack_dump(&mut self) -> Option<String> {
        // Discard anything stale from an earlier dump.
        let mut chunk = vec![0u8; 8192];
        while matches!(self.dump.try_read(&mut chunk), Ok(n) if n > 0) {}
        if self.is_reaped() || !self.processes.ask_for_stack_dump() {
            return None;
        }
        self.read_dump().await
    }

    /// Reads a stack dump from the dump pipe (asked for, or written by the
    /// worker's import watchdog) and returns where the tool's code was.
    pub(super) async fn read_dump(&mut self) -> Option<String> {
        // On the heap: an array here would make every call's future 8 KiB larger.
        let mut chunk = vec![0u8; 8192];
        let mut dump = Vec::new();
        let mut until = Instant::now() + DUMP_FIRST_BYTE_WAIT;
        while dump.len() < 256 * 1024 {
            match timeout_at(until, self.dump.readable()).await {
                Ok(Ok(())) => match self.dump.try_read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => {
                        dump.extend_from_slice(&chunk[..n]);
                        until = Instant::now() + DUMP_IDLE;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    Err(_) => break,
                },
                _ => break,
            }
        }
        let text = String::from_utf8_lossy(&dump);
        tracing::debug!(worker = self.pid(), "stack dump:\n{text}");
        locate_in_dump(&text, &self.spec.functions_dir)
    }
}

/// Finds where the tool's code was in a `faulthandler` dump: the innermost
/// frame of the thread running a tool, with the innermost frame of the
/// functions directory when they differ. Paths under the functions directory
/// are shown relative to it.
pub(super) fn locate_in_dump(dump: &str, functions_dir: &Path) -> Option<String> {
    struct Frame {
        file: String,
        line: String,
        function: String,
    }
    let mut threads: Vec<Vec<Frame>> = Vec::new();
    for raw in dump.lines() {
        if raw.starts_with("Thread ") || raw.starts_with("Current thread ") {
            threads.push(Vec::new());
            continue;
        }
        let Some(rest) = raw.trim_start().strip_prefix("File \"") else {
            continue;
        };
        let Some((file, rest)) = rest.split_once("\", line ") else {
            continue;
        };
        let (line, function) = rest.split_once(" in ").unwrap_or((rest, "?"));
        if threads.is_empty() {
            threads.push(Vec::new());
        }
        if let Some(frames) = threads.last_mut() {
            frames.push(Frame {
                file: file.to_string(),
                line: line.trim().to_string(),
                function: function.trim().to_string(),
            });
        }
    }
    let in_tools = |f: &Frame| Path::new(&f.file).starts_with(functions_dir);
    let thread = threads
        .iter()
        .find(|frames| frames.iter().any(in_tools))
        .or_else(|| threads.iter().find(|frames| !frames.is_empty()))?;
    let show = |f: &Frame| {
        let file = Path::new(&f.file)
            .strip_prefix(functions_dir)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| f.file.clone());
        format!("{file}:{} in {}", f.line, f.function)
    };
    let innermost = thread.first()?;
    match thread.iter().find(|f| in_tools(f)) {
        Some(tool) if std::ptr::eq(tool, innermost) => Some(show(tool)),
        Some(tool) => Some(format!("{}, called from {}", show(innermost), show(tool))),
        None => Some(show(innermost)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = r#"Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/shim/toolpool_shim/worker.py", line 40 in _read_loop

Current thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/subprocess.py", line 1959 in _wait
  File "/proj/functions/function_calling/slow.py", line 12 in spawn_and_wait
  File "/shim/toolpool_shim/invoke.py", line 88 in run
"#;

    #[test]
    fn dump_locates_the_tool_frame_and_what_it_called() {
        let at = locate_in_dump(DUMP, Path::new("/proj/functions/function_calling")).unwrap();
        assert_eq!(
            at,
            "/usr/lib/python3.11/subprocess.py:1959 in _wait, called from slow.py:12 in spawn_and_wait"
        );
    }

    #[test]
    fn dump_with_the_tool_frame_innermost_names_only_it() {
        let dump = "Current thread 0x1 (most recent call first):\n  File \"/f/busy.py\", line 3 in loop\n  File \"/shim/invoke.py\", line 9 in run\n";
        assert_eq!(
            locate_in_dump(dump, Path::new("/f")).unwrap(),
            "busy.py:3 in loop"
        );
    }

    #[test]
    fn empty_dump_locates_nothing() {
        assert_eq!(locate_in_dump("", Path::new("/f")), None);
    }
}
