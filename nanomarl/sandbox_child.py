"""sandbox_child.py: the two processes of a sandboxed run (sandbox.py's docstring has the threat
model), and the program's side.

Executed by sandbox.py's BOOT in a fresh `python -I -S -B` (or in a fork of the trainer's zygote,
which ran BOOT up to main(): sandbox_zygote.py), after the modules it imports: main() reads the
program's part of the job, puts up the isolation layers (sandbox_layers.py), imports the
context's modules and forks the program's process (by way of a middle process: fork_program;
program_side: runs the program, answers requests), then the test process reads the tests, runs
the context and the tests (sandbox_verdicts.py:test_side: decides every verdict, never runs the
program's code, writes the report). The sandbox's modules import only modules that are built in or
cheap to load (no json, signal or site: their imports would cost each run more than the fork)."""
import _sitebuiltins, builtins, io, marshal, os, select, sys

from sandbox_ahead import drawn  # sandbox.py's BOOT
from sandbox_caught import catch, caught
from sandbox_copies import (KEPT_ITEMS, KEPT_OBJECTS, OWN_ITEMS, containers, contents, kept_entry,
                            leaves, referenced, rooms, share, snapshot, unchanged)
from sandbox_errors import crossed, crossing
from sandbox_lending import awake, lent_back, unheld, unlent
from sandbox_layers import (capped_streams, confine, die_with_parent, drop_privileges,
                            fork_program, guard_threads, isolate, read_exactly)  # sandbox.py's BOOT
from sandbox_link import (EXIT, LINK, OPS, BINARY, TestTimeout, abort, answer, arrived, attempt,
                          called, refuse, compiled, deep, overdue, read_line, run, serve,
                          state_out, state_told, taken, tidings, with_pairs, write_all)
from sandbox_patches import IMPORT, by_name, gave_back, on_arguments, quiet_null, stand_in, took_on
from sandbox_proxies import (TestObject, given, program_answered, rebuilt_copy, state,
                             test_object, urgent)
from sandbox_bases import (IDENTITY, TAKE, ancestry, applied, finalizing, kind_of, named,
                           programs, traits, value_base, valued)
from sandbox_overrides import enumerated, listed, overrides
from sandbox_remote import COPIES
from sandbox_stdlib import UNKEPT_VIEW, member_named
from sandbox_values import CONTEXT, DATETIMES, PRINTS, Decoder, dump, error_payload, raised, same
from sandbox_verdicts import test_side


