"""The command line of every script: parse_args(Args) turns a dataclass into flags, reads --config
files, and refuses bad input with one line `error: --flag: ...` (exit code 2) before a model loads.

Also: the number checks of a script's check_args, the MODULE:FUNCTION loader of --reward-fn, and
BadRow (a malformed data row). A learner may skip this module: a script's Args is a plain list of
settings, one line of help each.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import importlib.util
import inspect
import io
import json
import os
import re
import shutil
import sys
import textwrap
import tokenize
import types
import typing
from pathlib import Path


def _field_comments(cls) -> dict[str, str]:
    """Read `name: type = default  # comment` lines of a dataclass's source; the comment is the
    --help text. Python's tokenizer finds the comments, so a '#' in a string default is none."""
    comments = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        lines = source.splitlines()
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                m = re.match(r"^\s+(\w+)\s*:", lines[token.start[0] - 1])
                if m:
                    comments[m.group(1)] = token.string[1:].strip()
    return comments


def _field_groups(cls, own: str) -> dict[str, str]:
    """Each field's --help group: a `# ---- title ----` banner above it in its class, else the class
    that declares it (`own` for cls, a shared dataclass titled by its docstring)."""
    groups = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        doc = (klass.__doc__ or "").split("(")[0].split(".")[0].strip()
        title = own if klass is cls or not doc else doc[0].lower() + doc[1:]
        try:
            lines = textwrap.dedent(inspect.getsource(klass)).splitlines()
        except (OSError, TypeError):
            lines = []
        for line in lines:
            banner = re.match(r"^\s+# -+ (.+?) -+\s*$", line)
            field = re.match(r"^\s+(\w+)\s*:", line)
            if banner:
                title = banner.group(1)
            elif field and field.group(1) in getattr(klass, "__annotations__", {}):
                groups[field.group(1)] = title
    return groups


def _examples(module) -> str:
    """The command lines of a script's docstring (lines that start with python or torchrun, and the
    lines that continue one after a trailing backslash), for the end of --help."""
    lines = []
    continued = False
    for line in (getattr(module, "__doc__", "") or "").splitlines():
        line = line.strip()
        if continued or line.startswith(("python ", "torchrun ")):
            lines.append(("    " if continued else "") + line)
            continued = line.endswith("\\")
    return "examples:\n" + "\n".join(f"  {line}" for line in lines) if lines else ""


