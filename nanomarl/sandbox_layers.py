"""sandbox_layers.py: the isolation layers of a sandboxed run (sandbox.py's docstring lists them).

Executed inside the sandbox, before sandbox_child.py, as the module `sandbox_layers` (sandbox.py's
BOOT): Linux namespaces (mount, network, IPC, UTS, user; the program's process's own PID namespace:
fork_program), a fresh uid without capabilities, PR_SET_PDEATHSIG, rlimits and the seccomp
allow-list, all with a few libc calls through ctypes; and, for the test process, the CPU watchdog
of each test (watchdog), the count of the hashes of a set or dict it receives before building it
(crowded), a refused thread as the harness's failure (guard_threads) and the wait for the
program's process at the end (reap); either process's job read from its pipe (read_exactly); the
output files under sys.stdout and sys.stderr, capped at RLIMIT_FSIZE's size without an error
(Capped)."""
import _signal, _thread, ctypes, io, os, resource, struct, sys, time
from _collections import _count_elements
from _operator import itemgetter, mul

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
RDONLY, NOSUID, NODEV, NOEXEC, REMOUNT, BIND, REC, PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
NEWNS, NEWUTS, NEWIPC, NEWUSER = 0x20000, 0x4000000, 0x8000000, 0x10000000  # CLONE_NEW*
NEWPID, NEWNET = 0x20000000, 0x40000000
CLONE_THREAD = 0x10000
# what a thread's clone never asks for: new namespaces (NEWCGROUP 0x2000000 too), PIDFD 0x1000,
# PTRACE 0x2000, VFORK 0x4000, PARENT 0x8000, UNTRACED 0x800000
NOT_A_THREAD = (NEWNS | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | 0x2000000 | 0x1000 | 0x2000
                | 0x4000 | 0x8000 | 0x800000)
THREADS = 32  # the threads a run may start, its two processes together (RLIMIT_NPROC)
WRITE = os.write  # (taken before any program code: it may replace os.write)
FIRST, SMALL = itemgetter(0), (1 << 61) - 1  # (a pair's key; an int nearer 0: its own hash)
PAIRS = 1 << 20  # the comparisons of keys of one hash a container may cost to build


def check(ret, what):
    if ret != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, what + ": " + os.strerror(errno))


def mount(source, target, fstype, flags, data=None):
    enc = lambda s: None if s is None else s.encode()
    check(libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), "mount " + target)


def bind_read_only(path, target):
    mount(path, target, None, BIND | REC)
    flags = os.statvfs(path).f_flag
    kept = flags & (NOSUID | NODEV | NOEXEC | 1024 | 2048)  # flags a user namespace must keep
    mount(None, target, None, REMOUNT | BIND | RDONLY | kept | (1 << 21 if flags & 4096 else 0))


