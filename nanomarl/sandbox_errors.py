"""sandbox_errors.py: a side's exception classes as the other side sees them, and where a program's
StopIteration is one in the test (sandbox.py's docstring has the threat model).

Executed inside the sandbox as the module `sandbox_errors` (sandbox.py's BOOT).

Crossing. An exception class of one side's own (the program's ValidationError, a test's `class
E(Exception)`) crosses as {"h": [this side's reference to it, its name, qualified name and module,
its bases that are exception classes (each crossing so: a builtin by name), whether it is the
context's class of its name, whether it is its module's own (the class that module holds at its
name in this side's process: sandbox_stdlib.py:own_module; a program's class that only names
statistics as its module is none), and from the program's process its `answered` and the builtin
names its class defines over (overrides)]} (crossing; a class whose metaclass's mro() is not its
bases' is refused: c3_ordered). An exception's payload carries its class so (class_text:
sandbox_values.py:error_payload), and is raised as an instance of it
(sandbox_values.py:program_error).

The class made. It is one real class on the other side (class_of), made once for each: of that
name, qualified name and module, its bases those bases there (none that is no exception class), so
that `except`, issubclass, isinstance and `type(e) is` see it as one process would (a standard
library module's own class of those bases is that module's there); it comes back as the first
side's reference, its own class again. The class made runs none of the other side's code: calling
it asks the other side to call its own class (its __init__ runs there: the instance crosses back),
a subclass made here is made by its nearest builtin's constructor, and its text is the one the
other side gave (its __str__), else its nearest builtin's. No code of an exception's class runs as
it crosses (its __str__, __getattr__, __getattribute__): it is read by BaseException's own slots,
its text only where its class's __str__ is a builtin's over plain values (described).

The program's object behind it. In the test process, by the program's `answered` (a function of
this module in its process, called as any program function is), an instance of a program's class
has the program's object behind it (the one the program's process keeps, RAISED, by the number it
crossed with: sandbox_values.py:error_payload): its public attributes that its class there lacks
(an own attribute, a class attribute, a property, a method, each read anew) and its builtin slots
(args, an OSError's errno), its str and its repr are asked there, as a program object's are
(sandbox_remote.py:Remote), and set and deleted there (forwarding); the object sent again is that
same instance (held); the values it crossed with stand in only where that process no longer holds
it and nothing was asked yet (once asked, the test fails then). A test's subclass of it is made by
the program's class (adopt: the object that call makes stands behind it; the test's own class's
attributes are the test's)."""
import builtins, sys

from sandbox_link import LINK, TestTimeout, abort
from sandbox_patches import PRINTS, same, stdlib_error, unpatched
from sandbox_proxies import TestObject
from sandbox_remote import Remote
from sandbox_stdlib import own_module
from sandbox_values import (CLASS_TEXT, CONTEXT, DECLARED, DESCRIBED, RAISED, Abort, Dumped,
                            ProgramError, builtin_ancestor, dump, error_class,
                            raised)  # sandbox.py's BOOT

CLASSES = 1024  # the most exception classes of the other side's that one side makes
# those made here: {id: the other side's reference}, {id(reference): (reference, class)}
MADE, THEIRS = {}, {}
OVERRIDDEN = {}  # by id of a class made here: the builtin's names its program class defines too
TYPE = vars(type)  # (a class's name, module and bases as its type holds them: no metaclass's)
SLOTS = vars(BaseException)  # (an exception's args and own attributes as it holds them)


