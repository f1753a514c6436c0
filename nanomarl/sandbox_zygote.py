"""sandbox_zygote.py: the zygote, one long-lived `python -I -S -B` per trainer process (started at
its first sandboxed run) that holds the sandbox's harness loaded (sandbox.py's MODULES, the
compiler warmed up) and forks each run's test process, which then goes on exactly as a fresh
process goes on once it has loaded the harness: sandbox_child.py:main, in a session and process
group of its own, with the run's own descriptors in the same roles (stdin a write-only /dev/null,
stdout and stderr the test process's files, the job's pipe, the report's, the program's process's
two files). Why: a fresh interpreter's start and the harness's load cost a run more than its own
work; a fork of a process that has done them costs little. sandbox.py:run_tests_in_sandbox with
zygote=False keeps the plain path (a fresh interpreter a run), which gives the same results.

How. The trainer (its threads, several runs at a time) and the zygote share a Unix socket pair of
packets: a request is one byte with the run's seven descriptors and one end of a socket pair of
the run's own (its channel) attached (SCM_RIGHTS). The zygote forks; the child puts the seven in
place (0 to 6), closes every other descriptor and returns into the boot script, which calls
main() as sandbox.py's BOOT does. On the channel the zygote tells the child's pid, then its exit
status once it has ended (seen through a pidfd, the child left unreaped), and reaps it only when
the trainer says it is done with it: after the trainer's killpg, so that the group's id (the
child's pid) cannot have gone to another process before it (Forked). The zygote is single-threaded
(a fork of a process with threads is unsafe) and imports nothing a fresh process lacks but _socket
(gone from each child's sys.modules; its module object stays, unlisted). It ends with the trainer:
it watches the trainer's pidfd and its socket's end (not PR_SET_PDEATHSIG, which fires when the
thread that started it ends, a thread of a parallel_map's pool), and the trainer kills it at its
exit; its children end with it (the test process's PR_SET_PDEATHSIG is the zygote's). A zygote
that died is started anew at the next run; where none can run (no pidfd_open: Linux before 5.3),
every run takes the plain path. What a child has that a fresh process has not: the zygote's
command line in sys.orig_argv, the garbage collector's counts, descriptors numbered 0 to 6.

Security: what a fork shares that a fresh process had of its own.
  1. Python's hash seed and the memory layout (ASLR) are one for all the runs of a zygote. Within
     a run the test process and the program's process share both already (the program's process
     is a fork of the test process's, by way of the middle one, with no exec:
     sandbox_layers.py:fork_program), and the program reads both in its own process (the seed's key
     with ctypes, _Py_HashSecret; the layout from id() and its own addresses): neither is a secret
     any layer keeps from it, and in every run the test process, the one its answers reach, has the
     seed and layout the program has. What the zygote adds is that they stay the same from one run
     to the next; but nothing of a run outlives it (3), and what a program could learn of them in
     one run it learns anew in the next. sandbox_layers.py:crowded counts the hashes of every set or
     dict of an answer but one of strs alone (or of ints each its own hash): that exemption rests on
     SipHash's collisions being out of reach (two strs of one 64-bit hash cost some 2^32 hashes,
     the thousand or more of one hash that would pass PAIRS far more, the key known or not), not
     on the seed being a secret, which it is not from the program.
  2. Random state: the harness imports no random (a context's or a program's import after the fork
     seeds it anew; random reseeds itself in a fork's child anyway: os.register_at_fork); os.urandom
     and secrets read the kernel's; the trainer makes each run's nonce.
  3. Nothing persists from one run to the next. The zygote never holds a job (programs, tests,
     nonces: they go from the trainer to the test process on the job's pipe), runs no code of a
     run's and hears from a child only its exit status (waitid). Each child closes every descriptor
     but its run's seven, fresh from the trainer, before any untrusted code runs: it shares no open
     file (an offset, O_NONBLOCK) with another run and cannot reach the zygote's socket; its memory
     is a private copy of the zygote's (the zygote maps no shared writable memory); its
     namespaces, root, uid, rlimits and seccomp filter are its own, made by main() as in a fresh
     process.
  4. The zygote runs as the trainer's uid, outside the namespaces, as the trainer does: a program
     that could reach it (no seccomp and no namespaces: sandbox.py's What remains (e)) could reach
     the trainer itself."""
