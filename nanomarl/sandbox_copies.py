"""sandbox_copies.py: what a call's arguments become in the program's process: copies, numbered
alike on both sides and written back after the call, and the test's objects of the standard
library that cross as copies rebuilt there (sandbox.py's docstring has the threat model).

Executed inside the sandbox as the module `sandbox_copies` (sandbox.py's BOOT). The mutable
containers of a call's arguments (lists, dicts, sets, bytearrays, Counters, deques, ...), its io
buffers, Random generators and SimpleNamespace objects are numbered alike on both sides
(containers, shared, share); after the call the program's process sends the new state of those the
call changed (snapshot, unchanged, contents) and the test process puts it into its own objects
(refill). A test's object of one of these standard types, which hold no test code, is sent as a
copy (copied, test side) and rebuilt in the program's process
(sandbox_proxies.py:rebuilt_copy):
  a functools.partial: its function (sent as it would be alone: a test's function by reference, a
    builtin by name), arguments and keywords (values, walked for write-back);
  an io.StringIO or io.BytesIO: its value and position (closed: closed), written back;
  a random.Random: its state (getstate), written back; a SystemRandom: a SystemRandom (no state);
  a types.SimpleNamespace, collections.UserList or UserDict: its attributes, items or dict (walked,
    written back; refused where the program changed a UserList's or UserDict's data or attributes:
    sandbox_stdlib.py:intact);
  a compiled re.Pattern and its bound methods (match, sub, ...): pattern and flags;
  a re.Match: its pattern, string, pos, endpos and how the test process finds it again (match,
    search, fullmatch or the n-th of finditer with the same spans), run again there: a real
    re.Match (one its pattern does not find again cannot be sent; the test fails saying so).
A Pattern or Match on a string that is no value (a memoryview) cannot be sent either.

A numbered object the program still holds after the request that brought it (in a global, an object,
a generator) is kept: both sides remember it under one handle with a snapshot (kept_entry, the
containers nested in it included); whichever side ran last sends the news of those it changed when
it hands over, in each request and each answer (changed, news; sandbox_link.py:told and taken): its
new contents, or the new items alone of a list or deque that only grew at its end, which the other
side appends (extend); either side sends a kept object inside a value as its mark ({"k": handle}),
which the other reads as its own object (the test gets its own list back). A container of the
program's own it still reaches and sends in a value (a call's result, an attribute, a draw) is kept
so too from then on (sandbox_lending.py:lent_back, received). The program's process forgets what it
no longer reaches, by the references counted (sandbox_lending.py:unreached), as it hands over, but a
test object's container of leaves only rests (sandbox_lending.py:unheld) until the test process
names it again (awake) or forgets it, or the program's process answers. At most KEPT_OBJECTS objects
and KEPT_ITEMS items (a dict's pairs: weight) are kept, and in a room of their own (rooms: they
never crowd out the others) at most OWN_OBJECTS and OWN_ITEMS of the program's own containers
returned (beyond, a copy is the program's own or, inside a kept one, part of its value); one whose
news cannot be sent (too deep, holding what is no value) is forgotten on both sides, a copy from
then on (sandbox_link.py:told): each request compares each kept object with its snapshot on both
sides, a cost that grows with what is kept (bench.py --parts sandbox), none for one at rest."""
from _operator import is_
from sys import getrefcount, implementation

from sandbox_stdlib import found_again, intact  # sandbox.py's BOOT
from sandbox_values import COLLECTIONS, dump

BUFFERS = ("StringIO", "BytesIO")
PATTERN_METHODS = ("match", "search", "fullmatch", "findall", "finditer", "split", "sub", "subn")
NAMESPACE = type(implementation)  # types.SimpleNamespace (as the types module takes it)
USER = ("UserList", "UserDict")  # (collections' wrappers of a list or dict: its `data`)


def buffer_state(buffer):
    """[kind, value (None: closed), position] of an io.StringIO ("s") or io.BytesIO ("b")."""
    kind = "s" if type(buffer).__name__ == "StringIO" else "b"
    return [kind, None, 0] if buffer.closed else [kind, buffer.getvalue(), buffer.tell()]


