"""sandbox_child.py: what runs inside the sandbox (sandbox.py's docstring has the threat model).

`python -I -S -B sandbox_child.py JOB_FD REPORT_FD TRAINER_PID` reads the program's part of the job,
puts up the isolation layers, forks the program's process (program_side: runs the program, answers
requests for values), then reads the tests and runs them (test_side: decides every verdict, never
runs the program's code, writes the report)."""
import builtins, ctypes, glob, json, os, resource, select, signal, site, struct, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
RDONLY, NOSUID, NODEV, NOEXEC, REMOUNT, BIND, REC, PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
NEWNS, NEWUTS, NEWIPC, NEWUSER = 0x20000, 0x4000000, 0x8000000, 0x10000000  # CLONE_NEW*
NEWPID, NEWNET = 0x20000000, 0x40000000


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
    """New mount, network, IPC, UTS, PID (and, if not root, user) namespaces; the root becomes an
    empty read-only tmpfs with read-only binds of /usr, the system libraries and the standard
    library, site-packages hidden. The next child is pid 1 of the new PID namespace."""
    uid, gid = os.getuid(), os.getgid()
    flags = NEWNS | NEWNET | NEWIPC | NEWUTS | NEWPID | (NEWUSER if uid else 0)
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
    hidden = (glob.glob(root + "/usr/lib/python3*/*-packages")
              + glob.glob(root + "/usr/local/lib/python3*/*-packages"))
    for path in hidden + [root + p + "/site-packages" for p in sys.path]:
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", RDONLY | NOSUID | NODEV | NOEXEC, "size=4k,mode=555")
    mount(None, root, None, REMOUNT | RDONLY | NOSUID | NODEV)
    os.chdir(root)
    check(libc.syscall(155, b".", b"."), "pivot_root")  # the old root now lies on the new one...
    check(libc.umount2(b".", 2), "umount")  # ...and is detached (MNT_DETACH): out of reach
    os.chdir("/")


def drop_privileges(isolated):
    """Root: a fresh uid/gid (2e9 + pid) without supplementary groups; everyone: no capabilities."""
    def others_can_read(path):  # without namespaces the new uid must still reach the stdlib
        ancestors = [path[:i] or "/" for i in range(len(path)) if path[i] == "/"]
        return (os.stat(path).st_mode & 0o005 == 0o005
                and all(os.stat(a).st_mode & 0o001 for a in ancestors))

    if os.getuid() == 0 and (isolated or all(others_can_read(p) for p in sys.path
                                             if os.path.isdir(p))):
        ident = 2000000000 + os.getpid()
        os.setgroups([])
        os.setresgid(ident, ident, ident)
        os.setresuid(ident, ident, ident)
    header = struct.pack("Ii", 0x20080522, 0)
    check(libc.syscall(126, header, bytes(24)), "capset")  # no capabilities left
    return os.geteuid() != 0


# x86_64 system calls a pure-Python program needs (everything else fails with EPERM)
ALLOWED = [int(call.split(":")[0]) for call in """
0:read 1:write 3:close 4:stat 5:fstat 6:lstat 7:poll 8:lseek 9:mmap 10:mprotect 11:munmap 12:brk
13:rt_sigaction 14:rt_sigprocmask 15:rt_sigreturn 17:pread64 18:pwrite64 19:readv 20:writev
21:access 23:select 24:sched_yield 25:mremap 28:madvise 32:dup 33:dup2 34:pause 35:nanosleep
36:getitimer 37:alarm 38:setitimer 39:getpid 60:exit 63:uname 78:getdents 79:getcwd 80:chdir
81:fchdir 89:readlink 96:gettimeofday 97:getrlimit 98:getrusage 99:sysinfo 100:times 102:getuid
104:getgid 107:geteuid 108:getegid 110:getppid 111:getpgrp 115:getgroups 118:getresuid
120:getresgid 121:getpgid 124:getsid 127:rt_sigpending 128:rt_sigtimedwait 130:rt_sigsuspend
131:sigaltstack 140:getpriority 186:gettid 201:time 202:futex 204:sched_getaffinity 217:getdents64
219:restart_syscall 228:clock_gettime 229:clock_getres 230:clock_nanosleep 231:exit_group
262:newfstatat 267:readlinkat 269:faccessat 270:pselect6 271:ppoll 292:dup3 309:getcpu
318:getrandom 332:statx 439:faccessat2""".split()]


