"""sandbox_child.py: the two processes of a sandboxed run (sandbox.py's docstring has the threat
model), and the program's side.

Executed by sandbox.py's BOOT in a fresh `python -I -S -B`, after the modules it imports: main()
reads the program's part of the job, puts up the isolation layers (sandbox_layers.py), imports the
context's modules and forks the program's process (program_side: runs the program, answers
requests), then the test process reads the tests, runs the context and the tests
(sandbox_verdicts.py:test_side: decides every verdict, never runs the program's code, writes the
report). The link between them is sandbox_link.py, the values that cross it sandbox_values.py.
These modules import only modules that are built in or cheap to load (no json, signal or site:
their imports would cost each run more than the fork)."""
import _sitebuiltins, builtins, marshal, os, select, sys

from sandbox_layers import confine, die_with_parent, drop_privileges, isolate  # sandbox.py's BOOT
from sandbox_link import (EXIT, LINK, OPS, BINARY, TestObject, TestTimeout, answer, attempt,
                          compiled, read_exactly, read_line, run, serve, write_all)
from sandbox_values import Decoder, containers, dump, error_payload, program_error, snapshot
from sandbox_verdicts import test_side


def program_side(job, requests, answers):
    """The program's process: runs the program, then answers requests until their pipe closes."""
    die_with_parent(lambda: not select.select([requests], [], [], 0)[0])  # (its pipe is not closed)
    confine(job)
    scope = {"__name__": "__main__", "__builtins__": builtins}
    refs, ids, tests, buffer = {}, {}, {}, bytearray()
    outputs, random_sent = (sys.stdout, sys.stderr), [None]

    def resolve(tag, item):
        if tag == "r" and type(item) is int and item in refs:
            return refs[item]
        if tag == "x" and type(item) is int:
            if item not in tests:
                tests[item] = TestObject(item)
            return tests[item]
        if tag == "M" and type(item) is list and len(item) == 2 and all(
                type(p) is str for p in item):
            found = sys.modules.get(item[0]) or __import__(item[0])
            for part in item[1].split(".") if item[1] else ():
                found = getattr(found, part)
            return found
        raise ValueError("malformed value")

    def refer(value, aliases):
        """A program object that is not a value: its reference (a subclass of a value's type
        travels as that type's value: its overridden methods stay here)."""
        if type(value) is TestObject:
            return '{"x":%d}' % value.handle
        for base in (str, int, float, bytes, complex, list, tuple, dict, set, frozenset):
            if isinstance(value, base):
                return dump(base(value), refer, aliases)
        if id(value) not in ids:
            refs[LINK["handles"]], ids[id(value)] = value, LINK["handles"]
            LINK["handles"] += 1
        return '{"r":%d}' % ids[id(value)]

    def next_message():
        while True:
            line = read_line(requests, buffer, 1 << 40)
            if line is None:
                EXIT(0)
            try:
                message = LINK["decode"](line)
            except Exception:
                continue
            if type(message) is list and len(message) in (5, 7) and type(message[-1]) is dict:
                return message

    def before(extra):
        for handle in extra.get("f", ()):
            if handle in refs:
                del ids[id(refs.pop(handle))]
        if type(extra.get("l")) is int:
            sys.setrecursionlimit(max(extra["l"], 100) + 50)
        if type(extra.get("rs")) is tuple:
            random = __import__("random")
            random.setstate(extra["rs"])
            random_sent[0] = extra["rs"]
        if extra.get("o"):
            sys.stdout = __import__("io").StringIO()
        if extra.get("e"):
            sys.stderr = __import__("io").StringIO()

    def after(extra):
        reply = {}
        if extra.get("o") and type(sys.stdout).__name__ == "StringIO":
            reply["o"], sys.stdout = sys.stdout.getvalue(), outputs[0]
        if extra.get("e") and type(sys.stderr).__name__ == "StringIO":
            reply["e"], sys.stderr = sys.stderr.getvalue(), outputs[1]
        if random_sent[0] is not None and "random" in sys.modules:
            state = sys.modules["random"].getstate()
            if state != random_sent[0]:
                reply["rs"] = random_sent[0] = state
        for stream in outputs:
            try:
                stream.flush()
            except BaseException:
                pass
        return reply

    def content(container):
        return (dict(container) if isinstance(container, dict) else set(container)
                if type(container) is set else bytes(container) if type(container) is bytearray
                else list(container))

    def ops(op, target, a, b, extra):
        """-> (the answer's value as JSON text, its write-backs: [[k, the new contents of the
        call's k-th argument container], ...] for those the call changed)."""
        if op == "get":
            if type(target) is not str or target not in scope:
                raise NameError(f"name {target!r} is not defined")
            return dump(scope[target], refer), ""
        if type(target) is not int or target not in refs:
            raise TypeError("a stale or malformed reference")
        value = refs[target]
        if op == "attr" and type(a) is str:
            return dump(getattr(value, a), refer), ""
        if op == "setattr" and type(a) is str:
            return dump(setattr(value, a, b), refer), ""
        if op == "next" and type(a) is int:
            items, end = [], None
            try:
                for _ in range(max(1, min(a, 256))):
                    items.append(next(value))
            except StopIteration:
                end = "stop"
            except Exception as e:
                end = error_payload(e)
            return dump([items, end], refer), ""
        if op == "op" and a == "setitem" and type(b) is list and len(b) == 2:
            value[b[0]] = b[1]
            return "null", ""
        if op == "op" and a in OPS:
            args = [b] if a in BINARY or a == "getitem" else b if type(b) is list else []
            return dump(OPS[a](value, *args), refer), ""
        if op == "call" and type(a) is list and type(b) is dict:
            numbered = containers(a + list(b.values()), [])
            before_call = [snapshot(c) for c in numbered]
            result = value(*a, **{str(k): v for k, v in b.items()})
            aliases = {id(c): (k, c) for k, c in enumerate(numbered)}
            writes = ",".join("[%d,%s]" % (k, dump(content(c), refer, aliases))
                              for k, c in enumerate(numbered) if snapshot(c) != before_call[k])
            return dump(result, refer, aliases), writes
        raise TypeError("no such operation: " + str(op)[:20])

    def answer_with(seq, status, payload, extra):
        if status != "v":
            return answer(seq, status, payload, extra)
        text, writes = payload
        reply = dump(extra, refer)
        if writes:
            reply = reply[:-2] + ("," if extra else "") + '["w",[' + writes + "]]]}"
        data = '[%d,"a","v",%s,%s]' % (seq, text, reply)
        if len(data) > LINK["limit"]:
            return answer(seq, "e", ValueError(f"an answer of {len(data)} bytes"), {})
        write_all(answers, b"\n" + data.encode() + b"\n")

    LINK.update(side="program", out=answers, refer=refer, ops=ops, before=before, after=after,
                next=next_message, answered=program_answered, gone="", handles=0,
                limit=job["answer_bytes"], decode=Decoder(resolve), answer=answer_with)
    code = compiled(job["program"], "<program>")
    status, payload = attempt(lambda: run(code, scope), job["timeout"])
    answer(0, status, None if status == "v" else payload, after({}))
    while True:
        message = next_message()
        if message[1] == "q":
            serve(message)


