"""sandbox_lending.py: the test process's side of the containers kept on both sides
(sandbox_copies.py): those of a test object's it lends the program's process, those at rest, and
the program's arguments to a test's callback it hands back (sandbox.py's docstring has the threat
model).

Executed inside the sandbox as the module `sandbox_lending` (sandbox.py's BOOT). A test object's
container the test process hands the program's process (an attribute the program reads, an item,
a callback's result, a draw: LENT) is lent: kept from then on as a numbered object is, under a
handle of the test process's (below 0), and sent as {"N": [handle, its value]}, which the
program's process keeps as that handle's object (sandbox_copies.py:borrowed): so the program's
changes reach the test's own object, and a second read is the same object there; one of the
call's arguments is sent as {"A": k}, the program's copy of it (lend, settle, lending; the same
bounds, outermost first).

A lent container that holds leaves only (ints, strs, ...) rests once the program's process no
longer reaches it ("z": sandbox_copies.py:unheld): both sides keep it and its snapshot, compared
with nothing at each request (let_go); read again, it wakes, marked {"k": handle}, if the test's
object is as it was (woken; else it is lent anew), whatever its size: a loop that appends through
`box.items` costs no copy of the list at each read. Every answer of the program's process ends
every rest on both sides (sandbox_verdicts.py:test_next; the bounds apply again there); at most
KEPT_OBJECTS rest (beyond, the oldest is forgotten on both sides: "D", forgotten).

The program's arguments to a test's callback are numbered alike too (sandbox_link.py:ask, handed):
the answer marks each {"a": k}, the program's own object there (`cb(a) is a`), and sends the new
contents of those the callback changed, also when it raised (handed_back), which the program's
process puts into its own objects (sandbox_link.py:taken).

What the program's process may read and set of a test object at all (sandbox_verdicts.py:test_ops
does it) is readable and settable: the public data of a test's instance, never the harness's or a
mock's own."""
from sandbox_copies import (KEPT_ITEMS, KEPT_OBJECTS, LEAVES, containers, contents,
                            inner_unchanged, kept_entry, nested, numbered, parts, share, snapshot,
                            unchanged, weight)  # sandbox.py's BOOT
from sandbox_values import dump


LENT = ("attr", "call", "next", "getitem")  # the test process's ops whose results are lent


def lending(link, refer):
    """The test process's link (sandbox_link.py:LINK) made to lend what its ops of LENT give and to
    hand back the program's arguments to a test's callback (handed): its "ops" and "answer"
    wrapped (the answer marks those arguments and lends, sends, then settles)."""
    ops, answer = link["ops"], link["answer"]
    link.update(fresh=[], lent=0, due=False, given=None, resting={}, forgot=[])

    def forgotten():  # (told's: "D" the handles forgotten at rest, which the program's forgets)
        found, link["forgot"] = link["forgot"], []
        return {"D": found} if found else {}

    def lent_ops(op, target, a, b, extra):
        given = None
        try:
            given = handed(a, b, extra) if op == "call" else None
            value = ops(op, target, a, b, extra)
        finally:  # (after the requests it served meanwhile: this request's, for its answer)
            link["given"] = given
        link["due"] = op in LENT
        return value

    def lent_answer(seq, status, payload, extra):
        sent, due, link["due"] = False, link["due"], False
        given, link["given"] = link["given"], None
        try:
            if given:
                extra = handed_back(given, extra, link)
            if due and status == "v":
                try:
                    lend(payload, link, refer)
                except BaseException:  # (a cyclic or unsendable value: answer() sends the error)
                    settle(link, False)
            sent = answer(seq, status, payload, extra)
        finally:
            settle(link, sent)
        return sent

    link.update(ops=lent_ops, answer=lent_answer, drop=forgotten)


def reached(values, stop, call, out, seen):
    """The numbered objects in values and what they hold, each once, inner and last ones first
    (reversed: outer, first ones first); none of stop (ids), nor inside one or one of call's."""
    for value in values:
        key = id(value)
        if type(value) in LEAVES or key in stop or key in seen:
            continue
        seen.add(key)
        inner = None if key in call else parts(value)
        if inner:
            reached(reversed(inner), stop, call, out, seen)
        if numbered(type(value)):
            out.append(value)
    return out


