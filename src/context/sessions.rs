//! Sessions of their own: over HTTP each credential, or each name a client
//! gives, has a toolpool session — its own `code_workspace`, attachment
//! store and packages directory — under one root directory
//! (`--sessions-root`); a session directory nobody has used for
//! `--keep-sessions` is removed.
//!
//! A directory is a session only if toolpool made it: each holds a marker
//! file ([`SESSION_MARKER`]), written before the directory takes its name.
//! Nothing else under the root — a project folder a client names, an old
//! directory that looks like a session — is ever adopted, swept or removed.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::{AttachmentStore, SessionPaths, SessionServices};
use crate::pool_error::PoolError;

#[cfg(feature = "http")]
/// Default `--keep-sessions`: a day.
pub(crate) const DEFAULT_KEEP: Duration = Duration::from_secs(24 * 3600);
/// Longest session name a client may give.
const MAX_NAME: usize = 128;
/// The directory of the tenants' roots, under the sessions root.
const TENANTS: &str = "tenants";
/// The file in every session directory toolpool made (see the module docs).
pub(crate) const SESSION_MARKER: &str = ".toolpool-session";

/// One toolpool session: its directories and its attachment store.
pub struct Session {
    /// Its directories; the session's name is their `id`.
    pub paths: SessionPaths,
    services: Arc<SessionServices>,
    /// The tenant whose session it is (`--auth-tokens`), if any.
    tenant: Option<String>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.paths.id)
            .field("dir", &self.paths.dir)
            .finish()
    }
}

impl Session {
    /// The session in `paths` (made by [`SessionPaths::prepare`]), with its
    /// attachment store: a folder the caller chose, such as the original
    /// runtime's `graph_directory`. It is never swept.
    pub fn at(paths: SessionPaths) -> Session {
        let services = Arc::new(SessionServices {
            session_id: paths.id.clone(),
            attachments: Arc::new(AttachmentStore::open(&paths.workspace, &paths.dir)),
            human_prompt: None,
        });
        Session {
            paths,
            services,
            tenant: None,
        }
    }

    /// The tenant whose session it is (a server's `--auth-tokens`), for the
    /// metrics by tenant; `None` outside tenants.
    pub fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }

    /// The session's name.
    pub fn id(&self) -> &str {
        &self.paths.id
    }

    /// The session's attachment store.
    pub fn attachments(&self) -> &Arc<AttachmentStore> {
        &self.services.attachments
    }

    pub(crate) fn services(&self) -> &Arc<SessionServices> {
        &self.services
    }

    /// Marks the session used now (its directory's modification time, which
    /// is what [`SessionsRoot::sweep`] reads, also for a replica that shares
    /// the root).
    fn touch(&self) {
        if let Ok(dir) = std::fs::File::open(&self.paths.dir) {
            let _ = dir.set_modified(SystemTime::now());
        }
    }
}

/// Checks a session name a client gave (a header or `_meta` key): ASCII
/// letters, digits, `-`, `_` and `.`, not starting with `.`, 1 to 128
/// characters — one path component on every file system, never `..`.
pub fn check_session_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!(
            "session name {name:?} must have 1 to {MAX_NAME} characters"
        ));
    }
    if name.starts_with('.') {
        return Err(format!("session name {name:?} must not start with '.'"));
    }
    if let Some(bad) = name.chars().find(|c| !allowed(*c)) {
        return Err(format!(
            "session name {name:?} has {bad:?}: only ASCII letters, digits, '-', '_' and '.' are allowed"
        ));
    }
    Ok(())
}

