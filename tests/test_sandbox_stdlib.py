"""The standard library's values that cross between the sandbox's two processes as themselves
(nanomarl/sandbox_stdlib.py): a member of a standard library Enum (re.RegexFlag, http.HTTPStatus,
signal.Signals), a slice, a datetime or time with its fold and its tzinfo's name (a named
timezone) or rules (a ZoneInfo), a time.struct_time, a mappingproxy. Each case is compared with
plain Python, and a program that forges such a value gets no credit plain Python would not give
it."""
from pathlib import Path

import pytest
from test_sandbox_semantics import plain, run

# the zones both processes read (the program's sees /usr, never site-packages' tzdata)
ZONES = [Path("/usr/share/zoneinfo", key) for key in ("Europe/Paris", "America/New_York")]


def test_a_standard_library_enum_member_crosses_as_that_member():
    """A test's re.I (a combined flag too), http.HTTPStatus.OK, signal.SIGTERM or a member of a
    module the program has not imported (py_compile) is that member in the program (its name,
    value, flags), and the program's is the test's member (`is`, its type); a test's own enum
    keeps its path (a test object: the same member back), and a program's member of a module the
    test process may not have (py_compile) is its object, as before."""
    program = """\
        import re, http
        def find_all(s, pat, flags=0):
            return re.findall(pat, s, flags)
        def describe(c):
            return f"{c.name.lower()}={c.value}"
        def echo(x):
            return x
        def flags():
            return re.M | re.S
        def status():
            return http.HTTPStatus.NOT_FOUND
        def mode():
            import py_compile
            return py_compile.PycInvalidationMode.TIMESTAMP
        """
    tests = ["import re; assert find_all('ABC', 'b', re.I) == ['B']",
             "import re; assert find_all('a\\nB', '^b', re.IGNORECASE | re.MULTILINE) == ['B']",
             "import http; assert describe(http.HTTPStatus.OK) == 'ok=200'",
             "import signal; assert describe(signal.SIGTERM) == 'sigterm=15'",
             "import py_compile\n"
             "assert describe(py_compile.PycInvalidationMode.TIMESTAMP) == 'timestamp=1'",
             "import re; assert echo(re.I) is re.I and echo(re.I | re.X) == re.I | re.X",
             "import re; r = flags(); assert type(r) is re.RegexFlag and r == re.M | re.S",
             "import http; r = status(); assert r is http.HTTPStatus.NOT_FOUND\n"
             "assert r.phrase == 'Not Found'",
             "from enum import IntEnum\nclass Lvl(IntEnum):\n    LOW = 1\n"
             "assert echo(Lvl.LOW) is Lvl.LOW and describe(Lvl.LOW) == 'low=1'",
             "assert mode().name == 'TIMESTAMP'"]
    assert plain(program, tests) == [True] * 10
    result = run(program, tests)
    assert result["passed"] == [True] * 10, result["errors"]


def test_a_program_cannot_pass_its_own_enum_off_as_the_standard_librarys():
    """A program's class named and placed as re.RegexFlag, with an always-true ==, is no member
    of re's (plain Python credits it); one it patches in as re.RegexFlag crosses as re's own
    member of its value, compared by re's ==. A forged member that names a module the test
    process has not imported (antigravity, this) or no Enum class of one fails the test and
    imports nothing there."""
    program = """\
        import enum, gc, re
        class RegexFlag(enum.IntFlag):
            NOFLAG = 0
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__
        RegexFlag.__module__ = "re"
        def forged():
            return RegexFlag.NOFLAG
        def patched():
            re.RegexFlag = RegexFlag
            return RegexFlag.NOFLAG
        def right():
            return re.I
        for found in gc.get_objects():
            if type(found) is dict and "Dumped" in found and "hook" in found:
                Dumped = found["Dumped"]
        def raw(text):
            return Dumped(text, None)
        """
    tests = ["import re; assert right() is re.I",
             "import re; assert forged() == re.I",
             "import re; assert patched() == re.I",
             "raw('{\"Y\":[\"antigravity\",\"Spam\",\"EGGS\"]}')",
             "raw('{\"Y\":[\"os\",\"environ\",\"PATH\"]}')",
             "import sys; assert 'antigravity' not in sys.modules and 'this' not in sys.modules"]
    assert plain(program.replace('"Dumped" in found', "False"), tests[:3]) == [True] * 3
    result = run(program, tests, max_timeouts=5)
    assert result["passed"] == [True, False, False, False, False, True], result["errors"]


