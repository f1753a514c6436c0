"""sandbox_patches.py: a test's patches of module attributes, mirrored in the program's process
(sandbox.py's docstring has the threat model).

Executed inside the sandbox as the module `sandbox_patches` (sandbox.py's BOOT). A test's patch of a
module attribute crosses with each request (and a callback's answer, where the callback set one:
sandbox_verdicts.py:module_patches, mirrored, served): noted in the test process (its modules are
`module`s: noted), set in the program's module for the request (took_on, gave_back; a lasting
value, which the program cannot change, is sent once and then only named while it stays the same:
the program's process keeps it; one that is also one of the call's argument containers is the
program's copy of that argument: on_arguments), and never seen by the harness's own lookups in
either (unpatched). A test's frozen clock is a class of the program's process there (stand_in;
its values: datetime_base, of_class; the program's own subclass with names of its own: own_dated).
The originals also name what crosses by name: a builtin class or function, or math's
(builtin_named), a standard library module's exception class (stdlib_error); and a program's class
that is the context's class of its name as plain Python sees it crosses as that class (same: by the
fingerprints the test process sends).
The state of a process that the program and its tests share in plain Python: decimal's context,
kept as one by both sides (decimal_now, take_decimal), and open() of os.devnull for writing, on
either side (quiet_null)."""
import builtins, sys


IMPORT = __import__  # (a test's mock.patch of builtins.__import__ is not the harness's)
# the module attributes a test's patches hold: {(module, attribute): [its value before, ...]}
PATCHED = {}
SETS = [0]  # how many times the test process's modules had an attribute set from outside


def unpatched(name, attribute):
    """A module's attribute as the harness uses it (a datetime rebuilt while a test patches
    datetime.datetime): as it was before a test's patch in force."""
    found = IMPORT(name)
    entry = PATCHED.get((found, attribute))
    return getattr(found, attribute) if entry is None or entry[0] is PATCHED else entry[0]


ORIGINAL = dict(vars(builtins), NoneType=type(None), ellipsis=type(...),  # (taken before a
                NotImplementedType=type(NotImplemented))  # program can replace builtins)
STDLIB = ("json statistics decimal fractions re csv datetime collections itertools functools heapq "
          "bisect math string textwrap enum dataclasses typing operator copy").split()
PURE = frozenset("abs all any ascii bin callable chr divmod format hash hex isinstance issubclass "
                 "iter len max min next oct ord pow repr round sorted sum".split())


def builtin_named(name, module="builtins"):
    """The builtin of that name that crosses by name ({"M": [module, name]}): a class, Ellipsis,
    NotImplemented or a function of PURE (none that runs what it is given: no eval, open or
    print), or a function of math's (each computes numbers from numbers: math.sqrt); else
    ValueError (a malformed value)."""
    found = ORIGINAL.get(name) if type(name) is str and module == "builtins" else None
    if found is not None and (isinstance(found, type) or name in PURE or found is ...
                              or found is NotImplemented):
        return found
    try:
        found = unpatched("math", name) if module == "math" and type(name) is str else None
    except AttributeError:
        found = None
    if type(found) is type(len) and found.__self__ is IMPORT("math"):
        return found
    raise ValueError("malformed value")


def by_name(value):
    """[module, name] under which value crosses (builtin_named is it: int, max, Ellipsis,
    math.sqrt), else None."""
    kind = type(value)
    name = getattr(value, "__name__", None) if kind is type or kind is type(len) else (
        "Ellipsis" if value is ... else "NotImplemented")
    for module in ("builtins", "math") if kind is type(len) else ("builtins",):
        try:
            if builtin_named(name, module) is value:
                return [module, name]
        except ValueError:
            pass
    return None


def stdlib_error(module, name):
    """The exception class of that name of a module of STDLIB's (one of its own, json.decoder's
    for json, _csv's for csv: its public module), imported if need be; else None."""
    module = module.partition(".")[0].lstrip("_") if type(module) is str else None
    try:
        found = unpatched(module, name) if module in STDLIB else None
    except Exception:
        return None
    if isinstance(found, type) and issubclass(found, BaseException) and found.__name__ == name:
        return found
    return None


