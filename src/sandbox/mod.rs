//! `--sandbox`: every worker in user, PID, mount, IPC, UTS and (without
//! `--allow-net`) network namespaces of its own, a mount view with nothing
//! of the host but the system directories, the interpreter, the shim, the
//! tools and the session (read-only except the workspace, the packages
//! directory and a private `/tmp`), a process limit, the memory limit in a
//! cgroup where one can be had, a seccomp filter and Landlock rules.
//!
//! Two stages, because only a process inside the worker's PID namespace can
//! mount that namespace's `/proc`, and both seccomp (no `mount`) and
//! Landlock (no mounts at all) would stop it:
//! - [`enter`], in the guardian's child between fork and exec: namespaces,
//!   id maps, the mount view ([`mounts`]), loopback, limits ([`cgroup`]);
//! - the shim's worker right after the guardian forked it, before any tool
//!   code: a fresh `/proc`, no capabilities, `no_new_privs`, the Landlock
//!   rules and the seccomp program built here ([`seccomp`]); its part of
//!   the boot config is [`Sandbox::shim_config`].
//!
//! A sandboxed worker's view holds one session's directories: a worker for
//! another session (over HTTP each credential or session name has its own)
//! is started with [`Sandbox::for_session`], the pool's system part planned
//! once.

mod cgroup;
mod mounts;
mod probe;
mod seccomp;

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};

pub(crate) use cgroup::WorkerCgroup;
pub(crate) use probe::{probe, Pieces, ProcessLimit};
pub(crate) use seccomp::terminal_program_hex;

/// How much of the sandbox a pool asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SandboxMode {
    /// Workers are isolated against accidents only (the default).
    #[default]
    Off,
    /// Every piece, or the pool refuses to start naming what is missing.
    Strict,
    /// The pieces this kernel has; the rest is logged as missing.
    BestEffort,
}

/// Processes (and threads) one sandboxed worker may have at once.
pub(crate) const DEFAULT_MAX_PROCS: u32 = 256;

/// A pool's sandbox settings (`PoolBuilder::sandbox`, `--allow-net`, `--max-procs`).
#[derive(Debug, Clone)]
pub struct SandboxOptions {
    pub mode: SandboxMode,
    /// Keep the host's network (else a network namespace with loopback only).
    pub allow_net: bool,
    pub max_procs: u32,
}

impl Default for SandboxOptions {
    fn default() -> Self {
        SandboxOptions {
            mode: SandboxMode::Off,
            allow_net: false,
            max_procs: DEFAULT_MAX_PROCS,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    #[error(
        "--sandbox: this system lacks {0} (--sandbox=best-effort runs without what is missing)"
    )]
    Missing(String),
    #[error("--sandbox cannot prepare {what}: {source}")]
    Prepare {
        what: String,
        source: std::io::Error,
    },
    /// A session whose folder every sandboxed worker already sees.
    #[error(
        "--sandbox cannot give session folder {session} a worker of its own: it is inside {shared}, \
         which every sandboxed worker sees read-only (keep the sessions root out of the tools', \
         the shim's and the interpreter's folders)"
    )]
    SessionInShared { session: PathBuf, shared: PathBuf },
}

/// What the sandbox needs to know about the pool's files.
#[derive(Debug, Clone)]
pub struct SandboxPaths {
    /// The interpreter (`sys.executable`, resolved).
    pub python: PathBuf,
    /// The shim's folder (read-only).
    pub shim_dir: PathBuf,
    /// The tools (read-only).
    pub functions_dir: PathBuf,
    /// The session the pool's own workers are started for.
    pub session: SessionMounts,
}

/// The directories of the one session a sandboxed worker is started for,
/// bound at their real paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionMounts {
    /// The session folder: only what follows of it is in the view, and the
    /// folder holding it is sealed (not listable).
    pub dir: PathBuf,
    /// Read-write.
    pub workspace: PathBuf,
    /// Read-write: `install_python_packages` installs here.
    pub packages_dir: PathBuf,
    /// Read-only over the workspace: the supervisor owns the store.
    pub attachments_dir: PathBuf,
}