def test_a_slice_crosses_as_a_value():
    """A test's slice reaches the program as a slice (its start, stop and step, each a value),
    and the program's slice comes back as one."""
    program = """\
        def take(xs, s):
            return xs[s]
        def backwards():
            return slice(None, None, -1)
        def echo(x):
            return x
        """
    tests = ["assert take([1, 2, 3, 4], slice(1, 3)) == [2, 3]",
             "assert take('abcdef', slice(None, None, 2)) == 'ace'",
             "assert [1, 2, 3][backwards()] == [3, 2, 1] and backwards() == slice(None, None, -1)",
             "assert echo(slice(1, 'a', (2, 3))) == slice(1, 'a', (2, 3))"]
    assert plain(program, tests) == [True] * 4
    result = run(program, tests)
    assert result["passed"] == [True] * 4, result["errors"]


def test_a_datetime_keeps_its_fold_and_its_timezones_name():
    """A datetime or time keeps its fold, and a timezone its name inside a datetime, both ways
    (the ISO text alone loses both)."""
    program = """\
        import datetime
        def ist():
            tz = datetime.timezone(datetime.timedelta(hours=5, minutes=30), "IST")
            return datetime.datetime(2020, 1, 1, 12, 0, tzinfo=tz)
        def fold_time():
            return datetime.time(1, 30, fold=1)
        def fold_dt():
            return datetime.datetime(2020, 11, 1, 1, 30, fold=1)
        def echo(x):
            return x
        def zone_name(d):
            return d.tzname()
        """
    tests = ["assert ist().tzname() == 'IST' and ist().utcoffset().total_seconds() == 19800",
             "assert fold_time().fold == 1 and fold_dt().fold == 1",
             "import datetime; assert echo(datetime.time(1, fold=1)).fold == 1",
             "import datetime; assert echo(datetime.datetime(2020, 1, 1, fold=1)).fold == 1",
             "import datetime\ntz = datetime.timezone(datetime.timedelta(hours=1), 'CET')\n"
             "assert zone_name(datetime.datetime(2020, 1, 1, tzinfo=tz)) == 'CET'",
             "import datetime; assert echo(datetime.datetime(2020, 1, 1)).fold == 0"]
    assert plain(program, tests) == [True] * 6
    result = run(program, tests)
    assert result["passed"] == [True] * 6, result["errors"]


@pytest.mark.skipif(not all(zone.is_file() for zone in ZONES),
                    reason="this machine has no system time zone files (/usr/share/zoneinfo)")