def copy_type(kind):
    """Whether kind is a functools.partial, an io buffer, a random.Random, a SimpleNamespace, a
    UserList or UserDict: walked (a partial) or numbered (the others) as a container is, but no
    value: a test's crosses as a copy (copied), a program's as a reference."""
    module, name = kind.__module__, kind.__name__
    return (module == "functools" and name == "partial" or module == "_io" and name in BUFFERS
            or module == "random" and name == "Random" or kind is NAMESPACE
            or module == "collections" and name in USER)


def keyed(value):
    """What holds its items by key: a dict, a SimpleNamespace's vars(), a UserDict's data."""
    kind = type(value)
    if isinstance(value, dict) or kind is NAMESPACE:
        return value if kind is not NAMESPACE else vars(value)
    return value.data if kind.__module__ == "collections" and kind.__name__ == USER[1] else None


def factored(kind):
    """Whether kind is collections.defaultdict: its default_factory is part of its contents."""
    return kind.__module__ == "collections" and kind.__name__ == "defaultdict"


def numbered(kind):
    """Whether a call's argument of this type is numbered for write-back: a mutable container (an
    array.array too), an io buffer, a random.Random, a SimpleNamespace, a UserList or UserDict."""
    return kind is list or kind is dict or kind is set or kind is bytearray or (
        kind.__module__ == "collections" and kind.__name__ in COLLECTIONS) or (
        kind.__module__ == "array" and kind.__name__ == "array") or (
        copy_type(kind) and kind.__name__ != "partial")


def parts(value):
    """What a value holds that containers() walks, by its exact type (a value's, never a test
    object's, which the program's process holds as a reference): a list's, tuple's, NamedTuple's
    or deque's items, a dict's (Counter's, UserDict's, ...) values, a SimpleNamespace's attributes,
    a UserList's items, a partial's arguments and keywords; None for anything else."""
    kind = type(value)
    if kind is list or kind is tuple or issubclass(kind, tuple) and hasattr(kind, "_fields"):
        return value
    module, name = kind.__module__, kind.__name__
    if kind is dict or kind is NAMESPACE or module == "collections" and name in COLLECTIONS + USER:
        return value if name in ("deque", "UserList") else keyed(value).values()
    if copy_type(kind) and name == "partial":
        return list(value.args) + list(value.keywords.values())
    return None


LEAVES = {int, str, float, bool, type(None), bytes, complex}  # (what containers() skips at once)
VIEWS = (type({}.values()), type({}.items()))  # (walked for their dict's values: inside)


def leaves(values):
    """A call's arguments that are leaves of their own (a str, int, float, bytes or complex, not
    inside a container): both processes number them first among its tuples, so that one the
    call hands back is the test's own object (f(s) is s; sandbox_proxies.py:given)."""
    return [value for value in values if type(value) in LEAVES and type(value) is not bool
            and value is not None]


def inside(value):
    """What containers() and share walk: its parts, or a values or items view's values (alike on
    both sides: one is of a dict rebuilt in the order sent; a test's d.values() written back)."""
    found = parts(value)
    if found is None and type(value) in VIEWS:
        return list(value) if type(value) is VIEWS[0] else [item for _, item in value]
    return found