def program_side(job, requests, answers):
    """The program's process: runs the program, then answers requests until their pipe closes."""
    die_with_parent(lambda: not select.select([requests], [], [], 0)[0])  # (its pipe is not closed)
    confine(job)
    quiet_null()  # (open(os.devnull, "w"): a duplicate of its stdin, a write-only /dev/null)
    scope = {"__name__": "__main__", "__builtins__": builtins}
    refs, ids, tests, buffer = {}, {}, {}, bytearray()
    clocks, marks = {}, {}  # the stand-ins of a test's frozen clocks: by handle, the mark by id
    taken_on = {}  # the patches' values the requests took on last (sandbox_patches.py:took_on)
    outputs, declared, sending, patches = (sys.stdout, sys.stderr), set(job["classes"]), [], []
    CONTEXT[0] = lambda name: name in declared and scope.get(name) or None  # (hook's "n")
    # the containers the program keeps (sandbox_copies.py): {handle: entry}, {id: handle},
    # {id: its mark}; those at rest (sandbox_lending.py:unheld); the argument containers of the
    # calls being served (numbering); the news of the kept ones for the next answer
    kept, kept_ids, kept_tags, dormant, calls, synced, next_kept = {}, {}, {}, {}, [], [], [0]

    def resolve(tag, item):
        if tag == "r" and type(item) is int and item in refs:
            LINK["reached"].append(item)  # (its release may run code once the call is over)
            return refs[item]
        if tag == "a" and type(item) is int and 0 <= item < len(numbered := called()):
            return numbered[item]  # (the k-th container of its call to a test's callback)
        if tag == "k" and type(item) is int and (item in kept or item in dormant):
            return awake(item, kept, kept_ids, kept_tags, dormant)
        if tag == "x" and type(item) is int:
            tag, item = "X", [item, None, False]
        if tag == "G" and type(item) is list and len(item) == 4 and type(item[1]) is str and (
                type(item[3]) is bool):  # a declared Enum's member: the program's own member
            if (found := member_named(scope.get(item[1]), item[2])) is not None:
                return found  # (none, or its lookup raised: the test's object, as "X")
            tag, item = "X", [item[0], item[1], item[3]]
        if tag == "X" and (found := test_object(item, tests, declared)) is not None:
            return found  # (of a class the context declares, or with its own ==, or told of)
        if tag == "Z" and type(item) is list and len(item) == 5 and type(item[0]) is int and (
                item[1] in DATETIMES and type(item[2]) is str and type(item[3]) is dict
                and type(item[4]) is dict):  # a frozen clock (sandbox_verdicts.py:frozen_class)
            if item[0] not in clocks:  # (one class: isinstance holds across requests)
                clocks[item[0]] = stand_in(*item[1:])
                marks[id(clocks[item[0]])] = '{"x":%d}' % item[0]  # (what dump marks with)
            return clocks[item[0]]
        if tag == "M" and type(item) is list and len(item) == 2 and all(
                type(p) is str for p in item):
            found = sys.modules.get(item[0]) or IMPORT(item[0])
            for part in item[1].split(".") if item[1] else ():
                found = getattr(found, part)
            return found
        if tag in ("e", "h"):  # a test's exception, exception class (sandbox_errors.py)
            return crossed(tag, item)
        # (a partial, buffer, Random, Pattern or Match; a test object's lent container)
        found = rebuilt_copy(tag, item, (kept, kept_ids, kept_tags, calls))
        if found is None:
            raise ValueError("malformed value")
        return found

    def refer(value, aliases):
        """A program object that is not a value: its reference, its class's names with it
        (sandbox_bases.py:named; the program's own subclass of a value type's ends with its
        base's: sandbox_bases.py:valued; the context's or a module's travels as its base's value;
        an exception as its payload)."""
        if issubclass(type(value), TestObject):  # (a proxy class's)
            return '{"x":%d}' % value.handle
        if id(value) in marks:  # the stand-in of a test's frozen clock: the test's class
            return marks[id(value)]
        kind, enum = type(value), sys.modules.get("enum")
        if (found := by_name(value)) is not None:  # a builtin class or function: the test's own
            return '{"M":%s}' % dump(found, None)
        # the context's class crosses as it (once a class for all an object reaches: rebuilt)
        context = sending and id(kind) in sending[0][2] or same(kind)
        if context and enum and isinstance(value, enum.Enum) and type(
                getattr(value, "_name_", None)) is str and member_named(
                kind, value._name_) is value:  # (its name leads back to it: not a forged one)
            return '{"G":[%s,%s]}' % (dump(kind.__name__, None), dump(value._name_, None))
        base = value_base(kind)
        if base is not None and (context or not programs(kind)):
            return dump(TAKE[base](value), refer, aliases)
        if isinstance(value, BaseException):  # as a raised one crosses (sandbox_values.py)
            return '{"e":%s}' % dump(error_payload(value, True), None)
        if context:
            return rebuilt(value, aliases)
        if id(value) not in ids:
            refs[LINK["handles"]], ids[id(value)] = value, LINK["handles"]
            LINK["handles"] += 1
        bits = traits(kind) | finalizing(value) | listed(kind)  # (its release may run code?)
        own = ancestry(kind)  # (neither __bool__ nor __len__: always true, as in one process)
        bits |= (own is not None and "__bool__" not in own and "__len__" not in own) << IDENTITY + 2
        text = '{"r":[%d,%s,%d,%s%s]}' % (ids[id(value)], dump(kind_of(kind), None), bits,
                                            named(kind), valued(value, base, refer, aliases))
        return crossing(value, lambda: text, refer)  # (an exception class: sandbox_errors.py)

    def next_message():
        while True:
            line = read_line(requests, buffer, 1 << 40)
            if line is None:
                EXIT(0)
            try:
                message = arrived(line, buffer)  # (its decimal context taken: a late one's too)
            except Exception:
                continue
            if type(message) is list and len(message) in (5, 7) and type(message[-1]) is dict:
                LINK["asked"] = message  # (the request served next: sandbox_ahead.py's)
                return message

    def before(extra):
        if type(extra.get("F")) is dict:  # (the context's classes' fingerprints: same)
            PRINTS.update(extra["F"])
        for handle in extra.get("f", ()):
            if handle in refs:
                del ids[id(refs.pop(handle))]
        taken(extra)  # the test's changes to the kept containers
        if type(extra.get("l")) is int:
            sys.setrecursionlimit(max(extra["l"], 100) + 50)
        for key, name in (("o", "stdout"), ("e", "stderr")):  # (after gives them back)
            if extra.get(key):
                setattr(sys, name, io.StringIO())
        saved = {}  # what the test's state replaces during this request (after puts it back)
        if "i" in extra:  # the sys.stdin the test set
            stdin = extra["i"]
            saved["i"] = sys.stdin, stdin, snapshot(stdin) if type(stdin).__module__ == "_io" else 0
            sys.stdin = stdin
        catch(extra, saved)  # (its warnings and log records, for the test process to show)
        take_on(extra, saved, taken_on)
        patches.append((extra, saved))

    def take_on(extra, saved, last=None):
        """The module attributes and builtins the test set, in force until give_back (last: the
        values a request took on last, for those it names only)."""
        if type(extra.get("p")) is list:  # the other module attributes the test set
            saved["p"] = took_on(extra["p"], last)
        if type(extra.get("b")) is dict:  # the builtins the test replaced (last: __import__ too)
            saved["b"] = {name: vars(builtins).get(name, LINK) for name in extra["b"]
                          if type(name) is str}
            for name in saved["b"]:
                setattr(builtins, name, extra["b"][name])

    def give_back(saved):
        """The builtins and module attributes take_on set, as they were before."""
        for name, value in saved.pop("b", {}).items():
            if value is LINK:
                vars(builtins).pop(name, None)
            else:
                setattr(builtins, name, value)
        gave_back(saved.pop("p", ()))

    def retake(extra):
        """A test's callback started, stopped or set a patch (its answer's "b" and "p": all in
        force now): they replace those of the request being served, for the rest of it."""
        if ("b" in extra or "p" in extra) and patches:
            give_back(patches[-1][1])
            take_on(extra, patches[-1][1])

    def after(extra):
        reply = {}
        saved = patches.pop()[1] if patches and patches[-1][0] is extra else {}
        give_back(saved)
        caught(saved, reply)
        if not patches and (found := urgent(LINK["reached"], refs, ids)):  # (the outermost's)
            reply["u"] = found
        if "i" in saved:
            sys.stdin, stdin, state = saved["i"]
            if type(stdin).__module__ == "_io" and not unchanged(state, snapshot(stdin)):
                reply["i"] = contents(stdin)
        if extra.get("o") and type(sys.stdout).__name__ == "StringIO":
            reply["o"], sys.stdout = sys.stdout.getvalue(), outputs[0]
        if extra.get("e") and type(sys.stderr).__name__ == "StringIO":
            reply["e"], sys.stderr = sys.stderr.getvalue(), outputs[1]
        for stream in outputs:
            try:
                stream.flush()
            except BaseException:
                pass
        try:
            synced[:] = [kept_news(extra)]
        except Exception:  # (the harness's own failure, no exit: all kept forgotten both sides)
            refuse("the program's changes cannot be sent")
            synced[:] = [['["d",%s]' % dump([*kept, *dormant], None)]]
            for found in (kept, kept_ids, kept_tags, dormant):
                found.clear()
        return reply

    def kept_news(extra):
        """The news of the kept containers for this request's answer: "w" the changes of a call's
        argument containers if it raised (one that returned sent them), "k" the news of the kept
        ones that changed (but its arguments: tidings, each walked under deep's limit), "n" [k,
        handle] for its k-th argument container if the program holds it now, "d" the handles of
        those it no longer reaches (none rests past an answer: unheld), whose news cannot be sent,
        or beyond KEPT_ITEMS or, the program's own returned, OWN_ITEMS (the highest first); JSON
        texts of pairs (they go out whatever the answer: sandbox_link.py:answer)."""
        numbered, before, tuples = (), None, ()
        if calls and calls[-1][0] is extra:
            _, numbered, before, tuples = calls.pop()
        marks = {id(c): '{"a":%d}' % k for k, c in enumerate(numbered)}
        pairs, texts, unsent = [], [], set()
        written = {**kept_tags, **given(tuples, extra), **marks} if before else None
        for k in range(len(numbered) if before else 0):  # (its tuples alive meanwhile: given)
            if not unchanged(before[k], snapshot(numbered[k])):
                try:
                    texts.append("[%d,%s]" % (k, deep(dump, contents(numbered[k]), refer, written)))
                except Exception:  # (nested too deep: not written back, nor kept; refused)
                    refuse("a change the program made to an argument cannot be sent")
                    unsent.add(k)
        if tuples:  # (let go first: a list inside one is referenced by the program alone)
            tuples.clear()
        candidates = [k for k in referenced(numbered) if k not in unsent]
        if not kept and not candidates and not before:
            dormant.clear()  # (an answer ends every rest, as unheld does below)
            return []
        if texts:
            pairs.append('["w",[%s]]' % ",".join(texts))
        if before:
            before.clear()  # (a traceback's frame may hold it too)
        texts, gone = tidings(marks, set(marks))
        if texts:
            pairs.append('["k",[%s]]' % ",".join(texts))
        for mine, bound in ((False, KEPT_ITEMS), (True, OWN_ITEMS)):  # (each room's own bound)
            total = rooms(kept, LINK["own"], mine)[1]
            while total > bound:  # (the highest handle first)
                gone.append(max(h for h in kept if (h in LINK["own"]) is mine))
                entry = kept.pop(gone[-1])
                total -= entry["weight"]
                del kept_ids[id(entry["object"])], kept_tags[id(entry["object"])]
        new = register(numbered, candidates)
        if numbered:
            numbered.clear()  # (its objects: now referenced by the program only, or by kept)
        for handle in unheld(kept, kept_ids, kept_tags, dormant, False).get("d", ()):
            if handle in new:
                del new[handle]
            else:
                gone.append(handle)
        if new:
            pairs.append('["n",[%s]]' % ",".join("[%d,%d]" % (k, h) for h, k in new.items()))
        if gone:
            pairs.append('["d",[%s]]' % ",".join(map(str, gone)))
        return pairs

    def numbering(extra, numbered, before, tuples=()):
        """A request's argument containers noted in calls: [extra, numbered, their snapshots
        before the call, None once the answer's "w" has their changes, its arguments' tuples
        (alive till its answer is out: given)]; a module attribute the test set to one of them is
        that container (sandbox_patches.py:on_arguments)."""
        if patches and patches[-1][0] is extra and "p" in patches[-1][1]:
            patches[-1][1]["p"] += on_arguments(extra["p"], numbered)
        calls.append([extra, numbered, before, tuples])
        return calls[-1]

    def register(numbered, candidates):
        """{handle: k} for this call's argument containers the program may hold (candidates: the
        k of those referenced but by numbered), kept from now on (those it does not hold are
        forgotten next: unreached), within KEPT_OBJECTS and KEPT_ITEMS (with the test objects'
        lent, not the program's own returned: sandbox_copies.py:rooms)."""
        new, (count, total) = {}, rooms(kept, LINK["own"], False)
        for k in reversed(candidates):  # (inner ones first: kept on their own, not nested)
            value = numbered[k]
            if id(value) in kept_ids or count >= KEPT_OBJECTS:
                continue
            entry = kept_entry(value, kept_ids)
            if total + entry["weight"] <= KEPT_ITEMS:
                count, total = count + 1, total + entry["weight"]
                handle = next_kept[0]
                next_kept[0] += 1
                kept[handle], kept_ids[id(value)] = entry, handle
                kept_tags[id(value)] = '{"k":%d}' % handle
                new[handle] = k
        return new

    def marked(box, aliases=None):
        """aliases (by default the kept containers' marks) with those of the containers of box's
        values (a list the harness alone holds) that the program still reaches, kept from now on
        (sandbox_lending.py:lent_back; not the argument containers of the calls in progress)."""
        aliases = dict(kept_tags) if aliases is None else aliases
        stop = [id(c) for level in LINK["args"] for c in level]
        stop += [id(c) for call in calls for c in call[1]]
        lent_back(box, LINK, aliases, stop, next_kept)
        return aliases

    def rebuilt(value, aliases):
        """An instance of a class the context declares, by its state, rebuilt in the test process
        (sandbox_verdicts.py:rebuilt): {"o": [k, class name]} for each, and around the first one
        met, {"W": [[{"S": [{"o": ...}, its state]}, ...], value]}, the states of all it reaches,
        those found last first (a set or dict key in a state is built once its objects are whole);
        objects met twice (a shared node, a cycle) are one, a long chain is no deep JSON."""
        root = not sending
        if root:
            sending.append(({}, [], set()))
        numbers, found, classes = sending[0]
        classes.add(id(type(value)))  # (its class is the context's: same)
        try:
            if id(value) not in numbers:
                numbers[id(value)] = LINK["made"]
                found.append((LINK["made"], value))
                LINK["made"] += 1
            text = '{"o":[%d,%s]}' % (numbers[id(value)], dump(type(value).__name__, None))
            if not root:
                return text
            states = []
            for k, item in found:  # (found grows as their states are dumped: what they reach)
                states.append('{"S":[{"o":[%d,%s]},%s]}' % (k, dump(type(item).__name__, None),
                                                           dump(state(item), refer, aliases)))
            return '{"W":[[%s],%s]}' % (",".join(reversed(states)), text)
        finally:
            if root:
                sending.clear()

    def ops(op, target, a, b, extra):
        """-> (the answer's value as JSON text, its write-backs: [[k, the new contents of the
        call's k-th argument container], ...] for those the call changed). The harness walks
        values under deep's limit (the program's own code under its own)."""
        if op == "get":
            if type(target) is not str or target not in scope:
                raise NameError(f"name {target!r} is not defined")
            return sent([scope[target]]), ""
        if type(target) is not int or target not in refs:
            raise TypeError("a stale or malformed reference")
        if op == "free":  # (its finalizer runs now, as request code: Remote.__del__)
            del ids[id(refs.pop(target))]
            return "null", ""
        value = refs[target]
        LINK["reached"].append(target)
        if op == "attr" and type(a) is str:
            if overrides(type(value), a):  # (its answer could be anything: the test fails)
                refuse(f"a program's subclass of a value type overrides its base's {a}")
                return "null", ""
            return sent([getattr(value, a)], a in COPIES), ""  # (their snapshots are never kept)
        if op == "setattr" and type(a) is str:
            numbering(extra, deep(containers, [b], []), None)  # (kept if the program holds it)
            return dump(setattr(value, a, b), refer), ""
        if op == "next" and type(a) is int:  # (its first item, and those read ahead)
            text = lambda items, end=None: refusing(lambda: deep(dump, [items, end], refer,
                                                                 deep(marked, items)))
            return text(*drawn(value, max(1, min(a, 256)), extra, text)), ""
        if op == "op" and a in OPS:
            args = [b] if a in BINARY or a == "getitem" else b if type(b) is list else []
            box = [OPS[a](value, *args)]
            return refusing(lambda: deep(dump, box.pop(), refer)), ""
        if op == "enter":  # a `with` in the test: the program's own __enter__ and __exit__
            return sent([type(value).__enter__(value)]), ""
        if op == "exit" and (a is None or (error := raised(a)) is not None):
            exited = (None, None, None) if a is None else (type(error), error, None)
            return sent([type(value).__exit__(value, *exited)]), ""
        if op in ("call", "apply") and type(a) is list and type(b) is dict:
            if op == "apply":  # a copy, a Valued's operation (sandbox_bases.py:applied): a call's
                how = a.pop(0) if a else None  # (an Enum class's protocol: enumerated)
                value = applied(value, how) if how != "enum" else (
                    lambda *key, found=value: enumerated(found, *key))
            values, count, keys = a + list(b.values()), len(a), [str(k) for k in b]
            tuples = leaves(values)  # (and those outside kept containers: the test's own back)
            if type(extra.get("m")) is list:  # the test passed one container twice
                values, numbered = deep(share, values, extra["m"])
                deep(containers, values, [], None, tuples, kept_tags)  # (as share made them)
            else:
                numbered = deep(containers, values, [], None, tuples, kept_tags)
            a.clear()  # (the request's own lists: what holds an argument after the call is the
            b.clear()  # program's, and keeps it: kept_news)
            call = numbering(extra, numbered, [snapshot(c) for c in numbered], tuples)
            box = [value(*values[:count], **dict(zip(keys, values[count:])))]  # (its result)
            aliases = {**kept_tags, **given(tuples, extra)}
            aliases.update({id(c): '{"a":%d}' % k for k, c in enumerate(numbered)})
            writes = refusing(lambda: ",".join(
                "[%d,%s]" % (k, deep(dump, contents(c), refer, aliases))
                for k, c in enumerate(numbered) if not unchanged(call[2][k], snapshot(c))))
            text = sent(box, False, aliases)
            call[2] = None
            call[3].clear()  # (its tuples: their marks are out; none is a reference now: kept_news)
            return text, writes
        raise TypeError("no such operation: " + str(op)[:20])

    def sent(box, copy=False, aliases=None):
        """box[0]'s JSON text (box: a list the harness alone holds), the containers the program
        still reaches in it kept from now on (marked, before box[0] is read: a reference of its
        own meanwhile), but for a copy (a __dict__ snapshot)."""
        def text():
            found = None if copy else marked(box, aliases)
            return dump(box[0], refer, found)
        return refusing(lambda: deep(text))

    def refusing(fn):
        """fn() (the harness's dump of what a request must send back); its failure (cyclic, too
        deep, ...) is the harness's refusal (refuse), not the program's exception."""
        try:
            return fn()
        except TestTimeout:
            raise
        except BaseException as e:
            refuse("the program's answer cannot be sent: " + (UNKEPT_VIEW if type(e) is (
                ValueError) and e.args and e.args[0] is UNKEPT_VIEW else type(e).__name__))
            raise

    def answer_with(seq, status, payload, extra):
        seq = LINK["resumed"].pop(seq, seq)  # (a suspended item's: the request it resumed for)
        pairs = synced.pop() if synced else []
        if status != "v" or LINK.get("refused"):
            unlent(LINK, False)  # (the containers its value would have lent)
            return answer(seq, status, payload if status != "v" else None, extra, pairs)
        text, writes = payload
        if writes:
            pairs.insert(0, '["w",[' + writes + "]]")
        data = '[%d,"a","v",%s,%s]' % (seq, text, with_pairs(dump(extra, refer), pairs + (
            state := state_told())))  # (the decimal context, in whatever line goes out)
        unlent(LINK, len(data) <= LINK["limit"])
        if len(data) > LINK["limit"]:
            refuse(f"an answer of {len(data)} bytes, over the limit of {LINK['limit']} bytes")
            return answer(seq, "v", None, {}, pairs, state)
        write_all(answers, b"\n" + data.encode() + b"\n")
        state_out()

    LINK.update(side="program", out=answers, refer=refer, scope=scope, ops=ops, before=before,
                after=after, next=next_message, answered=program_answered, retake=retake,
                gone="", handles=0, made=0, limit=job["answer_bytes"], decode=Decoder(resolve),
                answer=answer_with, kept=kept, kept_ids=kept_ids, kept_tags=kept_tags,
                dormant=dormant, drop=lambda: unheld(kept, kept_ids, kept_tags, dormant),
                lending=[], reached=[], resumed={})
    code = compiled(job["program"], "<program>")
    status, payload = attempt(lambda: run(code, scope), job["timeout"])
    answer(0, status, None if status == "v" else payload, after({}))
    while True:
        message = next_message()
        serve(message) if message[1] == "q" else overdue(message)  # (a late answer's news)
        calls.clear()


