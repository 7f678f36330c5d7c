//! What this kernel lets a sandbox use, found by trying it in a child.

use super::cgroup;

/// How `--max-procs` is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessLimit {
    /// `pids.max` of a cgroup per worker.
    Cgroup,
    /// `RLIMIT_NPROC` set inside the worker's user namespace, where it
    /// counts that worker's processes only (it does not bind host root).
    Rlimit,
    None,
}

/// The sandbox's pieces, each available or not.
#[derive(Debug, Clone)]
pub struct Pieces {
    pub user_ns: bool,
    pub pid_ns: bool,
    pub mount_ns: bool,
    pub ipc_ns: bool,
    pub uts_ns: bool,
    pub net_ns: bool,
    pub seccomp: bool,
    pub landlock_abi: Option<u32>,
    pub process_limit: ProcessLimit,
    pub memory_cgroup: bool,
    /// What keeps unprivileged user namespaces from this process, with what
    /// to do about it, where the system says (AppArmor's restriction on
    /// Ubuntu 23.10+, Debian's switch, a zero namespace limit).
    pub userns_restricted: Option<String>,
    pub(super) cgroup_mounts: cgroup::Mounts,
}

impl Pieces {
    /// What a strict sandbox would miss, named for the error message.
    pub fn missing(&self) -> Vec<String> {
        let mut missing = Vec::new();
        let user_ns = match &self.userns_restricted {
            Some(why) => format!("user namespaces ({why})"),
            None => "user namespaces".to_string(),
        };
        for (on, name) in [
            (self.user_ns, user_ns.as_str()),
            (self.pid_ns, "PID namespaces"),
            (self.mount_ns, "mount namespaces"),
            (self.ipc_ns, "IPC namespaces"),
            (self.uts_ns, "UTS namespaces"),
            (self.net_ns, "network namespaces"),
            (self.seccomp, "seccomp filters"),
            (self.landlock_abi.is_some(), "Landlock"),
            (
                self.process_limit != ProcessLimit::None,
                "a process limit (no pids cgroup can be made, and RLIMIT_NPROC does not bind root)",
            ),
        ] {
            if !on {
                missing.push(name.to_string());
            }
        }
        // Without a memory cgroup the memory limit is RLIMIT_AS, as
        // unsandboxed: not a missing piece.
        missing
    }
}

const USER: i32 = 1;
const PID: i32 = 2;
const MOUNT: i32 = 4;
const IPC: i32 = 8;
const UTS: i32 = 16;
const NET: i32 = 32;

/// Tries each namespace in a forked child (namespaces are per process, so
/// the supervisor's own are never touched), and asks the kernel about
/// seccomp, Landlock and cgroups.
pub(crate) fn probe(allow_net: bool) -> Pieces {
    let found = namespaces_in_child();
    let has = |bit: i32| found & bit != 0;
    let cgroup_mounts = cgroup::Mounts::find();
    let root = nix::unistd::geteuid().is_root();
    let pids_cgroup = cgroup_mounts.can_limit_pids();
    let process_limit = if pids_cgroup {
        ProcessLimit::Cgroup
    } else if !root && has(USER) {
        ProcessLimit::Rlimit
    } else {
        ProcessLimit::None
    };
    Pieces {
        user_ns: has(USER),
        pid_ns: has(PID),
        mount_ns: has(MOUNT),
        ipc_ns: has(IPC),
        uts_ns: has(UTS),
        // Not needed with --allow-net: the host's network is kept.
        net_ns: has(NET) || allow_net,
        seccomp: seccomp_available(),
        landlock_abi: landlock_abi(),
        process_limit,
        memory_cgroup: cgroup_mounts.can_limit_memory(),
        userns_restricted: userns_restriction(root, |name| {
            std::fs::read_to_string(format!("/proc/sys/{name}")).ok()
        }),
        cgroup_mounts,
    }
}

