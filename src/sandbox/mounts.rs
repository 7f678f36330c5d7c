//! The worker's mount view, as bubblewrap builds one: a fresh tmpfs root
//! holding read-only binds of the system directories, the interpreter, the
//! shim and the tools; the workspace and packages directory read-write
//! (the attachment store read-only inside it); a private `/tmp`; a minimal
//! `/dev`; and the host's `/proc` for the guardian (the worker mounts its
//! own over it, see the module above). The old root is detached.
//!
//! Planned in the parent (paths as C strings), applied in the child with
//! system calls only. The system part is planned once per pool
//! ([`Plan::system`]); each worker's plan adds the one session it is
//! started for ([`Plan::with_session`]), so that a worker sees no other
//! session's directories, nor the listing of the folder that holds them.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::{SandboxPaths, SessionMounts};

/// Top-level system folders a Python program may need, read-only.
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];
/// The devices a tool may open. No `tty`: a sandboxed tool has no terminal to reach (it has no controlling
/// one either: the worker runs in a session of its own).
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];
/// Files of `/etc` that hold secrets: hidden behind an empty file.
const MASKED: &[&str] = &[
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/security/opasswd",
];
/// Folders of `/etc` that hold private keys: hidden behind an empty,
/// read-only tmpfs. (As root, root inside the sandbox is the owner of
/// root's 0600 files: the view must not hold them.)
const MASKED_DIRS: &[&str] = &["/etc/ssh", "/etc/ssl/private", "/etc/sudoers.d"];

const STAGE: &str = "/tmp";
const NEW_ROOT: &str = "/newroot";
const OLD_ROOT: &str = "/oldroot";

#[derive(Debug, Clone)]
enum Op {
    /// `mkdir`, an existing folder is fine.
    Mkdir(CString),
    /// An empty file to bind a file onto.
    Touch(CString),
    Symlink {
        target: CString,
        link: CString,
    },
    /// `device`: a device node, on a mount that must not be `nodev`.
    Bind {
        source: CString,
        target: CString,
        writable: bool,
        device: bool,
    },
    Tmpfs {
        target: CString,
        options: CString,
        read_only: bool,
    },
    /// Mode 0111: the folder can be passed through but not listed (by the
    /// tool, which has no capabilities left; see `sandbox.py`).
    Seal(CString),
}

/// The operations, in order, with every path as the child needs it.
#[derive(Debug, Default, Clone)]
pub(super) struct Plan {
    ops: Vec<Op>,
    /// Every folder (of the new root) already made by the plan, so each is made once.
    made: Vec<PathBuf>,
    /// The host folders every worker sees (read-only binds of the system part).
    shared: Vec<PathBuf>,
    fixed: Option<Fixed>,
}

/// The staging paths.
#[derive(Debug, Clone)]
struct Fixed {
    stage: CString,
    new_root: CString,
    old_root: CString,
    stage_new_root: CString,
    stage_old_root: CString,
    /// `oldroot`, relative to the staging root (pivot_root's `put_old`).
    old_root_relative: CString,
    root: CString,
    dot: CString,
    tmpfs: CString,
    proc_dir: CString,
    mode_0755: CString,
}

pub(super) fn cstring(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other(format!("{} holds a NUL byte", path.display())))
}

fn under(root: &str, path: &Path) -> PathBuf {
    Path::new(root).join(path.strip_prefix("/").unwrap_or(path))
}