def containers(values, out, sent=None, tuples=None, kept=()):
    """The numbered objects in values, depth first: both processes number a call's arguments
    alike, for write-back and identity. sent: the ids of the objects the program keeps, where its
    process numbers its arguments to a test's callback: one of a copy_type it does not keep
    crosses as a reference there, neither numbered nor walked. tuples: a list the exact tuples
    met go into, numbered alike too, but none inside one of kept (ids: the kept containers, which
    cross as marks; sandbox_proxies.py:given)."""
    for value in values:
        kind = type(value)
        if kind in LEAVES or sent is not None and id(value) not in sent and copy_type(kind):
            continue
        if numbered(kind):
            out.append(value)
        elif kind is tuple and tuples is not None:
            tuples.append(value)
        inner = inside(value)
        if inner:
            containers(inner, out, sent, None if id(value) in kept else tuples, kept)
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
        kind, found = type(value), value
        if numbered(kind):
            k = len(out)
            out.append(value)
            found = out[same[k]] if k in same else value
        inner = inside(value)
        if not inner:
            return found
        items = [walk(item) for item in inner]
        if all(new is old for new, old in zip(items, inner)):
            return found
        if kind in VIEWS:  # (a view of a dict of its own: one holding the items replaced)
            made = dict(zip(range(len(items)) if kind is VIEWS[0] else dict(value), items))
            return made.values() if kind is VIEWS[0] else made.items()
        if numbered(kind) and keyed(value) is None:  # a list, deque or UserList
            for i, new in enumerate(items):
                value[i] = new
        elif numbered(kind):  # a dict, Counter, OrderedDict, defaultdict, SimpleNamespace, ...
            for key, new in zip(list(keyed(value)), items):
                keyed(value)[key] = new
        elif kind.__module__ == "functools":  # a partial
            cut = len(value.args)
            return kind(value.func, *items[:cut], **dict(zip(value.keywords, items[cut:])))
        else:
            return tuple(items) if kind is tuple else kind._make(items)
        return found

    return [walk(value) for value in values], out


def snapshot(value):
    """What a numbered object holds now, to tell whether a call changed it (unchanged; intact)."""
    kind = type(value)
    if not intact(value):
        return [object()]  # (changed: contents refuses it)
    if keyed(value) is not None:  # (its pairs, flat; a defaultdict's factory last)
        return [x for pair in keyed(value).items() for x in pair] + (
            [value.default_factory] if factored(kind) else [])
    if kind is bytearray or kind.__module__ == "array":
        return bytes(value)  # (an array's machine values)
    if kind.__module__ == "_io":
        return tuple(buffer_state(value))
    if kind.__module__ == "random":
        return value.getstate()
    return list(value)


KEPT_OBJECTS, KEPT_ITEMS = 64, 4096  # the argument containers kept and a test object's lent
OWN_OBJECTS, OWN_ITEMS = 16, 1024  # the program's own containers it returned: a room of their own


def rooms(kept, own, mine):
    """[how many, the items they hold (weight)] of the kept objects ({handle: entry}) in one room:
    the program's own it returned if mine (own: their handles; the forgotten dropped), else the
    rest."""
    own.intersection_update(kept)
    found = [entry["weight"] for handle, entry in kept.items() if (handle in own) is mine]
    return [len(found), sum(found)]