import atexit
import marshal
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

ZYGOTES = {}  # the harness's code -> (the trainer's pid, the zygote's Popen, the trainer's end)
LOCK = threading.Lock()  # (one thread starts a zygote, and ends a dead one, at a time)
os.register_at_fork(after_in_child=LOCK._at_fork_reinit)  # (a fork of the trainer: free in it)
PLAIN = []  # why no zygote can run here (then every run takes the plain path), once found
REAPED_SECONDS = 5.0  # the longest a run waits for the zygote to reap its killed test process


def serve():
    """The zygote's loop, run in the zygote once BOOT has loaded the harness (its code is sent
    there marshalled: it uses no name of this module's): a request's child is forked at once, its
    pid told on its channel, then its exit status once it has ended; it is reaped once the
    trainer is done with it (a byte on the channel, or its end). Returns only in a child, its
    descriptors in place and sys.argv as BOOT's, for the boot script to call main(); the zygote
    itself exits once the trainer has ended (its pidfd, or its socket's end)."""
    import os, select, sys  # (the harness has them loaded already)
    known = set(sys.modules)
    import _socket
    added = set(sys.modules) - known  # (gone from each child's sys.modules: a fresh one lacks it)
    zygote, parent, seven = os.getpid(), int(sys.argv[3]), 7
    os.close(int(sys.argv[1]))  # the harness's pipe, read to its end
    requests = _socket.socket(fileno=int(sys.argv[2]))
    trainer = os.pidfd_open(parent)
    if os.getppid() != parent:  # (it ended before its pidfd opened)
        os._exit(0)
    compile("", "<boot>", "exec", dont_inherit=True, optimize=0)  # (main's warm-up: once for all)
    poller, runs = select.poll(), {}  # runs: a run's pidfd or channel -> the run (a dict)
    poller.register(requests.fileno(), select.POLLIN)
    poller.register(trainer, select.POLLIN)

    def received():
        """A request's descriptors (its seven and its channel), or None where it has none."""
        data, ancillary, _, _ = requests.recvmsg(1, _socket.CMSG_SPACE(4 * 16))
        if not data:  # the trainer's end is closed: it has ended
            os._exit(0)
        fds = [fd for level, kind, items in ancillary
               if (level, kind) == (_socket.SOL_SOCKET, _socket.SCM_RIGHTS)
               for fd in memoryview(items)[:len(items) // 4 * 4].cast("i")]
        if len(fds) == seven + 1:
            return fds
        for fd in fds:
            os.close(fd)

    def placed(fds):
        """In the child: its session; the seven in place (0-6), every other descriptor closed
        (the zygote's socket, other runs' channels and pidfds), sys.argv and sys.modules as a
        fresh process's."""
        requests.detach()  # (its descriptor is closed below, by number)
        os.setsid()
        for name in added:
            del sys.modules[name]
        top = max(seven, *fds) + 1
        for k, fd in enumerate(fds[:seven]):  # (out of each other's way first)
            os.dup2(fd, top + k)
        for k in range(seven):
            os.dup2(top + k, k)
        os.closerange(seven, 1 << 30)
        sys.argv[:] = ["-c", "3", "4", str(zygote), "5", "6"]  # (BOOT's, the parent the zygote)

    def tell(run, number):
        try:
            os.write(run["channel"], b"%d\n" % number)
        except OSError:  # (the trainer's end is closed: the channel's event says it is done)
            pass

    try:
        while True:
            ready = dict(poller.poll())  # (one event a poll: a descriptor closed below is never
            if trainer in ready:  # taken for a new one of the same number)
                os._exit(0)
            fd = next(iter(ready))
            if fd == requests.fileno():
                fds = received()
                if fds is None:
                    continue
                pid = os.fork()
                if pid == 0:
                    placed(fds)
                    return
                for k in fds[:seven]:
                    os.close(k)
                run = dict(pid=pid, pidfd=os.pidfd_open(pid), channel=fds[seven], status=None,
                           done=False)  # (done: the trainer is done with it)
                for k in (run["pidfd"], run["channel"]):
                    runs[k] = run
                    poller.register(k, select.POLLIN)
                tell(run, pid)
                continue
            run = runs[fd]
            if fd == run["pidfd"]:  # it has ended: its status told, it left unreaped
                found = os.waitid(os.P_PID, run["pid"], os.WEXITED | os.WNOHANG | os.WNOWAIT)
                run["status"] = found.si_status if found.si_code == os.CLD_EXITED else (
                    -found.si_status)
                tell(run, run["status"])
            else:  # the trainer is done with it: a byte, or the channel's end
                run["done"] = True
            poller.unregister(fd)
            if run["status"] is not None and run["done"]:  # (the trainer's killpg is past)
                os.waitpid(run["pid"], 0)
                for k in (run["pidfd"], run["channel"]):  # (both unwatched by now)
                    del runs[k]
                    os.close(k)
    except BaseException as e:
        if os.getpid() == zygote:
            sys.excepthook(type(e), e, e.__traceback__)
    finally:
        if os.getpid() == zygote:  # never main() in the zygote
            os._exit(1)
    os._exit(1)  # (a child whose setup failed: never main() either)


SERVE = marshal.dumps(serve.__code__)


def booted(boot):
    """The zygote's boot script: sandbox.py's BOOT (boot), with serve's code, read after the
    harness's, called before main(): it returns only in a fork, whose globals are then BOOT's."""
    if boot.count("module.main()") != 1:
        raise ValueError("sandbox.py's BOOT no longer ends with module.main()")
    call = ('type(read)(marshal.loads(read(int.from_bytes(read(8), "big"))), '
            '{"__builtins__": __builtins__})()\n')
    return boot.replace("module.main()", call + "module.main()")


def started(code, boot, env):
    """The zygote of this process for this harness code (a test's changed CHILD_CODE has one of
    its own), started where there is none or it has died: (the trainer's pid, its Popen, the
    trainer's end of its socket). Called under LOCK."""
    found = ZYGOTES.get(code)
    if found and found[0] == os.getpid():
        if found[1].poll() is None:
            return found
        ended(found)
    elif found:  # (this process is a fork of the trainer's: that zygote is its parent's)
        found[2].close()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    code_read, code_write = os.pipe()
    stdin = os.open(os.devnull, os.O_WRONLY)  # (sys.stdin made as a fresh process's is)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", "-c", booted(boot), str(code_read),
             str(theirs.fileno()), str(os.getpid())], stdin=stdin, stdout=subprocess.DEVNULL,
            cwd="/", env=env, start_new_session=True, pass_fds=(code_read, theirs.fileno()))
    except BaseException:
        ours.close()
        os.close(code_write)
        raise
    finally:
        for fd in (code_read, stdin):
            os.close(fd)
        theirs.close()
    try:
        for view in (memoryview(code), memoryview(len(SERVE).to_bytes(8, "big") + SERVE)):
            while view:
                view = view[os.write(code_write, view):]
    except BrokenPipeError:  # (it died: its first request finds it so)
        pass
    finally:
        os.close(code_write)
    ZYGOTES[code] = found = (os.getpid(), proc, ours)
    return found