def test_a_zoneinfo_crosses_by_its_key():
    """A datetime whose tzinfo is a ZoneInfo keeps its zone's rules (a day later, the offset of
    summer time), and a ZoneInfo crosses as the one of its key (ZoneInfo's cache: `is` holds),
    both ways; a key that names no zone, or a path, fails the test."""
    program = """\
        import datetime, gc
        from zoneinfo import ZoneInfo
        def add_day(dt):
            return dt + datetime.timedelta(days=1)
        def paris():
            return datetime.datetime(2024, 7, 1, 12, tzinfo=ZoneInfo("Europe/Paris"))
        def echo(x):
            return x
        for found in gc.get_objects():
            if type(found) is dict and "Dumped" in found and "hook" in found:
                Dumped = found["Dumped"]
        def raw(text):
            return Dumped(text, None)
        """
    new_york = ("from zoneinfo import ZoneInfo\nimport datetime\n"
                "zone = ZoneInfo('America/New_York')\n"
                "r = add_day(datetime.datetime(2024, 3, 9, 12, tzinfo=zone))\n")
    tests = [new_york + "assert r.utcoffset() == datetime.timedelta(hours=-4)",
             new_york + "assert r.tzinfo is ZoneInfo('America/New_York')",
             "from zoneinfo import ZoneInfo\nr = paris()\n"
             "assert r.tzinfo is ZoneInfo('Europe/Paris') and r.tzname() == 'CEST'",
             "from zoneinfo import ZoneInfo\n"
             "assert echo(ZoneInfo('Asia/Tokyo')).key == 'Asia/Tokyo'",
             "raw('{\"J\":\"../../../etc/passwd\"}')"]
    assert plain(program.replace('"Dumped" in found', "False"), tests[:4]) == [True] * 4
    result = run(program, tests, max_timeouts=5)
    assert result["passed"] == [True] * 4 + [False], result["errors"]


def test_a_flag_value_outside_its_members_bits_is_refused():
    """A program's value of a standard library Flag crosses as that flag only within the bits of
    its members (re.RegexFlag's: at most 512 values, each cached by enum for good in the test
    process): a forged one with other bits, or negative, fails the test and caches nothing there;
    one of a plain Enum names one of its members. Within them a value crosses as before, compared
    with plain Python."""
    program = """\
        import gc, re
        def combined():
            return ~re.I
        for found in gc.get_objects():
            if type(found) is dict and "Dumped" in found and "hook" in found:
                Dumped = found["Dumped"]
        def raw(text):
            return Dumped(text, None)
        """
    tests = ["import re; assert combined() == ~re.I and combined() & re.M",
             "raw('{\"Y\":[\"re\",\"RegexFlag\",%d]}')" % (1 << 20 | 1),
             "raw('{\"Y\":[\"re\",\"RegexFlag\",-4096]}')",
             "raw('{\"Y\":[\"http\",\"HTTPStatus\",999]}')",
             "import re; assert all(k < 512 for k in re.RegexFlag._value2member_map_)",
             "import re; assert raw('{\"Y\":[\"re\",\"RegexFlag\",6]}') is re.I | re.L"]
    assert plain(program.replace('"Dumped" in found', "False"), tests[:1]) == [True]
    result = run(program, tests, max_timeouts=5)
    assert result["passed"] == [True, False, False, False, True, True], result["errors"]


def test_a_programs_memoryview_mappingproxy_and_chainmap_cross_as_values():
    """The program's memoryview of bytes crosses as a memoryview of those bytes (==, len, items,
    its format), its mappingproxy of a dict as a read-only proxy of that dict (its global's: kept,
    so a later change shows, as in plain Python), its ChainMap of dicts as a ChainMap of them
    (the test's own arguments: a write reaches them). Where a copy could fall behind the
    program's object (a view of a bytearray, a ChainMap of a global or a fresh dict, which the
    program may keep and write through) it stays a program object, which the test cannot
    compare; a forged one fails the test."""
    program = """\
        import collections, gc, types
        _d = {'a': 1}
        G = {'g': 1}
        for found in gc.get_objects():
            if type(found) is dict and "Dumped" in found and "hook" in found:
                Dumped = found["Dumped"]
        def raw(text):
            return Dumped(text, None)
        def view(b):
            return memoryview(b)[1:]
        def ints(b):
            return memoryview(b).cast('h')
        def config():
            return types.MappingProxyType(_d)
        def setc(k, v):
            _d[k] = v
        def merged(a, b):
            return collections.ChainMap(a, b)
        def fresh():
            return collections.ChainMap({'x': 1}, {'y': 2, 'x': 3})
        def held():
            return collections.ChainMap(G)
        def mutable():
            return memoryview(bytearray(b'ab'))
        """
    tests = ["v = view(b'abc'); assert v == b'bc' and len(v) == 2 and list(v) == [98, 99]\n"
             "assert bytes(v) == b'bc' and v[0] == 98 and v.readonly and type(v) is memoryview",
             "assert ints(bytes([1, 0, 2, 0])).tolist() == [1, 2]",
             "p = config(); assert p == {'a': 1}; setc('b', 2)\n"
             "assert p == {'a': 1, 'b': 2} and len(p) == 2 and p['b'] == 2\n"
             "import types; assert type(p) is types.MappingProxyType",
             "p = config()\ntry:\n    p['z'] = 1\n    ok = False\nexcept TypeError:\n"
             "    ok = True\nassert ok",
             "a = {'a': 1}; m = merged(a, {'b': 2}); assert m['b'] == 2 and len(m) == 2\n"
             "m['c'] = 3; assert a == {'a': 1, 'c': 3} and m.maps[0] is a",
             "m = fresh(); assert m['x'] == 1 and dict(m) == {'x': 1, 'y': 2} and sorted(m) == "
             "['x', 'y']",
             "assert held()['g'] == 1",
             "assert mutable() == b'ab'",
             "raw('{\"m\":[\"B\",[5],{\"b\":\"6162\"}]}')",
             "raw('{\"w\":[]}')"]
    expected = [True] * 8
    assert plain(program.replace('"Dumped" in found', "False"), tests[:8]) == expected
    result = run(program, tests, max_timeouts=5)
    assert result["passed"] == [True] * 5 + [False] * 5, result["errors"]