def _field_type(cls, name: str):
    typ = typing.get_type_hints(cls)[name]
    if typing.get_origin(typ) in (typing.Union, getattr(types, "UnionType", None)):
        typ = next(t for t in typing.get_args(typ) if t is not type(None))  # Optional[X] -> X
    return typ


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """argparse's refusals as one line `error: --flag: what is wrong`, exit code 2."""
        unknown = re.match(r"unrecognized arguments: (\S+)", message)
        if unknown:
            flag = unknown.group(1).split("=")[0]
            known = [s for action in self._actions for s in action.option_strings
                     if s.startswith("--")]
            close = difflib.get_close_matches(flag, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else " (see --help)"
            arg_error(flag, "not a flag of this script" + hint)
        named = re.match(r"argument ([^:/ ]+)(?:/\S+)?: (.*)", message)
        if named and named.group(2) == "expected one argument":  # --lr -1e-4: read as a flag
            argv = getattr(self, "argv", [])
            after = argv[argv.index(named.group(1)) + 1:][:1] if named.group(1) in argv else []
            if after and re.fullmatch(r"-[\d.]+(e[-+]?\d+)?", after[0], re.IGNORECASE):
                arg_error(named.group(1), f"{after[0]} reads as a flag; write "
                                          f"{named.group(1)}={after[0]}")
        arg_error(*(named.groups() if named else ("arguments", message)))


def parse_args(cls, argv: list[str] | None = None):
    """Build an argparse parser from a dataclass: field `num_agents` becomes `--num-agents`, bools
    become `--flag/--no-flag`, a Literal["a", "b"] field accepts only those values (listed in
    --help, and in the error of a typo), the same-line comment becomes the help text. --config FILE
    (YAML or JSON: a recipe in recipes/, or a run's own args.json) sets fields first; the flags
    typed on the command line override it. The result remembers which fields were given (typed or in
    the config file): given_fields()."""
    comments = _field_comments(cls)
    module = sys.modules.get(cls.__module__)
    doc = (module.__doc__ or "").strip().split("\n\n")[0] if module else ""  # its first paragraph
    # --help fits 80 columns, also in a wider terminal (argparse keeps 2 of them free)
    width = min(shutil.get_terminal_size().columns, 80) - 2
    # no defaults in the namespace: what comes back was typed; the dataclass fills in the rest
    script = Path(getattr(module, "__file__", "") or "script").stem
    parser = _Parser(prog=f"{script}.py", description=textwrap.fill(" ".join(doc.split()), width),
                     allow_abbrev=False, argument_default=argparse.SUPPRESS,
                     usage="%(prog)s [--flag VALUE ...]  (the flags below, by group)",
                     epilog=_examples(module),
                     formatter_class=functools.partial(argparse.RawDescriptionHelpFormatter,
                                                       width=width))
    parser.add_argument("--config", metavar="FILE",
                        help="a YAML or JSON file of settings {flag name: value} (a recipe in "
                             "recipes/, or a run's args.json); flags typed on the command line "
                             "override it")
    titles, groups = _field_groups(cls, f"{script}.py"), {}
    own = [f for f in dataclasses.fields(cls) if f.name in vars(cls).get("__annotations__", {})]
    for f in own + [f for f in dataclasses.fields(cls) if f not in own]:  # the script's first
        typ = _field_type(cls, f.name)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        shown = default if default != "" else repr("")
        comment = comments.get(f.name, "")
        help_text = (comment if "default" in comment else f"{comment} (default: {shown})")
        title = titles.get(f.name, f"{script}.py")
        group = groups.setdefault(title, parser.add_argument_group(title))
        flag, kind = flag_name(f.name), dict(dest=f.name, help=help_text.replace("%", "%%"))
        if typ is bool:
            group.add_argument(flag, action=argparse.BooleanOptionalAction, **kind)
        elif typing.get_origin(typ) is typing.Literal:
            group.add_argument(flag, choices=typing.get_args(typ), **kind)
        elif typ not in (int, float, str):
            raise TypeError(f"parse_args: {cls.__name__}.{f.name}: unsupported type {typ!r} "
                            f"(use str and parse it)")
        else:
            group.add_argument(flag, type=typ, metavar=typ.__name__.upper(), **kind)
    argv = parser.argv = sys.argv[1:] if argv is None else list(argv)
    typed = vars(parser.parse_args(argv))
    values = load_config(cls, typed.pop("config")) if "config" in typed else {}
    values.update(typed)
    args = cls(**values)
    object.__setattr__(args, "_given", frozenset(values))
    return args


def load_config(cls, path: str) -> dict:
    """The settings of a --config file, checked against cls's fields and types: a YAML (.yaml/.yml)
    or JSON mapping {flag name (dashes or underscores): value}. A run's args.json works too: its
    `script` must be this script, and its output_dir and resume are left out (a new run goes to a
    new folder)."""
    file = Path(path)
    if not file.is_file():
        arg_error("--config", f"{path} is not a file")
    try:
        if file.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(file.read_text())
        else:
            data = json.loads(file.read_text())
    except Exception as e:  # a syntax error in the file: its own message, first line
        arg_error("--config", f"{path} does not parse: "
                              f"{str(e).splitlines()[0] if str(e) else type(e).__name__}")
    if not isinstance(data, dict):
        arg_error("--config", f"{path} must hold a mapping of flag names to values, "
                              f"got {type(data).__name__}")
    this = Path(getattr(sys.modules.get(cls.__module__), "__file__", "") or "script").stem
    script = data.pop("script", None)
    if script is not None:  # a run's args.json
        if script != this:
            arg_error("--config", f"{path} holds the settings of a {script}.py run, "
                                  f"not of {this}.py")
        data.pop("output_dir", None)
    data.pop("resume", None)
    fields, values = {f.name for f in dataclasses.fields(cls)}, {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in fields:
            arg_error("--config", f"{path}: {key!r} is not a flag of {this}.py (see --help)")
        values[name] = _config_value(cls, name, value, f"{path}: {key}")
    return values


def _config_value(cls, name: str, value, where: str):
    """A config file's value for field `name`, in the field's type (YAML gives ints, floats,
    bools and strings)."""
    typ = _field_type(cls, name)
    if value is None and typing.get_type_hints(cls)[name] is not typ:
        return None
    if typing.get_origin(typ) is typing.Literal:
        if value not in typing.get_args(typ):
            choices = ", ".join(map(str, typing.get_args(typ)))
            arg_error("--config", f"{where}: expected one of {choices}, got {value!r}")
        return value
    if typ is str and isinstance(value, list):  # `models: [a, b]` -> "a,b"
        return ",".join(map(str, value))
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = {bool: isinstance(value, bool), int: number and isinstance(value, int), float: number,
          str: isinstance(value, str) or number}[typ]
    if not ok:
        arg_error("--config", f"{where}: expected {typ.__name__}, got {value!r}")
    return typ(value)


def given_fields(args) -> set[str]:
    """The fields given on the command line or by --config (parse_args remembers them); for Args
    built in Python, the fields that differ from the defaults."""
    given = getattr(args, "_given", None)
    if given is None:
        defaults = type(args)()
        given = {f.name for f in dataclasses.fields(args)
                 if getattr(args, f.name) != getattr(defaults, f.name)}
    return set(given)


def check_numbers(args, positive=(), non_negative=(), unit_interval=()):
    """The numeric part of a script's check_args: each named field > 0, >= 0 or in [0, 1] (NaN
    fails), and every Literal field one of its values (Args built in Python skip argparse's check).
    One line naming the flag."""
    for f in dataclasses.fields(args):
        typ, value = _field_type(type(args), f.name), getattr(args, f.name)
        if typing.get_origin(typ) is typing.Literal and value not in typing.get_args(typ):
            choices = ", ".join(map(str, typing.get_args(typ)))
            arg_error(flag_name(f.name), f"expected one of {choices}, got {value!r}")
    for names, ok, rule in ((positive, lambda v: v > 0, "> 0"),
                            (non_negative, lambda v: v >= 0, ">= 0"),
                            (unit_interval, lambda v: 0 <= v <= 1, "in [0, 1]")):
        for name in names:
            if not ok(getattr(args, name)):
                arg_error(flag_name(name), f"must be {rule}, got {getattr(args, name)}")


class ArgError(SystemExit):
    """A refused setting: exit code 2 (as argparse's), the one-line message in str(error)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.code = 2


def arg_error(flag: str, message: str):
    """Stop with one line `error: --flag: what is wrong (what to do)` on stderr and exit code 2,
    without a traceback."""
    print(f"error: {flag}: {message}", file=sys.stderr)
    raise ArgError(f"error: {flag}: {message}")


def parse_int_list(text: str, flag: str) -> list[int]:
    """'1,2' -> [1, 2]; '' -> []. Errors name the flag."""
    try:
        return [int(x) for x in text.split(",") if x.strip() != ""]
    except ValueError:
        arg_error(flag, f"expected a comma-separated list of integers, got {text!r}")


def load_function(spec: str, flag: str):
    """'MODULE:FUNCTION' -> the function (--reward-fn). MODULE is a .py file path
    (examples/my_reward.py) or a dotted module importable from the working directory
    (examples.my_reward). Called before any model loads, so a bad spec stops the run at once with
    `error: FLAG: ...`."""
    module_name, _, function_name = spec.rpartition(":")
    if not module_name or not function_name:
        arg_error(flag, f"expected MODULE:FUNCTION (e.g. examples/my_reward.py:correct_and_brief), "
                        f"got {spec!r}")
    try:
        if module_name.endswith(".py") or os.sep in module_name or "/" in module_name:
            path = Path(module_name)
            if not path.is_file():
                arg_error(flag, f"{path} is not a file")
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
    except Exception as e:  # the module itself failed: a syntax error, a missing import, ...
        arg_error(flag, f"importing {module_name} failed: {type(e).__name__}: {e}")
    function = getattr(module, function_name, None)
    if not callable(function):
        arg_error(flag, f"{module_name} has no function {function_name!r}")
    return function


class BadRow(ValueError):
    """A malformed data row; the message names the file and line."""


@dataclasses.dataclass
class RunArgs:
    """The flags of a training run and its machine, shared by the trainers (Args(RunArgs, ...))."""
    seed: int = 0  # random seed (data order, sampling, initialisation)
    output_dir: str = ""  # the run folder (default: runs/<script>-<time>-s<seed>)
    resume: str = ""  # continue this run folder; the flags typed now override its saved settings
    device: str = ""  # cpu, cuda or cuda:N (default: cuda when available)
    threads: int = 0  # torch CPU threads (0: OMP_NUM_THREADS, else the cores left free)
    report_to: typing.Literal["none", "wandb", "trackio", "tensorboard"] = "none"  # also log there
    log_every: int = 1  # print a summary every N updates
    sample_every: int = 2  # print a sample and log all samples every N updates (0: never)
    save_every: int = 2  # write the checkpoint and adapters every N updates (and at the end)


@dataclasses.dataclass
class DataArgs:
    """The flags that read questions from a hub dataset or a local file (load_task)."""
    dataset_config: str = ""  # hub id: its configuration (main); reasoning-gym:NAME: key=value,...
    question_field: str = "question"  # hub id or local file: the question column
    answer_field: str = "answer"  # hub id or local file: the gold answer column
    dataset_task: typing.Literal["math", "nli"] = "math"  # hub id or local file: how answers read
    skip_bad_rows: bool = False  # skip malformed dataset rows instead of stopping


@dataclasses.dataclass
class ModelArgs:
    """The base model and its LoRA adapters."""
    model: str = "smollm2-135m"  # the base: hub id, local path, smollm2-135m or tiny
    dtype: typing.Literal["float32", "bfloat16", "float16"] = "float32"  # weights and compute dtype
    quant: typing.Literal["none", "4bit", "8bit"] = "none"  # 4bit: QLoRA (nf4)
    lora_r: int = 8  # LoRA rank (on all linear layers, dropout 0)
    lora_alpha: int = 16  # LoRA alpha
    use_vllm: bool = False  # rollouts on one vLLM engine holding every adapter (docs/usage.md)
    fast: bool = True  # the fast paths, the same numbers (docs/speed.md); --no-fast: the plain code