def crossing(value, inner, refer):
    """value's JSON text where it is an exception class (else inner(), this side's reference to
    it): one made here (class_of) as the other side's reference to its own; one of this side's as
    {"h": [inner(), ...]} (the module's docstring); the harness's own as its builtin ancestor."""
    if not (issubclass(type(value), type) and issubclass(value, BaseException)):
        return inner()
    if id(value) in MADE:
        return dump(MADE[id(value)], refer)
    if issubclass(value, (Abort, TestTimeout)):
        return dump(builtin_ancestor(value), refer)
    name, module = TYPE["__name__"].__get__(value), TYPE["__module__"].__get__(value)
    bases = [dump(base, refer) for base in TYPE["__bases__"].__get__(value)
             if issubclass(base, BaseException)]
    context = name in PRINTS and same(value) or DECLARED.get(name) is value  # (program; test)
    program = LINK.get("side") == "program"  # (the program's reads of its own: answered)
    if program and not c3_ordered(value):  # (the test's `except` would read its bases' order)
        raise ValueError("an exception class whose ancestry is not its bases' (a metaclass mro)")
    return '{"h":[%s,%s,%s,%s,[%s],%s,%s%s]}' % (
        inner(), dump(name, None), dump(TYPE["__qualname__"].__get__(value), None),
        dump(module if type(module) is str else "", None), ",".join(bases),
        "true" if context else "false", "false" if own_module(value) is None else "true",
        "," + dump(answered, refer) + "," + dump(overrides(value), None) if program else "")


def c3_ordered(kind):
    """Whether kind's ancestry (its __mro__ slot) is the one type's own mro() makes of its bases
    (a metaclass's mro() may make another: one without a base's class, or with other classes)."""
    try:
        return list(TYPE["__mro__"].__get__(kind)) == TYPE["mro"](kind)
    except Exception:
        return False


def overrides(kind):
    """The public names that kind's classes of the program's (no builtin's) define over a builtin
    ancestor's (BaseException's add_note or with_traceback; __notes__ with add_note): read through
    to the program's object in the test process (through), as plain Python runs its own."""
    ancestry, space = TYPE["__mro__"].__get__(kind), TYPE["__dict__"]
    own = {name for owner in ancestry if id(owner) not in BUILTINS and owner is not object
           for name in space.__get__(owner) if type(name) is str}
    found = sorted({name for owner in ancestry if id(owner) in BUILTINS
                    for name in space.__get__(owner) if type(name) is str and name in own
                    and name[:1] != "_" and name not in SLOTTED})
    return found + ["__notes__"] * ("add_note" in found)


def class_text(kind):
    """An exception's class as its payload carries it: its JSON text by this side's refer
    (Dumped), None where it cannot be sent (the payload's name and ancestor make it then)."""
    try:
        return Dumped(dump(kind, LINK["refer"]), kind)
    except Exception:
        return None


CLASS_TEXT[0] = class_text
UNTOLD = "<the program's text>"  # (an exception's message its process does not read: described)
# the builtin exception classes (bound before a program runs) by id; each one's own __str__ (C
# code) by id: it and the slots it reads (what other builtins' hold: a UnicodeError's five)
BUILTINS = {id(kind): kind for kind in vars(builtins).values()
            if type(kind) is type and issubclass(kind, BaseException)}
READS = {"OSError": ("args", "errno", "strerror", "filename", "filename2"),
         "SyntaxError": ("args", "msg", "filename", "lineno"), "ImportError": ("args", "msg"),
         "BaseExceptionGroup": ("message",)}
TEXTS = {id(vars(kind)["__str__"]): (vars(kind)["__str__"], [next(
    vars(owner)[name] for owner in kind.__mro__ if name in vars(owner)) for name in READS.get(
        kind.__name__, ("args", "encoding", "object", "start", "end", "reason")
        if issubclass(kind, UnicodeError) else ("args",))])
    for kind in BUILTINS.values() if "__str__" in vars(kind)}
# the public slots of builtin exception classes (args, an OSError's errno, a SystemExit's code)
SLOTTED = {name for kind in BUILTINS.values() for name, found in vars(kind).items() if name[:1]
           != "_" and type(found) in (type(SLOTS["args"]), type(vars(OSError)["errno"]))}
PLAIN = {id(kind) for kind in (str, int, float, bool, type(None), bytes, complex)}
BOXES = {id(kind) for kind in (tuple, list, dict, set, frozenset)}