def weight(value, state):
    """What comparing value's snapshot (state) costs, in items: a list's length, a dict's pairs
    (the bound counts them as a list's items), a bytearray's or buffer's size / 64, Random's 10."""
    if type(state) is list:
        return 1 + (len(state) // 2 if keyed(value) is not None else len(state))
    if type(state) is bytes:
        return 1 + len(state) // 64
    if len(state) == 3 and type(state[0]) is str:  # a buffer's (kind, value, position)
        return 1 + len(state[1] or "") // 64
    return 10


def nested(state, ids, out, seen):
    """[(container, snapshot), ...] of the containers inside a snapshot's items, through tuples
    and containers but not into kept ones (ids): a change deep inside a kept container (a list
    the program put into it, or the test) is its change too. Depth first, on a stack of its own
    (a value nested thousands deep is walked at any recursion limit)."""
    stack = [iter(state)]
    while stack:
        for value in stack[-1]:
            if type(value) in LEAVES or id(value) in ids or id(value) in seen:
                continue
            seen.add(id(value))
            if numbered(type(value)):
                out.append((value, snapshot(value)))
                inner = out[-1][1] if type(out[-1][1]) is list else None
            else:
                inner = parts(value)
            if inner:
                stack.append(iter(inner))
                break
        else:
            stack.pop()
    return out


def kept_entry(value, ids, before=None, state=None):
    """{"object": a kept object, "snapshot": its snapshot (state, else as it is now), "nested": its
    nested containers and their snapshots (ids: those of the kept ones), "weight": what comparing
    them all costs, "inner_ids": the ids of the objects in its snapshot that may be kept too};
    made anew each time its snapshot is renewed (the two sides agree on it again). before: its
    entry when it has only grown at its end since (growable: changed, extend): only its new items
    are walked."""
    state = snapshot(value) if state is None else state
    items = state if type(state) is list else []  # (a list's items, a dict's keys and values)
    old = before or {"snapshot": (), "nested": [], "inner_ids": ()}
    new = items[len(old["snapshot"]):]
    inner = old["nested"] + nested(new, ids, [], {id(c) for c, _ in old["nested"]})
    return {"object": value, "snapshot": state, "nested": inner,
            "weight": weight(value, state) + sum(weight(c, then) for c, then in inner),
            "inner_ids": old["inner_ids"] + tuple([id(item) for item in new
                                                   if type(item) not in LEAVES])}


def growable(value):
    """Whether a kept object's news may be its new items alone: a list, a deque of no maxlen (one
    with a maxlen drops its first items as it grows), a dict, Counter or OrderedDict (new keys
    come after the others: its snapshot's pairs, flat, grow at their end; a defaultdict's end in
    its factory)."""
    kind = type(value)
    return kind is list or keyed(value) is value and not factored(kind) or (
        kind.__module__ == "collections" and kind.__name__ == "deque" and value.maxlen is None)


def changed(kept, ids):
    """[handle, start, its entry renewed] for each kept object ({handle: entry}; ids {id: handle})
    that changed since its snapshot, nested containers included (the caller puts the entry in
    place once its news will go out: sandbox_link.py:tidings): start is its snapshot's length if
    it only grew at its end (growable, its first items still the snapshot's objects, none nested
    in them changed: news sends its new items alone), else None (news sends it whole)."""
    found = []
    for handle, entry in kept.items():
        value, then = entry["object"], entry["snapshot"]
        now = value if type(value) is list else snapshot(value)  # (a list: compared in place)
        if unchanged(then, now) and inner_unchanged(entry):
            continue
        grew = growable(value) and len(now) > len(then) and all(map(is_, then, now))
        start = len(then) if grew and inner_unchanged(entry) else None
        found.append([handle, start, kept_entry(value, ids, None if start is None else entry)])
    return found


def inner_unchanged(entry):
    """Whether the containers nested in a kept object (its entry's) are as their snapshots."""
    return all(unchanged(then, snapshot(inner)) for inner, then in entry["nested"])


def news(handle, value, start):
    """What the other side is sent of a changed kept object (changed's [handle, start]): [handle,
    its contents], or [handle, start, its items (a dict's pairs, flat) from start on] (extend puts
    them at its end)."""
    if start is None:
        return [handle, contents(value)]
    return [handle, start, value[start:] if type(value) is list else snapshot(value)[start:]]


def extend(kept, handle, start, tail, ids):
    """The other side's news [handle, start, tail] (news) put into this side's kept object, whose
    snapshot holds the start items the two sides agreed on: tail goes after them, before what this
    side added since (a thread's, a finalizer's: sent at its next hand-over, as growth; a dict's
    come before, sent whole then); if this side changed those items, it takes the other side's
    contents (its snapshot and tail), as whole news does. A malformed message (a tail that is no
    list, another start, an odd tail or a key no dict holds for a dict) changes nothing more."""
    entry = kept[handle]
    value, then = entry["object"], entry["snapshot"]
    mapping = keyed(value) is value
    if not growable(value) or type(tail) is not list or start != len(then) or (
            mapping and len(tail) % 2):
        return
    now = snapshot(value) if mapping else value
    if len(now) < start or not all(map(is_, then, now)):  # (this side changed those items)
        value.clear()
        if not mapping:
            value.extend(then)
        for key, item in zip(then[::2], then[1::2]) if mapping else ():
            value[key] = item
    if mapping:
        try:
            for key, item in zip(tail[::2], tail[1::2]):  # (its own __setitem__: a Counter's too)
                value[key] = item
        except TypeError:
            return
    else:
        own = [value.pop() for _ in range(len(value) - start)]  # (this side's since, last first)
        value.extend(tail + own[::-1])
    kept[handle] = kept_entry(value, ids, entry, then + tail)  # (agreed: then, tail)


def pairs(found, sizes=(2,)):
    """The well-formed [int, ..., contents] lists, of one of sizes, of found (news, "w"; a list)."""
    if type(found) is not list:
        return []
    well_formed = []
    for item in found:
        if type(item) is list and len(item) in sizes and all(type(k) is int for k in item[:-1]):
            well_formed.append(item)
    return well_formed


def references(holder, k):
    return getrefcount(holder[k])


BASE = references([[]], 0)  # an object referenced by one list or dict only (`numbered`, an entry)


def referenced(numbered):
    """The k of each object of numbered (each once) referenced elsewhere too: those may be kept."""
    return [k for k in range(len(numbered)) if references(numbered, k) > BASE]


def unchanged(before, after):
    """Items compared by identity (never by their __eq__, which may be a test object's, asked of
    the test process); a state by equality."""
    if type(before) is list:
        return len(before) == len(after) and all(map(is_, before, after))
    return before == after


def contents(value):
    """What a numbered object holds, sent back after a call (refill puts it in place; intact)."""
    kind = type(value)
    if not intact(value):
        raise ValueError("a UserList or UserDict whose data or attributes the program changed")
    if factored(kind):  # (its factory too, which the program may change)
        return kind(value.default_factory, value)
    if keyed(value) is not None:
        return dict(keyed(value))
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
    if kind is NAMESPACE and not (type(content) is dict and all(type(k) is str for k in content)):
        raise ValueError("malformed contents")  # (its attributes: names)
    if (isinstance(target, set) or keyed(target) is not None) and type(content) is not (
            set if isinstance(target, set) else kind if factored(kind) else dict):
        raise ValueError("malformed contents")  # (one sandbox_values.py:hook built)
    if factored(kind):
        target.default_factory = content.default_factory
    if kind.__module__ == "array":  # (an array of its items, or TypeError before any change)
        content = kind(target.typecode, content if type(content) is list else None)
    if isinstance(target, set) or keyed(target) is not None or kind.__name__ == "deque":
        target = keyed(target) if keyed(target) is not None else target
        target.clear()
        (target.extend if kind.__name__ == "deque" else target.update)(content)
    else:
        target[:] = content


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


def copied(value, refer):
    """The JSON text of a test's object that crosses as a copy (the module's docstring lists how
    each is rebuilt), else None; ValueError for a re.Match its pattern does not find again."""
    kind = type(value)
    module, name = kind.__module__, kind.__name__
    if module == "functools" and name == "partial":
        return '{"P":[%s,%s,%s]}' % (dump(value.func, refer), dump(list(value.args), refer),
                                     dump(dict(value.keywords), refer))
    if module == "_io" and name in BUFFERS:
        return '{"B":%s}' % dump(buffer_state(value), refer)
    if module == "random" and name in ("Random", "SystemRandom"):
        return '{"U":%s}' % dump(value.getstate() if name == "Random" else None, refer)
    if kind is NAMESPACE:
        return '{"j":%s}' % dump(dict(vars(value)), refer)
    if copy_type(kind) and name in USER:
        return '{"u":%s}' % dump([name, contents(value)], refer)
    owner = getattr(value, "__self__", None)
    if module == "re" and name == "Pattern" or type(owner).__name__ == "Pattern" and (
            type(owner).__module__ == "re" and getattr(value, "__name__", "") in PATTERN_METHODS):
        pattern = value if name == "Pattern" else owner
        return '{"p":%s}' % dump([pattern.pattern, pattern.flags,
                                  None if name == "Pattern" else value.__name__], refer)
    if module == "re" and name == "Match":
        how = found_again(value)
        if how is None:
            raise ValueError("a re.Match its pattern does not find again")
        return '{"H":%s}' % dump([value.re.pattern, value.re.flags, value.string, value.pos,
                                  value.endpos, how], refer)
    return None