/// What restricts unprivileged user namespaces, by the sysctls `read`
/// returns (`kernel/apparmor_restrict_unprivileged_userns` as it is under
/// `/proc/sys`), with what to do; `None` for root, which none of them binds.
pub(super) fn userns_restriction(
    root: bool,
    read: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    if root {
        return None;
    }
    let set = |name: &str, value: &str| read(name).is_some_and(|v| v.trim() == value);
    if set("kernel/apparmor_restrict_unprivileged_userns", "1") {
        return Some(
            "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1, \
             the default on Ubuntu 23.10 and later): run `sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0`, \
             or give the toolpool binary an AppArmor profile that allows `userns,` (docs/deploy.md, \"AppArmor\")"
                .into(),
        );
    }
    if set("kernel/unprivileged_userns_clone", "0") {
        return Some(
            "kernel.unprivileged_userns_clone = 0: run `sudo sysctl kernel.unprivileged_userns_clone=1`".into(),
        );
    }
    if set("user/max_user_namespaces", "0") {
        return Some(
            "user.max_user_namespaces = 0: run `sudo sysctl user.max_user_namespaces=15000`".into(),
        );
    }
    None
}

/// A bit per namespace kind the child could make, as its exit code.
fn namespaces_in_child() -> i32 {
    // SAFETY: the child makes system calls only, then _exit.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return 0;
        }
        if pid == 0 {
            let mut found = 0;
            if libc::unshare(libc::CLONE_NEWUSER) == 0 {
                found |= USER;
            }
            for (bit, flag) in [
                (PID, libc::CLONE_NEWPID),
                (MOUNT, libc::CLONE_NEWNS),
                (IPC, libc::CLONE_NEWIPC),
                (UTS, libc::CLONE_NEWUTS),
                (NET, libc::CLONE_NEWNET),
            ] {
                if libc::unshare(flag) == 0 {
                    found |= bit;
                }
            }
            libc::_exit(found);
        }
        let mut status = 0;
        loop {
            if libc::waitpid(pid, &mut status, 0) == pid {
                break;
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return 0;
            }
        }
        if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            0
        }
    }
}

/// `prctl(PR_GET_SECCOMP)` fails with EINVAL on kernels built without it.
fn seccomp_available() -> bool {
    // SAFETY: a query without side effects.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 }
}

/// The Landlock ABI version, `None` where the kernel has no Landlock (or
/// it is disabled at boot).
fn landlock_abi() -> Option<u32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: the version query takes no ruleset and returns a number.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(abi).ok().filter(|abi| *abi > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_apparmor_restriction_is_named_with_what_to_do() {
        let ubuntu = |name: &str| {
            (name == "kernel/apparmor_restrict_unprivileged_userns").then(|| "1\n".to_string())
        };
        let why = userns_restriction(false, ubuntu).expect("found");
        assert!(
            why.contains("AppArmor")
                && why.contains("sysctl kernel.apparmor_restrict_unprivileged_userns=0"),
            "{why}"
        );
        assert_eq!(
            userns_restriction(true, ubuntu),
            None,
            "root is not bound by it"
        );
        let off = |name: &str| {
            (name == "kernel/apparmor_restrict_unprivileged_userns").then(|| "0\n".to_string())
        };
        assert_eq!(userns_restriction(false, off), None);
        let debian =
            |name: &str| (name == "kernel/unprivileged_userns_clone").then(|| "0".to_string());
        assert!(userns_restriction(false, debian)
            .is_some_and(|w| w.contains("unprivileged_userns_clone=1")));
        let mut pieces = probe(false);
        pieces.user_ns = false;
        pieces.userns_restricted = userns_restriction(false, ubuntu);
        assert!(
            pieces.missing()[0].starts_with("user namespaces (AppArmor restricts"),
            "{:?}",
            pieces.missing()
        );
    }

    #[test]
    fn what_is_missing_is_named() {
        let mut pieces = probe(false);
        pieces.landlock_abi = None;
        pieces.net_ns = false;
        pieces.process_limit = ProcessLimit::None;
        let missing = pieces.missing();
        assert!(missing.contains(&"Landlock".to_string()), "{missing:?}");
        assert!(
            missing.contains(&"network namespaces".to_string()),
            "{missing:?}"
        );
        assert!(
            missing.iter().any(|m| m.starts_with("a process limit")),
            "{missing:?}"
        );
    }
}