def install_seccomp():
    """The allow-list plus argument rules (open(at), fcntl, ioctl, prlimit64); True if active."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        return False
    LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06  # classic BPF: load, jump if ==, if & bits, return
    ALLOW, DENY, KILL = 0x7FFF0000, 0x00050001, 0x80000000  # DENY = SECCOMP_RET_ERRNO | EPERM
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
             302: [(LD, 0, 0, ARG(2)), (JEQ, 0, 3, 0), (LD, 0, 0, ARG(2) + 4),  # prlimit64:
                   (JEQ, 0, 1, 0), (RET, 0, 0, ALLOW), (RET, 0, 0, DENY)]}  # new == NULL
    prog = [(LD, 0, 0, 4), (JEQ, 1, 0, 0xC000003E), (RET, 0, 0, KILL), (LD, 0, 0, 0)]  # x86_64, nr
    prog += [ins for nr in ALLOWED for ins in ((JEQ, 0, 1, nr), (RET, 0, 0, ALLOW))]
    prog += [ins for nr, block in rules.items() for ins in [(JEQ, 0, len(block), nr)] + block]
    prog += [(RET, 0, 0, DENY)]
    code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in prog))
    fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxP", len(prog),
                                                    ctypes.addressof(code)))  # sock_fprog
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    return libc.prctl(22, 2, ctypes.addressof(fprog), 0, 0) == 0  # PR_SET_SECCOMP, FILTER


def confine(job, parent_alive):
    """Dies with its parent, then the rlimits and the seccomp filter of this process."""
    check(libc.prctl(1, signal.SIGKILL, 0, 0, 0), "prctl")  # PR_SET_PDEATHSIG
    if not parent_alive():
        os._exit(1)
    for name, value in (("CPU", job["cpu_seconds"]), ("AS", job["memory_bytes"]), ("NPROC", 0),
                        ("FSIZE", job["file_bytes"]), ("CORE", 0), ("NOFILE", 32), ("MEMLOCK", 0),
                        ("MSGQUEUE", 0), ("RTPRIO", 0)):
        resource.setrlimit(getattr(resource, "RLIMIT_" + name), (value, value))
    return install_seccomp()


class TestTimeout(BaseException):  # not an Exception: `except Exception` does not swallow it
    pass


ALARM = [False]  # armed: the alarm raises TestTimeout only inside attempt()


def on_alarm(signum, frame):
    if ALARM[0]:
        raise TestTimeout()


def attempt(fn, seconds):
    """fn() under a wall-clock alarm -> ("v", its value) | ("t", None) | ("e", the exception)."""
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        ALARM[0] = True
        value = fn()
        ALARM[0] = False
        return "v", value
    except TestTimeout:
        return "t", None
    except BaseException as e:
        return "e", e
    finally:
        ALARM[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)


def compiled(source, name):
    """The code object, compiled before anything runs (no flag changed later applies), or the
    compiler's error (SyntaxError, ValueError for a null byte, ...)."""
    try:
        return compile(source, name, "exec", dont_inherit=True, optimize=0)
    except BaseException as e:
        return e


def run(code, scope):
    if isinstance(code, BaseException):
        raise code
    exec(code, scope, scope)


def plain(value):
    """value as JSON data of exact plain types (tuples, sets, dicts tagged); TypeError otherwise."""
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is float or kind is str:
        return value
    if kind is list:
        return [plain(v) for v in value]
    if kind is tuple or kind is set:
        return {"t" if kind is tuple else "s": [plain(v) for v in value]}
    if kind is dict:
        return {"d": [[plain(k), plain(v)] for k, v in value.items()]}
    if kind is Remote:
        return {"r": value._Remote__path}
    raise TypeError("not a plain value: " + kind.__name__)


def unplain(tagged, resolve=None):
    """json's object_hook: a tagged tuple, set, dict (or, with resolve, a reference) back."""
    (tag, items), = tagged.items() if len(tagged) == 1 else [(None, None)]
    if type(items) is list and tag in ("t", "s", "d"):
        return {"t": tuple, "s": set, "d": dict}[tag](items)
    if type(items) is list and tag == "r" and resolve:
        return resolve(items)
    raise ValueError("malformed value")


def read_line(fd, buffer, limit):
    """The next line (without its newline) from fd; None at the end or past limit bytes."""
    start = 0
    while (end := buffer.find(b"\n", start)) < 0:
        if len(buffer) > limit or not (chunk := os.read(fd, 1 << 16)):
            return None
        start = len(buffer)
        buffer += chunk
    line = bytes(buffer[:end])
    del buffer[:end + 1]
    return line


def describe(error):
    """'Name: message' of an exception (an answer's as the program's process gave it)."""
    try:
        return getattr(error, "program_text", None) or type(error).__name__ + ": " + str(error)
    except BaseException:
        return type(error).__name__


class ProgramError(Exception):
    """The program's exception (or the end of its process), raised in the test process."""


