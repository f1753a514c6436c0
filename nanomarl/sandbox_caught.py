"""sandbox_caught.py: the program's warnings and log records, caught in its process while the test
catches or records them and shown in the test process (sandbox.py's docstring has the threat
model).

Executed inside the sandbox as the module `sandbox_caught` (sandbox.py's BOOT). For each request
the test process says what it watches (watched: "c" while it catches, records or filters warnings;
"g" while any of its loggers has a handler, with the levels of its loggers that differ from those
at the fork), the program's process catches that much for the request (catch, caught: the warnings
as error payloads and lines, up to RECORDS log records as [logger name, level, message formatted
there, exception text or None]) and the test process shows them under its own filters and
handlers (displayed: a warning at the program's line; a record handed, as a new record of that
name, level and text, to the nearest existing logger of its name, none created: nearest). What
crosses is values checked on arrival: no program object reaches a filter, formatter or handler."""
import sys

from sandbox_link import LINK
from sandbox_patches import IMPORT
from sandbox_values import error_payload, raised  # sandbox.py's BOOT


RECORDS = 256  # the most log records one answer carries
NOTING = []  # the program's process's records of the requests being served, the innermost last
TEXT = 2000  # the longest message of a record that crosses
NAME = 256  # the longest logger name of a record that crosses
TRACE = 8000  # the longest exception text of a record that crosses


def catching():
    """Whether the test catches, records or filters warnings (its warnings module's filters or
    display are not as they were once the context had run)."""
    warnings, (filters, listed, show, impl) = sys.modules.get("warnings"), LINK["warnings"]
    return warnings is not None and (warnings.filters is not filters or warnings.filters != listed
                                     or warnings.showwarning is not show
                                     or warnings._showwarnmsg_impl is not impl)


def warnings_state():
    """The test process's warnings state catching() compares with."""
    warnings = IMPORT("warnings")
    return (warnings.filters, list(warnings.filters), warnings.showwarning,
            warnings._showwarnmsg_impl)


def levels():
    """{name: level} of the test process's loggers ("root" the root's), {} before logging is
    imported (what watched compares with: as at the fork, the program's process's own)."""
    logging = sys.modules.get("logging")
    if logging is None:
        return {}
    found = [logging.root] + [logger for logger in list(logging.Logger.manager.loggerDict.values())
                              if isinstance(logger, logging.Logger)]
    return {logger.name: logger.level for logger in found}


def handled():
    """The test process's loggers, the root first, while one of them has a handler, else None
    (nothing to compare while logging is not imported)."""
    logging = sys.modules.get("logging")
    if logging is None:
        return None
    loggers = [logging.root] + [logger for logger in list(logging.root.manager.loggerDict.values())
                                if isinstance(logger, logging.Logger)]
    return loggers if any([logger.handlers for logger in loggers]) else None


def erring():
    """The test's warnings filters, where one of them makes a warning an error, for the program's
    process to filter with (catch): [[whether it is "error", its message and module (a pattern's
    text: filterwarnings compiles it again), its category, its line], ...]; else None (none is an
    error, or one is malformed or of a category of no builtin's or test's)."""
    filters = list(sys.modules["warnings"].filters)
    if not any(type(found) is tuple and found[:1] == ("error",) for found in filters):
        return None
    found = []
    for item in filters:
        if type(item) is not tuple or len(item) != 5:
            return None
        action, message, category, module, lineno = item
        message, module = getattr(message, "pattern", message), getattr(module, "pattern", module)
        if not (type(message) in (str, type(None)) and type(module) in (str, type(None)) and type(
                lineno) is int and lineno >= 0 and isinstance(category, type) and issubclass(
                category, Warning) and category.__module__ in ("builtins", "__main__")):
            return None
        found.append([action == "error", message, category, module, lineno])
    return found


def watched():
    """What the program's process catches for a request: {"c": 1} while the test catches
    warnings (the test's filters where one is an error: erring); {"g": the levels of its loggers
    that are not as at the fork} while one of its loggers has a handler."""
    extra = {"c": erring() or 1} if catching() else {}
    if (loggers := handled()) is not None:
        start, root = LINK["logs"], loggers[0]
        extra["g"] = {logger.name: logger.level for logger in loggers
                      if logger.level != start.get(logger.name, 30 if logger is root else 0)}
    return extra


