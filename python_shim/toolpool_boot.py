"""The guardian: what the supervisor starts, as `python3 -I toolpool_boot.py '<config json>'`.

It forks the worker (which imports and runs the tools) into a session and
process group of its own, waits for it, kills that whole group so nothing the tools started
outlives the worker, then ends the same way the worker did: same exit code,
or same signal. The supervisor's waitpid on the guardian therefore tells how
the worker ended. The guardian runs no tool code. See docs/protocol.md.

Where the kernel allows (as root, or through a user namespace), the worker
is forked into a PID namespace of its own, as its init: when the worker dies
the kernel kills every process of the namespace, whatever they did with
process groups and sessions. Otherwise the guardian is the child subreaper of
the worker's tree: a process the tools started that left the worker's group
(setsid, a daemon's double fork) is adopted by the guardian when its parent
dies, and is killed with the rest.

Started as `python3 -I toolpool_boot.py --template <supervisor pid>` it is
instead the template: an interpreter that has imported the shim once and
clones a guardian whenever the supervisor asks (see `_template`), so that a
worker's start costs its tools' imports, not an interpreter's start.
"""

import json
import os
import resource
import signal
import sys

SHIM_DIR = os.path.dirname(os.path.abspath(__file__))
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
# SIGTERM and SIGHUP: the supervisor died (its parent-death signal) or is
# stopping us. SIGINT is treated alike so that a stray Ctrl-C cannot leave the
# worker's group behind.
STOP_SIGNALS = {signal.SIGTERM, signal.SIGHUP, signal.SIGINT}
# The template's channel to the supervisor (a SOCK_SEQPACKET socket).
TEMPLATE_FD = 3
MAX_TEMPLATE_REQUEST = 1 << 20
# Descriptors a request brings: stdin, stdout, stderr, dump pipe, go pipe.
TEMPLATE_FDS = 5
CLONE_PARENT = 0x00008000
# What the template imports for itself, forgotten by the guardians it clones.
TEMPLATE_ONLY_MODULES = ("_socket", "gc")
# clone(2)'s number where its first argument is the flags (on s390 it is not).
SYS_CLONE = {"x86_64": 56, "aarch64": 220, "riscv64": 220}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--template":
        _template(int(sys.argv[2]))
    if len(sys.argv) != 2:
        sys.exit("usage: python3 -I toolpool_boot.py '<config json>' | --template <supervisor pid>")
    _guard(json.loads(sys.argv[1]))


def _guard(config: dict) -> None:
    """Be the guardian of one worker (see the module's docstring). Never returns."""
    if SHIM_DIR not in sys.path:  # it is when cloned from the template
        sys.path.insert(0, SHIM_DIR)  # -I leaves the script's own folder off sys.path
    # No core files from crashing tools, and none when the guardian re-raises
    # the worker's fatal signal on itself.
    _, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))

    guardian = os.getpid()
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if config.get("pid_namespace"):
        _enter_pid_namespace()
    # Blocked across the fork: a stop signal that arrives before the handler
    # knows the worker's pid waits until it does.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    worker = os.fork()
    if worker == 0:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        _run_worker(config, guardian)

    # The worker makes itself a session (and so a group) of its own; a stop
    # signal that comes before it did still reaches it by its pid.
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda _signum, _frame: _kill_worker(worker))
    # Only the worker may hold the channel: the supervisor must see EOF on the
    # worker's stdout exactly when the worker is gone.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    if config.get("dump_fd") is not None:
        try:
            os.close(config["dump_fd"])  # the worker's only
        except OSError:
            pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    status = _wait_for(worker)
    _kill_worker(worker)
    _kill_adopted()
    _mirror(status)