impl Plan {
    /// Everything but the session: the system folders, the interpreter,
    /// the shim and the tools, `/tmp`, `/dev`, `/proc`.
    pub(super) fn system(paths: &SandboxPaths) -> std::io::Result<Plan> {
        let c = |s: &str| cstring(Path::new(s));
        let mut plan = Plan {
            fixed: Some(Fixed {
                stage: c(STAGE)?,
                new_root: c(NEW_ROOT)?,
                old_root: c(OLD_ROOT)?,
                stage_new_root: c(&format!("{STAGE}{NEW_ROOT}"))?,
                stage_old_root: c(&format!("{STAGE}{OLD_ROOT}"))?,
                old_root_relative: c(OLD_ROOT.trim_start_matches('/'))?,
                root: c("/")?,
                dot: c(".")?,
                tmpfs: c("tmpfs")?,
                proc_dir: c(&format!("{NEW_ROOT}/proc"))?,
                mode_0755: c("mode=0755")?,
            }),
            ..Plan::default()
        };
        // Mount points that later binds may fall under come first.
        plan.tmpfs(Path::new("/tmp"), "mode=1777")?;
        plan.tmpfs(Path::new("/dev"), "mode=0755")?;
        for device in DEVICES {
            let path = Path::new("/dev").join(device);
            if path.exists() {
                plan.bind_file(&path)?;
            }
        }
        for (link, target) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            plan.ops.push(Op::Symlink {
                target: c(target)?,
                link: cstring(&under(NEW_ROOT, &Path::new("/dev").join(link)))?,
            });
        }
        plan.tmpfs(Path::new("/dev/shm"), "mode=1777")?;
        plan.mkdirs(Path::new("/proc"))?;
        let mut bound: Vec<PathBuf> = Vec::new();
        for dir in SYSTEM_DIRS {
            let path = Path::new(dir);
            let Ok(meta) = path.symlink_metadata() else {
                continue;
            };
            if meta.file_type().is_symlink() {
                // Merged /usr: /bin -> usr/bin stays a link in the view.
                let target = std::fs::read_link(path)?;
                plan.ops.push(Op::Symlink {
                    target: cstring(&target)?,
                    link: cstring(&under(NEW_ROOT, path))?,
                });
            } else if meta.is_dir() {
                plan.bind_dir(path, path, false)?;
                bound.push(path.to_path_buf());
            }
        }
        for dir in MASKED_DIRS {
            if Path::new(dir).is_dir() {
                plan.ops.push(Op::Tmpfs {
                    target: cstring(&under(NEW_ROOT, Path::new(dir)))?,
                    options: c("mode=0755")?,
                    read_only: true,
                });
            }
        }
        for file in MASKED {
            let path = Path::new(file);
            if path.exists() {
                plan.ops.push(Op::Bind {
                    source: cstring(&under(OLD_ROOT, Path::new("/dev/null")))?,
                    target: cstring(&under(NEW_ROOT, path))?,
                    writable: false,
                    device: false,
                });
            }
        }
        let mut read_only = interpreter_dirs(&paths.python);
        read_only.push(paths.shim_dir.clone());
        read_only.push(paths.functions_dir.clone());
        // Shallow first, so a folder is bound before anything inside it.
        read_only.sort_by_key(|p| p.components().count());
        for path in read_only {
            let canonical = path.canonicalize().unwrap_or(path.clone());
            for target in [&path, &canonical] {
                if !target.is_dir() || bound.iter().any(|b| target.starts_with(b)) {
                    continue;
                }
                plan.bind_dir(&canonical, target, false)?;
                bound.push(target.clone());
            }
        }
        plan.shared = bound;
        Ok(plan)
    }

    /// This system plan with one session's directories at their real
    /// paths: the workspace and packages directory read-write, the
    /// attachment store read-only inside the workspace. The folder holding
    /// the session folder (the sessions root) is sealed: in the view it
    /// holds this session only, and cannot even be listed.
    pub(super) fn with_session(&self, session: &SessionMounts) -> std::io::Result<Plan> {
        let mut plan = self.clone();
        plan.bind_dir(&session.workspace, &session.workspace, true)?;
        plan.bind_dir(&session.packages_dir, &session.packages_dir, true)?;
        if session.attachments_dir.is_dir() {
            plan.bind_dir(&session.attachments_dir, &session.attachments_dir, false)?;
        }
        // Only a folder this session's binds made: never `/tmp`, `/dev` or
        // a folder the system part holds (the tool would lose it).
        if let Some(root) = session.dir.parent() {
            if root.parent().is_some() && !self.made.iter().any(|made| made == root) {
                plan.ops.push(Op::Seal(cstring(&under(NEW_ROOT, root))?));
            }
        }
        Ok(plan)
    }

    /// The folder of the system part (seen by every worker, read-only)
    /// that holds `path`, if one does.
    pub(super) fn shared_folder_holding(&self, path: &Path) -> Option<&Path> {
        self.shared
            .iter()
            .find(|shared| path.starts_with(shared))
            .map(PathBuf::as_path)
    }

    fn mkdirs(&mut self, path: &Path) -> std::io::Result<()> {
        let mut so_far = PathBuf::from("/");
        for part in path.components().skip(1) {
            so_far.push(part);
            if !self.made.contains(&so_far) {
                self.ops
                    .push(Op::Mkdir(cstring(&under(NEW_ROOT, &so_far))?));
                self.made.push(so_far.clone());
            }
        }
        Ok(())
    }

    fn tmpfs(&mut self, path: &Path, options: &str) -> std::io::Result<()> {
        self.mkdirs(path)?;
        self.ops.push(Op::Tmpfs {
            target: cstring(&under(NEW_ROOT, path))?,
            options: cstring(Path::new(options))?,
            read_only: false,
        });
        Ok(())
    }

    fn bind_dir(&mut self, source: &Path, target: &Path, writable: bool) -> std::io::Result<()> {
        self.mkdirs(target)?;
        self.ops.push(Op::Bind {
            source: cstring(&under(OLD_ROOT, source))?,
            target: cstring(&under(NEW_ROOT, target))?,
            writable,
            device: false,
        });
        Ok(())
    }

    fn bind_file(&mut self, path: &Path) -> std::io::Result<()> {
        if let Some(parent) = path.parent() {
            self.mkdirs(parent)?;
        }
        let target = cstring(&under(NEW_ROOT, path))?;
        self.ops.push(Op::Touch(target.clone()));
        self.ops.push(Op::Bind {
            source: cstring(&under(OLD_ROOT, path))?,
            target,
            writable: true,
            device: true,
        });
        Ok(())
    }

    /// Builds the view and makes it the root. Between fork and exec, in a
    /// new mount namespace: system calls only.
    ///
    /// # Safety
    /// Changes the calling process's root; only for the child.
    pub(super) unsafe fn apply(&self) -> std::io::Result<()> {
        let Some(f) = &self.fixed else {
            return Ok(());
        };
        f.enter_stage()?;
        for op in &self.ops {
            op.apply(f)?;
        }
        f.leave_stage()
    }
}