def described(error):
    """'Name: message' of an exception (sandbox_values.py:describe), read by BaseException's own
    slots: the text the other process gave it; '<program object>' ('<test object>') where an
    argument is one; the text its class's builtin __str__ makes of plain values (error_text);
    else in the test process its str (the test's code), in the program's UNTOLD: a program's
    __str__ runs only where the test asks it (forwarding), never as its exception crosses."""
    kind = type(error)
    name = TYPE["__name__"].__get__(kind)
    if not issubclass(kind, BaseException):
        return name
    text = SLOTS["__dict__"].__get__(error).get("program_text")
    if type(text) is str and text:
        return text
    for arg in SLOTS["args"].__get__(error):  # (an object's text would ask the other process)
        if issubclass(type(arg), (Remote, TestObject)):
            return name + (": <program object>" if issubclass(type(arg), Remote)
                           else ": <test object>")
    text = error_text(error)
    if text is None and LINK.get("side") != "program":
        try:
            text = str(error)
        except BaseException:
            return name
    return name + ": " + (UNTOLD if type(text) is not str else text)


DESCRIBED[0] = described


def error_text(error):
    """error's str where its class's __str__ is a builtin's (TEXTS: BaseException's, KeyError's,
    OSError's, ...) and what that reads are plain values (inert): no code but C's runs; else
    None (a program's own __str__; an argument that is an object of its: its __str__ would)."""
    found = None
    for kind in TYPE["__mro__"].__get__(type(error)):
        if "__str__" in TYPE["__dict__"].__get__(kind):
            found = TYPE["__dict__"].__get__(kind)["__str__"]
            break
    builtin, reads = TEXTS.get(id(found), (None, ()))
    try:
        if builtin is found and all(inert(read.__get__(error)) for read in reads):
            text = builtin(error)
            return text if type(text) is str else None
    except Exception:  # (a slot of another class's, an int too long for its text)
        pass
    return None


def inert(value, depth=0):
    """Whether value's str and repr run no code but builtins' C: a str, int, float, bool, None,
    bytes or complex, or a tuple, list, dict, set or frozenset of those (4 levels, 1,000 items)."""
    if id(type(value)) in PLAIN:
        return True
    if depth > 3 or id(type(value)) not in BOXES or len(value) > 1000:
        return False
    items = [*value.keys(), *value.values()] if type(value) is dict else value
    return all(inert(item, depth + 1) for item in items)


def crossed(tag, item):
    """What either side's resolve reads of the other's: {"e": payload} an exception (an argument, a
    value: raised), {"h": [...]} an exception class (class_of); ValueError if malformed."""
    if tag == "h":
        return class_of(item)
    if (error := raised(item)) is None:
        raise ValueError("malformed value")
    return error


def class_of(item):
    """The class of the other side's exception class that item describes (crossing's): the one
    made for its reference before; the context's class of its name where it is that (the test's
    class the context declares; the program's own class of that name); a standard library
    module's class of its module and name where it is that module's own there and has those
    bases; else a class made here (made_class; in the test process, with the program's answered
    where the item ends with it: its exceptions are read through to the program's own)."""
    if not (type(item) is list and len(item) in (7, 9) and issubclass(type(item[0]), (
            Remote, TestObject)) and all(type(part) is str and len(part) <= 1000
                                         for part in item[1:4])
            and type(item[4]) is list and type(item[5]) is bool and type(item[6]) is bool):
        raise malformed("a malformed exception class")
    reference, name, qualname, module, bases, context, own = item[:7]
    forward, names = item[7:] or (None, [])
    if not (forward is None or LINK["side"] == "test" and issubclass(type(forward), Remote)
            and callable(forward) and type(names) is list and len(names) <= 64 and all(
                type(part) is str and len(part) <= 100 and (part == "__notes__" or part[:1] != "_"
                and not part.startswith("program_")) for part in names)):
        raise malformed("a malformed exception class")
    if id(reference) not in THEIRS:
        if len(THEIRS) >= CLASSES:
            raise malformed("too many exception classes")
        found = context and exception_class(CONTEXT[0](name)) or own and stdlib_class(
            module, name, bases)
        THEIRS[id(reference)] = reference, found or made_class(reference, name, qualname,
                                                                module, bases, forward, names)
    return THEIRS[id(reference)][1]


