"""sandbox_copies.py: what a call's arguments become in the program's process: copies, numbered
alike on both sides and written back after the call, and the test's objects of the standard
library that cross as copies rebuilt there (sandbox.py's docstring has the threat model).

Executed inside the sandbox as the module `sandbox_copies` (sandbox.py's BOOT). The mutable
containers of a call's arguments (lists, dicts, sets, bytearrays, Counters, deques, ...), its
io.StringIO and io.BytesIO buffers and its random.Random generators are numbered alike on both
sides (containers, shared, share); after the call the program's process sends the new state of
those the call changed (snapshot, unchanged, contents) and the test process puts it into its own
objects (refill). A test's object of one of these standard types, which hold no test code, is sent
as a copy (sandbox_values.py:copied, test side) and rebuilt in the program's process
(rebuilt_copy):
  a functools.partial: its function (sent as it would be alone: a test's function by reference, a
    builtin by name), arguments and keywords (values, walked for write-back);
  an io.StringIO or io.BytesIO: its value and position (closed: closed), written back;
  a random.Random: its state (getstate), written back; a SystemRandom: a SystemRandom (no state);
  a compiled re.Pattern and its bound methods (match, sub, ...): pattern and flags;
  a re.Match: its pattern, string, pos, endpos and how the test process finds it again (match,
    search, fullmatch or the n-th of finditer with the same spans), run again there: a real
    re.Match (one its pattern does not find again cannot be sent; the test fails saying so).
A Pattern or Match on a string that is no value (a memoryview) cannot be sent either.

A numbered object the program still holds after the request that brought it (in a global, an object,
a generator) is kept: both sides remember it under one handle with a snapshot (kept_entry, the
containers nested in it included); whichever side ran last sends the new contents of those it
changed when it hands over, in each request and each answer (changed; sandbox_link.py:told and
taken), and either side sends a kept object inside a value as its mark ({"k": handle}), which the
other reads as its own object (the test gets its own list back). The program's process forgets what
it no longer reaches, by the references counted (unreached), as it hands over. At most KEPT_OBJECTS
objects and KEPT_ITEMS items are kept (beyond, a copy is the program's own or, inside a kept one,
part of its value): each request compares each kept object with its snapshot on both sides, a
cost that grows with what is kept (bench.py --parts sandbox), nothing when none is kept.

A test object's container the test process hands the program's process (an attribute the program
reads, an item, a callback's result, a draw: LENT) is lent: kept from then on as a numbered object
is, under a handle of the test process's (below 0), and sent as {"N": [handle, its value]}, which
the program's process keeps as that handle's object (borrowed): so the program's changes reach the
test's own object, and a second read is the same object there; one of the call's arguments is sent
as {"A": k}, the program's copy of it (lend, settle, lending; the same bounds, outermost first).

The program's arguments to a test's callback are numbered alike too (sandbox_link.py:ask, handed):
the answer marks each {"a": k}, the program's own object there (`cb(a) is a`), and sends the new
contents of those the callback changed, also when it raised (handed_back), which the program's
process puts into its own objects (sandbox_link.py:taken)."""
from _operator import is_
from sys import getrefcount

from sandbox_patches import unpatched  # sandbox.py's BOOT
from sandbox_values import BUFFERS, COLLECTIONS, FINDS, PATTERN_METHODS, buffer_state, dump


def copy_type(kind):
    """Whether kind is a functools.partial, an io buffer or a random.Random: walked (a partial) or
    numbered (the others) as a container is, but no value: a test's crosses as a copy
    (sandbox_values.py:copied), a program's as a reference (containers)."""
    module, name = kind.__module__, kind.__name__
    return (module == "functools" and name == "partial" or module == "_io" and name in BUFFERS
            or module == "random" and name == "Random")


def numbered(kind):
    """Whether a call's argument of this type is numbered for write-back: a mutable container, an
    io buffer, a random.Random."""
    return kind is list or kind is dict or kind is set or kind is bytearray or (
        kind.__module__ == "collections" and kind.__name__ in COLLECTIONS) or (
        copy_type(kind) and kind.__name__ != "partial")


def parts(value):
    """What a value holds that containers() walks, by its exact type (a value's, never a test
    object's, which the program's process holds as a reference): a list's, tuple's, NamedTuple's
    or deque's items, a dict's (Counter's, ...) values, a partial's arguments and keywords; None
    for anything else."""
    kind = type(value)
    if kind is list or kind is tuple:
        return value
    if kind is dict:
        return value.values()
    module, name = kind.__module__, kind.__name__
    if module == "collections" and name in COLLECTIONS:
        return value if name == "deque" else value.values()
    if issubclass(kind, tuple) and hasattr(kind, "_fields"):
        return value
    if copy_type(kind) and name == "partial":
        return list(value.args) + list(value.keywords.values())
    return None