/// A pool's prepared sandbox: probed, planned, shared by the workers of
/// one session ([`Sandbox::for_session`] makes one for another session).
#[derive(Debug, Clone)]
pub struct Sandbox {
    options: SandboxOptions,
    pieces: Pieces,
    /// The view without a session, planned once per pool.
    system_plan: mounts::Plan,
    /// The view with this sandbox's session.
    plan: mounts::Plan,
    seccomp_program: Option<String>,
    landlock: Value,
    cgroups: Option<Arc<cgroup::PoolCgroups>>,
    /// `/proc/self/{setgroups,uid_map,gid_map}` and what is written there.
    id_maps: [(CString, Vec<u8>); 3],
    workspace: CString,
    uses_memory_cgroup: bool,
}

impl Sandbox {
    /// Probes the kernel, refuses (strict mode) when a piece is missing, and
    /// prepares everything [`enter`] needs so that the child only makes
    /// system calls. `None` when the mode is `Off`.
    pub fn prepare(
        options: &SandboxOptions,
        paths: &SandboxPaths,
        memory_limit_bytes: Option<u64>,
    ) -> Result<Option<Sandbox>, SandboxError> {
        if options.mode == SandboxMode::Off {
            return Ok(None);
        }
        let pieces = probe(options.allow_net);
        let missing = pieces.missing();
        if !missing.is_empty() {
            let text = missing.join(", ");
            if options.mode == SandboxMode::Strict {
                return Err(SandboxError::Missing(text));
            }
            tracing::warn!("--sandbox=best-effort runs without: {text}");
        }
        let prepare = |what: &str| {
            let what = what.to_string();
            move |source| SandboxError::Prepare { what, source }
        };
        let system_plan = if pieces.mount_ns {
            mounts::Plan::system(paths).map_err(prepare("the mount view"))?
        } else {
            mounts::Plan::default()
        };
        let seccomp_program = if pieces.seccomp {
            Some(seccomp::program_hex().map_err(prepare("the seccomp filter"))?)
        } else {
            None
        };
        // max_procs 0: the process limit is not a cgroup's (RLIMIT_NPROC, or none).
        let pids_max = match pieces.process_limit {
            ProcessLimit::Cgroup => options.max_procs,
            ProcessLimit::Rlimit | ProcessLimit::None => 0,
        };
        let cgroups = cgroup::PoolCgroups::create(&pieces, pids_max, memory_limit_bytes)
            .map_err(prepare("the worker cgroups"))?
            .map(Arc::new);
        let uses_memory_cgroup =
            memory_limit_bytes.is_some() && cgroups.as_ref().is_some_and(|c| c.limits_memory());
        let uid = nix::unistd::geteuid().as_raw();
        let gid = nix::unistd::getegid().as_raw();
        let c = |s: &str| CString::new(s).map_err(|e| prepare("a path")(std::io::Error::other(e)));
        let sandbox = Sandbox {
            options: options.clone(),
            id_maps: [
                (c("/proc/self/setgroups")?, b"deny".to_vec()),
                // Root inside (the guardian keeps its capabilities across
                // exec, to make the PID namespace), the caller's ids outside.
                (c("/proc/self/uid_map")?, format!("0 {uid} 1").into_bytes()),
                (c("/proc/self/gid_map")?, format!("0 {gid} 1").into_bytes()),
            ],
            workspace: CString::default(),
            pieces,
            plan: mounts::Plan::default(),
            system_plan,
            seccomp_program,
            landlock: Value::Null,
            cgroups,
            uses_memory_cgroup,
        };
        sandbox.with_session(&paths.session).map(Some)
    }

    /// This pool's sandbox for a worker of another session: the same
    /// namespaces, limits, cgroups and seccomp program, a view and Landlock
    /// rules holding `session`'s directories instead (and no other
    /// session's). Refused for a session folder every worker already sees.
    pub fn for_session(&self, session: &SessionMounts) -> Result<Sandbox, SandboxError> {
        if let Some(shared) = self.system_plan.shared_folder_holding(&session.dir) {
            return Err(SandboxError::SessionInShared {
                session: session.dir.clone(),
                shared: shared.to_path_buf(),
            });
        }
        self.with_session(session)
    }