def catch(extra, saved):
    """In the program's process, for a request: its warnings caught ("c": those the test's filters
    make errors raised here, where the program may catch them, as in one process; the others
    recorded, for the test's filters to show), its loggers at the test's levels and its records
    noted by a handler on its root logger ("g"); until caught."""
    if extra.get("c"):
        warnings = IMPORT("warnings")
        catcher = warnings.catch_warnings(record=True)
        saved["c"] = catcher, catcher.__enter__()
        warnings.resetwarnings()
        try:
            for error, message, category, module, lineno in extra["c"] if type(
                    extra["c"]) is list else ():
                warnings.filterwarnings("error" if error is True else "always", message or "",
                                        category, module or "", lineno, append=True)
        except Exception:  # (a malformed filter: each warning recorded)
            warnings.resetwarnings()
        warnings.simplefilter("always", append=True)
    if type(extra.get("g")) is dict:
        logging, records = IMPORT("logging"), []
        handler, old = logging.Handler(), []

        def emit(record):  # (a nested request's records are its own)
            try:
                if NOTING[-1] is records and len(records) < RECORDS:
                    text = record.exc_text or (record.exc_info and logging.Formatter(
                        ).formatException(record.exc_info))
                    records.append([str(record.name)[:NAME], int(record.levelno),
                                    str(record.getMessage())[:TEXT],
                                    str(text)[:TRACE] if text else None])
            except Exception:
                handler.handleError(record)

        handler.emit = emit
        for name, level in extra["g"].items():
            if type(name) is str and type(level) is int:
                logger = logging.root if name == "root" else logging.getLogger(name)
                old.append((logger, logger.level))
                logger.setLevel(level)
        logging.root.addHandler(handler)
        NOTING.append(records)
        saved["g"] = logging, handler, old, records


def caught(saved, reply):
    """The program's process puts back what catch changed; its answer carries what it caught."""
    if "c" in saved:
        catcher, log = saved.pop("c")
        catcher.__exit__(None, None, None)
        reply["c"] = [[error_payload(w.message), w.lineno] for w in log
                      if isinstance(w.message, Warning) and type(w.lineno) is int]
    if "g" in saved:
        logging, handler, old, records = saved.pop("g")
        logging.root.removeHandler(handler)
        NOTING[:] = [noted for noted in NOTING if noted is not records]
        for logger, level in reversed(old):
            logger.setLevel(level)
        reply["g"] = records


def displayed(extra):
    """An answer's output ("o", "e": only into a test's redirection), warnings ("c") and log
    records ("g"), shown in the test process while it still catches them (while one of its
    loggers has a handler)."""
    for key, stream in (("o", "stdout"), ("e", "stderr")):
        if type(extra.get(key)) is str and getattr(sys, stream) is not LINK[stream]:
            getattr(sys, stream).write(extra[key])
    for warning in extra["c"] if type(extra.get("c")) is list and catching() else ():
        shown(warning)
    if type(extra.get("g")) is list and extra["g"] and handled() is not None:
        for record in extra["g"][:RECORDS]:
            logged(record)


def shown(caught):
    """A warning the program's process caught ([its error payload, line]), shown here as the
    program's warning at that line, under the test's filters (sandbox.py's docstring)."""
    if type(caught) is list and len(caught) == 2 and type(caught[1]) is int and isinstance(
            warning := raised(caught[0]), Warning):
        sys.modules["warnings"].warn_explicit(warning, type(warning), "<program>", caught[1],
                                              "__main__", LINK["registry"])


def logged(record):
    """A log record of the program's ([name, level, message, exception text or None]), handed to
    the nearest existing logger of its name as a record of that name, level and text (its message
    the program's, formatted there: no arguments), unless logging is disabled at its level."""
    if type(record) is list and len(record) == 4 and type(record[0]) is str and (
            type(record[1]) is int and type(record[2]) is str and len(record[0]) <= NAME
            and (record[3] is None or type(record[3]) is str) and -1 << 31 < record[1] < 1 << 31):
        name, level, message, text = record
        logging = sys.modules["logging"]
        if level > logging.root.manager.disable:
            logger = nearest(logging, name)
            made = logger.makeRecord(name, level, "<program>", 0, message[:TEXT], None, None)
            made.exc_text = text and text[:TRACE]
            logger.handle(made)


def nearest(logging, name):
    """The test process's logger of that name, else of its nearest parent name, else the root
    (none is created)."""
    loggers = logging.Logger.manager.loggerDict
    while name:
        if isinstance(found := loggers.get(name), logging.Logger):
            return found
        name = name.rpartition(".")[0]
    return logging.root
