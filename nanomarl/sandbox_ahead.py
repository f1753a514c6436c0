"""sandbox_ahead.py: the program's process's draws of a stream (a generator or builtin iterator
the test draws: sandbox_remote.py:Remote's next), executed inside the sandbox as the module
`sandbox_ahead` (sandbox.py's BOOT).

A "next" request asks for some items: the first is drawn as the test asks, the others are read
ahead (one round trip for many) only where plain Python would show no difference: while each item
is a lasting value (sandbox_bases.py:lasting; a list the program changes later, a groupby's group,
read ahead, would reach the test as the later items leave it), and none while the test catches the
program's output, warnings or logs or gives it stdin, while another stream's item is suspended or
in a request served while the program waits for an answer of its own. A read-ahead item is
suspended at its first act the test could see: a request of the program's to the test process (a
callback, a test object's attribute: sandbox_link.py:request) or the end of AHEAD seconds (a slow
item, an endless one: the alarm rings, sandbox_alarm.py:on_alarm). The test is answered with the
items before it, and its requests are served meanwhile, on top of the suspended item's frames,
until it asks this stream's next item: then the item goes on, as the first of that request, under
its alarm (sandbox_child.py's answer_with answers it: LINK["resumed"]). Meanwhile the stream runs
for the program's own code (its next, send or close raise ValueError: in plain Python they run)."""
import _signal, sys

from sandbox_alarm import ALARM, LINK, RING_AGAIN
from sandbox_bases import lasting
from sandbox_link import ROOM, TALKING, overdue, room, serve
from sandbox_values import error_payload  # sandbox.py's BOOT

AHEAD = 0.05  # the seconds a request may read ahead before its item in progress is suspended
CAUGHT = ("o", "e", "c", "g", "i")  # a request's keys for what the test catches or gives
IDLE = LINK["ahead"]  # (no item read ahead: a ring is the alarm's, a request goes out)
HARNESS = error_payload.__code__.co_filename.rpartition("/")[0] + "/sandbox_"  # (its modules)


def drawn(value, count, extra, text):
    """-> (the items of value a "next" request gets, its end: "stop", the payload of the exception
    a draw raised, or None); count: how many it asks for, extra: its extra (that of the request
    that resumes a suspended item, once one does), text(items): the JSON text of the answer's
    value (sent early, where an item is suspended)."""
    items, end, message, base = [], None, LINK["asked"], depth()
    seq, armed, reading = message[0], None, ahead(extra)

    def ring(frame):
        """A ring of the alarm (frame: the code it interrupts) or a request of the program's
        (None) while an item is read ahead: the item suspended (but a ring in the harness's own
        code, which ends the batch: in code the program called, it rings again) -> True."""
        nonlocal seq, count, armed, reading
        if frame is not None and frame.f_code.co_filename.startswith(HARNESS):
            reading = False
            return True
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        LINK["ahead"], ALARM[0], armed = IDLE, False, None  # (those served: their own alarms)
        LINK["answer"](seq, "v", (text(items), ""), LINK["after"](extra))
        asked = suspended(message[3], depth() - base)
        seq, count = asked[0], max(1, min(asked[4], 256))
        LINK["resumed"][message[0]] = seq  # (the request serve answers last: this one)
        extra.clear()  # (the dict serve holds: after() gives back what before() took on)
        extra.update(asked[6])
        LINK["reached"].append(message[3])
        LINK["before"](extra)
        items.clear()
        reading, ALARM[0] = ahead(extra), True
        _signal.setitimer(_signal.ITIMER_REAL, max(extra.get("s", 1.0), 0.001), RING_AGAIN)
        return True

    try:
        items.append(next(value))
        while reading and len(items) < count and lasting(items[-1]):
            if armed is None:
                if (armed := budget()) is None:
                    break
                LINK["ahead"] = ring
            item = next(value)  # (items is emptied where the item is suspended: its own list)
            items.append(item)
    except StopIteration:
        end = "stop"
    except Exception as e:
        end = error_payload(e)
    finally:
        if LINK["ahead"] is ring:
            LINK["ahead"] = IDLE
            left, spent = armed[0], armed[1] - _signal.getitimer(_signal.ITIMER_REAL)[0]
            _signal.setitimer(_signal.ITIMER_REAL, max(left - spent, 0.001), RING_AGAIN)
    return items, end


def ahead(extra):
    """Whether a request of this extra may read ahead: the test catches or gives the program
    nothing, no other stream's item is suspended, the program waits for no answer of its own."""
    return not ("suspended" in LINK or TALKING._is_owned() or any(k in extra for k in CAUGHT))


def budget():
    """The alarm set to ring once AHEAD seconds are spent reading ahead (within the request's own
    time), then every millisecond -> (the request's seconds left, the budget); None: none left."""
    left = _signal.getitimer(_signal.ITIMER_REAL)[0]
    if left <= 0:
        return None
    _signal.setitimer(_signal.ITIMER_REAL, min(AHEAD, left), 0.001)
    return left, min(AHEAD, left)


def suspended(handle, frames):
    """The test's requests served (frames: those of the suspended item, over the limit, as in
    plain Python, where they are not on the stack), until it asks the stream of handle for its
    next items -> that request. The argument containers a request of the program's numbered
    before it went out (sandbox_link.py:ask), it suspended, are set aside meanwhile."""
    caller = room(frames + ROOM)
    stacks = LINK["args"][:], LINK["tuples"][:]
    LINK["args"].clear()
    LINK["tuples"].clear()
    LINK["suspended"] = handle
    try:
        while (message := LINK["next"]())[1:4] != ["q", "next", handle] or type(
                message[4]) is not int:
            serve(message, frames) if message[1] == "q" else overdue(message)
    finally:
        del LINK["suspended"]
        LINK["args"][:], LINK["tuples"][:] = stacks
        room(caller)
    return message


def depth():
    """How many frames the stack holds now."""
    frame, found = sys._getframe(1), 0
    while frame is not None:
        frame, found = frame.f_back, found + 1
    return found