def ended(found):
    """A zygote of this process killed (its children die with it) and reaped, its socket closed,
    and forgotten."""
    _, proc, ours = found
    ours.close()
    proc.kill()
    proc.wait()
    for code in [code for code, other in ZYGOTES.items() if other is found]:
        del ZYGOTES[code]


@atexit.register
def stop():
    """Every zygote of this process ended, at its exit (a fork of the trainer's ends none of its
    parent's)."""
    with LOCK:
        for found in list(ZYGOTES.values()):
            if found[0] == os.getpid():
                ended(found)


def usable():
    """Whether a zygote can run here: it watches its children and the trainer through pidfds
    (Linux 5.3); where it cannot, a warning, once."""
    if not PLAIN:
        try:
            os.close(os.pidfd_open(os.getpid()))
            PLAIN.append("")
        except (AttributeError, OSError) as e:
            PLAIN.append(f"no pidfd ({e})")
            print(f"warning: sandbox: no zygote, {PLAIN[0]}: each run starts a fresh interpreter",
                  file=sys.stderr)
    return not PLAIN[0]


def forked(fds, code, boot, env):
    """A run's test process, forked by the zygote with these seven descriptors in place (the
    caller closes its own copies): a Forked, or None where no zygote can run (the plain path),
    as after a zygote that ended twice before forking."""
    for _ in range(2):  # (a zygote that died meanwhile: once more, with a new one)
        with LOCK:
            if not usable():
                return None
            found = started(code, boot, env)
        mine, theirs = socket.socketpair()
        try:
            socket.send_fds(found[2], [b"r"], [*fds, theirs.fileno()])
            proc = Forked(mine)
        except OSError:  # (it has died: its socket is closed)
            proc = None
        finally:
            theirs.close()
        if proc is not None and proc.pid is not None:
            return proc
        mine.close()
        with LOCK:  # (dead, or dying: the next try starts another)
            if ZYGOTES.get(code) is found:
                ended(found)
    with LOCK:  # (twice: then every run of this process takes the plain path)
        PLAIN[:] = ["the zygote ended twice before it forked"]
        print(f"warning: sandbox: no zygote, {PLAIN[0]}: each run starts a fresh interpreter",
              file=sys.stderr)
    return None