LEAVES = {int, str, float, bool, type(None), bytes, complex}  # (what containers() skips at once)


def containers(values, out, sent=None):
    """The numbered objects in values, depth first: both processes number a call's arguments
    alike, for write-back and identity. sent: the ids of the objects the program keeps, where its
    process numbers its arguments to a test's callback: one of a copy_type it does not keep
    crosses as a reference there, neither numbered nor walked."""
    for value in values:
        kind = type(value)
        if kind in LEAVES or sent is not None and id(value) not in sent and copy_type(kind):
            continue
        if numbered(kind):
            out.append(value)
        inner = parts(value)
        if inner:
            containers(inner, out, sent)
    return out


def shared(numbers):
    """[[k, j], ...] for each object numbered twice (the k-th is the j-th, j < k): a container a
    test passes twice (f(a, a), (a, a)) is one object on the program's side too (share)."""
    first = {}
    return [[k, j] for k, c in enumerate(numbers) if (j := first.setdefault(id(c), k)) != k]


def share(values, same):
    """(values with each object of `same` (shared's pairs) replaced by the one it is, the objects
    numbered as containers() numbers them): the program's copy of f(a, a) holds one list twice. A
    replaced copy keeps its number (its contents never change: no write-back)."""
    same, out = {k: j for k, j in same if type(k) is int and type(j) is int and 0 <= j < k}, []

    def walk(value):
        kind = type(value)
        found = value
        if numbered(kind):
            k = len(out)
            out.append(value)
            found = out[same[k]] if k in same else value
        inner = parts(value)
        if not inner:
            return found
        items = [walk(item) for item in inner]
        if all(new is old for new, old in zip(items, inner)):
            return found
        if kind is list or numbered(kind) and kind.__name__ == "deque":
            for i, new in enumerate(items):
                value[i] = new
        elif numbered(kind):  # a dict, Counter, OrderedDict or defaultdict: its values
            for key, new in zip(list(value), items):
                value[key] = new
        elif kind.__module__ == "functools":  # a partial
            cut = len(value.args)
            return kind(value.func, *items[:cut], **dict(zip(value.keywords, items[cut:])))
        else:
            return tuple(items) if kind is tuple else kind._make(items)
        return found

    return [walk(value) for value in values], out


def snapshot(value):
    """What a numbered object holds now, to tell later whether a call changed it (unchanged)."""
    kind = type(value)
    if isinstance(value, dict):
        return [x for pair in value.items() for x in pair]
    if kind is bytearray:
        return bytes(value)
    if kind.__module__ == "_io":
        return tuple(buffer_state(value))
    if kind.__module__ == "random":
        return value.getstate()
    return list(value)


KEPT_OBJECTS, KEPT_ITEMS = 64, 4096


def weight(state):
    """What comparing a snapshot costs, in items: a list's length; a bytearray's or a buffer's
    size / 64 (compared at once); a Random's state 10."""
    if type(state) is list:
        return 1 + len(state)
    if type(state) is bytes:
        return 1 + len(state) // 64
    if len(state) == 3 and type(state[0]) is str:  # a buffer's (kind, value, position)
        return 1 + len(state[1] or "") // 64
    return 10


def nested(state, ids, out, seen):
    """[(container, snapshot), ...] of the containers inside a snapshot's items, through tuples
    and containers but not into kept ones (ids): a change deep inside a kept container (a list
    the program put into it, or the test) is its change too."""
    for value in state:
        if type(value) in LEAVES or id(value) in ids or id(value) in seen:
            continue
        seen.add(id(value))
        if numbered(type(value)):
            out.append((value, snapshot(value)))
            inner = out[-1][1] if type(out[-1][1]) is list else None
        else:
            inner = parts(value)
        if inner:
            nested(inner, ids, out, seen)
    return out


def kept_entry(value, ids):
    """{"object": a kept object, "snapshot": its snapshot, "nested": its nested containers and
    their snapshots (ids: those of the kept ones), "weight": what comparing them all costs,
    "inner_ids": the ids of the objects in its snapshot that may be kept too}; made anew each time
    its snapshot is renewed (the two sides agree on it again)."""
    state = snapshot(value)
    items = state if type(state) is list else []  # (a list's items, a dict's keys and values)
    inner = nested(items, ids, [], set())
    return {"object": value, "snapshot": state, "nested": inner,
            "weight": weight(state) + sum(weight(then) for _, then in inner),
            "inner_ids": tuple([id(item) for item in items if type(item) not in LEAVES])}