DATETIMES = ("date", "datetime", "time", "timedelta", "timezone")  # datetime's value types


def datetime_base(kind):
    """The type of datetime's (DATETIMES) that kind is or derives from, else None."""
    for found in kind.__mro__:
        if found.__module__ == "datetime" and found.__name__ in DATETIMES:
            return found
    return None


# what Python puts in a class of no names of its own (a `class Day(date): pass`)
PLAIN = {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__slots__",
         "__annotations__", "__firstlineno__", "__static_attributes__", "__annotate__"}
CLOCKS = set()  # the stand-ins of the tests' frozen clocks made (stand_in): the test's classes


def own_dated(kind, base):
    """Whether a program's subclass of datetime's type base has names of its own (a method, a
    property, a constant; a frozen clock's stand-in's are the test's), in any class of its
    ancestry that base's lacks (a mixin after base too: `class Day(date, Mixin)`): its instances
    cross as program objects that keep their base's value (sandbox_remote.py:Valued), not as that
    value; True where its ancestry cannot be read."""
    try:
        ancestry, based = (vars(type)["__mro__"].__get__(k) for k in (kind, base))
        return any(owner not in CLOCKS and owner not in based and not PLAIN.issuperset(vars(
            type)["__dict__"].__get__(owner)) for owner in ancestry)
    except Exception:
        return True


def of_class(value, kind):
    """value as an instance of kind where kind derives from value's type (a test's frozen clock,
    its stand-in), made by that type's own constructor from value's state (no code of kind's
    runs); else value, whatever kind is."""
    base = type(value)
    if issubclass(type(kind), type) and kind is not base and datetime_base(kind) is base:
        return base.__new__(kind, *base.__reduce__(value)[1])
    return value


def stand_in(base, name, on_class, on_instance):
    """The program's process's class for a test's frozen clock (patched in as datetime.datetime;
    sandbox_verdicts.py:frozen_class sends it): a real subclass of the type of datetime's (its
    constructor, isinstance and inherited methods are datetime's, its instances values, marked
    with the test's class when they cross); the test's methods called in the test process (an
    instance method with the instance, as an instance of the test's class)."""
    def on(method):
        return lambda self, *args, **kwargs: method(self, *args, **kwargs)
    space = {key: staticmethod(method) for key, method in on_class.items()}
    space.update({key: on(method) for key, method in on_instance.items()}, __module__="__main__")
    made = type(name, (unpatched("datetime", base),), space)
    CLOCKS.add(made)
    return made


# in the program's process, the fingerprints of the classes the context declares (the test
# process's first request brings them: sandbox_verdicts.py:mirrored), for same
PRINTS = {}


def test_made(value):
    """A class the tests (or the context) define, or an instance of one."""
    kind = value if issubclass(type(value), type) else type(value)
    return kind.__module__ == "__main__" and not issubclass(kind, BaseException)


def module_level(kind):
    """Whether kind is a class defined at the top of the program (or of the context)."""
    return kind.__module__ == "__main__" and kind.__qualname__ == kind.__name__


def same(kind):
    """Whether a program's class is the context's class of its name as plain Python sees it (one
    the program repeats; never one it redefines otherwise): a module-level class of the same
    ancestry whose own attributes include the context's class's, each alike; any more it defines
    are names the context's class lacks (a helper method), or its text (__repr__, __str__): the
    test process never runs them, and a test reading them fails there as it could in plain Python.
    (A forged fingerprint only claims the context's class.)"""
    context, mine = PRINTS.get(kind.__name__), module_level(kind) and fingerprint(kind)
    if type(context) is not list or len(context) != 3 or not mine or mine[0] != context[0]:
        return False
    own, names = context[1], context[2]
    return type(own) is dict and type(names) is list and all(
        mine[1].get(key) == value for key, value in own.items()) and all(
        key in own or key in TEXT or key not in names for key in mine[1])