def isolate():
    """New mount, network, IPC, UTS (and, if not root, user) namespaces; the root becomes an
    empty read-only tmpfs with read-only binds of /usr, the system libraries and the standard
    library, site-packages hidden. The PID namespace is the program's process's: fork_program."""
    uid, gid = os.getuid(), os.getgid()
    flags = NEWNS | NEWNET | NEWIPC | NEWUTS | (NEWUSER if uid else 0)
    check(libc.unshare(flags), "unshare")
    if uid:  # a user namespace in which our own ids are mapped: we may mount (in it only)
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):
            with open("/proc/self/" + name, "w") as f:
                f.write(text)
    mount("none", "/", None, REC | PRIVATE)  # nothing mounted from here on propagates back
    root = "/tmp"
    mount("tmpfs", root, "tmpfs", NOSUID | NODEV, "size=1m,mode=755")
    shown = []
    for path in sorted(["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                        "/etc/ld.so.cache"] + [p for p in sys.path if os.path.isdir(p)]):
        if any(path.startswith(s + "/") for s in shown) or not os.path.lexists(path):
            continue
        shown.append(path)
        if os.path.islink(path) and path.count("/") == 1:  # merged /usr: /lib -> usr/lib
            os.symlink(os.readlink(path), root + path)
        elif os.path.isdir(path):
            os.makedirs(root + path, exist_ok=True)
            bind_read_only(path, root + path)
        else:
            os.makedirs(os.path.dirname(root + path), exist_ok=True)
            open(root + path, "w").close()
            bind_read_only(path, root + path)
    hidden = [f"{root}{lib}/{python}/{kind}-packages" for lib in ("/usr/lib", "/usr/local/lib")
              if os.path.isdir(root + lib) for python in os.listdir(root + lib)
              if python.startswith("python3") for kind in ("site", "dist")]
    for path in hidden + [root + p + "/site-packages" for p in sys.path]:
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", RDONLY | NOSUID | NODEV | NOEXEC, "size=4k,mode=555")
    mount(None, root, None, REMOUNT | RDONLY | NOSUID | NODEV)
    os.chdir(root)
    check(libc.syscall(155, b".", b"."), "pivot_root")  # the old root now lies on the new one...
    check(libc.umount2(b".", 2), "umount")  # ...and is detached (MNT_DETACH): out of reach
    os.chdir("/")


def drop_privileges(isolated, run):
    """Root: a fresh uid/gid (2e9 + run, the test process's pid: one for the run's processes)
    without supplementary groups; everyone: no capabilities, and not dumpable (the program's
    process, of the same uid, cannot open the test process's /proc/PID/fd or mem where /proc is
    visible)."""
    def others_can_read(path):  # without namespaces the new uid must still reach the stdlib
        ancestors = [path[:i] or "/" for i in range(len(path)) if path[i] == "/"]
        return (os.stat(path).st_mode & 0o005 == 0o005
                and all(os.stat(a).st_mode & 0o001 for a in ancestors))

    if os.getuid() == 0 and (isolated or all(others_can_read(p) for p in sys.path
                                             if os.path.isdir(p))):
        ident = 2000000000 + run
        os.setgroups([])
        os.setresgid(ident, ident, ident)
        os.setresuid(ident, ident, ident)
    header = struct.pack("Ii", 0x20080522, 0)
    check(libc.syscall(126, header, bytes(24)), "capset")  # no capabilities left
    check(libc.prctl(4, 0, 0, 0, 0), "prctl")  # PR_SET_DUMPABLE 0 (the fork keeps it)
    return os.geteuid() != 0


def fork_program(isolated):
    """Forks the program's process by way of a short-lived middle process, which unshares
    CLONE_NEWPID (where `isolated`: the program's process is pid 1 of the new PID namespace and
    sees no other process), drops its privileges, forks the program's process and ends. This
    process, the test process, never unshares CLONE_NEWPID itself (the kernel refuses a thread to
    a process whose children go to another PID namespace) and so may start threads; as a child
    subreaper it inherits the program's process, and it reaps the middle one here (before any
    thread starts: RLIMIT_NPROC counts the two processes). Returns None in the program's process,
    once the middle one is reaped (its PR_SET_PDEATHSIG, set later, is the test process's); in
    the test process 0, or the errno of the unshare the kernel refused (the program's process then
    shares its PID namespace)."""
    check(libc.prctl(36, 1, 0, 0, 0), "prctl")  # PR_SET_CHILD_SUBREAPER
    # the program's process waits for the end of this pipe, closed here once the middle process
    # is reaped: then it is this process's child (the middle one's files close before the kernel
    # hands its child on, and a PR_SET_PDEATHSIG set in between would fire at the handing on)
    gate = os.pipe()
    try:
        middle = os.fork()
    except OSError:  # no program's process: the test process reads the end of its answers
        middle = None
    if middle != 0:
        os.close(gate[0])
        refused = 0 if middle is None else os.WEXITSTATUS(os.waitpid(middle, 0)[1])
        os.close(gate[1])  # the middle process is reaped: the program's process is a child here
        return refused
    program, refused = -1, 0
    try:  # the middle process
        if isolated and libc.unshare(NEWPID) != 0:
            refused = ctypes.get_errno()
        drop_privileges(isolated, os.getppid())
        program = os.fork()
    finally:
        if program != 0:  # never back into the test process's code
            os._exit(refused)
    os.close(gate[1])
    os.read(gate[0], 1)  # its end: the test process has reaped the middle one
    os.close(gate[0])
    return None


# x86_64 system calls a pure-Python program needs (everything else fails with EPERM)
ALLOWED = [int(call.split(":")[0]) for call in """
0:read 1:write 3:close 4:stat 5:fstat 6:lstat 7:poll 8:lseek 9:mmap 10:mprotect 11:munmap 12:brk
13:rt_sigaction 14:rt_sigprocmask 15:rt_sigreturn 17:pread64 18:pwrite64 19:readv 20:writev
21:access 23:select 24:sched_yield 25:mremap 28:madvise 32:dup 33:dup2 34:pause 35:nanosleep
36:getitimer 37:alarm 38:setitimer 39:getpid 60:exit 61:wait4 63:uname 78:getdents 79:getcwd
80:chdir 81:fchdir 89:readlink 96:gettimeofday 97:getrlimit 98:getrusage 99:sysinfo 100:times
102:getuid 104:getgid 107:geteuid 108:getegid 110:getppid 111:getpgrp 115:getgroups 118:getresuid
120:getresgid 121:getpgid 124:getsid 127:rt_sigpending 128:rt_sigtimedwait 130:rt_sigsuspend
131:sigaltstack 140:getpriority 186:gettid 201:time 202:futex 204:sched_getaffinity 217:getdents64
219:restart_syscall 228:clock_gettime 229:clock_getres 230:clock_nanosleep 231:exit_group
262:newfstatat 267:readlinkat 269:faccessat 270:pselect6 271:ppoll 273:set_robust_list 292:dup3
309:getcpu 318:getrandom 332:statx 334:rseq 439:faccessat2""".split()]


def seccomp_filter():
    """The allow-list plus argument rules (open(at), fcntl, ioctl, prlimit64): (the BPF program, its
    sock_fprog), built once before the fork; None off Linux x86_64."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        return None
    LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06  # classic BPF: load, jump if ==, if & bits, return
    ALLOW, DENY, KILL = 0x7FFF0000, 0x00050001, 0x80000000  # DENY = SECCOMP_RET_ERRNO | EPERM
    NO_SUCH_CALL = 0x00050026  # SECCOMP_RET_ERRNO | ENOSYS
    ARG = lambda i: 16 + 8 * i  # offset of the low 32 bits of argument i in struct seccomp_data

    def one_of(offset, values):  # allow if the argument word is one of values
        return [(LD, 0, 0, offset)] + [ins for v in values
                                       for ins in ((JEQ, 0, 1, v), (RET, 0, 0, ALLOW))] + [
            (RET, 0, 0, DENY)]

    def none_of_bits(offset, bits):  # allow if none of these bits is set in the argument word
        return [(LD, 0, 0, offset), (JSET, 0, 1, bits), (RET, 0, 0, DENY), (RET, 0, 0, ALLOW)]

    read_only = none_of_bits  # O_WRONLY O_RDWR O_CREAT O_TRUNC O_APPEND O_ASYNC __O_TMPFILE
    write_flags = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000 | 0o20000 | 0o20000000
    rules = {2: read_only(ARG(1), write_flags), 257: read_only(ARG(2), write_flags),  # open(at)
             # ioctl TCGETS TIOCGWINSZ FIONBIO FIOCLEX FIONCLEX
             16: one_of(ARG(1), [0x5401, 0x5413, 0x5421, 0x5450, 0x5451]),
             # fcntl F_DUPFD F_GETFD F_SETFD F_GETFL F_DUPFD_CLOEXEC, F_SETFL without O_ASYNC
             72: one_of(ARG(1), [0, 1, 2, 3, 1030])[:-1] + [
                 (JEQ, 0, 3, 4), (LD, 0, 0, ARG(2)), (JSET, 1, 0, 0o20000), (RET, 0, 0, ALLOW),
                 (RET, 0, 0, DENY)],
             # prlimit64: of this process (pid 0: a soft limit at most up to its hard one), or
             # only to read (new == NULL)
             302: [(LD, 0, 0, ARG(0)), (JEQ, 0, 2, 0), (LD, 0, 0, ARG(0) + 4), (JEQ, 4, 0, 0),
                   (LD, 0, 0, ARG(2)), (JEQ, 0, 3, 0), (LD, 0, 0, ARG(2) + 4),
                   (JEQ, 0, 1, 0), (RET, 0, 0, ALLOW), (RET, 0, 0, DENY)],
             # clone: a thread only (CLONE_THREAD, which the kernel gives only with the parent's
             # memory and signal handlers: no new process), without namespace, tracing, vfork or
             # parent flags; clone3 (flags behind a pointer, out of a filter's reach): ENOSYS,
             # so that the C library falls back on clone
             56: none_of_bits(ARG(0), NOT_A_THREAD)[:-1] + [
                 (JSET, 0, 1, CLONE_THREAD), (RET, 0, 0, ALLOW), (RET, 0, 0, DENY)],
             435: [(RET, 0, 0, NO_SUCH_CALL)]}
    prog = [(LD, 0, 0, 4), (JEQ, 1, 0, 0xC000003E), (RET, 0, 0, KILL), (LD, 0, 0, 0)]  # x86_64, nr
    prog += [ins for nr in ALLOWED for ins in ((JEQ, 0, 1, nr), (RET, 0, 0, ALLOW))]
    prog += [ins for nr, block in rules.items() for ins in [(JEQ, 0, len(block), nr)] + block]
    prog += [(RET, 0, 0, DENY)]
    code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in prog))
    return code, ctypes.create_string_buffer(struct.pack("HxxxxxxP", len(prog),
                                                         ctypes.addressof(code)))


FILTER = seccomp_filter()


def die_with_parent(parent_alive):
    """PR_SET_PDEATHSIG (after any uid change, which clears it; a fork clears it in the child):
    SIGKILL when the parent dies; exits now if it is gone already."""
    check(libc.prctl(1, _signal.SIGKILL, 0, 0, 0), "prctl")
    if not parent_alive():
        os._exit(1)


def confine(job):
    """The rlimits and the seccomp filter of this process (True if the filter is active).
    RLIMIT_NPROC counts the tasks of this uid (the run's own: a fresh uid, or the uid in a user
    namespace of its own), threads included: the two processes and THREADS threads where the
    filter refuses every clone but a thread's, none where there is no filter (no process
    either)."""
    for name, value in (("CPU", job["cpu_seconds"]), ("AS", job["memory_bytes"]),
                        ("FSIZE", job["file_bytes"]), ("CORE", 0), ("NOFILE", 32), ("MEMLOCK", 0),
                        ("MSGQUEUE", 0), ("RTPRIO", 0)):
        resource.setrlimit(getattr(resource, "RLIMIT_" + name), (value, value))
    filtered = FILTER is not None and libc.prctl(38, 1, 0, 0, 0) == 0 and (  # PR_SET_NO_NEW_PRIVS
        libc.prctl(22, 2, ctypes.addressof(FILTER[1]), 0, 0) == 0)  # PR_SET_SECCOMP, FILTER
    tasks = 2 + THREADS if filtered else 0
    resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))
    return filtered


def guard_threads(fail):
    """The test process's thread starts, wrapped: one the kernel refuses (RLIMIT_NPROC counts the
    program's threads with the test's, and a program may hold them all) calls fail(its
    RuntimeError) first, the harness's failure of the test whatever the test catches, never an
    error a test could take for the program's own (a pool helper's `except RuntimeError`)."""
    def guarded(start):
        def started(*args, **kwargs):
            try:
                return start(*args, **kwargs)
            except RuntimeError as e:
                fail(e)
                raise
        return started

    threading = sys.modules.get("threading")  # (imported already: it holds its own name for it)
    for owner, name in ((_thread, "start_new_thread"), (_thread, "start_new"),
                        (_thread, "start_joinable_thread"), (threading, "_start_new_thread"),
                        (threading, "_start_joinable_thread")):
        if getattr(owner, name, None) is not None:
            setattr(owner, name, guarded(getattr(owner, name)))


def read_exactly(fd, size):
    """size bytes from fd (fewer if it ends first)."""
    data = bytearray()
    while len(data) < size and (chunk := os.read(fd, min(size - len(data), 1 << 16))):
        data += chunk
    return bytes(data)


def watchdog(seconds):
    """The test process's CPU time from now on capped at `seconds` + 1 s (RLIMIT_CPU: SIGXCPU ends
    the run): a watchdog for C code the alarm cannot interrupt, such as a set of colliding hashes
    or the gcd of a forged Fraction, in a test, the load or the prefetch alike."""
    used, hard = sum(os.times()[:2]), resource.getrlimit(resource.RLIMIT_CPU)[1]
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (min(hard, int(used + seconds) + 1), hard))
    except (ValueError, OSError):
        pass


def crowded(items, pairs=False):
    """Whether a set or dict of these keys (items; pairs: [key, value] items, a dict's) would cost
    more than 8 comparisons a key, beyond PAIRS, to build: a key is compared with each one of its
    hash already there, inside one C call that no alarm interrupts, so keys made to share a hash
    (ints k * (2**61 - 1), tuples made to collide) cost quadratic time, up to the watchdog (a
    right program's numbers fit in PAIRS: 2,000 powers of 2 (61 hashes), the 1,024 tuples of -1
    and -2 (one hash)). Their
    hashes are counted first, in linear time (the test process's sandbox_values.py:filled refuses
    such a container), but for strs alone (of random hashes) or ints alone between -SMALL and SMALL
    (each its own hash, but -1's: -2)."""
    size = len(items)
    if size * (size - 1) // 2 <= 8 * size + PAIRS:  # (all of one hash cost no more)
        return False
    keys = list(map(FIRST, items)) if pairs else items
    kinds = set(map(type, keys))
    if kinds == {str} or kinds == {int} and -SMALL < min(keys) and max(keys) < SMALL:
        return False
    spare = size - len(set(map(hash, keys)))  # (keys whose hash one before them has)
    if spare * (spare + 1) // 2 <= 8 * size + PAIRS:
        return False
    counts = {}
    _count_elements(counts, map(hash, keys))  # (how many keys of each hash)
    squares = sum(map(mul, counts.values(), counts.values()))
    return (squares - size) // 2 > 8 * size + PAIRS  # (the pairs of keys of one hash)


def reap(seconds):
    """Wait, at most `seconds`, for the program's process (this process's only child) to end, so
    that no zombie is left to an init that does not reap (a trainer that is pid 1 of a container);
    one still running then (a program that ignores the end of its requests) is killed with the
    group by the trainer, which reaps it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        time.sleep(0.002)


class Capped(io.RawIOBase):
    """The file under sys.stdout or sys.stderr: keeps the first `room` bytes written and drops the
    rest without an error (past RLIMIT_FSIZE a write would raise OSError in the print that plain
    Python makes; the caller reads only the first few KB anyway)."""

    def __init__(self, fd, room):
        super().__init__()
        self.fd, self.room = fd, room

    def writable(self):
        return True

    def fileno(self):
        return self.fd

    def write(self, data):
        size = len(data)
        try:
            while self.room > 0 and data and (sent := WRITE(self.fd, data[:self.room])):
                data, self.room = data[sent:], self.room - sent
        except OSError:
            self.room = 0
        return size


def capped_streams(room):
    """sys.stdout and sys.stderr (and their __stdout__/__stderr__) on Capped files of `room`
    bytes, each as the interpreter made it (encoding, errors, stderr line-buffered)."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        stream = io.TextIOWrapper(io.BufferedWriter(Capped(fd, room)), encoding=old.encoding,
                                  errors=old.errors, line_buffering=name == "stderr")
        setattr(sys, name, stream)
        setattr(sys, "__%s__" % name, stream)