const NULL: *const libc::c_char = std::ptr::null();
const NOSUID_NODEV: libc::c_ulong = libc::MS_NOSUID | libc::MS_NODEV;

/// A system call's 0-or-errno result as a `Result`.
fn check(result: libc::c_int) -> std::io::Result<()> {
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Fixed {
    /// Makes a staging tmpfs the root, with the new root (still empty) and
    /// the host's at `/oldroot` under it.
    ///
    /// # Safety
    /// Changes the calling process's root; only for the child.
    unsafe fn enter_stage(&self) -> std::io::Result<()> {
        // Nothing done here propagates back to the host.
        check(libc::mount(
            NULL,
            self.root.as_ptr(),
            NULL,
            libc::MS_REC | libc::MS_PRIVATE,
            NULL.cast(),
        ))?;
        self.mount_tmpfs(&self.stage)?;
        check(libc::mkdir(self.stage_new_root.as_ptr(), 0o755))?;
        check(libc::mkdir(self.stage_old_root.as_ptr(), 0o755))?;
        self.mount_tmpfs(&self.stage_new_root)?;
        // The staging tmpfs becomes the root; the host's is at /oldroot.
        check(libc::chdir(self.stage.as_ptr()))?;
        check(pivot_root(
            self.dot.as_ptr(),
            self.old_root_relative.as_ptr(),
        ))?;
        check(libc::chdir(self.root.as_ptr()))
    }

    /// # Safety
    /// Mounts over `target`; only for the child.
    unsafe fn mount_tmpfs(&self, target: &CString) -> std::io::Result<()> {
        check(libc::mount(
            self.tmpfs.as_ptr(),
            target.as_ptr(),
            self.tmpfs.as_ptr(),
            NOSUID_NODEV,
            self.mode_0755.as_ptr().cast(),
        ))
    }

    /// Lets go of the host's tree and makes the new root the root, read-only
    /// at its top.
    ///
    /// # Safety
    /// Changes the calling process's root; only for the child.
    unsafe fn leave_stage(&self) -> std::io::Result<()> {
        // The host's /proc, for the guardian (and so that the kernel lets
        // the worker mount its own: a fully visible proc must exist).
        let host_proc = b"/oldroot/proc\0";
        check(libc::mount(
            host_proc.as_ptr().cast(),
            self.proc_dir.as_ptr(),
            NULL,
            libc::MS_BIND | libc::MS_REC,
            NULL.cast(),
        ))?;
        check(libc::umount2(self.old_root.as_ptr(), libc::MNT_DETACH))?;
        // The new root becomes the root; the staging tmpfs goes.
        check(libc::chdir(self.new_root.as_ptr()))?;
        check(pivot_root(self.dot.as_ptr(), self.dot.as_ptr()))?;
        check(libc::umount2(self.dot.as_ptr(), libc::MNT_DETACH))?;
        check(libc::chdir(self.root.as_ptr()))?;
        // Nothing new at the top of the view.
        check(libc::mount(
            NULL,
            self.root.as_ptr(),
            NULL,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | NOSUID_NODEV,
            NULL.cast(),
        ))
    }
}

impl Op {
    /// Does this step of the view, inside the staged new root.
    ///
    /// # Safety
    /// Mounts and creates files in the caller's mount namespace; only for
    /// the child, between [`Fixed::enter_stage`] and [`Fixed::leave_stage`].
    unsafe fn apply(&self, f: &Fixed) -> std::io::Result<()> {
        match self {
            Op::Mkdir(path) => {
                if libc::mkdir(path.as_ptr(), 0o755) != 0
                    && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST)
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            }
            Op::Touch(path) => {
                let fd = libc::open(
                    path.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o644,
                );
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
                Ok(())
            }
            Op::Symlink { target, link } => check(libc::symlink(target.as_ptr(), link.as_ptr())),
            Op::Seal(path) => check(libc::chmod(path.as_ptr(), 0o111)),
            Op::Tmpfs {
                target,
                options,
                read_only,
            } => check(libc::mount(
                f.tmpfs.as_ptr(),
                target.as_ptr(),
                f.tmpfs.as_ptr(),
                NOSUID_NODEV | if *read_only { libc::MS_RDONLY } else { 0 },
                options.as_ptr().cast(),
            )),
            Op::Bind {
                source,
                target,
                writable,
                device,
            } => {
                check(libc::mount(
                    source.as_ptr(),
                    target.as_ptr(),
                    NULL,
                    libc::MS_BIND | libc::MS_REC,
                    NULL.cast(),
                ))?;
                let mut flags =
                    libc::MS_REMOUNT | libc::MS_BIND | libc::MS_NOSUID | locked_flags(target);
                if !device {
                    flags |= libc::MS_NODEV;
                }
                if !writable {
                    flags |= libc::MS_RDONLY;
                }
                check(libc::mount(NULL, target.as_ptr(), NULL, flags, NULL.cast()))
            }
        }
    }
}

