"""sandbox_alarm.py: the alarm under which either process of a sandboxed run runs code, and the
link's state (LINK) that its ring notes a timeout in.

Executed inside the sandbox as the module `sandbox_alarm` (sandbox.py's BOOT), before sandbox_link,
which passes LINK, TestTimeout and attempt on to the other modules. A ring raises TestTimeout
inside attempt(), but not while the link holds the alarm off (held: it takes bytes or unpacks a
message); a ring then is owed, never lost: the link's next wait for bytes raises it
(sandbox_link.py:read_line, due)."""
import _signal, _thread

from sandbox_values import Abort  # sandbox.py's BOOT

# (mirrored, sent: the test process's hooks, sandbox_verdicts.py; none in the program's process)
LINK = dict(seq=0, gone="has not started", buffer=bytearray(), failed="", args=[], released=[],
            kept={}, kept_ids={}, kept_tags={}, dormant={}, own=set(), mirrored=lambda numbered: {},
            sent=lambda extra: None, drop=dict, waiting={}, tuples=[],
            ahead=lambda frame: False)  # (a stream's item read ahead: sandbox_ahead.py)


class TestTimeout(BaseException):  # not an Exception: `except Exception` does not swallow it
    pass


ALARM = [False]  # armed: the alarm raises TestTimeout only inside attempt()
OWED = [False, False]  # [held off while armed (held), a ring came meanwhile (owed to due)]
MAIN = _thread.get_ident()  # the thread the alarm interrupts (Python runs signal handlers there)
RING_AGAIN = 0.05  # seconds between rings once the alarm has gone off


def on_alarm(signum, frame):
    """The test process notes the timeout first (LINK["failed"]: a test that swallows the
    TestTimeout still fails as timed out); the alarm rings every RING_AGAIN s until attempt ends.
    A ring while held is owed (due raises it)."""
    if OWED[0]:
        OWED[1] = True
    elif ALARM[0] and not LINK["ahead"](frame):  # (one read ahead suspends its item instead)
        rang()


def rang():
    if LINK.get("side") == "test":
        LINK["failed"] = LINK["failed"] or "Timeout: test timed out"
    raise TestTimeout()


def due():
    """Raises the ring that came while the alarm was held off, if one did and it is armed again."""
    if OWED[1] and ALARM[0] and _thread.get_ident() == MAIN:
        OWED[1] = False
        rang()


def attempt(fn, seconds):
    """fn() under a wall-clock alarm -> ("v", its value) | ("t", None) | ("e", the exception).
    Inside another attempt (a request served while waiting for an answer) and in any thread but
    the main one the outer alarm goes on and its TestTimeout passes through."""
    if ALARM[0] or OWED[0] or _thread.get_ident() != MAIN:
        try:
            return "v", fn()
        except (TestTimeout, Abort):
            raise
        except BaseException as e:
            return "e", e
    _signal.signal(_signal.SIGALRM, on_alarm)
    OWED[1] = False
    _signal.setitimer(_signal.ITIMER_REAL, max(seconds, 0.001), RING_AGAIN)
    try:
        try:
            ALARM[0] = True
            value = fn()
            due()  # (a ring owed once it returns: it ran past its time all the same)
            return "v", value
        finally:  # (a ring in this block still ends in the outer one: the alarm is off after it)
            ALARM[0] = False
            _signal.setitimer(_signal.ITIMER_REAL, 0)
    except TestTimeout:
        return "t", None
    except BaseException as e:
        return "e", e
    finally:
        ALARM[0] = OWED[1] = False
        _signal.setitimer(_signal.ITIMER_REAL, 0)


def armed():
    """Whether the main thread runs code under the alarm now (not held off)."""
    return ALARM[0] and _thread.get_ident() == MAIN


def held(fn, *args):
    """fn(*args) with the alarm held off (a ring meanwhile raises nothing, but is owed: due), in
    the main thread (the one a ring interrupts: another's is fn(*args))."""
    if _thread.get_ident() != MAIN or not ALARM[0]:
        return fn(*args)
    OWED[0] = True
    ALARM[0] = False
    try:
        return fn(*args)
    finally:
        ALARM[0] = True
        OWED[0] = False