def stdlib_class(module, name, bases):
    """The standard library module's exception class of that name
    (sandbox_patches.py:stdlib_error) where its bases are those (a class of the other side's
    that it patched in as statistics', of other bases, is a class of its own), else None."""
    found = stdlib_error(module, name)
    if found is not None and len(bases) == len(found.__bases__) and all(
            base is mine for base, mine in zip(bases, found.__bases__)):
        return found
    return None


def malformed(why):
    return abort(ProgramError(why)) if LINK["side"] == "test" else ValueError(why)


def exception_class(kind):
    """kind if it is a class (a real one: no object that claims to be) of an exception."""
    return issubclass(type(kind), type) and error_class(kind, True) or None


def made_class(reference, name, qualname, module, bases, forward=None, names=()):
    """A class of that name, qualified name and module whose bases are those of bases that are
    exception classes here (each once; Exception where none is; the first alone where Python
    refuses them together): calling it calls the other side's class (reference); its text is the
    other side's. A subclass's instance is made by its nearest builtin's constructor, but, with
    `forward` (the program's answered: the test process's class of a program's), by that
    class's: the program's object it makes stands behind it (adopt), and an instance's attributes
    (names: those of its builtin ancestors' the program's class defines too) and text are read
    through to the program's object behind it (forwarding)."""
    bases = [base for i, base in enumerate(bases) if exception_class(base) and all(
        base is not other for other in bases[:i])] or [Exception]

    def __new__(cls, *args, **kwargs):
        if cls is kind:  # (made there: its instance crosses back, an instance of this class)
            return reference(*args, **kwargs)
        return builtin_ancestor(cls).__new__(cls, *args, **kwargs)

    def __init__(self, *args, **kwargs):
        if type(self) is kind:
            return
        if forward is None:
            builtin_ancestor(type(self)).__init__(self, *args, **kwargs)
        else:  # (a test's subclass: the program's class makes the object behind it)
            adopt(self, reference(*args, **kwargs), kind)

    def __str__(self):
        text = vars(self).get("program_str")
        return text if type(text) is str else builtin_ancestor(type(self)).__str__(self)

    space = dict(__module__=module, __qualname__=qualname, __new__=__new__, __init__=__init__,
                 __str__=__str__)
    if forward is not None:
        space.update(forwarding(forward, __str__))
    for tried in (bases, bases[:1]):
        try:
            kind = type(name, tuple(tried), space)
            break
        except Exception:  # (an order or layout Python refuses; a name it refuses)
            kind = None
    if kind is None:
        raise malformed("a malformed exception class")
    MADE[id(kind)] = reference
    if names:
        OVERRIDDEN[id(kind)] = frozenset(names)
    return kind


GONE = object()  # (asked's: the program's process no longer holds the object)
HANDLES = ("program_handle", "program_object")  # (the numbers of the program's object behind)