def _template(supervisor: int) -> None:
    """Be the template: start the interpreter and import the shim once, then
    clone a guardian for each request on the channel (fd 3). Never returns.

    A request is one message: the guardian's config JSON, with five
    descriptors (its stdin, stdout, stderr and dump pipe, and a pipe it
    waits on before it forks its worker: the supervisor first moves it into
    its own cgroup under --sandbox). The guardian is
    cloned with CLONE_PARENT, so that it is the supervisor's child, not
    ours: the supervisor waits for it and kills it as if it had spawned it.
    The answer is its pid, or `error <errno>`. No tool is imported here: a
    guardian's worker imports them after its fork, as a spawned one does.
    """
    # _socket, not socket: socket.py imports `array`, which the shim reads as
    # "a tool may return a buffer" (results.py); a worker must see the
    # modules a spawned worker would.
    import _socket

    # Not dumpable: no process of the same user (a tool among them) may
    # trace it or write its memory through /proc/<pid>/mem, which would run
    # its code in every worker cloned after. Each guardian cloned from it
    # makes itself dumpable again (_become_guardian).
    _prctl(PR_SET_DUMPABLE, 0)
    channel = _socket.socket(fileno=TEMPLATE_FD)
    clone = SYS_CLONE.get(os.uname().machine)
    if clone is None:
        channel.send(b"unsupported: no clone system call number for " + os.uname().machine.encode())
        os._exit(1)
    sys.path.insert(0, SHIM_DIR)
    from toolpool_shim import worker  # noqa: F401 -- importing it once is the template's purpose
    import ctypes

    # PyDLL keeps the GIL across the call: the clone returns holding it.
    libc = ctypes.PyDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    # Every object made so far into the permanent generation: a clone's
    # collections then never write to them, so the pages it shares with the
    # template stay shared (fewer copy-on-write faults per worker start).
    import gc

    gc.freeze()
    channel.send(b"ready")
    while True:
        try:
            request, fds = _receive(channel)
        except OSError:
            os._exit(0)
        if not request:
            os._exit(0)  # the supervisor closed its end
        if len(fds) != TEMPLATE_FDS:
            answer = b"error 22"  # EINVAL: the supervisor always sends them all
        else:
            pid = libc.syscall(clone, CLONE_PARENT | signal.SIGCHLD, 0, 0, 0, 0)
            if pid == 0:
                channel.detach()  # fd 3 is the dump pipe's from here on
                _become_guardian(request, fds, supervisor)
            answer = str(pid).encode() if pid > 0 else b"error %d" % ctypes.get_errno()
        for fd in fds:
            os.close(fd)
        channel.send(answer)


def _receive(channel) -> tuple:
    """One request and the descriptors that came with it."""
    import _socket
    import struct

    space = _socket.CMSG_SPACE(TEMPLATE_FDS * struct.calcsize("i"))
    request, ancillary, _, _ = channel.recvmsg(MAX_TEMPLATE_REQUEST, space)
    fds = []
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            whole = len(data) - len(data) % 4
            fds.extend(struct.unpack(f"{whole // 4}i", data[:whole]))
    return request, fds