def changed(kept, ids):
    """The handles of the kept objects ({handle: entry}; ids {id: handle}) that changed since
    their snapshots, nested containers included (their entries renewed)."""
    found = []
    for handle, entry in kept.items():
        value = entry["object"]
        now = value if type(value) is list else snapshot(value)  # (a list: compared in place)
        if unchanged(entry["snapshot"], now) and all(
                unchanged(then, snapshot(inner)) for inner, then in entry["nested"]):
            continue
        kept[handle] = kept_entry(value, ids)
        found.append(handle)
    return found


def references(holder, k):
    return getrefcount(holder[k])


BASE = references([[]], 0)  # an object referenced by one list or dict only (`numbered`, an entry)


def referenced(numbered):
    """The k of each object of numbered (each there once) referenced from elsewhere too: only
    those may be kept (the others are gone once numbered is)."""
    return [k for k in range(len(numbered)) if references(numbered, k) > BASE]


def unreached(kept, ids):
    """The handles of the kept objects ({handle: entry}, ids {id: handle}) the program's process
    no longer reaches, from the references counted: the entry's, two for each place in a kept
    object (its contents and its snapshot, current), the rest the program's; an object the
    program references is reached, and so is what it holds. A reference the harness holds for a
    while (a traceback's) counts as the program's: that object is forgotten a request later."""
    inside = {}
    for entry in kept.values():
        for key in entry["inner_ids"]:
            if key in ids:
                inside[key] = inside.get(key, 0) + 1
    reached = [handle for handle, entry in kept.items()
               if references(entry, "object") - BASE > 2 * inside.get(id(entry["object"]), 0)]
    seen = set(reached)
    while reached:
        for key in kept[reached.pop()]["inner_ids"]:
            handle = ids.get(key)
            if handle is not None and handle not in seen:
                seen.add(handle)
                reached.append(handle)
    return [handle for handle in kept if handle not in seen]


def unchanged(before, after):
    """Items compared by identity (never by their __eq__, which may be a test object's, asked of
    the test process); a state by equality."""
    if type(before) is list:
        return len(before) == len(after) and all(map(is_, before, after))
    return before == after


def contents(value):
    """What a numbered object holds, as sent back after a call (refill puts it in place)."""
    kind = type(value)
    if isinstance(value, dict):
        return dict(value)
    if kind is set or kind is bytearray:
        return set(value) if kind is set else bytes(value)
    if kind.__module__ == "_io":
        return buffer_state(value)
    if kind.__module__ == "random":
        return value.getstate()
    return list(value)


def refill(target, content):
    """target's contents replaced in place by content (the program's copy after a call); a
    malformed content (of the wrong kind) raises before anything is changed."""
    kind = type(target)
    if kind.__module__ == "_io" and kind.__name__ in BUFFERS:
        text = str if kind.__name__ == "StringIO" else bytes
        if not (type(content) is list and len(content) == 3 and content[0] in ("s", "b") and (
                content[1] is None or type(content[1]) is text) and type(content[2]) is int
                and content[2] >= 0):
            raise ValueError("malformed contents")
        if content[1] is None:
            return target.close()
        target.seek(0)
        target.truncate()
        target.write(content[1])
        return target.seek(content[2])
    if kind.__module__ == "random":
        return target.setstate(content)
    if isinstance(target, (dict, set)) or kind.__name__ == "deque":
        target.clear()
        (target.extend if kind.__name__ == "deque" else target.update)(content)
    else:
        target[:] = content


LENT = ("attr", "call", "next", "getitem")  # the test process's ops whose results are lent