def forwarding(forward, snapshot):
    """The methods of the test process's class of a program's exception class by which an
    instance's attributes (its builtin slots too: args, an OSError's errno; but those its class
    here has: a test's subclass's own) and its text are its program object's (asked): read, set
    and deleted there, its str and repr made there; where the program's process no longer holds
    it and none was, as that crossed. The program's number it crossed with makes it that object
    here (held)."""
    def __getattribute__(self, name):
        if through(self, name) and (found := asked(self, forward, "get", name)) is not GONE:
            return found
        return object.__getattribute__(self, name)

    def __setattr__(self, name, value):  # (here too: what the instance crosses with)
        if through(self, name):
            asked(self, forward, "set", name, value)
        elif name in HANDLES and name in vars(self):  # (copy.copy's state: the copy's own)
            return
        object.__setattr__(self, name, value)
        if name == HANDLES[0]:  # (program_error's: the number the program's process sent it by)
            held(value, self)

    def __delattr__(self, name):
        if through(self, name) and asked(self, forward, "del", name) is not GONE:
            vars(self).pop(name, None)
        else:
            object.__delattr__(self, name)

    def __str__(self):
        text = asked(self, forward, "str")
        return snapshot(self) if text is GONE else text_of(text)

    def __repr__(self):
        text = asked(self, forward, "repr")
        return builtin_ancestor(type(self)).__repr__(self) if text is GONE else text_of(text)

    return dict(__getattribute__=__getattribute__, __setattr__=__setattr__,
                __delattr__=__delattr__, __str__=__str__, __repr__=__repr__)


def through(error, name):
    """Whether the attribute name of a program's exception is its program object's: a public
    name (no harness's program_ one) that no class of its class's mro here holds but as a
    builtin's slot (SLOTTED: its args are the program's object's as they are now) or a builtin's
    name the program's class defines too (OVERRIDDEN: its add_note, and then __notes__)."""
    for kind in type(error).__mro__:  # (a test's subclass's own name stays the test's)
        if name in OVERRIDDEN.get(id(kind), ()):
            return True
        if name in kind.__dict__ and not (name in SLOTTED and id(kind) in BUILTINS):
            return False
    return name[:1] != "_" and not name.startswith("program_")


OTHERS, HELD = [], 256  # the program's numbers RAISED holds the test's instance at (oldest
# first), and the most it holds: the program's process holds its last 64 sent, its own again


def held(handle, error):
    """In the test process, the instance made of the program's exception it sent by handle (a
    number from -1 down): RAISED holds it at that number, so that the program's object, sent
    again while its process holds it (the same number: sandbox_values.py:error_payload), is this
    very instance (sandbox_values.py:raised), for the last HELD the program sent."""
    if type(handle) is int and handle < 0 and handle not in RAISED:
        RAISED[handle] = error
        OTHERS.append(handle)
        while len(OTHERS) > HELD:
            RAISED.pop(OTHERS.pop(0), None)


def text_of(text):
    """A str or repr the program's object gave: a str (a program object fails the test)."""
    if type(text) is not str:
        raise abort(ProgramError("an exception's text that is no str"))
    return text


def asked(error, forward, how, name="", value=None):
    """What the program's process answers (answered) for the object behind error (the number it
    crossed with, or that of the one its class made: adopt; an attribute it lacks an
    AttributeError raised here), GONE where it holds none; once one answered, the object is read
    through alone (one it no longer holds fails the test)."""
    own = object.__getattribute__(error, "__dict__")
    handle = own.get(HANDLES[1], own.get(HANDLES[0]))
    answer = forward(handle, how, name, value) if type(handle) is int else ()
    if type(answer) is tuple and len(answer) == 1:
        own["program_live"] = True
        return answer[0]
    if how == "get" and type(answer) is tuple and len(answer) == 2 and type(answer[1]) is str:
        own["program_live"] = True  # (its AttributeError, as one raised here)
        raise AttributeError(answer[1][:300], name=name, obj=error)
    if own.get("program_live") is True:
        raise abort(ProgramError("the program's process no longer holds this exception"))
    return GONE


def adopt(error, made, kind):
    """A test's subclass's instance (error) whose program class (kind) made `made` in the
    program's process: made's arguments, text and attributes are error's, that object stands
    behind it (asked); the attributes the test set before are set on it where made has none of
    that name. One of a second program class besides kind's fails the test."""
    handle = vars(made).get("program_handle") if isinstance(made, kind) else None
    if type(handle) is not int or not all(issubclass(kind, other) for other in type(error).__mro__
                                          if id(other) in MADE):
        raise abort(ProgramError("a test's subclass of this program exception class"))
    own, theirs = vars(error), vars(made)
    before = {key: own.pop(key) for key in [*own] if through(error, key)}
    object.__setattr__(error, "args", made.args)
    own.update({key: value for key, value in theirs.items() if through(error, key)},
               program_object=handle, program_text=theirs.get("program_text"),
               program_str=theirs.get("program_str"))
    for key, value in before.items():
        if key not in theirs:
            setattr(error, key, value)


