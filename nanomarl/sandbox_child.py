"""sandbox_child.py: the two processes of a sandboxed run (sandbox.py's docstring has the threat
model).

Executed by sandbox.py's BOOT in a fresh `python -I -S -B`: main() reads the program's part of the
job, puts up the isolation layers (sandbox_layers.py), runs the trusted context and forks the
program's process (program_side: runs the program, answers requests for values), then reads the
tests and runs them (test_side: decides every verdict, never runs the program's code, writes the
report). It imports only modules that are built in or cheap to load (no json, signal or site:
their imports would cost each run more than the fork)."""
import _json, _signal, _sitebuiltins, builtins, marshal, os, select, sys, time

from sandbox_layers import confine, die_with_parent, drop_privileges, isolate  # sandbox.py's BOOT


class TestTimeout(BaseException):  # not an Exception: `except Exception` does not swallow it
    pass


ALARM = [False]  # armed: the alarm raises TestTimeout only inside attempt()


def on_alarm(signum, frame):
    if ALARM[0]:
        raise TestTimeout()


def attempt(fn, seconds):
    """fn() under a wall-clock alarm -> ("v", its value) | ("t", None) | ("e", the exception)."""
    _signal.signal(_signal.SIGALRM, on_alarm)
    _signal.setitimer(_signal.ITIMER_REAL, max(seconds, 0.001))
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
        _signal.setitimer(_signal.ITIMER_REAL, 0)


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
    """The JSON decoder's object hook: a tagged tuple, set, dict (or, with resolve, a reference)."""
    (tag, items), = tagged.items() if len(tagged) == 1 else [(None, None)]
    if type(items) is list and tag in ("t", "s", "d"):
        return {"t": tuple, "s": set, "d": dict}[tag](items)
    if type(items) is list and tag == "r" and resolve:
        return resolve(items)
    raise ValueError("malformed value")


def dump(data):
    """The JSON text of plain()'s data."""
    if data is None or data is True or data is False:
        return "null" if data is None else "true" if data else "false"
    if type(data) is float:
        text = repr(data)
        return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(text, text)
    if type(data) is str:
        return _json.encode_basestring_ascii(data)
    if type(data) is list:
        return "[" + ",".join(map(dump, data)) + "]"
    if type(data) is dict:
        return "{" + ",".join(dump(str(k)) + ":" + dump(v) for k, v in data.items()) + "}"
    return repr(int(data))


class Decoder:
    """JSON text -> plain values (json.loads with `object_hook`, on json's own C scanner)."""
    strict, object_pairs_hook, parse_float, parse_int = True, None, float, int
    parse_constant = {"NaN": float("nan"), "Infinity": float("inf"),
                      "-Infinity": float("-inf")}.__getitem__

    def __init__(self, object_hook):
        self.object_hook = object_hook
        self.scan = _json.make_scanner(self)

    def __call__(self, line):
        text = line.decode()
        value, end = self.scan(text, 0)
        if end != len(text):
            raise ValueError("extra data")
        return value


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


LINK = dict(seq=0, gone="has not started", buffer=bytearray())  # the test process's pipe ends


def gone(why):
    LINK["gone"] = LINK["gone"] or why
    return ProgramError("the program's process " + LINK["gone"])