def test_a_tests_mappingproxy_and_struct_time_cross_as_values():
    """A test's mappingproxy of a dict is a read-only mappingproxy of a copy of that dict in the
    program (read, iterated; a write through it raises TypeError there as in plain Python, and
    none reaches the test's dict, not even one through gc: the program's copy is written, as
    a program's ctypes write stays in its process); a time.struct_time crosses either way as
    a struct_time equal to it, with its zone and offset. A program's forged struct_time of
    anything but time's fields fails the test."""
    program = """\
        import gc, time
        for found in gc.get_objects():
            if type(found) is dict and "Dumped" in found and "hook" in found:
                Dumped = found["Dumped"]
        def get(m, k):
            return m[k]
        def keys(m):
            return sorted(m), type(m).__name__
        def write(m):
            try:
                m['b'] = 2
            except TypeError:
                return 'refused'
        def under(m):
            gc.get_referents(m)[0]['b'] = 2
            return m['b']
        def year(t):
            return t.tm_year, t.tm_zone, type(t).__name__
        def same(t):
            return t
        def epoch():
            return time.gmtime(0)
        def forged():
            return Dumped('{"z":[1970,1,1,0,0,0,3,1,0,[],0]}', None)
        """
    tests = ["import types\nassert get(types.MappingProxyType({'a': 1}), 'a') == 1",
             "import types\nassert keys(types.MappingProxyType({'b': 1, 'a': 2})) == "
             "(['a', 'b'], 'mappingproxy')",
             "import types\nd = {'a': 1}\nassert write(types.MappingProxyType(d)) == 'refused' "
             "and d == {'a': 1}",
             "import time\nassert year(time.gmtime(0)) == (1970, 'GMT', 'struct_time')",
             "import time\nt = time.localtime(86400)\nu = same(t)\nassert u == t and "
             "type(u) is time.struct_time and (u.tm_zone, u.tm_gmtoff) == (t.tm_zone, t.tm_gmtoff)",
             "import time\nassert epoch() == time.gmtime(0) and epoch().tm_gmtoff == 0",
             "forged()"]
    assert plain(program.replace('"Dumped" in found', "False"), tests[:6]) == [True] * 6
    result = run(program, tests, max_timeouts=5)
    assert result["passed"] == [True] * 6 + [False], result["errors"]
    under_gc = ("import types\nd = {'a': 1}\n"
                "assert under(types.MappingProxyType(d)) == 2 and d == {'a': 1}")
    assert run(program, [under_gc])["passed"] == [True]  # (the program's copy, not the test's)