def program_error(name, message):
    """The builtin exception class of that name (an Exception, not a StopIteration), else a
    ProgramError; described as the program's process described it."""
    kind = getattr(builtins, name, None) if name.isidentifier() else None
    if not (isinstance(kind, type) and issubclass(kind, Exception)) or issubclass(
            kind, (StopIteration, StopAsyncIteration)):
        kind = ProgramError
    try:
        error = kind(message)
    except Exception:
        error = ProgramError(message)
    error.program_text = name[:100] + ": " + message[:300]
    return error


LINK = dict(seq=0, gone="", buffer=bytearray())  # the test process's end of the pipes


def gone(why):
    LINK["gone"] = LINK["gone"] or "the program's process " + why
    return ProgramError(LINK["gone"])


def receive(seq, path=None):
    """The answer to request seq (other lines are ignored): a plain value, a Remote (for a `get`
    of path), or the program's exception raised here ("t": TestTimeout)."""
    while True:
        line = read_line(LINK["answers"], LINK["buffer"], LINK["limit"])
        if line is None:
            raise gone("has ended or sent an over-long answer")
        try:
            got, status, payload = json.loads(line, object_hook=unplain)
        except Exception:
            continue
        if type(got) is int and got == seq:
            break
    if status == "v":
        return payload
    if status == "r" and path:
        return Remote(path)
    if status == "t":
        raise TestTimeout()
    if status == "e" and type(payload) is list and [type(p) for p in payload] == [str, str]:
        raise program_error(*payload)
    raise ProgramError("a malformed answer")


def ask(op, path, args=(), kwargs=None):
    """A request to the program's process ("get" path, or "call" it), with the time left of this
    test; its answer (see receive)."""
    if LINK["gone"]:
        raise ProgramError(LINK["gone"])
    LINK["seq"] = seq = LINK["seq"] + 1
    seconds = signal.getitimer(signal.ITIMER_REAL)[0] or LINK["timeout"]
    data = json.dumps([seq, op, path, plain(list(args)), plain(dict(kwargs or {})), seconds])
    data, sent = data.encode() + b"\n", 0
    try:
        while sent < len(data):
            sent += os.write(LINK["requests"], data[sent:])
    except OSError:
        raise gone("has ended") from None
    finally:
        if 0 < sent < len(data):  # interrupted mid-request: the stream is out of step
            gone("stopped reading")
    return receive(seq, path if op == "get" else None)


def refuse(remote, *args):
    raise TypeError("a program object, not a plain value: " + repr(remote))


class Remote:
    """A program object that is not a plain value, by its path (a global name, then attributes): a
    test can read its attributes, call it (getting a plain value back) or pass it to a call."""
    __slots__ = ("__path",)  # mangled (_Remote__path): no attribute of the program's is hidden
    __hash__ = None
    __bool__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = refuse
    __iter__ = __len__ = __contains__ = __getitem__ = refuse

    def __init__(self, path):
        self.__path = path

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return ask("get", self.__path + [name])

    def __call__(self, *args, **kwargs):
        return ask("call", self.__path, args, kwargs)

    def __repr__(self):
        return "<program object " + ".".join(self.__path) + ">"


class Scope(dict):
    """The tests' globals: a name that neither they, the context nor the builtins define is asked
    of the program's process (a Remote is kept)."""

    def __missing__(self, name):
        if name.startswith("__") or hasattr(builtins, name):
            raise KeyError(name)
        try:
            value = ask("get", [name])
        except NameError:
            raise KeyError(name) from None
        if type(value) is Remote:
            self[name] = value
        return value