class Forked:
    """A run's test process as the zygote forked it, with what run_tests_in_sandbox uses of a
    Popen: pid and wait(). The zygote reaps it only once wait() without a timeout has said the
    trainer is done with it (after its killpg: until then the group's id, this pid, can go to no
    other process)."""

    def __init__(self, channel):
        self.channel, self.told, self.returncode = channel, b"", None
        self.pid = self.number(None)

    def number(self, timeout):
        """The next number the zygote tells (the pid, then the exit status); None once the
        channel has ended first (the zygote died); TimeoutExpired after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.told:
            if deadline is not None and not select.select(
                    [self.channel], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise subprocess.TimeoutExpired("the sandbox's test process", timeout)
            chunk = self.channel.recv(64)
            if not chunk:
                return None
            self.told += chunk
        line, self.told = self.told.split(b"\n", 1)
        return int(line)

    def wait(self, timeout=None):
        """Its exit status (as Popen's returncode; -SIGKILL where the zygote died first: its
        PR_SET_PDEATHSIG killed it); timeout None: the trainer is done with it (its killpg is
        past), the zygote reaps it, and this returns once it has (the zygote then closes the
        channel), as Popen.wait returns with its child reaped: no process of the run is left."""
        if timeout is None:
            try:
                self.channel.send(b"k")
            except OSError:
                pass
        if self.returncode is None:
            found = self.number(timeout)
            self.returncode = -signal.SIGKILL if found is None else found
        if timeout is None:
            deadline = time.monotonic() + REAPED_SECONDS
            try:  # (its end, or a reset: the zygote closes it with the byte above unread)
                while select.select([self.channel], [], [],
                                    max(0.0, deadline - time.monotonic()))[0]:
                    if not self.channel.recv(64):
                        break
            except OSError:
                pass
            self.channel.close()
        return self.returncode
