"""The worker's part of `--sandbox`, taken before any tool code runs.

The supervisor already put the guardian in new user, mount, IPC, UTS and
network namespaces, with a mount view of its own, and the guardian forked
this worker into a new PID namespace. (A guardian cloned from a template
shares the template's namespaces: its worker first makes its own IPC,
network and mount namespaces, see `_own_namespaces`.) What is left needs a
process inside that PID namespace, and must come before seccomp and
Landlock (which forbid mounts):

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

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS = 0x8913, 0x8914
IFF_UP, IFF_RUNNING = 0x1, 0x40
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 4096, 8192, 16384, 1 << 18
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
    if sandbox.get("own_namespaces"):
        _own_namespaces(bool(sandbox.get("private_net")))
    _drop_capabilities()
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    if sandbox.get("landlock"):
        _landlock(sandbox["landlock"])
    if sandbox.get("seccomp"):
        install_seccomp(bytes.fromhex(sandbox["seccomp"]))


def _own_namespaces(private_net: bool) -> None:
    """The namespaces a worker cloned from a template does not have of its own.

    A spawned worker's guardian entered new user, IPC, UTS and network
    namespaces and a mount view between fork and exec; a cloned one shares
    the template's with the template's other workers. So this worker, in
    the mount namespace `_fresh_proc` made (owned by the template's user
    namespace, so its mounts are not locked), mounts a `/tmp` and
    `/dev/shm` of its own, then enters new user, IPC, UTS and network
    (loopback only, unless --allow-net) namespaces. The process limit,
    `RLIMIT_NPROC` or a cgroup's, then counts this worker's processes alone.
    """
    _fresh_tmp()
    _check(_libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777"),
           "mounting a /dev/shm of the worker's own")
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWUSER | CLONE_NEWIPC | CLONE_NEWUTS | (CLONE_NEWNET if private_net else 0)
    _check(_libc.unshare(flags), "unshare(the worker's own user, IPC, UTS and network namespaces)")
    write_own_id_maps(uid, gid)
    if private_net:
        _loopback_up()


def write_own_id_maps(uid: int, gid: int) -> None:
    """In a new user namespace: map only the ids the process had outside
    (what an unprivileged process may map itself). Also the guardian's."""
    for path, text in (("/proc/self/setgroups", "deny"),
                       ("/proc/self/uid_map", f"{uid} {uid} 1"),
                       ("/proc/self/gid_map", f"{gid} {gid} 1")):
        with open(path, "w") as handle:
            handle.write(text)


def _fresh_tmp() -> None:
    """A tmpfs of the worker's own on /tmp, holding what the view binds
    under /tmp (a session's folders under /tmp are there) bound again."""
    old_tmp = os.open(b"/tmp", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    name = b".toolpool-tmp-" + os.urandom(8).hex().encode()
    staging = b"/tmp/" + name
    os.mkdir(staging, 0o700)
    _check(_libc.mount(b"tmpfs", staging, b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777"),
           "mounting a /tmp of the worker's own")
    for point in _mounts_under(b"/tmp/", staging):
        relative = point[len(b"/tmp/"):]
        parts = relative.split(b"/")
        for depth in range(1, len(parts)):
            old = b"/tmp/" + b"/".join(parts[:depth])
            new = staging + b"/" + b"/".join(parts[:depth])
            if not os.path.isdir(new):
                os.mkdir(new)
                os.chmod(new, os.stat(old).st_mode & 0o7777)  # a sealed folder stays sealed
        target = staging + b"/" + relative
        if os.path.isdir(point):
            os.mkdir(target)
        else:
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        _check(_libc.mount(point, target, None, MS_BIND | MS_REC, None),
               f"binding {point.decode(errors='replace')} into the worker's /tmp")
    _check(_libc.mount(staging, b"/tmp", None, MS_MOVE, None), "moving the worker's /tmp into place")
    os.rmdir(name, dir_fd=old_tmp)  # its mount point, left in the template's /tmp
    os.close(old_tmp)


def _mounts_under(prefix: bytes, staging: bytes) -> list:
    """The outermost mount points below `prefix` (each bound with what is under it)."""
    with open("/proc/self/mountinfo", "rb") as handle:
        return _outermost(handle.read(), prefix, staging)


def _outermost(mountinfo: bytes, prefix: bytes, staging: bytes) -> list:
    points = sorted({_unescape(line.split()[4]) for line in mountinfo.splitlines()
                     if len(line.split()) > 4})
    outermost = []
    for point in points:
        if not point.startswith(prefix) or point == staging:
            continue
        if not any(point.startswith(kept + b"/") for kept in outermost):
            outermost.append(point)
    return outermost


def _unescape(field: bytes) -> bytes:
    """A mountinfo path: space, tab, newline and backslash come as \\ooo."""
    out, i = bytearray(), 0
    while i < len(field):
        digits = field[i + 1:i + 4]
        if field[i] == 0x5C and len(digits) == 3 and digits.isdigit():
            out.append(int(digits, 8))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return bytes(out)


def _loopback_up() -> None:
    """SIOCSIFFLAGS on `lo`: a new network namespace's loopback starts down."""
    import _socket
    import fcntl
    import struct

    ifreq = "16sh22x"  # struct ifreq: the name, then ifr_flags in its union
    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        _, flags = struct.unpack(ifreq, fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS,
                                                     struct.pack(ifreq, b"lo", 0)))
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack(ifreq, b"lo", flags | IFF_UP | IFF_RUNNING))
    except OSError as error:
        raise OSError(error.errno, f"--sandbox: bringing up loopback: {error.strerror}") from None
    finally:
        sock.close()


def _fresh_proc(strict: bool) -> None:
    """Mount this PID namespace's proc, then detach the host's from under it."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making / private")
    # /tmp may be shared with other workers at this point (a template's).
    staging = b"/tmp/.toolpool-proc-" + os.urandom(8).hex().encode()
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


def install_seccomp(program: bytes) -> None:
    """Installs a seccomp filter the supervisor built (8 bytes per instruction).
    Without no_new_privs this takes CAP_SYS_ADMIN: else PermissionError (EACCES)."""
    if len(program) % 8:
        raise ValueError("--sandbox: the seccomp program is not whole instructions")

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = Program(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
           "installing the seccomp filter")