def program_side(job, requests, answers):
    """The program's process: runs the program, then answers requests until their pipe closes."""
    confine(job, lambda: not select.select([requests], [], [], 0)[0])  # the test process is there
    write, dumps, loads, limit = os.write, json.dumps, json.loads, job["answer_bytes"]
    outputs, scope = (sys.stdout, sys.stderr), {"__name__": "__main__", "__builtins__": builtins}

    def resolve(path):
        if type(path) is not list or not path or any(type(p) is not str for p in path):
            raise TypeError("a malformed path")
        if path[0] not in scope:
            raise NameError(f"name '{path[0]}' is not defined")
        value = scope[path[0]]
        for name in path[1:]:
            value = getattr(value, name)
        return value

    def serve(line):  # -> ("v", plain data) | ("r", None)
        _, op, path, args, kwargs, _ = loads(line, object_hook=lambda t: unplain(t, resolve))
        target = resolve(path)
        if op == "call":
            return "v", plain(target(*args, **kwargs))
        try:
            return "v", plain(target)
        except TypeError:
            return "r", None

    def answer(seq, status, payload):
        for stream in outputs:
            try:
                stream.flush()
            except BaseException:
                pass
        if status == "e":
            payload = [type(payload).__name__, describe(payload).partition(": ")[2][:300]]
        try:
            data = dumps([seq, status, payload], separators=(",", ":"))
        except BaseException as e:
            data = dumps([seq, "e", ["ValueError", describe(e)[:300]]])
        if len(data) > limit:
            data = dumps([seq, "e", ["ValueError", f"an answer of {len(data)} bytes"]])
        data = b"\n" + data.encode() + b"\n"  # on a line of its own, whatever the program wrote
        while data:
            data = data[write(answers, data):]

    code = compiled(job["program"], "<program>")
    status, payload = attempt(lambda: run(code, scope), job["timeout"])
    answer(0, status, payload)
    buffer = bytearray()
    while (line := read_line(requests, buffer, 1 << 40)) is not None:
        head = loads(line)
        status, payload = attempt(lambda: serve(line), head[5])
        answer(head[0], *(payload if status == "v" else (status, payload)))
    os._exit(0)


def test_side(job, fds, parent, layers):
    """The test process: reads the tests, waits for the program to load, runs the context and each
    test, writes the report."""
    job_fd, report_fd, requests, answers = fds
    layers.append(b"seccomp " + (b"1" if confine(job, lambda: os.getppid() == parent) else b"0"))
    tests_job, timeout = json.loads(read_exactly(job_fd, 1 << 40)), job["timeout"]
    os.close(job_fd)
    nonce = tests_job["nonce"].encode()
    LINK.update(requests=requests, answers=answers, timeout=timeout, limit=job["answer_bytes"])
    tests = [compiled(test, "<test %d>" % i) for i, test in enumerate(tests_job["tests"])]
    verdicts = {"v": b"1", "e": b"0", "t": b"T"}

    def message(status, error):
        text = describe(error) if status == "e" else "Timeout: test timed out" * (status == "t")
        text = text[:300].encode("utf-8", "backslashreplace")[:tests_job["message_bytes"]]
        return text.replace(b"\n", b" ").replace(b"\r", b" ")

    lines = [nonce + b" " + layer for layer in layers]
    status, error = attempt(lambda: receive(0), timeout)  # the program's load
    lines.append(nonce + b" load %s %s" % (verdicts[status], message(status, error)))
    if status == "v":
        scope = Scope(__name__="__main__", __builtins__=builtins)
        context = compiled(tests_job["context"], "<context>")
        context = attempt(lambda: run(context, scope), timeout)
        timeouts = 0
        for i, test in enumerate(tests):
            if timeouts >= tests_job["max_timeouts"]:
                break
            if context[0] != "v":
                test = ProgramError("context: " + message(*context).decode())
            status, error = attempt(lambda: run(test, scope), timeout)
            timeouts += status == "t"
            lines.append(nonce + b" test %d %s %s" % (i, verdicts[status], message(status, error)))
    report = b"\n".join(lines) + b"\n" + nonce + b" done\n"
    while report:
        report = report[os.write(report_fd, report):]
    os._exit(0)


def read_exactly(fd, size):
    """size bytes from fd (fewer if it ends first)."""
    data = bytearray()
    while len(data) < size and (chunk := os.read(fd, min(size - len(data), 1 << 16))):
        data += chunk
    return bytes(data)


def main():
    job_fd, report_fd, parent = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    size = int.from_bytes(read_exactly(job_fd, 8), "big")
    job = json.loads(read_exactly(job_fd, size))  # the program's part; the tests after the fork
    site.setquit()  # exit() and quit(), as in a normal interpreter (-S skipped the site module)
    try:
        isolate()
        isolated = b"1"
    except OSError as e:
        isolated = b"0 " + str(e).encode()[:200]
        os.chdir("/")
    unprivileged = drop_privileges(isolated == b"1")
    requests, answers = os.pipe(), os.pipe()
    try:
        child = os.fork()
    except OSError:  # no program's process: the test process reads the end of its answers
        child = -1
    if child == 0:  # the program's process: pid 1 of the new PID namespace
        for fd in (job_fd, report_fd, requests[1], answers[0]):
            os.close(fd)
        try:
            program_side(job, requests[0], answers[1])
        finally:  # never back into the test process's code
            os._exit(1)
    os.close(requests[0])
    os.close(answers[1])
    layers = [b"namespaces " + isolated, b"unprivileged " + (b"1" if unprivileged else b"0")]
    test_side(job, (job_fd, report_fd, requests[1], answers[0]), parent, layers)


if __name__ == "__main__":
    main()
