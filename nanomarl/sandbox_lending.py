"""sandbox_lending.py: the containers kept on both sides (sandbox_copies.py) that one side lends
the other: a test object's the test process lends the program's process, those at rest, the
program's arguments to a test's callback it hands back, and the program's own containers it
sends back (sandbox.py's docstring has the threat model).

Executed inside the sandbox as the module `sandbox_lending` (sandbox.py's BOOT). A test object's
container the test process hands the program's process (an attribute the program reads, an item,
a callback's result, a draw, what vars() holds: LENT) is lent: kept from then on as a numbered
object is, under a handle of the test process's (below 0), and sent as {"N": [handle, its
value]}, which the program's process keeps as that handle's object (sandbox_copies.py:borrowed):
so the program's changes reach the test's own object, and a second read is the same object there;
one of the call's arguments is sent as {"A": k}, the program's copy of it (lend, settle, lending;
the same bounds, outermost first).

A lent container that holds leaves only (ints, strs, ...) rests once the program's process no
longer reaches it ("z": unheld, from the references counted: unreached): both sides keep it and its
snapshot, compared with nothing at each request (let_go); read again, it wakes, marked {"k":
handle}, if the test's object is as it was (woken; else it is lent anew), whatever its size: a loop
that appends through `box.items` costs no copy of the list at each read. Every answer of the
program's process ends every rest on both sides (sandbox_verdicts.py:test_next; the bounds apply
again there); at most KEPT_OBJECTS rest (beyond, the oldest is forgotten on both sides: "D",
forgotten).

The program's arguments to a test's callback are numbered alike too (sandbox_link.py:ask, handed):
the answer marks each {"a": k}, the program's own object there (`cb(a) is a`), and sends the new
contents of those the callback changed, also when it raised (handed_back), which the program's
process puts into its own objects (sandbox_link.py:taken).

The other way, a container of the program's own that the program's process sends back (a call's
result, an attribute the test reads, a generator's draw: sandbox_child.py:program_side) is lent
if the program still reaches it, from the references counted: one referenced by more than the
value that holds it (a global's, an attribute's, a closure cell's, a cache's list) and all it
holds; a fresh one, referenced by the value alone, stays a copy (reached_back). It is kept from
then on under a handle of the program's process's (from 0 up) and sent as {"N": [handle, its
value]}, which the test process keeps as that handle's object (received): the test's changes
reach the program's own object and the program's later changes the test's copy, and the next
time it crosses it is the test's same object (lent_back, unlent; outermost first, within a room
of their own: sandbox_copies.py:rooms; beyond it, or inside a kept one, a copy; a view of such a
dict, keys(), values() or items(), is a view of that dict there, else its snapshot: walked)."""
from sandbox_copies import (BASE, KEPT_ITEMS, KEPT_OBJECTS, LEAVES, OWN_ITEMS, OWN_OBJECTS,
                            containers, contents, copy_type, inner_unchanged, kept_entry, nested,
                            numbered, parts, references, rooms, share, snapshot, unchanged,
                            weight)  # sandbox.py's BOOT
from sandbox_stdlib import WALK, held_elsewhere
from sandbox_values import VIEWS, dump
from gc import get_referents


LENT = ("attr", "call", "next", "getitem", "vars")  # the test process's ops whose results are lent
VIEWED = ("dict_values", "dict_items")  # the views walked as their dict's values (walked)


def lending(link, refer):
    """The test process's link (sandbox_alarm.py:LINK) made to lend what its ops of LENT give and to
    hand back the program's arguments to a test's callback (handed): its "ops" and "answer"
    wrapped (the answer marks those arguments and lends, sends, then settles)."""
    ops, answer = link["ops"], link["answer"]
    link.update(fresh=[], lent=0, due=False, given=None, resting={}, forgot=[], received=[])

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
    (count, items), found = rooms(kept, link["own"], False), {}
    room, woke = [items, set(), least([value], ids) if len(order) > 1 else {}], {}  # (woken)
    for c in reversed(order):  # (outermost first)
        key = id(c)
        if key in call:
            tags[key] = '{"A":%d}' % call[key]
            link["fresh"].append((key, None))
            continue
        handle, entry = top if c is value else woken(c, link)
        if entry is None:
            if not fits(c, ids, count + len(found), room):
                continue
            link["lent"] -= 1
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


def fits(c, ids, count, room, bounds=(KEPT_OBJECTS, KEPT_ITEMS)):
    """Whether c may be kept too, count objects being kept or chosen already in its room, within
    its bounds (room: [the items they hold, the ids inside a chosen one (costs none: not walked),
    least's costs (one over the room left: not walked)]); if so, its items counted in room."""
    if count >= bounds[0] or id(c) in room[1]:
        return count < bounds[0]
    if room[0] + room[2].get(id(c), 0) > bounds[1]:
        return False
    inside = nested([c], ids, [], set())  # (c and the containers in it, with snapshots)
    cost = sum(weight(inner, state) for inner, state in inside)
    if room[0] + cost > bounds[1]:
        return False
    room[0] += cost
    room[1].update([id(inner) for inner, _ in inside])
    return True


