//! A cgroup per sandboxed worker, where one can be had: `pids.max` is the
//! process limit (`--max-procs`), the memory controller's limit is
//! `--memory-limit`. cgroup v1 hierarchies (`pids`, `memory`) or the
//! cgroup2 root where it hands out those controllers.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::process::ProcessId;

/// Where the controllers live for this process.
#[derive(Debug, Clone, Default)]
pub(super) struct Mounts {
    /// v1: this process's cgroup in the `pids` hierarchy.
    v1_pids: Option<PathBuf>,
    /// v1: this process's cgroup in the `memory` hierarchy.
    v1_memory: Option<PathBuf>,
    /// The cgroup2 mount's root, with the controllers it hands to children.
    v2_root: Option<(PathBuf, String)>,
}

impl Mounts {
    pub(super) fn find() -> Mounts {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let own_path = |controller: &str| {
            own.lines().find_map(|line| {
                let mut parts = line.splitn(3, ':');
                let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
                names
                    .split(',')
                    .any(|n| n == controller)
                    .then(|| path.trim_start_matches('/').to_string())
            })
        };
        let mut mounts = Mounts::default();
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let mount_point = left.split(' ').nth(4).unwrap_or_default();
            let mut right = right.split(' ');
            let fs_type = right.next().unwrap_or_default();
            let options = right.nth(1).unwrap_or_default();
            let writable =
                |dir: &Path| nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok();
            match fs_type {
                "cgroup" => {
                    for controller in ["pids", "memory"] {
                        if !options.split(',').any(|o| o == controller) {
                            continue;
                        }
                        let Some(path) = own_path(controller) else {
                            continue;
                        };
                        let dir = Path::new(mount_point).join(path);
                        if writable(&dir) {
                            match controller {
                                "pids" => mounts.v1_pids = Some(dir),
                                _ => mounts.v1_memory = Some(dir),
                            }
                        }
                    }
                }
                "cgroup2" => {
                    let root = PathBuf::from(mount_point);
                    let handed = std::fs::read_to_string(root.join("cgroup.subtree_control"))
                        .unwrap_or_default();
                    if writable(&root) && !handed.trim().is_empty() {
                        mounts.v2_root = Some((root, handed));
                    }
                }
                _ => {}
            }
        }
        mounts
    }

    fn v2_has(&self, controller: &str) -> bool {
        self.v2_root
            .as_ref()
            .is_some_and(|(_, handed)| handed.split_whitespace().any(|c| c == controller))
    }

    pub(super) fn can_limit_pids(&self) -> bool {
        self.v1_pids.is_some() || self.v2_has("pids")
    }

    pub(super) fn can_limit_memory(&self) -> bool {
        self.v1_memory.is_some() || self.v2_has("memory")
    }
}

/// One limit file to write in each worker's cgroup of a hierarchy.
#[derive(Debug)]
struct Hierarchy {
    /// The pool's folder (removed when the pool goes).
    dir: PathBuf,
    limits: Vec<(&'static str, String)>,
}

/// The pool's cgroup folders, one per hierarchy that limits something.
#[derive(Debug)]
pub(super) struct PoolCgroups {
    hierarchies: Vec<Hierarchy>,
    next: AtomicU64,
    memory: bool,
}

impl PoolCgroups {
    /// `max_procs` 0: no pids limit here. `None` when nothing is limited.
    pub(super) fn create(
        pieces: &super::Pieces,
        max_procs: u32,
        memory_bytes: Option<u64>,
    ) -> std::io::Result<Option<PoolCgroups>> {
        static POOLS: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "toolpool-{}-{}",
            std::process::id(),
            POOLS.fetch_add(1, Ordering::Relaxed)
        );
        let mounts = &pieces.cgroup_mounts;
        for parent in [&mounts.v1_pids, &mounts.v1_memory]
            .into_iter()
            .flatten()
            .chain(mounts.v2_root.as_ref().map(|(root, _)| root))
        {
            remove_stale(parent);
        }
        let pids = (max_procs > 0).then(|| ("pids.max", max_procs.to_string()));
        let mut hierarchies = Vec::new();
        let mut memory = false;
        if let Some((root, _)) = mounts.v2_root.as_ref().filter(|_| {
            (pids.is_some() && mounts.v2_has("pids"))
                || (memory_bytes.is_some() && mounts.v2_has("memory"))
        }) {
            let dir = root.join(&name);
            std::fs::create_dir(&dir)?;
            let mut limits = Vec::new();
            let mut enable = Vec::new();
            if let Some(limit) = pids.clone().filter(|_| mounts.v2_has("pids")) {
                limits.push(limit);
                enable.push("+pids");
            }
            if let Some(bytes) = memory_bytes.filter(|_| mounts.v2_has("memory")) {
                limits.push(("memory.max", bytes.to_string()));
                limits.push(("memory.swap.max", "0".into()));
                enable.push("+memory");
                memory = true;
            }
            std::fs::write(dir.join("cgroup.subtree_control"), enable.join(" "))?;
            hierarchies.push(Hierarchy { dir, limits });
        } else {
            if let (Some(parent), Some(limit)) = (&mounts.v1_pids, pids) {
                let dir = parent.join(&name);
                std::fs::create_dir(&dir)?;
                hierarchies.push(Hierarchy {
                    dir,
                    limits: vec![limit],
                });
            }
            if let (Some(parent), Some(bytes)) = (&mounts.v1_memory, memory_bytes) {
                let dir = parent.join(&name);
                std::fs::create_dir(&dir)?;
                hierarchies.push(Hierarchy {
                    dir,
                    limits: vec![("memory.limit_in_bytes", bytes.to_string())],
                });
                memory = true;
            }
        }
        Ok((!hierarchies.is_empty()).then_some(PoolCgroups {
            hierarchies,
            next: AtomicU64::new(0),
            memory,
        }))
    }