def fingerprint(kind):
    """Numbers the same for classes defined alike, whatever their docstrings and lines: [the hash
    of its metaclass's name and, for each class of its ancestry, its module and name and, for one
    of __main__'s above it, the shape of what its own __dict__ holds; {name: the hash of its
    shape} of its own __dict__; the names it has (dir)], None where they cannot be taken."""
    try:
        return [hash((type(kind).__qualname__, *[
            (k.__module__, k.__qualname__, k.__module__ == "__main__" and shape(
                [item for item in vars(k).items() if item[0] not in SKIPPED]))
            for k in kind.__mro__[1:]])),
            {key: hash(shape(settled(kind, key, value))) for key, value in vars(kind).items()
             if key not in SKIPPED},
            sorted(dir(kind))]
    except Exception:
        return None


def settled(kind, key, value):
    """What fingerprint takes of an attribute of kind's: of an Enum class's maps of names and of
    values to members, its own members only, without the combined flags its class made since
    (`Perm.R | Perm.W`, as they are met), each by its name and value (a member renamed, or another
    one put in the map, makes its class differ from the context's); of any other member, its name
    and value too; else the attribute itself."""
    if key in ("_value2member_map_", "_member_map_") and type(value) is dict:
        members = {id(member) for member in vars(kind)["_member_map_"].values()}
        return {found: alike(kind, member) for found, member in value.items()
                if id(member) in members}
    return alike(kind, value)


def alike(kind, value):
    """A member of the Enum class kind by its _name_ and _value_ (read past the class's own
    attribute lookup); else value."""
    if type(value) is not kind or "_member_map_" not in vars(kind):
        return value
    return [object.__getattribute__(value, name) for name in ("_name_", "_value_")]


TEXT = ("__repr__", "__str__")
SKIPPED = ("__doc__", "__module__", "__qualname__", "__dict__", "__weakref__", "__firstlineno__")
CODES = {}  # a code object's shape, by id: {id: (code object, shape)} (a code object never changes)


def shape(value, depth=0):
    """What a class's attribute is, for fingerprint: a function by its code, defaults and closure;
    a static or class method or a property by its functions; a code object by the hash of its
    names and instructions, each constant it loads by its shape (a docstring, never loaded,
    counts for nothing; line numbers are not in them); a value of a builtin type by itself (a
    container by its items'); a class by its module and name; anything else by its type's."""
    kind = type(value)
    if depth > 20:
        raise RecursionError("too deep")
    if kind is type(shape):
        value = [value.__code__, value.__defaults__, value.__kwdefaults__,
                 [cell.cell_contents for cell in value.__closure__ or ()]]
    elif kind is staticmethod or kind is classmethod or kind is property:
        value = [value.__func__] if kind is not property else [value.fget, value.fset, value.fdel]
    if type(value) in (list, tuple, set, frozenset, dict):
        items = value.items() if type(value) is dict else value
        if len(items) > 1000:
            return kind.__name__, len(items)
        found = [shape(item, depth + 1) for item in items]
        return kind.__name__, frozenset(found) if kind in (set, frozenset) else tuple(found)
    if kind is type(shape.__code__) and id(value) not in CODES:
        if len(CODES) > 1000:
            CODES.clear()
        ops, loads, arg, steps = value.co_code, unpatched("opcode", "hasconst"), 0, []
        extended = unpatched("opcode", "EXTENDED_ARG")  # (its argument: the next one's high bits)
        for i in range(0, len(ops), 2):
            arg = arg << 8 | ops[i + 1]
            if ops[i] != extended:
                steps.append((ops[i], shape(value.co_consts[arg]) if ops[i] in loads else arg))
                arg = 0
        CODES[id(value)] = value, hash((tuple(steps), value.co_names, value.co_varnames,
                                        value.co_argcount, value.co_kwonlyargcount, value.co_flags))
    if kind is type(shape.__code__):
        return CODES[id(value)][1]
    if kind in (int, float, complex, str, bytes, bool, type(None)):
        return kind.__name__, value
    owner = value if issubclass(kind, type) else kind
    return owner.__module__, owner.__qualname__


class module(type(sys)):
    """The class of the test process's modules once the context has run (watch_modules), named as
    a module's own (type(m) is not types.ModuleType then; isinstance holds): an attribute set on
    one from outside (mock.patch('random.randint'), patch.object, `random.randint = f`; never the
    module's own code, whose globals it sets directly) is noted, so that sandbox_verdicts.py:
    mirrored compares those only, and nothing while none is set."""
    __slots__ = ()
    __module__ = "builtins"

    def __setattr__(self, name, value):
        noted(self, name, value)
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        noted(self, name, None)
        object.__delattr__(self, name)