def lend(value, link, refer):
    """The numbered objects of a value the test process hands the program's process, marked for
    the answer (link's kept_tags, noted in its "fresh"): one of the call in progress's arguments
    {"A": k}; one at rest that is as it was, kept again under its handle whatever the bounds
    (woken), {"k": handle} (the value itself: not walked, it holds leaves only); one not kept or
    marked yet (a callback's argument: handed_back), nor inside one or an outer call's argument,
    kept under a new handle below 0 within KEPT_OBJECTS and KEPT_ITEMS (outermost first: one
    inside a chosen one costs no items), {"N": [handle, value]} (sandbox_copies.py:borrowed),
    marked inner ones first."""
    kept, ids, tags, args = link["kept"], link["kept_ids"], link["kept_tags"], link["args"]
    if type(value) in LEAVES or id(value) in ids:
        return
    call = {id(c): k for k, c in reversed([*enumerate(args[-1] if args else ())])}  # (first k)
    stop = {id(c) for level in args[:-1] for c in level}
    stop.update([id(c) for entry in kept.values() for c, _ in entry["nested"]], tags)
    top = (None, None) if id(value) in call or id(value) in stop else woken(value, link)
    order = [value] if top[1] else reached([value], stop, call, [], set())  # (woken: not walked)
    total, found, covered = sum(entry["weight"] for entry in kept.values()), {}, set()
    woke = {}  # (the entries of those woken)
    for c in reversed(order):  # (outermost first)
        key = id(c)
        if key in call:
            tags[key] = '{"A":%d}' % call[key]
            link["fresh"].append((key, None))
            continue
        handle, entry = top if c is value else woken(c, link)
        if entry is None:
            inside = nested([c], ids, [], set())  # (c and the containers in it, with snapshots)
            cost = 0 if key in covered else sum(weight(inner, state) for inner, state in inside)
            if len(kept) + len(found) >= KEPT_OBJECTS or total + cost > KEPT_ITEMS:
                continue
            total, link["lent"] = total + cost, link["lent"] - 1
            covered.update([id(inner) for inner, _ in inside])  # (inside it: in its cost)
            handle = link["lent"]
        else:  # (whatever its size: the bounds apply again when the program's process answers)
            woke[key] = entry
        ids[key] = found[key] = handle
        link["fresh"].append((key, handle))
    for c in order:  # (once all are chosen: an entry's nested stops at the kept ones in it)
        if (handle := found.get(id(c))) is not None and id(c) in woke:
            kept[handle], tags[id(c)] = woke[id(c)], '{"k":%d}' % handle
        elif handle is not None:
            kept[handle] = kept_entry(c, ids)
            tags[id(c)] = '{"N":[%d,%s]}' % (handle, dump(c, refer, tags))


def settle(link, sent):
    """The objects lent for one answer (lend): each marked {"k": handle} from now on if the answer
    went out as a value, else forgotten (the program's process never read it; one woken is
    forgotten there too: "D"); "A" marks dropped."""
    kept, ids, tags, fresh = link["kept"], link["kept_ids"], link["kept_tags"], link["fresh"]
    while fresh:
        key, handle = fresh.pop()
        if handle is not None and sent:
            tags[key] = '{"k":%d}' % handle
            continue
        tags.pop(key, None)  # (none, and no entry, if lend failed before it)
        if handle is not None:
            kept.pop(handle, None)
            del ids[key]
            link["forgot"].append(handle)


def let_go(extra, link):
    """The test process's kept objects the program's process forgot ("d") or keeps at rest ("z":
    a test object's container it no longer reaches that holds leaves only, sandbox_copies.py:
    unheld), forgotten here; those at rest kept in link's "resting" {id: [handle, entry]},
    compared with nothing, until the program reads one again (woken) or answers, at most
    KEPT_OBJECTS of them (beyond, the oldest is forgotten on both sides: "D", forgotten)."""
    kept, ids, tags, resting = link["kept"], link["kept_ids"], link["kept_tags"], link["resting"]
    for key in ("d", "z"):
        for handle in extra[key] if type(extra.get(key)) is list else ():
            if type(handle) is int and handle in kept:
                entry = kept.pop(handle)
                del ids[id(entry["object"])], tags[id(entry["object"])]
                if key == "z" and handle < 0 and not entry["inner_ids"]:
                    resting[id(entry["object"])] = [handle, entry]
    while len(resting) > KEPT_OBJECTS:
        link["forgot"].append(resting.pop(next(iter(resting)))[0])


