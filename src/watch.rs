//! `--watch`: rebuilds the catalog and recycles the workers when a tool
//! module changes. File-system events (inotify, through `notify`) are
//! debounced, so a burst of saves settles into one look; the reload happens
//! only when the modules' content hash changed (a `touch`, or an editor's
//! swap file, reloads nothing).

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify_debouncer_mini::notify::RecursiveMode;
use sha2::{Digest, Sha256};

use crate::pool::Pool;

/// How long the directory must be quiet before its modules are looked at.
pub const DEBOUNCE: Duration = Duration::from_millis(300);
/// When events cannot be had (no inotify, its watch limit reached): how
/// often the directory is hashed instead.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// A SHA-256 over every tool module's path (relative to `dir`) and content,
/// in path order.
pub fn fingerprint(dir: &Path) -> [u8; 32] {
    let mut files = Vec::new();
    collect(dir, &mut files);
    files.sort();
    let mut hasher = Sha256::new();
    for path in files {
        let relative = path.strip_prefix(dir).unwrap_or(&path);
        let name = relative.to_string_lossy();
        let content = std::fs::read(&path).unwrap_or_default();
        // Lengths first, so that no two different sets hash alike.
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update((content.len() as u64).to_le_bytes());
        hasher.update(&content);
    }
    hasher.finalize().into()
}

/// The `*.py` files the catalog imports: names starting with `_` or `.`
/// (and `__pycache__`) are skipped, as discovery skips them.
fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('_') || name.starts_with('.') {
            continue;
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            collect(&entry.path(), files);
        } else if name.ends_with(".py") {
            files.push(entry.path());
        }
    }
}

/// Watches `pool`'s functions directory until the pool shuts down. The
/// receiver is told the number of reloads so far after each successful one
/// (the MCP server tells its clients the tool list changed); it closes when
/// the watcher ends.
pub fn spawn(pool: &Pool) -> tokio::sync::watch::Receiver<u64> {
    let dir = pool.catalog().functions_dir.clone();
    let weak = pool.downgrade();
    let (reloaded, reloads) = tokio::sync::watch::channel(0u64);
    let (changed_tx, mut changed) = tokio::sync::mpsc::unbounded_channel();
    let debouncer = notify_debouncer_mini::new_debouncer(DEBOUNCE, move |events| {
        let _ = changed_tx.send(events);
    })
    .and_then(|mut debouncer| {
        debouncer
            .watcher()
            .watch(&dir, RecursiveMode::Recursive)
            .map(|()| debouncer)
    });
    let mut debouncer = match debouncer {
        Ok(debouncer) => Some(debouncer),
        Err(e) => {
            tracing::warn!(
                "cannot watch {} for changes ({e}): looking every {} s instead",
                dir.display(),
                POLL_INTERVAL.as_secs()
            );
            None
        }
    };
    tokio::spawn(async move {
        let mut seen = fingerprint(&dir);
        loop {
            // The timer also notices, within POLL_INTERVAL, that the pool
            // shut down, so the watch ends with it.
            let look = tokio::select! {
                events = changed.recv(), if debouncer.is_some() => match events {
                    Some(Ok(_)) => true,
                    Some(Err(e)) => {
                        tracing::warn!("watching {}: {e}", dir.display());
                        true
                    }
                    None => {
                        debouncer = None;
                        true
                    }
                },
                () = tokio::time::sleep(POLL_INTERVAL) => debouncer.is_none(),
            };
            let Some(pool) = weak.upgrade() else {
                return;
            };
            if pool.is_closed() {
                return;
            }
            if !look {
                continue;
            }
            let now = fingerprint(&dir);
            if now == seen {
                continue;
            }
            seen = now;
            tracing::info!("{} changed: reloading the tools", dir.display());
            match pool.reload().await {
                Ok(_) => reloaded.send_modify(|count| *count += 1),
                Err(e) => tracing::error!("reload failed, the old catalog stays: {e}"),
            }
        }
    });
    reloads
}