def answered(handle, how, name, value):
    """In the program's process, at the test process's request (asked): for its exception that
    RAISED holds at handle, (its attribute name,) (or (None, the text of its AttributeError)),
    (None,) once it set or deleted it, (its str,) or (its repr,); () where RAISED holds none."""
    error = RAISED.get(handle) if type(handle) is int else None
    if error is None or type(name) is not str:
        return ()
    if how == "get":
        try:
            return getattr(error, name),
        except AttributeError as missing:  # (its text alone: nothing the program keeps)
            if type(missing) is not AttributeError:
                raise
            return None, str(missing)
    if how in ("set", "del"):
        return (setattr(error, name, value) if how == "set" else delattr(error, name)),
    return (str(error) if how == "str" else repr(error)),


SOURCES, CALLS = {}, {}  # by file name ("<test 0>"), the test process's sources and their calls
STOPS = 0x20 | 0x80 | 0x100 | 0x200  # a generator's or coroutine's code (CO_GENERATOR, ...)


def direct(answered, call, link):
    """Whether the program's call whose answer this thread's frame of `answered` reads (above it
    the link's talk, request and ask: `link`, then a Remote's __call__, `call`) was made by
    the test's own code through plain calls only (its StopIteration is one in the test then):
    each frame up from that __call__ is the test's or the context's, its instruction a call (in
    its source) of a name that holds that Remote, then the function of the frame below, up to
    the test's top level or a generator (which makes a StopIteration a RuntimeError). A C
    function between (map, iter(f, end), next() of a test's iterator) would end an iteration."""
    frame, code = sys._getframe(1), None
    while frame is not None and frame.f_code is not answered:
        frame = frame.f_back
    frame = frame and frame.f_back
    while frame is not None and any(frame.f_code is code for code in link):
        frame = frame.f_back
    if frame is None or frame.f_code is not call:
        return False
    target, frame = frame.f_locals.get("self"), frame.f_back
    for _ in range(64):
        if frame is None or frame.f_code.co_filename not in SOURCES:
            return False
        found = named(frame, called(frame))
        if found is not target if code is None else (
                type(found) is not type(direct) or found.__code__ is not code):
            return False
        code, frame = frame.f_code, frame.f_back
        if code.co_flags & STOPS or code.co_name == "<module>" and code.co_filename[:5] == "<test":
            return True
    return False


def called(frame):
    """The name a test's frame is calling (its instruction now a call of `name(...)`), or None."""
    code, at, ops = frame.f_code, frame.f_lasti, unpatched("opcode", "opmap")
    while at > 0 and code.co_code[at] == ops["CACHE"]:  # (a call's inline cache, after it)
        at -= 2
    if code.co_code[at] not in [ops.get(op) for op in ("CALL", "CALL_KW")]:
        return None
    if code.co_filename not in CALLS:
        CALLS[code.co_filename] = {(node.lineno, node.end_lineno, node.col_offset,
                                    node.end_col_offset): node.func.id
                                   for node in unpatched("ast", "walk")(unpatched("ast", "parse")(
                                       SOURCES[code.co_filename]))
                                   if type(node).__name__ == "Call"
                                   and type(node.func).__name__ == "Name"}
    return CALLS[code.co_filename].get([*code.co_positions()][at // 2])


def named(frame, name):
    """What `name` is in frame: its local, else its global, else its builtin (looked up: no code
    runs, a Scope's __missing__ neither); None for none."""
    for space in (frame.f_locals, frame.f_globals, frame.f_builtins) if name else ():
        if name in space:
            return space[name]
    return None