def noted(space, name, value):
    """PATCHED[module, name] = [its value before (PATCHED if none)], once until
    sandbox_verdicts.py:module_patches finds it restored; but a dunder and a submodule that its
    import sets on its package. Each set is counted (SETS: sandbox_verdicts.py:served)."""
    SETS[0] += 1
    if (space, name) not in PATCHED and not name.startswith("__") and not (
            type(value) in (type(sys), module) and vars(value).get("__name__") == "%s.%s" % (
                vars(space).get("__name__"), name)):
        PATCHED[space, name] = [vars(space).get(name, PATCHED)]


def watch_modules():
    """The test process's modules, and those it imports from now on (its import machinery's
    module_from_spec), made `module`s; but builtins, sys and warnings (sandbox_verdicts.py:mirrored
    has their rules) and the harness's own."""
    importing = sys.modules.get("_frozen_importlib")
    made = getattr(importing, "module_from_spec", None)

    def module_from_spec(spec):  # (looked up at each import: a module is one from its birth)
        found = made(spec)
        if type(found) is type(sys):
            found.__class__ = module
        return found
    if made is not None:
        importing.module_from_spec = module_from_spec
    for name, found in list(sys.modules.items()):
        if type(found) is type(sys) and not name.startswith("sandbox_") and name not in (
                "builtins", "sys", "warnings", "__main__"):
            found.__class__ = module


def took_on(patches, last=None):
    """The module attributes the test set (sandbox_verdicts.py:module_patches: [module name,
    attribute, value], or in a request [module name, attribute] for the value the requests took
    on last, noted in `last`; one that is one of the call's arguments is set once they are
    numbered: on_arguments), each set for this request in the dict of the program's module of
    that name (imported first where it is not yet, as the test's patch imported it; no code of the
    program's runs): -> what gave_back puts back."""
    done, last = [], {} if last is None else last
    for patch in patches:
        if not (type(patch) is list and len(patch) in (2, 3) and type(patch[0]) is str
                and type(patch[1]) is str):
            continue
        name, attribute = key = patch[0], patch[1]
        if len(patch) == 3:
            last[key] = patch[2]
        elif key not in last:
            continue
        value = last[key]
        try:
            found = sys.modules.get(name) or IMPORT(name) and sys.modules.get(name)
        except Exception:  # (no such module here)
            continue
        if type(found) is type(sys):
            space = vars(found)
            done.append((found, attribute, space.get(attribute, PATCHED),
                         (found, attribute) not in PATCHED))
            PATCHED.setdefault((found, attribute), [done[-1][2]])  # (the harness's: unpatched)
            space[attribute] = value
    return done


def on_arguments(patches, numbered):
    """The module attributes the test set to one of a call's argument containers (in a request's
    patches, [module name, attribute, null, k]: sandbox_verdicts.py:module_patches), each set for
    the rest of the request to the program's k-th one (numbered as the test process numbered
    them): one object, as in one process -> what gave_back puts back."""
    return took_on([[patch[0], patch[1], numbered[patch[3]]] for patch in patches
                    if type(patch) is list and len(patch) == 4 and type(patch[3]) is int
                    and 0 <= patch[3] < len(numbered)])


def gave_back(done):
    """The program's module attributes as they were before took_on, the last one set first."""
    for found, attribute, former, first in reversed(done):
        if former is PATCHED:
            vars(found).pop(attribute, None)
        else:
            vars(found)[attribute] = former
        if first:
            PATCHED.pop((found, attribute), None)


# decimal's context, which a program and its tests share in plain Python (one a thread): the one the
# two processes agreed on last (sandbox_link.py:state_told sends a side's own where it is not this,
# sandbox_link.py:unpacked sets the other's), as decimal_now reads it: a fresh interpreter's on
# both sides of the fork until either changes its own
DECIMAL = [[28, "ROUND_HALF_EVEN", -999999, 999999, 1, 0,
            ["DivisionByZero", "InvalidOperation", "Overflow"]]]
