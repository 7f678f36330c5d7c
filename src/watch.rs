//! `--watch`: rebuilds the catalog and recycles the workers when a tool
//! module changes. Polls a fingerprint of the functions directory (paths,
//! sizes and modification times of its `*.py` files): no platform-specific
//! notification API, and a burst of saves settles into one reload.

use std::hash::{Hash, Hasher};
use std::path::Path;
use std::time::Duration;

use crate::pool::Pool;

/// How often the functions directory is looked at.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// A hash of every tool module's path, size and modification time.
pub fn fingerprint(dir: &Path) -> u64 {
    let mut files = Vec::new();
    collect(dir, &mut files);
    files.sort();
    #[allow(deprecated)] // SipHasher: a stable, keyless hash is all this needs
    let mut hasher = std::hash::SipHasher::new();
    files.hash(&mut hasher);
    hasher.finish()
}

fn collect(dir: &Path, files: &mut Vec<(String, u64, u128)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('_') || name.starts_with('.') {
            continue;
        }
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        if meta.is_dir() {
            collect(&path, files);
        } else if name.ends_with(".py") {
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            files.push((path.to_string_lossy().into_owned(), meta.len(), modified));
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
    tokio::spawn(async move {
        let mut seen = fingerprint(&dir);
        loop {
            tokio::time::sleep(POLL_INTERVAL).await;
            let Some(pool) = weak.upgrade() else {
                return;
            };
            if pool.is_closed() {
                return;
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