/// A new session name nobody can guess: 128 random bits, hex.
pub(crate) fn random_session_name() -> String {
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        // Unique if not secret: the time and a process-wide counter.
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        bytes[..8].copy_from_slice(&now.to_le_bytes());
        bytes[8..].copy_from_slice(&n.to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The directory that holds every session, and the sessions open now.
pub struct SessionsRoot {
    root: PathBuf,
    keep: Duration,
    /// Directories the sweep never removes (the pool's own session: the
    /// workers start in it).
    pinned: Vec<PathBuf>,
    open: Mutex<HashMap<String, Arc<Session>>>,
    /// What the ids of its sessions start with: `TENANT~` for a tenant's
    /// (a `~` no session name has, so ids never meet), else nothing.
    id_prefix: String,
    /// The tenants' own roots, under `tenants/` (`--auth-tokens`).
    tenants: Mutex<HashMap<String, Arc<SessionsRoot>>>,
    /// The tenant of a tenant's root.
    tenant: Option<String>,
}

impl SessionsRoot {
    /// Creates `root` if needed. `pinned` directories are never swept.
    pub fn new(root: &Path, keep: Duration, pinned: &[&Path]) -> Result<SessionsRoot, PoolError> {
        std::fs::create_dir_all(root).map_err(|source| PoolError::SessionDir {
            path: root.to_path_buf(),
            source,
        })?;
        let root = root
            .canonicalize()
            .map_err(|source| PoolError::SessionDir {
                path: root.to_path_buf(),
                source,
            })?;
        Ok(SessionsRoot {
            root,
            keep,
            pinned: pinned
                .iter()
                .filter_map(|p| p.canonicalize().ok())
                .collect(),
            open: Mutex::new(HashMap::new()),
            id_prefix: String::new(),
            tenants: Mutex::new(HashMap::new()),
            tenant: None,
        })
    }

    /// The sessions of `tenant` (a session-name-shaped word): a root of
    /// their own, `tenants/TENANT` under this one, whose sessions' ids are
    /// `TENANT~NAME`, so that two tenants' sessions of one name are two
    /// sessions, in two directories, on two sets of workers. Swept with
    /// this root.
    pub(crate) fn for_tenant(&self, tenant: &str) -> Result<Arc<SessionsRoot>, PoolError> {
        check_session_name(tenant).map_err(PoolError::Setting)?;
        let mut tenants = self
            .tenants
            .lock()
            .map_err(|_| PoolError::Setting("the tenants table is poisoned".into()))?;
        if let Some(root) = tenants.get(tenant) {
            return Ok(root.clone());
        }
        let mut root = SessionsRoot::new(&self.root.join(TENANTS).join(tenant), self.keep, &[])?;
        root.id_prefix = format!("{tenant}~");
        root.tenant = Some(tenant.to_string());
        let root = Arc::new(root);
        tenants.insert(tenant.to_string(), root.clone());
        Ok(root)
    }

    /// The directory that holds the sessions (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The session `name`, its directories created if they are not there
    /// yet. A name must be 1 to 128 ASCII letters, digits, `-`, `_` and `.`,
    /// not starting with `.` (else [`PoolError::Setting`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use toolpool::context::SessionsRoot;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let sessions = SessionsRoot::new(dir.path(), Duration::from_secs(3600), &[])?;
    /// let alice = sessions.open("alice")?;
    /// assert_eq!(alice.id(), "alice");
    /// assert!(alice.paths.workspace.starts_with(sessions.root()));
    /// // The same session again, not a second one.
    /// assert!(std::sync::Arc::ptr_eq(&alice, &sessions.open("alice")?));
    /// assert!(sessions.open("../bob").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(&self, name: &str) -> Result<Arc<Session>, PoolError> {
        check_session_name(name).map_err(PoolError::Setting)?;
        if let Some(session) = self.open.lock().ok().and_then(|o| o.get(name).cloned()) {
            session.touch();
            return Ok(session);
        }
        let session = Arc::new(self.make(name)?);
        session.touch();
        let mut open = self
            .open
            .lock()
            .map_err(|_| PoolError::Setting("the sessions table is poisoned".into()))?;
        // Two first requests of one session may race here: one store wins.
        Ok(open.entry(name.to_string()).or_insert(session).clone())
    }

    fn make(&self, name: &str) -> Result<Session, PoolError> {
        let id = format!("{}{name}", self.id_prefix);
        let paths = SessionPaths::prepare(&id, Some(&self.claim(name)?))?;
        let mut session = Session::at(paths);
        session.tenant = self.tenant.clone();
        Ok(session)
    }

    /// The directory of session `name`: one toolpool made before, or made
    /// now with its marker — under a staging name, then moved into place
    /// only if nothing holds the name (`RENAME_NOREPLACE`), so two first
    /// requests of one session both find it whole. Anything else holding the
    /// name is refused: [`PoolError::NotASession`].
    fn claim(&self, name: &str) -> Result<PathBuf, PoolError> {
        let dir = self.root.join(name);
        if is_session_dir(&dir) {
            return Ok(dir);
        }
        let failed = |path: &Path| {
            let path = path.to_path_buf();
            move |source| PoolError::SessionDir { path, source }
        };
        // A staging name no client can give (names never start with '.').
        let staging = self.root.join(format!(".making-{}", random_session_name()));
        std::fs::create_dir(&staging).map_err(failed(&staging))?;
        let placed = std::fs::write(staging.join(SESSION_MARKER), "made by toolpool\n")
            .and_then(|()| rename_no_replace(&staging, &dir));
        match placed {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staging);
                return Err(failed(&dir)(e));
            }
        }
        let _ = std::fs::remove_dir_all(&staging);
        if is_session_dir(&dir) {
            return Ok(dir); // made by a request of the same session just now
        }
        Err(PoolError::NotASession {
            name: name.to_string(),
            path: dir,
        })
    }

    /// Removes the session directories nobody has used for the keep time
    /// (their modification time, set at every call), and forgets the open
    /// sessions among them that no call holds. Returns how many it removed.
    /// Only directories holding toolpool's marker are sessions; symbolic
    /// links are never followed.
    pub fn sweep(&self) -> usize {
        if self.tenant.is_none() {
            // Tenants no request has come for since the start are swept too.
            for entry in std::fs::read_dir(self.root.join(TENANTS))
                .into_iter()
                .flatten()
                .flatten()
            {
                let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
                if let (true, Some(tenant)) = (is_dir, entry.file_name().to_str()) {
                    let _ = self.for_tenant(tenant);
                }
            }
        }
        let tenants: Vec<Arc<SessionsRoot>> = self
            .tenants
            .lock()
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default();
        let mut removed: usize = tenants.iter().map(|tenant| tenant.sweep()).sum();
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return removed;
        };
        let now = SystemTime::now();
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            let pinned = entry
                .path()
                .canonicalize()
                .is_ok_and(|path| self.pinned.contains(&path));
            if pinned || !meta.is_dir() || !is_session_dir(&entry.path()) {
                continue;
            }
            let idle = meta
                .modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .unwrap_or_default();
            if idle < self.keep {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let held = self.open.lock().ok().is_some_and(|mut open| {
                // Held by a live MCP session or a call: kept (its handle and
                // the table are the two owners of an idle one).
                let held = open.get(&name).is_some_and(|s| Arc::strong_count(s) > 1);
                if !held {
                    open.remove(&name);
                }
                held
            });
            if held {
                continue;
            }
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => {
                    removed += 1;
                    tracing::info!(session = %name, "removed a session directory idle past --keep-sessions");
                }
                Err(e) => {
                    tracing::warn!(session = %name, "cannot remove an idle session directory: {e}")
                }
            }
        }
        removed
    }

    /// Sweeps every `period` (a quarter of the keep time, 1 s to 60 s)
    /// until the returned task is aborted or the runtime ends.
    pub fn sweep_periodically(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let period = (self.keep / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let root = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let root = root.clone();
                let _ = tokio::task::spawn_blocking(move || root.sweep()).await;
            }
        })
    }
}