def lending(link, refer):
    """The test process's link (sandbox_link.py:LINK) made to lend what its ops of LENT give and to
    hand back the program's arguments to a test's callback (handed): its "ops" and "answer"
    wrapped (the answer marks those arguments and lends, sends, then settles)."""
    ops, answer = link["ops"], link["answer"]
    link.update(fresh=[], lent=0, due=False, given=None)

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

    link.update(ops=lent_ops, answer=lent_answer)


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
    {"A": k}; one not kept or marked yet (a callback's argument: handed_back), nor inside one or
    an outer call's argument, kept under a new handle below 0 within KEPT_OBJECTS and KEPT_ITEMS
    (outermost first: one inside a chosen one costs no items), {"N": [handle, value]}
    (borrowed), marked inner ones first."""
    kept, ids, tags, args = link["kept"], link["kept_ids"], link["kept_tags"], link["args"]
    if type(value) in LEAVES or id(value) in ids or not containers([value], []):
        return
    call = {id(c): k for k, c in reversed([*enumerate(args[-1] if args else ())])}  # (first k)
    stop = {id(c) for level in args[:-1] for c in level}
    stop.update([id(c) for entry in kept.values() for c, _ in entry["nested"]], tags)
    total, found, covered = sum(entry["weight"] for entry in kept.values()), {}, set()
    for c in reversed(order := reached([value], stop, call, [], set())):  # (outermost first)
        key = id(c)
        if key in call:
            tags[key] = '{"A":%d}' % call[key]
            link["fresh"].append((key, None))
            continue
        inside = nested([c], ids, [], set())  # (c and the containers in it, with snapshots)
        cost = 0 if key in covered else sum(weight(state) for _, state in inside)
        if len(kept) + len(found) >= KEPT_OBJECTS or total + cost > KEPT_ITEMS:
            continue
        total, link["lent"] = total + cost, link["lent"] - 1
        covered.update([id(inner) for inner, _ in inside])  # (inside it: in its cost)
        ids[key] = found[key] = link["lent"]
        link["fresh"].append((key, link["lent"]))
    for c in order:  # (once all are chosen: an entry's nested stops at the kept ones in it)
        if (handle := found.get(id(c))) is not None:
            kept[handle] = kept_entry(c, ids)
            tags[id(c)] = '{"N":[%d,%s]}' % (handle, dump(c, refer, tags))


def settle(link, sent):
    """The objects lent for one answer (lend): each marked {"k": handle} from now on if the answer
    went out as a value, else forgotten (the program's process never read it); "A" marks
    dropped."""
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


def borrowed(tag, item, kept, ids, tags, calls):
    """The program's object for a test's object lent to it (lend): {"A": k} the k-th argument
    container of the call in progress (calls[-1]); {"N": [handle, value]} that value, kept under
    the handle from then on, the first time (then the same object); None if malformed."""
    if tag == "A":
        args = calls[-1][1] if calls else ()
        return args[item] if type(item) is int and 0 <= item < len(args) else None
    if not (type(item) is list and len(item) == 2 and type(item[0]) is int and item[0] < 0
            and numbered(type(item[1]))):
        return None
    if item[0] not in kept:
        kept[item[0]] = kept_entry(item[1], ids)
        ids[id(item[1])], tags[id(item[1])] = item[0], '{"k":%d}' % item[0]
    return kept[item[0]]["object"]


def rebuilt_copy(tag, item, lent=()):
    """The program's copy of a test's object (sandbox_values.py:copied's JSON, decoded), or its
    lent object (lent: the kept, their ids and tags and the calls borrowed takes); None if the tag
    is neither's or a lent one is malformed; ValueError if a copy is malformed."""
    if tag == "N" or tag == "A":
        return borrowed(tag, item, *lent) if lent else None
    if tag not in ("P", "B", "U", "p", "H"):
        return None
    kind = type(item)
    if tag == "P" and kind is list and len(item) == 3 and callable(item[0]) and (
            type(item[1]) is list and type(item[2]) is dict and all(
                type(key) is str for key in item[2])):
        return unpatched("functools", "partial")(item[0], *item[1], **item[2])
    if tag == "B" and kind is list and len(item) == 3 and item[0] in ("s", "b"):
        made = unpatched("io", "StringIO" if item[0] == "s" else "BytesIO")()
        refill(made, item)
        return made
    if tag == "U":
        if item is None:
            return unpatched("random", "SystemRandom")()
        made = unpatched("random", "Random")()
        made.setstate(item)
        return made
    if tag == "p" and kind is list and len(item) == 3 and type(item[1]) is int and (
            item[2] is None or item[2] in PATTERN_METHODS):
        pattern = unpatched("re", "compile")(item[0], item[1])
        return pattern if item[2] is None else getattr(pattern, item[2])
    if tag == "H" and kind is list and len(item) == 6 and type(item[5]) is list and len(
            item[5]) == 2 and item[5][0] in FINDS + ("finditer",) and type(item[5][1]) is int:
        pattern = unpatched("re", "compile")(item[0], item[1])
        how, n = item[5]
        if how != "finditer":
            return getattr(pattern, how)(item[2], item[3], item[4])
        for k, found in enumerate(pattern.finditer(item[2], item[3], item[4])):
            if k == n:
                return found
    raise ValueError("malformed value")