unsafe fn pivot_root(new_root: *const libc::c_char, put_old: *const libc::c_char) -> libc::c_int {
    libc::syscall(libc::SYS_pivot_root, new_root, put_old) as libc::c_int
}

/// The flags of a mount a user namespace may not clear (the kernel refuses
/// a remount that drops them).
unsafe fn locked_flags(path: &CString) -> libc::c_ulong {
    let mut stat: libc::statvfs = std::mem::zeroed();
    if libc::statvfs(path.as_ptr(), &mut stat) != 0 {
        return 0;
    }
    let mut flags = 0;
    for (st, ms) in [
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
        (libc::ST_RDONLY, libc::MS_RDONLY),
    ] {
        if stat.f_flag & st != 0 {
            flags |= ms;
        }
    }
    flags
}

/// The interpreter's prefixes and its `sys.path` folders, asked of it.
fn interpreter_dirs(python: &Path) -> Vec<PathBuf> {
    let script = "import sys, json; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix] + sys.path))";
    let mut dirs = Vec::new();
    if let Some(parent) = python.parent().and_then(Path::parent) {
        dirs.push(parent.to_path_buf());
    }
    let output = std::process::Command::new(python)
        .args(["-I", "-c", script])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    if let Ok(output) = output {
        let listed: Vec<String> = serde_json::from_slice(&output.stdout).unwrap_or_default();
        dirs.extend(
            listed
                .into_iter()
                .filter(|p| p.starts_with('/'))
                .map(PathBuf::from),
        );
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session_at(dir: &str) -> SessionMounts {
        let dir = PathBuf::from(dir);
        SessionMounts {
            workspace: dir.join("code_workspace"),
            packages_dir: dir.join("site-packages"),
            attachments_dir: dir.join("code_workspace/attachments"),
            dir,
        }
    }

    fn sealed(plan: &Plan) -> Vec<String> {
        plan.ops
            .iter()
            .filter_map(|op| match op {
                Op::Seal(path) => Some(path.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_session_view_seals_the_sessions_root_but_never_a_folder_the_system_part_holds() {
        let mut system = Plan::default();
        system.tmpfs(Path::new("/tmp"), "mode=1777").unwrap();
        system
            .bind_dir(Path::new("/srv/tools"), Path::new("/srv/tools"), false)
            .unwrap();
        let plan = system
            .with_session(&session_at("/srv/sessions/alice"))
            .unwrap();
        assert_eq!(sealed(&plan), ["/newroot/srv/sessions"]);
        // The system plan is left as it was: the next session starts from it.
        assert!(sealed(&system).is_empty());
        // The private /tmp, and a folder holding the tools, stay usable.
        assert!(sealed(&system.with_session(&session_at("/tmp/alice")).unwrap()).is_empty());
        assert!(sealed(&system.with_session(&session_at("/srv/alice")).unwrap()).is_empty());
        let targets: Vec<String> = plan
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::Bind {
                    target, writable, ..
                } => Some(format!("{} {writable}", target.to_string_lossy())),
                _ => None,
            })
            .collect();
        assert!(
            targets.contains(&"/newroot/srv/sessions/alice/code_workspace true".to_string())
                && targets.contains(&"/newroot/srv/sessions/alice/site-packages true".to_string()),
            "{targets:?}"
        );
    }
}
