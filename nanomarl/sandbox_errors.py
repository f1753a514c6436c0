"""sandbox_errors.py: a side's exception classes as the other side sees them, and where a program's
StopIteration is one in the test (sandbox.py's docstring has the threat model).

Executed inside the sandbox as the module `sandbox_errors` (sandbox.py's BOOT). An exception class
of one side's own (the program's ValidationError, a test's `class E(Exception)`) crosses as
{"h": [this side's reference to it, its name, qualified name and module, its bases that are
exception classes (each crossing so: a builtin by name), whether it is the context's class of its
name, whether it is its module's own (the class that module holds at its name in this side's
process: sandbox_stdlib.py:own_module; a program's class that only names statistics as its module
is none)]} (crossing) and is one real class on the other side (class_of), made once for each: of
that name, qualified name and module, its bases those bases there (none that is no exception
class), so that `except`, issubclass, isinstance and `type(e) is` see it as one process would (a
standard library module's own class of those bases is that module's there); it comes back
as the first side's reference, its own class again. An exception's payload carries its class so
(class_text: sandbox_values.py:error_payload), and is raised as an instance of it
(sandbox_values.py:program_error). The class made runs none of the other side's code: calling it
asks the other side to call its own class (its __init__ runs there: the instance crosses back), a
subclass made here is made by its nearest builtin's constructor, and its text is the one the other
side gave (its __str__), else its nearest builtin's. No other attribute or method of the class
crosses."""
import sys

from sandbox_link import LINK, TestTimeout, abort
from sandbox_patches import PRINTS, same, stdlib_error, unpatched
from sandbox_proxies import TestObject
from sandbox_remote import Remote
from sandbox_stdlib import own_module
from sandbox_values import (CLASS_TEXT, CONTEXT, DECLARED, Abort, Dumped, ProgramError,
                            builtin_ancestor, dump, error_class, raised)  # sandbox.py's BOOT

CLASSES = 1024  # the most exception classes of the other side's that one side makes
# those made here: {id: the other side's reference}, {id(reference): (reference, class)}
MADE, THEIRS = {}, {}
TYPE = vars(type)  # (a class's name, module and bases as its type holds them: no metaclass's)


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
    return '{"h":[%s,%s,%s,%s,[%s],%s,%s]}' % (
        inner(), dump(name, None), dump(TYPE["__qualname__"].__get__(value), None),
        dump(module if type(module) is str else "", None), ",".join(bases),
        "true" if context else "false", "false" if own_module(value) is None else "true")


def class_text(kind):
    """An exception's class as its payload carries it: its JSON text by this side's refer
    (Dumped), None where it cannot be sent (the payload's name and ancestor make it then)."""
    try:
        return Dumped(dump(kind, LINK["refer"]), kind)
    except Exception:
        return None


CLASS_TEXT[0] = class_text


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
    bases; else a class made here (made_class)."""
    if not (type(item) is list and len(item) == 7 and issubclass(type(item[0]), (
            Remote, TestObject)) and all(type(part) is str and len(part) <= 1000
                                         for part in item[1:4])
            and type(item[4]) is list and type(item[5]) is bool and type(item[6]) is bool):
        raise malformed("a malformed exception class")
    reference, name, qualname, module, bases, context, own = item
    if id(reference) not in THEIRS:
        if len(THEIRS) >= CLASSES:
            raise malformed("too many exception classes")
        found = context and exception_class(CONTEXT[0](name)) or own and stdlib_class(
            module, name, bases)
        THEIRS[id(reference)] = reference, found or made_class(reference, name, qualname,
                                                                module, bases)
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


def made_class(reference, name, qualname, module, bases):
    """A class of that name, qualified name and module whose bases are those of bases that are
    exception classes here (each once; Exception where none is; the first alone where Python
    refuses them together): calling it calls the other side's class (reference); a subclass's
    instance is made by its nearest builtin's constructor; its text is the other side's."""
    bases = [base for i, base in enumerate(bases) if exception_class(base) and all(
        base is not other for other in bases[:i])] or [Exception]

    def __new__(cls, *args, **kwargs):
        if cls is kind:  # (made there: its instance crosses back, an instance of this class)
            return reference(*args, **kwargs)
        return builtin_ancestor(cls).__new__(cls, *args, **kwargs)

    def __init__(self, *args, **kwargs):
        if type(self) is not kind:
            builtin_ancestor(type(self)).__init__(self, *args, **kwargs)

    def __str__(self):
        text = vars(self).get("program_str")
        return text if type(text) is str else builtin_ancestor(type(self)).__str__(self)

    space = dict(__module__=module, __qualname__=qualname, __new__=__new__, __init__=__init__,
                 __str__=__str__)
    for tried in (bases, bases[:1]):
        try:
            kind = type(name, tuple(tried), space)
            break
        except Exception:  # (an order or layout Python refuses; a name it refuses)
            kind = None
    if kind is None:
        raise malformed("a malformed exception class")
    MADE[id(kind)] = reference
    return kind


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