def least(roots, ids):
    """{id: the least that fits' walk (nested) finds in each container reached from roots}: its
    weight and the costs of what it alone holds (referenced once in all that walked and reached
    follow: what a view holds counts for none), none of ids; one walk, not one for each level."""
    refs, costs, order, stack = {}, {}, [], [[None, iter(roots), [], 0]]
    while stack:
        top = stack[-1]
        if (item := next(top[1], stack)) is stack:  # (all it holds walked: after what it holds)
            order.append(stack.pop())
            continue
        kind, key = type(item), id(item)
        if kind in LEAVES or key in ids:
            continue
        refs[key] = refs.get(key, 0) + 1
        if refs[key] > 1:
            continue
        cost, held = 0, parts(item)
        if numbered(kind):
            state = snapshot(item)
            cost, held = weight(item, state), state if type(state) is list else None
        elif held is None and kind.__module__ == "builtins" and kind.__name__ in VIEWED:
            owner = get_referents(item)[0]  # (its dict; a key None: the view adds no cost)
            held, key = list(dict.values(owner)) if isinstance(owner, dict) else None, None
        top[2].append(key)  # (leaves skipped at once, as walked skips them)
        stack.append([item, iter([x for x in held or () if type(x) not in LEAVES]), [], cost])
    for item, _, inner, cost in order[:-1]:  # (inner ones first; the roots' last)
        costs[id(item)] = cost + sum(costs[k] for k in inner if refs.get(k) == 1)
    return costs


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


def walked(box, stop):
    """The containers and tuples that box's values send as values (through lists, tuples, dicts'
    values, a fresh dict's values or items view's values, the dict of a view something else holds
    too, and deques; none of stop, the ids of those marked, nor inside one; none that crosses as
    a reference: copy_type), each once, inner ones first -> (them, {id: the references they and
    box hold to it}, {id: the ids of those it holds}, the ids of those views' dicts: reached)."""
    found, counts, inner, stack, views = [], {}, {}, [[None, iter(box)]], set()
    while stack:  # (no recursion: a value nested deeper than the limit fails in dump, not here)
        top = stack[-1]
        item = next(top[1], stack)
        if item is stack:  # (all it holds walked)
            stack.pop()
            if top[0] is not None:
                found.append(top[0])
            continue
        kind, key = type(item), id(item)
        if kind.__module__ == "builtins" and kind.__name__ in VIEWS and held_elsewhere(item):
            item = get_referents(item)[0]  # (a view of a dict held elsewhere too: that dict)
            kind, key = type(item), id(item)
            views.add(key)
            WALK["met"].add(key)  # (kept, or else its snapshot: sandbox_values.py:dump)
        if kind in LEAVES or key in stop or copy_type(kind):
            continue
        held = parts(item)
        if held is None and kind.__module__ == "builtins" and kind.__name__ in VIEWED:
            held = list(dict.values(get_referents(item)[0]))  # (a fresh dict's: its values)
        if held is None and not numbered(kind):
            continue
        if top[0] is not None:
            inner.setdefault(id(top[0]), []).append(key)
        counts[key] = counts.get(key, 0) + 1
        if counts[key] == 1:  # (its leaves skipped at once: a long list of numbers costs little)
            stack.append([item, iter([x for x in held or () if type(x) not in LEAVES])])
    return found, counts, inner, views


def reached_back(box, stop):
    """The containers of box's values (walked) that the program's process reaches from elsewhere
    too, inner ones first: each met twice in the walk (a row of `[[0] * m] * n`) or referenced
    more often than the walked ones and box reference it (by a global, an object, a closure cell,
    a cache, a generator's frame), and each inside one of those, a tuple so referenced or the dict
    of a view so referenced. A fresh value's containers are met once, referenced by it alone."""
    found, counts, inner, views = walked(box, stop)
    reached = [id(found[k]) for k in range(len(found)) if counts[id(found[k])] > 1
               or references(found, k) - BASE > counts[id(found[k])] or id(found[k]) in views]
    seen = set(reached)
    while reached:  # (what a reached one holds is reached)
        for key in inner.get(reached.pop(), ()):
            if key not in seen:
                seen.add(key)
                reached.append(key)
    return [c for c in found if id(c) in seen and numbered(type(c))]