def _become_guardian(request: bytes, fds: list, supervisor: int) -> None:
    """The cloned child: take the request's pipes as stdio and dump fd, drop
    everything else the template held, wait to be let go, and guard. Never
    returns."""
    try:
        for name in TEMPLATE_ONLY_MODULES:
            sys.modules.pop(name, None)
        *inherited, go = fds
        # Out of the way of the targets (0 up) first, so no dup2 overwrites
        # a descriptor still to be placed.
        count = len(inherited)
        go = go if go >= count else _dup_at_or_above(go, count)
        inherited = [fd if fd >= count or fd == target else _dup_at_or_above(fd, count)
                     for target, fd in enumerate(inherited)]
        for target, fd in enumerate(inherited):
            if fd != target:
                os.dup2(fd, target)
        os.setpgid(0, 0)
        # Dumpable again, as a spawned guardian is: it writes its own
        # /proc/self/uid_map for a PID namespace (unwritable to a process that
        # is not), and its worker inherits it for the author's debuggers.
        _prctl(PR_SET_DUMPABLE, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != supervisor:
            os._exit(1)  # the supervisor died before the parent-death signal was armed
        if os.read(go, 1) != b"g":
            os._exit(1)  # the supervisor gave this start up
        os.closerange(len(inherited), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        config = json.loads(request)
        if config.get("sandbox"):
            # Siblings share the template's namespaces: the worker makes the
            # ones a spawned worker has of its own (toolpool_shim.sandbox).
            config["sandbox"]["own_namespaces"] = True
        _guard(config)
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(1)


def _dup_at_or_above(fd: int, lowest: int) -> int:
    """A duplicate of `fd` numbered `lowest` or more (what fcntl's F_DUPFD
    does, without importing `fcntl`: a cloned worker loads only the modules
    a spawned one does)."""
    below = []
    duplicate = os.dup(fd)
    while duplicate < lowest:
        below.append(duplicate)
        duplicate = os.dup(fd)
    for extra in below:
        os.close(extra)
    return duplicate


def _enter_pid_namespace() -> None:
    """Make the next child the init of a new PID namespace, if the kernel lets us.

    As root a PID namespace alone; otherwise a user namespace first (mapping
    only our own uid and gid), which unprivileged users may create where the
    kernel allows it. Failing both, the worker runs in ours (the supervisor
    sees which from /proc and says so).
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    unshare = getattr(libc, "unshare", None)
    if unshare is None:
        return
    if unshare(CLONE_NEWPID) == 0:
        return
    uid, gid = os.geteuid(), os.getegid()
    if unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0:
        return
    from toolpool_shim.sandbox import write_own_id_maps

    try:
        write_own_id_maps(uid, gid)
    except OSError:
        pass  # unmapped ids show as nobody; the namespace still holds the tree


def _wait_for(worker: int) -> int:
    """Wait for the worker, reaping adopted orphans of its tree that end meanwhile."""
    while True:
        pid, status = os.waitpid(-1, 0)  # retried after a signal handler has run (PEP 475)
        if pid == worker:
            return status


def _kill_adopted() -> None:
    """Kill and reap every process left in the worker's tree, until there is none.

    They are all children of the guardian by now: the worker is gone, so the
    kernel handed its orphans (and theirs, as they die) to the subreaper.
    """
    while True:
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _children() -> list:
    """Pids whose parent is this (single-threaded) process."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as handle:
            return [int(pid) for pid in handle.read().split()]
    except OSError:
        pass
    children = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children  # no /proc: the worker's group was killed, which is all we can do
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == me:
            children.append(int(entry))
    return children


def _run_worker(config: dict, guardian: int) -> None:
    """The forked child: become the worker. Never returns."""
    try:
        # A session of its own: no controlling terminal, so nothing a tool
        # does (TIOCSTI, a fake prompt on /dev/tty) reaches the terminal of
        # the person who started toolpool; its own group, killed as one.
        os.setsid()
        _die_with_parent()
        if _parent_pid() != guardian:
            os._exit(1)  # the guardian died before the parent-death signal was armed
        if config.get("sandbox"):
            # Before any tool code: the last steps of --sandbox, which only a
            # process inside the worker's PID namespace can take.
            from toolpool_shim.sandbox import lock_down

            lock_down(config["sandbox"])
        elif config.get("terminal_filter"):
            _refuse_terminal_ioctls(bytes.fromhex(config["terminal_filter"]))
        _forget_ctypes()
        from toolpool_shim import worker

        worker.main(config)
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(1)  # worker.main only ends through os._exit: getting here is a failure


def _refuse_terminal_ioctls(program: bytes) -> None:
    """Without --sandbox: TIOCSTI, TIOCLINUX and TIOCSCTTY fail, so that a tool
    run by root (which may push input into any terminal it can open) cannot
    type into a person's shell. Installing a filter without no_new_privs takes
    CAP_SYS_ADMIN; without it the kernel already refuses TIOCSTI on every
    terminal but the caller's controlling one, and the worker has none (setsid)."""
    from toolpool_shim.sandbox import install_seccomp

    try:
        install_seccomp(program)
    except PermissionError:
        pass


def _forget_ctypes() -> None:
    """Drop the ctypes modules the guardian and the lock-down imported for
    their system calls, before any tool is imported: the shim reads a loaded
    `_ctypes` as "a tool may return a ctypes buffer" and then checks every
    marshalled result (results.py). A tool that imports ctypes loads it again."""
    for name in [name for name in sys.modules if name == "_ctypes" or name.partition(".")[0] == "ctypes"]:
        del sys.modules[name]


def _parent_pid() -> int:
    """The parent's pid as the guardian knows it.

    In a PID namespace of its own the worker's getppid() is 0 (its parent is
    outside); /proc, mounted from the guardian's namespace, still names it.
    """
    try:
        with open("/proc/self/stat", "rb") as handle:
            stat = handle.read()
        return int(stat[stat.rfind(b")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return os.getppid()


def _die_with_parent() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGKILL): the kernel kills the worker when the guardian dies."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _prctl(option: int, value: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    prctl = getattr(libc, "prctl", None)
    if prctl is None:
        return  # not Linux: stdin EOF still ends the worker when the supervisor goes
    if prctl(option, value, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl({option}): {os.strerror(errno)}")


def _kill_worker(worker: int) -> None:
    """SIGKILL to the worker's group (its session's) and to the worker itself."""
    for kill in (os.killpg, os.kill):
        try:
            kill(worker, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # already gone


def _mirror(status: int) -> None:
    """End this process as the worker ended: same exit code, or same signal."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        try:
            signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL and SIGSTOP have no handler to reset
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # a signal whose default action does not end a process
    os._exit(os.WEXITSTATUS(status))


if __name__ == "__main__":
    main()