    fn with_session(&self, session: &SessionMounts) -> Result<Sandbox, SandboxError> {
        let prepare = |what: &str| {
            let what = what.to_string();
            move |source| SandboxError::Prepare { what, source }
        };
        let plan = if self.pieces.mount_ns {
            self.system_plan
                .with_session(session)
                .map_err(prepare("the mount view"))?
        } else {
            mounts::Plan::default()
        };
        Ok(Sandbox {
            plan,
            landlock: json!({
                "abi": self.pieces.landlock_abi,
                "read": ["/"],
                "write": [session.workspace, session.packages_dir, "/tmp", "/dev"],
                "read_only": [session.attachments_dir],
            }),
            workspace: mounts::cstring(&session.workspace).map_err(prepare("the workspace"))?,
            ..self.clone()
        })
    }

    /// The boot config's `sandbox` entry: what the worker does itself.
    pub fn shim_config(&self) -> Value {
        json!({
            "strict": self.options.mode == SandboxMode::Strict,
            "fresh_proc": self.pieces.mount_ns && self.pieces.pid_ns,
            // Whether a worker has a network namespace of its own (loopback
            // only): a worker cloned from a template makes its own, as the
            // template's is shared (python_shim/toolpool_shim/sandbox.py).
            "private_net": self.pieces.net_ns && !self.options.allow_net,
            "seccomp": self.seccomp_program,
            "landlock": if self.pieces.landlock_abi.is_some() { self.landlock.clone() } else { Value::Null },
        })
    }

    /// The memory limit is a cgroup's: no `RLIMIT_AS` then.
    pub fn limits_memory(&self) -> bool {
        self.uses_memory_cgroup
    }

    pub fn pieces(&self) -> &Pieces {
        &self.pieces
    }

    pub fn options(&self) -> &SandboxOptions {
        &self.options
    }

    /// A cgroup for the next worker (empty when the pool has none).
    /// Whether a worker's processes are frozen by its cgroup while a human
    /// is asked (else they are stopped by signals until a scan finds them
    /// settled).
    pub fn freezes_by_cgroup(&self) -> bool {
        self.cgroups.as_ref().is_some_and(|c| c.can_freeze())
    }

    pub fn worker_cgroup(&self) -> std::io::Result<WorkerCgroup> {
        match &self.cgroups {
            Some(cgroups) => cgroups.next_worker(),
            None => Ok(WorkerCgroup::none()),
        }
    }

    fn unshare_flags(&self) -> libc::c_int {
        let p = &self.pieces;
        let mut flags = 0;
        for (on, flag) in [
            (p.user_ns, libc::CLONE_NEWUSER),
            (p.mount_ns, libc::CLONE_NEWNS),
            (p.ipc_ns, libc::CLONE_NEWIPC),
            (p.uts_ns, libc::CLONE_NEWUTS),
            (p.net_ns && !self.options.allow_net, libc::CLONE_NEWNET),
        ] {
            if on {
                flags |= flag;
            }
        }
        flags
    }
}