def lent_back(box, link, aliases, stop, handles):
    """The containers of box's values (a list the harness alone holds: a call's result, an
    attribute, a generator's draws) that the program's process still reaches (reached_back), kept
    from now on as an argument container it holds is, under handles of its own (handles: [the
    next], from 0 up), within OWN_OBJECTS and OWN_ITEMS (a room of their own: link's "own" holds
    their handles; outermost first, as lend), none of stop (the calls' argument containers:
    copies) nor inside a kept one: marked in aliases for the answer {"N": [handle, value]} (the
    test process keeps its copy under the handle: received), {"k": handle} in link's kept_tags
    from then on; noted in link's "lending" until the answer goes out (else forgotten: unlent)."""
    WALK.update(aliases=aliases, met=set())  # (what dump may send as a snapshot)
    if all([type(value) in LEAVES for value in box]):
        return
    kept, ids, tags = link["kept"], link["kept_ids"], link["kept_tags"]
    stop = set(stop).union(aliases, [id(c) for entry in kept.values() for c, _ in entry["nested"]])
    order = reached_back(box, stop)
    (count, items), chosen = rooms(kept, link["own"], True), {}
    room = [items, set(), least(box, ids) if len(order) > 1 else {}]  # (one: one walk)
    for c in reversed(order):  # (outermost first)
        if fits(c, ids, count + len(chosen), room, (OWN_OBJECTS, OWN_ITEMS)):
            chosen[id(c)] = ids[id(c)] = handles[0]
            link["lending"].append((handles[0], id(c)))
            handles[0] += 1
    for c in order:  # (once all are chosen: an entry's nested stops at the kept ones in it)
        if id(c) in chosen:
            handle = chosen[id(c)]
            kept[handle], tags[id(c)] = kept_entry(c, ids), '{"k":%d}' % handle
            link["own"].add(handle)
            aliases[id(c)] = '{"N":[%d,%s]}' % (handle, dump(c, link["refer"], aliases))


def unlent(link, sent):
    """The containers lent_back kept for an answer: kept on if it went out as a value (sent), else
    forgotten (the test process never read them)."""
    kept, ids, tags, lending = link["kept"], link["kept_ids"], link["kept_tags"], link["lending"]
    while lending:
        handle, key = lending.pop()
        if not sent and ids.get(key) == handle:
            kept.pop(handle, None)
            del ids[key]
            tags.pop(key, None)


def received(item, link):
    """The test process's object for a container the program's process keeps from now on
    ({"N": [handle >= 0, value]}: lent_back): value, kept under the handle within twice the
    bounds of their room (OWN_OBJECTS, OWN_ITEMS; as sandbox_verdicts.py:kept_up's "n"; beyond, a
    copy), its entry made anew once the message's write-backs are in (link's "received":
    kept_up); the handle's object if it is kept already (met twice in one value); None if
    malformed."""
    if not (type(item) is list and len(item) == 2 and type(item[0]) is int and item[0] >= 0
            and numbered(type(item[1])) and not copy_type(type(item[1]))):
        return None
    kept, ids, tags = link["kept"], link["kept_ids"], link["kept_tags"]
    handle, value = item
    if handle in kept or id(value) in ids:
        return kept[handle]["object"] if handle in kept else value
    entry, (count, items) = kept_entry(value, ids), rooms(kept, link["own"], True)
    if count < 2 * OWN_OBJECTS and items + entry["weight"] <= 2 * OWN_ITEMS:
        kept[handle], ids[id(value)], tags[id(value)] = entry, handle, '{"k":%d}' % handle
        link["received"].append(handle)
        link["own"].add(handle)
    return value


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


def unheld(kept, ids, tags, dormant, rest=True):
    """The program's process's kept objects it no longer reaches (unreached), forgotten -> {"d":
    their handles, "z": those of them at rest}, an empty list left out: a test object's container
    (lent) that holds leaves only rests in dormant {handle: entry}, so that its next read costs no
    copy, until the test process names it again (awake) or forgets it (unrest); rest False (an
    answer, which ends every rest, in the test process too): none rests, none is left."""
    found = {"d": [], "z": []}
    for handle in unreached(kept, ids):
        entry = kept.pop(handle)
        del ids[id(entry["object"])], tags[id(entry["object"])]
        resting = rest and handle < 0 and not entry["inner_ids"]
        if resting:
            dormant[handle] = entry
        found["z" if resting else "d"].append(handle)
    if not rest:
        dormant.clear()
    return {key: handles for key, handles in found.items() if handles}


def awake(handle, kept, ids, tags, dormant):
    """The kept object of a handle the other side names (a mark, its news), out of rest (unheld)
    in the program's process; None if there is none."""
    if handle in dormant:
        entry = kept[handle] = dormant.pop(handle)
        ids[id(entry["object"])], tags[id(entry["object"])] = handle, '{"k":%d}' % handle
    return kept[handle]["object"] if handle in kept else None


def unrest(handles, kept, ids, tags, dormant):
    """Those the test process forgot ("D": a list of handles; anything else is ignored), forgotten
    in the program's process: at rest (unheld) or kept (one whose news the test process could not
    send: sandbox_link.py:told)."""
    for handle in handles if type(handles) is list else ():
        if type(handle) is int:
            dormant.pop(handle, None)
            if handle in kept:
                key = id(kept.pop(handle)["object"])
                del ids[key]
                tags.pop(key, None)