def woken(c, link):
    """[handle, entry] of a container at rest (let_go) that the program's process reads again, out
    of rest, if it is as it was then (its copy there is right: marked {"k": handle}, awake); else
    [None, None] (not at rest; or changed since: forgotten on both sides, "D")."""
    handle, entry = link["resting"].pop(id(c), (None, None))
    if entry is None:
        return None, None
    if unchanged(entry["snapshot"], c if type(c) is list else snapshot(c)) and inner_unchanged(
            entry):
        return handle, entry
    link["forgot"].append(handle)
    return None, None


def handed(a, b, extra):
    """The program's arguments to a test's callback (a call the test process serves: the request's
    a and b), their "#" containers numbered as its process numbered them (one passed twice is one
    object: share, its "m"; a and b changed in place) -> [those containers, their snapshots]; None
    if a or b is malformed, or if its process numbered fewer (a subclass of list, tuple, dict or
    set crosses as its base's copy, which it does not number)."""
    if type(a) is not list or type(b) is not dict:
        return None
    values = a + list(b.values())
    if len(numbered := containers(values, [])) != extra.get("#"):
        return None
    if type(extra.get("m")) is list:
        values, numbered = share(values, extra["m"])
        b.update(zip(list(b), values[len(a):]))
        a[:] = values[:len(a)]
    return [numbered, [snapshot(c) for c in numbered]]


def handed_back(given, extra, link):
    """The answer to a test's callback the program called (given: handed's), also when it raised:
    its argument containers marked {"a": k}, the program's own objects (a kept one is marked so
    already; settle drops the marks), extra with "w" [k, contents] of those the callback changed."""
    numbered, before = given
    for k, c in enumerate(numbered):
        if id(c) not in link["kept_tags"]:
            link["kept_tags"][id(c)] = '{"a":%d}' % k
            link["fresh"].append((id(c), None))
    writes = [[k, contents(c)] for k, c in enumerate(numbered)
              if not unchanged(before[k], snapshot(c))]
    return dict(extra, w=writes) if writes else extra


def test_made(value):
    """A class the tests (or the context) define, or an instance of one."""
    kind = value if issubclass(type(value), type) else type(value)
    return kind.__module__ == "__main__" and not issubclass(kind, BaseException)


def settable(value, name):
    """Whether the program may set this attribute of a test object: a public attribute of an
    instance of a test's class (never of a class) which its class does not define, or defines as
    a slot, a property with a setter (which runs), or a dataclass field whose default is no
    callable; never a method or other object a test's later call would find there."""
    if type(name) is not str or name.startswith("_") or not test_made(value) or isinstance(
            value, type):
        return False
    kind = type(value)
    for owner in kind.__mro__:
        if name in vars(owner):
            found = vars(owner)[name]
            return (type(found).__name__ == "member_descriptor"
                    or type(found) is property and found.fset is not None
                    or name in getattr(kind, "__dataclass_fields__", ()) and not callable(found))
    return True


def readable(value, name):
    """Whether the program may read this attribute of a test object: a public one of a test's
    class or instance, or of a unittest.mock object one its mock class does not define (what the
    mock stands for, a mock_open's read, never the mock's records, resets or configuration); a
    test's function's, method's or class's __name__, __qualname__, __doc__ or __module__ where it
    is a str or None (sandbox_proxies.py:texts)."""
    if name in ("__name__", "__qualname__", "__doc__", "__module__"):
        return (type(value).__module__ == "builtins" and type(value).__name__ in (
            "function", "method") or isinstance(value, type) and test_made(value)) and type(
            getattr(value, name, None)) in (str, type(None))
    if type(name) is not str or name.startswith("_"):
        return False
    if type(value).__module__ == "unittest.mock":
        return not hasattr(type(value), name)
    return test_made(value)