def receive(seq, path=None):
    """The answer to request seq (other lines are ignored): a plain value, a Remote (for a `get`
    of path), or the program's exception raised here ("t": TestTimeout)."""
    while True:
        line = read_line(LINK["answers"], LINK["buffer"], LINK["limit"])
        if line is None:
            raise gone("has ended or sent an over-long answer")
        try:
            got, status, payload = LINK["decode"](line)
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
        raise gone("")
    LINK["seq"] = seq = LINK["seq"] + 1
    seconds = _signal.getitimer(_signal.ITIMER_REAL)[0] or LINK["timeout"]
    data = dump([seq, op, path, plain(list(args)), plain(dict(kwargs or {})), seconds])
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
    die_with_parent(lambda: not select.select([requests], [], [], 0)[0])  # (its pipe is not closed)
    confine(job)
    write, limit, outputs = os.write, job["answer_bytes"], (sys.stdout, sys.stderr)
    scope = {"__name__": "__main__", "__builtins__": builtins}

    def resolve(path):
        if type(path) is not list or not path or any(type(p) is not str for p in path):
            raise TypeError("a malformed path")
        if path[0] not in scope:
            raise NameError(f"name '{path[0]}' is not defined")
        value = scope[path[0]]
        for name in path[1:]:
            value = getattr(value, name)
        return value

    decode, peek = Decoder(lambda tagged: unplain(tagged, resolve)), Decoder(None)

    def serve(line):  # -> ("v", plain data) | ("r", None)
        _, op, path, args, kwargs, _ = decode(line)
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
            data = dump([seq, status, payload])
        except BaseException as e:
            data = dump([seq, "e", ["ValueError", describe(e)[:300]]])
        if len(data) > limit:
            data = dump([seq, "e", ["ValueError", f"an answer of {len(data)} bytes"]])
        data = b"\n" + data.encode() + b"\n"  # on a line of its own, whatever the program wrote
        while data:
            data = data[write(answers, data):]

    code = compiled(job["program"], "<program>")
    status, payload = attempt(lambda: run(code, scope), job["timeout"])
    answer(0, status, payload)
    buffer = bytearray()
    while (line := read_line(requests, buffer, 1 << 40)) is not None:
        request = peek(line)  # [seq, op, path, args, kwargs, seconds]
        status, payload = attempt(lambda: serve(line), request[5])
        answer(request[0], *(payload if status == "v" else (status, payload)))
    os._exit(0)


def test_side(job, fds, layers, scope, context, child):
    """The test process: reads the tests, waits for the program to load, runs each test (after
    the context, run before the fork), writes the report, and reaps the program's process."""
    job_fd, report_fd, requests, answers = fds
    layers.append(b"seccomp " + (b"1" if confine(job) else b"0"))
    tests_job, timeout = marshal.loads(read_exactly(job_fd, 1 << 40)), job["timeout"]
    os.close(job_fd)
    nonce = tests_job["nonce"].encode()
    LINK.update(requests=requests, answers=answers, timeout=timeout, limit=job["answer_bytes"],
                decode=Decoder(unplain), gone="")
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
    os.close(requests)  # the program's process reads the end of its requests and exits
    reap(child, 0.5)
    os._exit(0)


def reap(child, seconds):
    """Wait, at most `seconds`, for the program's process to end, so that no zombie is left to an
    init that does not reap (a trainer that is pid 1 of a container); one still running then
    (a program that ignores the end of its requests) is killed with the group by the trainer."""
    deadline = time.monotonic() + seconds
    while child > 0 and time.monotonic() < deadline:
        try:
            if os.waitpid(child, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        time.sleep(0.002)


def read_exactly(fd, size):
    """size bytes from fd (fewer if it ends first)."""
    data = bytearray()
    while len(data) < size and (chunk := os.read(fd, min(size - len(data), 1 << 16))):
        data += chunk
    return bytes(data)


def main():
    job_fd, report_fd, parent = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    size = int.from_bytes(read_exactly(job_fd, 8), "big")
    job = marshal.loads(read_exactly(job_fd, size))  # the program's part; the tests after the fork
    for name in ("exit", "quit"):  # as a normal interpreter's site module (-S skipped it)
        setattr(builtins, name, _sitebuiltins.Quitter(name, "Ctrl-D (i.e. EOF)"))
    try:
        isolate()
        isolated = b"1"
    except OSError as e:
        isolated = b"0 " + str(e).encode()[:200]
        os.chdir("/")
    unprivileged = drop_privileges(isolated == b"1")
    die_with_parent(lambda: os.getppid() == parent)
    # the trusted context (the prompt's imports and helpers) runs once, before the fork: the
    # program's process inherits its imports, the test process keeps its scope
    scope = Scope(__name__="__main__", __builtins__=builtins)
    context = attempt(lambda: run(compiled(job["context"], "<context>"), scope), job["timeout"])
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
    test_side(job, (job_fd, report_fd, requests[1], answers[0]), layers, scope, context, child)


if __name__ == "__main__":
    main()