/// A real directory (not a link) holding toolpool's marker file.
fn is_session_dir(dir: &Path) -> bool {
    let real = |path: &Path, dir: bool| {
        path.symlink_metadata()
            .is_ok_and(|m| if dir { m.is_dir() } else { m.is_file() })
    };
    real(dir, true) && real(&dir.join(SESSION_MARKER), false)
}

/// `rename(from, to)` that fails with `AlreadyExists` when `to` exists
/// (where plain `rename` would replace an empty directory).
fn rename_no_replace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |path: &Path| {
        std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)
    };
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: two NUL-terminated paths that live across the call.
    let result = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_safe_path_component() {
        for good in ["a", "alice-1", "x_y.z", "0123456789abcdef0123456789abcdef"] {
            assert_eq!(check_session_name(good), Ok(()), "{good}");
        }
        for bad in ["", ".", "..", ".hidden", "a/b", "a\\b", "a b", "é", "a\0b"] {
            assert!(check_session_name(bad).is_err(), "{bad:?} passed");
        }
        assert!(check_session_name(&"a".repeat(129)).is_err());
        let name = random_session_name();
        assert_eq!(name.len(), 32);
        assert_eq!(check_session_name(&name), Ok(()));
    }

    #[test]
    fn a_tenants_sessions_are_swept_after_a_restart_too() {
        let dir = tempfile::tempdir().unwrap();
        let before = SessionsRoot::new(dir.path(), Duration::ZERO, &[]).unwrap();
        let alice = before.for_tenant("alice").unwrap();
        let session = alice.open("notes").unwrap();
        assert_eq!(session.id(), "alice~notes");
        assert_eq!(session.tenant(), Some("alice"));
        let session_dir = session.paths.dir.clone();
        assert!(session_dir.ends_with("tenants/alice/notes"));
        // A new server over the same root, before any request of alice's.
        let after = SessionsRoot::new(dir.path(), Duration::ZERO, &[]).unwrap();
        assert_eq!(after.sweep(), 1);
        assert!(!session_dir.exists());
        // A session a tenant names "tenants" is not taken for tenants' roots.
        let odd = after.for_tenant("bob").unwrap().open("tenants").unwrap();
        std::fs::create_dir_all(odd.paths.dir.join("x")).unwrap();
        drop(odd);
        assert_eq!(after.sweep(), 1);
        assert!(!dir.path().join("tenants/bob/tenants").exists());
    }

    #[test]
    fn sweep_removes_only_idle_unheld_session_directories() {
        let dir = tempfile::tempdir().unwrap();
        let own = dir.path().join("own");
        SessionPaths::prepare("own", Some(&own)).unwrap();
        let root = SessionsRoot::new(dir.path(), Duration::ZERO, &[&own]).unwrap();
        let held = root.open("held").unwrap();
        drop(root.open("idle").unwrap());
        std::fs::create_dir(dir.path().join("not-a-session")).unwrap();
        // Looks like a session, was not made as one (no marker): kept.
        std::fs::create_dir_all(dir.path().join("lookalike/code_workspace")).unwrap();
        assert_eq!(root.sweep(), 1);
        assert!(held.paths.workspace.is_dir());
        assert!(!dir.path().join("idle").exists());
        assert!(dir.path().join("not-a-session").is_dir());
        assert!(dir.path().join("lookalike/code_workspace").is_dir());
        assert!(own.join("code_workspace").is_dir());
    }

    #[test]
    fn a_directory_toolpool_did_not_make_is_never_adopted() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("precious");
        std::fs::create_dir(&project).unwrap();
        std::fs::write(project.join("notes.txt"), "mine").unwrap();
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        let root = SessionsRoot::new(dir.path(), Duration::ZERO, &[]).unwrap();
        for name in ["precious", "empty"] {
            let refused = root.open(name).unwrap_err().to_string();
            assert!(
                refused.contains(&format!("'{name}'"))
                    && refused.contains("not a toolpool session"),
                "{refused}"
            );
        }
        let names = |path: &Path| {
            let mut names: Vec<String> = std::fs::read_dir(path)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(names(&project), ["notes.txt"]);
        assert!(names(&dir.path().join("empty")).is_empty());
        // A session made now is found again, and swept once idle.
        drop(root.open("made").unwrap());
        drop(root.open("made").unwrap());
        assert_eq!(root.sweep(), 1);
        assert_eq!(names(dir.path()), ["empty", "precious"]);
    }
}