/// Puts the calling process (the guardian's child, between fork and exec)
/// into the sandbox: joins the worker's cgroup, unshares the namespaces,
/// writes the id maps, builds the mount view, brings up loopback, sets the
/// process limit and enters the workspace.
///
/// # Safety
/// Only between fork and exec: it changes the calling process's namespaces
/// and root. It makes system calls only (no allocation).
pub(crate) unsafe fn enter(sandbox: &Sandbox, cgroup: &WorkerCgroup) -> std::io::Result<()> {
    cgroup.join()?;
    let flags = sandbox.unshare_flags();
    if flags != 0 && libc::unshare(flags) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if sandbox.pieces.user_ns {
        for (path, text) in &sandbox.id_maps {
            write_file(path, text)?;
        }
    }
    if sandbox.pieces.mount_ns {
        sandbox.plan.apply()?;
        if libc::chdir(sandbox.workspace.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    if sandbox.pieces.uts_ns {
        let name = b"toolpool";
        libc::sethostname(name.as_ptr().cast(), name.len());
    }
    if flags & libc::CLONE_NEWNET != 0 {
        loopback_up()?;
    }
    if sandbox.pieces.process_limit == ProcessLimit::Rlimit {
        // After the user namespace: the limit then counts this worker's
        // processes only (per user namespace), not all of the user's.
        let limit = libc::rlimit {
            rlim_cur: sandbox.options.max_procs as libc::rlim_t,
            rlim_max: sandbox.options.max_procs as libc::rlim_t,
        };
        if libc::setrlimit(libc::RLIMIT_NPROC, &limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Writes `text` to `path` with plain system calls.
unsafe fn write_file(path: &CString, text: &[u8]) -> std::io::Result<()> {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let written = libc::write(fd, text.as_ptr().cast(), text.len());
    let error = std::io::Error::last_os_error();
    libc::close(fd);
    if written != text.len() as isize {
        return Err(error);
    }
    Ok(())
}

/// `ip link set lo up` in the new network namespace.
unsafe fn loopback_up() -> std::io::Result<()> {
    let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
    if sock < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut request: libc::ifreq = std::mem::zeroed();
    for (i, b) in b"lo\0".iter().enumerate() {
        request.ifr_name[i] = *b as libc::c_char;
    }
    let mut result = libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut request);
    if result == 0 {
        request.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        result = libc::ioctl(sock, libc::SIOCSIFFLAGS, &request);
    }
    let error = std::io::Error::last_os_error();
    libc::close(sock);
    if result != 0 {
        return Err(error);
    }
    Ok(())
}

/// Lines for `toolpool doctor`: each piece, on or off.
pub(crate) fn doctor_lines(sandbox: Option<&Sandbox>, allow_net: bool) -> Vec<String> {
    let pieces = match sandbox {
        Some(sandbox) => sandbox.pieces.clone(),
        None => probe(allow_net),
    };
    let state = |on: bool| if on { "on" } else { "off" };
    let mode = match sandbox.map(|s| s.options.mode) {
        None | Some(SandboxMode::Off) => "off (pass --sandbox to use what is available)",
        Some(SandboxMode::Strict) => "strict",
        Some(SandboxMode::BestEffort) => "best-effort",
    };
    let mut lines = vec![format!("sandbox: {mode}")];
    for (name, on) in [
        ("user namespace", pieces.user_ns),
        ("pid namespace", pieces.pid_ns),
        ("mount namespace", pieces.mount_ns),
        ("ipc namespace", pieces.ipc_ns),
        ("uts namespace", pieces.uts_ns),
        ("network namespace", pieces.net_ns && !allow_net),
        ("seccomp", pieces.seccomp),
    ] {
        lines.push(format!("sandbox {name}: {}", state(on)));
    }
    lines.push(match pieces.landlock_abi {
        Some(abi) => format!("sandbox landlock: on (ABI {abi})"),
        None => "sandbox landlock: off (the kernel has no Landlock)".into(),
    });
    lines.push(format!(
        "sandbox process limit: {}",
        match pieces.process_limit {
            ProcessLimit::Cgroup => "on (a pids cgroup per worker)",
            ProcessLimit::Rlimit => "on (RLIMIT_NPROC in the worker's user namespace)",
            ProcessLimit::None =>
                "off (no pids cgroup can be made, and RLIMIT_NPROC does not bind root)",
        }
    ));
    lines.push(format!(
        "sandbox memory cgroup: {}",
        if pieces.memory_cgroup {
            "on (--memory-limit is a cgroup limit under --sandbox)"
        } else {
            "off (--memory-limit stays RLIMIT_AS)"
        }
    ));
    if allow_net {
        lines.push("sandbox network: the host's (--allow-net)".into());
    }
    let restricts =
        std::fs::read_to_string("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
            .is_ok_and(|v| v.trim() == "1");
    lines.push(match &pieces.userns_restricted {
        Some(why) => format!("sandbox apparmor: {why}"),
        None if restricts => "sandbox apparmor: restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1); toolpool runs as root here, which it does not bind".into(),
        None => "sandbox apparmor: no restriction on user namespaces".into(),
    });
    lines.push(format!(
        "terminal: {}",
        match sandbox.map(|s| s.options.mode) {
            Some(SandboxMode::Strict | SandboxMode::BestEffort) if pieces.seccomp =>
                "none for tools (workers run in a session of their own, the sandbox has no /dev/tty, and TIOCSTI, TIOCLINUX, TIOCSCTTY fail by seccomp)",
            _ if nix::unistd::geteuid().is_root() =>
                "none for tools (workers run in a session of their own; TIOCSTI, TIOCLINUX, TIOCSCTTY fail by seccomp; as root a tool can still open a terminal by its path and write to it: use --sandbox)",
            _ =>
                "none for tools (workers run in a session of their own: the kernel refuses TIOCSTI on any terminal but a controlling one, and they have none)",
        }
    ));
    lines
}