def main():
    job_fd, report_fd, parent = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    outputs = int(sys.argv[4]), int(sys.argv[5])  # the program's process's stdout and stderr
    size = int.from_bytes(read_exactly(job_fd, 8), "big")
    job = marshal.loads(read_exactly(job_fd, size))  # the program's part; the tests after the fork
    for name in ("exit", "quit"):  # as a normal interpreter's site module (-S skipped it)
        setattr(builtins, name, _sitebuiltins.Quitter(name, "Ctrl-D (i.e. EOF)"))
    capped_streams(job["file_bytes"])
    try:
        isolate()
        isolated = b"1"
    except OSError as e:
        isolated = b"0 " + str(e).encode()[:200]
        os.chdir("/")
    # the context's modules are imported before the fork (the program's process inherits them);
    # the context itself runs in the test process only, after the fork, so none of its objects
    # (a random.Random() of a helper) exists in the program's process
    for module in job["preload"]:
        attempt(lambda: __import__(module), job["timeout"])
    compiled("", "<boot>")  # (the compiler's first call makes its AST types: once for both)
    requests, answers = os.pipe(), os.pipe()
    refused = fork_program(isolated == b"1")  # (before the privileges go: it unshares)
    if refused is None:  # the program's process: pid 1 of its own PID namespace
        try:
            for fd, target in zip(outputs, (1, 2)):  # not the files the test process writes
                os.dup2(fd, target)
            for fd in (job_fd, report_fd, requests[1], answers[0], *outputs):
                os.close(fd)
            program_side(job, requests[0], answers[1])
        finally:  # never back into the test process's code
            os._exit(1)
    # (the uid the middle process gave the program's process: 2e9 + this process's pid)
    unprivileged = drop_privileges(isolated == b"1", os.getpid())
    if refused:
        isolated = b"0 unshare: " + os.strerror(refused).encode()
    die_with_parent(lambda: os.getppid() == parent)
    for fd in (requests[0], answers[1], *outputs):
        os.close(fd)
    layers = [b"namespaces " + isolated, b"unprivileged " + (b"1" if unprivileged else b"0")]
    guard_threads(abort)  # (a test's thread the kernel refuses fails the test: LINK["failed"])
    test_side(job, (job_fd, report_fd, requests[1], answers[0]), layers)