def program_answered(message):
    """The test process's answer to a request of the program's (a callback's value)."""
    _, _, status, payload, _ = message
    if status == "v":
        return payload
    if status == "e" and type(payload) is list and len(payload) == 3:
        if payload[0] == "StopIteration":
            raise StopIteration
        raise program_error(*payload)
    raise TestTimeout()


def main():
    job_fd, report_fd, parent = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    outputs = int(sys.argv[4]), int(sys.argv[5])  # the program's process's stdout and stderr
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
    # the context's modules are imported before the fork (the program's process inherits them);
    # the context itself runs in the test process only, after the fork, so none of its objects
    # (a random.Random() of a helper) exists in the program's process
    for module in job["preload"]:
        attempt(lambda: __import__(module), job["timeout"])
    requests, answers = os.pipe(), os.pipe()
    try:
        child = os.fork()
    except OSError:  # no program's process: the test process reads the end of its answers
        child = -1
    if child == 0:  # the program's process: pid 1 of the new PID namespace
        for fd, target in zip(outputs, (1, 2)):  # not the files the test process writes
            os.dup2(fd, target)
        for fd in (job_fd, report_fd, requests[1], answers[0], *outputs):
            os.close(fd)
        try:
            program_side(job, requests[0], answers[1])
        finally:  # never back into the test process's code
            os._exit(1)
    for fd in (requests[0], answers[1], *outputs):
        os.close(fd)
    layers = [b"namespaces " + isolated, b"unprivileged " + (b"1" if unprivileged else b"0")]
    test_side(job, (job_fd, report_fd, requests[1], answers[0]), layers, child)