FIELDS = ("prec", "rounding", "Emin", "Emax", "capitals", "clamp")  # (and traps; never flags)
KINDS = [int, str, int, int, int, int, list]  # (their types as they cross)


def decimal_now(context=None):
    """This side's decimal context (by default its thread's: current_decimal) as it crosses:
    [prec, rounding, Emin, Emax, capitals, clamp, the names of the traps set, sorted], read by
    decimal.Context's own descriptors (a subclass's property hides nothing); None where there is
    none or it cannot be read as such."""
    context = current_decimal() if context is None else context
    if context is None:  # (decimal never imported: at each message, so no exception raised)
        return None
    try:
        own = vars(unpatched("decimal", "Context"))
        found = [own[name].__get__(context) if name in own else getattr(context, name)
                 for name in FIELDS]
        traps = own.get("__getattribute__", getattr)(context, "traps")
        found.append(sorted(str(signal.__name__) for signal, on in traps.items() if on))
    except Exception:
        return None
    return found if [type(field) for field in found[:6]] == KINDS[:6] else None


def current_decimal(made=False):
    """This side's thread's decimal context itself; None where this side never imported decimal
    (made: imported now, the thread's context made)."""
    try:
        return unpatched("decimal", "getcontext")() if made or "decimal" in sys.modules else None
    except Exception:
        return None


def take_decimal(found, context=None):
    """found (decimal_now's, from the other side) set on this side's decimal context (by default
    its thread's: decimal imported where it was not) field by field, by decimal.Context's own
    descriptors, on the object itself (as a `getcontext().prec = 6` changes the one context of a
    plain Python thread; its flags stay), and noted as agreed (DECIMAL: where this side's differs
    after all, its next message tells it) -> False, nothing set, where found is malformed: not 6
    fields of their types and trap names from which decimal.Context makes a context."""
    if type(found) is not list or [type(field) for field in found] != KINDS or len(found[6]) > 9:
        return False
    try:
        made = unpatched("decimal", "Context")
        own, signals = vars(made), {signal.__name__: signal for signal in made().traps.keys()}
        traps = sorted({name: signals[name] for name in found[6]}.items())
        new = made(*found[:6], traps=[signal for _, signal in traps], flags=[])  # (checked)
        if context is None:
            context = unpatched("decimal", "getcontext")()
        for name in FIELDS:
            if name in own:
                own[name].__set__(context, getattr(new, name))
            else:
                setattr(context, name, getattr(new, name))
        own.get("__setattr__", setattr)(context, "traps", new.traps)
    except Exception:
        return False
    DECIMAL[0] = [*found[:6], [name for name, _ in traps]]
    return True


def quiet_null():
    """In either process, before the program or the context runs: open() and io.open() of
    os.devnull for writing only (no reading, no "+", no "x") give a file on a duplicate of its
    stdin, the write-only /dev/null both inherit (sandbox.py:run_tests_in_sandbox), as plain
    Python's open gives one on /dev/null: what it writes is discarded
    (redirect_stdout(open(os.devnull, "w")) silences prints, a test's
    unittest.TextTestRunner(stream=open(os.devnull, "w")) runs), nothing is opened, no new
    descriptor can be read. Any other open is open's own (a file opened to write fails: the
    seccomp filter, sandbox_layers.py:seccomp_filter)."""
    import io, os
    real = io.open

    def null_opener(path, flags):
        stdin = os.fstat(0)  # (only where descriptor 0 is still the character device /dev/null)
        if flags & (os.O_ACCMODE | os.O_EXCL) == os.O_WRONLY and (stdin.st_mode & 0o170000 == (
                0o020000) and stdin.st_rdev == os.makedev(1, 3)):
            return os.dup(0)
        return os.open(path, flags, 0o666)

    def open(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None,
             closefd=True, opener=None):
        path = os.fspath(file) if isinstance(file, os.PathLike) else file
        if opener is None and path in ("/dev/null", b"/dev/null"):
            opener = null_opener
        return real(file, mode, buffering, encoding, errors, newline, closefd, opener)
    open.__doc__, open.__module__, open.__qualname__ = real.__doc__, real.__module__, "open"
    builtins.open = io.open = open