    pub(super) fn limits_memory(&self) -> bool {
        self.memory
    }

    /// Whether its workers' cgroups can be frozen (a cgroup v2 hierarchy,
    /// whose non-root cgroups have `cgroup.freeze`).
    pub(super) fn can_freeze(&self) -> bool {
        self.hierarchies
            .iter()
            .any(|hierarchy| hierarchy.dir.join("cgroup.freeze").is_file())
    }

    /// A fresh cgroup in each hierarchy for one worker, its limits written
    /// and its `cgroup.procs` open for the child to join.
    pub(super) fn next_worker(&self) -> std::io::Result<WorkerCgroup> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut worker = WorkerCgroup::none();
        for hierarchy in &self.hierarchies {
            let dir = hierarchy.dir.join(format!("w{n}"));
            std::fs::create_dir(&dir)?;
            worker.dirs.push(dir.clone());
            for (file, value) in &hierarchy.limits {
                std::fs::write(dir.join(file), value)?;
            }
            let procs = std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))?;
            worker.procs.push(OwnedFd::from(procs));
        }
        Ok(worker)
    }
}

impl Drop for PoolCgroups {
    fn drop(&mut self) {
        remove_when_empty(self.hierarchies.iter().map(|h| h.dir.clone()).collect());
    }
}

/// A worker's cgroups: joined by the child before exec, removed when the
/// worker is dropped (once its last process is gone).
#[derive(Debug, Default)]
pub struct WorkerCgroup {
    dirs: Vec<PathBuf>,
    /// `cgroup.procs` of each, opened close-on-exec.
    procs: Vec<OwnedFd>,
}

impl WorkerCgroup {
    pub fn none() -> WorkerCgroup {
        WorkerCgroup::default()
    }

    /// Moves the calling process into the cgroups: between fork and exec,
    /// system calls only.
    pub fn join(&self) -> std::io::Result<()> {
        for fd in &self.procs {
            // SAFETY: a write of a static buffer to an open descriptor.
            if unsafe { libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) } != 1 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

impl WorkerCgroup {
    /// Freezes (`true`) or thaws the worker's cgroup v2 (`cgroup.freeze`):
    /// every process in it, one forked in the same instant too. `None`
    /// when it has no cgroup v2 with a freezer.
    pub fn freeze(&self, frozen: bool) -> Option<std::io::Result<()>> {
        let dir = self.freezer()?;
        Some(std::fs::write(
            dir.join("cgroup.freeze"),
            if frozen { "1" } else { "0" },
        ))
    }

    /// Whether the kernel says the cgroup is frozen (`frozen 1` in
    /// `cgroup.events`): every process in it has stopped.
    pub fn is_frozen(&self) -> bool {
        self.freezer()
            .and_then(|dir| std::fs::read_to_string(dir.join("cgroup.events")).ok())
            .is_some_and(|events| events.lines().any(|line| line.trim() == "frozen 1"))
    }

    /// Whether the worker has a cgroup it can be frozen by.
    pub fn can_freeze(&self) -> bool {
        self.freezer().is_some()
    }

    fn freezer(&self) -> Option<&PathBuf> {
        self.dirs
            .iter()
            .find(|dir| dir.join("cgroup.freeze").is_file())
    }

    /// Moves process `pid` (a guardian the template cloned, waiting to be
    /// let go before it forks its worker) into the cgroups.
    pub fn adopt(&self, pid: ProcessId) -> std::io::Result<()> {
        let text = pid.to_string();
        for fd in &self.procs {
            nix::unistd::write(fd, text.as_bytes()).map_err(std::io::Error::from)?;
        }
        Ok(())
    }
}

impl Drop for WorkerCgroup {
    fn drop(&mut self) {
        self.procs.clear();
        remove_when_empty(std::mem::take(&mut self.dirs));
    }
}

/// Removes cgroup folders; those still holding a process (a worker being
/// killed) are retried from a thread for a while.
fn remove_when_empty(mut dirs: Vec<PathBuf>) {
    dirs.retain(|dir| !try_remove(dir));
    if dirs.is_empty() {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("toolpool-cgroup-rm".into())
        .spawn(move || {
            for _ in 0..200 {
                std::thread::sleep(Duration::from_millis(50));
                dirs.retain(|dir| !try_remove(dir));
                if dirs.is_empty() {
                    return;
                }
            }
            for dir in dirs {
                tracing::warn!("cannot remove the worker cgroup {}", dir.display());
            }
        });
}

/// Removes the empty cgroups that pools of processes no longer alive left
/// behind (a process that exits cannot wait for its last worker to go).
fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("toolpool-"))
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if let Ok(workers) = std::fs::read_dir(entry.path()) {
            for worker in workers.flatten() {
                if worker.path().is_dir() {
                    try_remove(&worker.path());
                }
            }
        }
        try_remove(&entry.path());
    }
}

/// `rmdir`; true when the folder is gone.
fn try_remove(dir: &Path) -> bool {
    let Ok(path) = CString::new(dir.as_os_str().as_bytes()) else {
        return true;
    };
    // SAFETY: rmdir of a NUL-terminated path.
    let removed = unsafe { libc::rmdir(path.as_ptr()) } == 0;
    removed || std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT)
}
