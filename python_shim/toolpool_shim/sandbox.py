"""The worker's part of `--sandbox`, taken before any tool code runs.

The supervisor already put the guardian in new user, mount, IPC, UTS and
network namespaces, with a mount view of its own, and the guardian forked
this worker into a new PID namespace. What is left needs a process inside
that PID namespace, and must come before seccomp and Landlock (which forbid
mounts):

1. its own `/proc`: a proc of this PID namespace replaces the host's (which
   the guardian keeps, in its own mount namespace);
2. no capabilities, and `no_new_privs`;
3. Landlock: read anywhere in the view, write only in the workspace, the
   packages directory, `/tmp` and `/dev`; signals and abstract sockets
   scoped to the worker's own processes (ABI 6);
4. the seccomp program the supervisor built (its hex in the config).

A step that fails raises: the worker does not start, and its start error
names the step.
"""

import ctypes
import os

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_MOVE, MS_REC, MS_PRIVATE = 8192, 16384, 1 << 18
MNT_DETACH = 2
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_RULE_PATH_BENEATH = 1
# Landlock file-system rights, ABI 1 (13 rights), then REFER (2), TRUNCATE (3), IOCTL_DEV (5).
FS_EXECUTE, FS_READ_FILE, FS_READ_DIR = 1, 4, 8
FS_ABI1 = (1 << 13) - 1
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"--sandbox: {what}: {os.strerror(errno)}")
    return result


def lock_down(sandbox: dict) -> None:
    if sandbox.get("fresh_proc"):
        _fresh_proc(sandbox.get("strict", True))
    _drop_capabilities()
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    if sandbox.get("landlock"):
        _landlock(sandbox["landlock"])
    if sandbox.get("seccomp"):
        _seccomp(bytes.fromhex(sandbox["seccomp"]))


def _fresh_proc(strict: bool) -> None:
    """Mount this PID namespace's proc, then detach the host's from under it."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making / private")
    staging = b"/tmp/.toolpool-proc"
    os.mkdir(staging, 0o700)
    try:
        # The kernel lets a user namespace mount proc only while a fully
        # visible one exists in the mount namespace: the host's, for now.
        _check(_libc.mount(b"proc", staging, b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None),
               "mounting a /proc of the worker's PID namespace")
    except OSError:
        os.rmdir(staging)
        if strict:
            raise
        import sys

        print("toolpool: --sandbox=best-effort: the worker keeps the host's /proc", file=sys.stderr)
        return
    _check(_libc.umount2(b"/proc", MNT_DETACH), "detaching the host's /proc")
    _check(_libc.mount(staging, b"/proc", None, MS_MOVE, None), "moving the new /proc into place")
    os.rmdir(staging)


def _drop_capabilities() -> None:
    """Root in its user namespace, with none of root's powers."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3: two Data
    data = (Data * 2)()
    number = SYS_CAPSET.get(os.uname().machine)
    if number is None:
        raise OSError(0, f"--sandbox: no capset number known for {os.uname().machine}")
    _check(_libc.syscall(number, ctypes.byref(header), data), "capset (dropping capabilities)")


def _landlock(rules: dict) -> None:
    abi = int(rules["abi"])
    handled = FS_ABI1
    if abi >= 2:
        handled |= FS_REFER
    if abi >= 3:
        handled |= FS_TRUNCATE
    if abi >= 5:
        handled |= FS_IOCTL_DEV

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64),
                    ("handled_access_net", ctypes.c_uint64),
                    ("scoped", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    attr = RulesetAttr(handled, 0, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    # Older ABIs know a shorter struct: pass only the fields they have.
    size = 24 if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = _check(_libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr),
                                   ctypes.c_size_t(size), ctypes.c_uint32(0)),
                     "landlock_create_ruleset")
    try:
        granted = [(path, FS_EXECUTE | FS_READ_FILE | FS_READ_DIR) for path in rules["read"]]
        granted += [(path, handled) for path in rules["write"]]
        for path, access in granted:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                beneath = PathBeneath(access, fd)
                _check(_libc.syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset),
                                     ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                                     ctypes.byref(beneath), ctypes.c_uint32(0)),
                       f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        _check(_libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)),
               "landlock_restrict_self")
    finally:
        os.close(ruleset)


def _seccomp(program: bytes) -> None:
    if len(program) % 8:
        raise ValueError("--sandbox: the seccomp program is not whole instructions")

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = Program(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
           "installing the seccomp filter")
