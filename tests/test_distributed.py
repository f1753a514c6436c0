"""Multi-process training under torchrun (2 gloo ranks on CPU, the tiny model).

Equivalence (cotrain.py and magrpo.py): the test samples a rollout of 2B questions/problems once (fixed seed) and
saves it; then (a) this process makes ONE update on all 2B samples, and (b) `python -m torch.distributed.run
--standalone --nproc_per_node 2 tests/test_distributed.py ...` makes one update where each rank holds B of them
(global question g on rank g % 2 with its K samples, as the scripts deal them out). The trainable
parameters (LoRA adapters, value heads) must agree to fp32 tolerance. This file is also the helper
script of (b): see its __main__ block.
CLI: both scripts run one step under torchrun, only rank 0 prints and writes, and the checkpoint keeps one RNG
state per rank (the ranks sample differently)."""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, also when run as the helper script

import pytest  # noqa: E402
import torch  # noqa: E402

import cotrain  # noqa: E402
import magrpo as M  # noqa: E402
from conftest import PAPER_PPO, run_script  # noqa: E402
from nanomarl.cli import parse_args
from nanomarl import distributed
from nanomarl.distributed import finish_distributed, init_distributed, rank_rows, seed_everything
from nanomarl.magrpo_run import agent_states
from nanomarl.models import adapter_state_dict, load_tokenizer
from nanomarl.tasks.debate import load_task

TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
HELPER = str(Path(__file__).resolve())
ATOL, RTOL = 1e-6, 1e-5


# Both scripts' updates are compared with plain SGD in place of AdamW: the update is then linear in the gradient.
# AdamW's g / (|g| + eps) turns the rounding noise of a near-zero gradient (a sum that cancels, added up in another
# order on 2 ranks) into changes of ~1e-5 (measured); the optimiser itself is elementwise and the same on all ranks.
# Each comparison runs without clipping (checks the scale of the summed gradients, which a binding clip would hide)
# and with a clip that binds (checks that clipping comes after the all-reduce).
# cotrain: the paper's settings (one debate per question) and --advantage group with K = 2 debates
# per question, each question's pair on one rank, in minibatches that split pairs (the rows of N
# processes are labelled as one's).
COTRAIN_SETTINGS = {"no clip": (1, 1e9), "clip": (1, 0.05), "group K=2": (2, 1e9)}
MAGRPO_SETTINGS = {"seq-sum": ("seq-sum", 0.0), "token-mean": ("token-mean", 0.0), "seq-sum clip": ("seq-sum", 1e-3)}


# ---------------------------------------------------------------- cotrain.py (PPO)


def cotrain_args(max_grad_norm: float = 1.0, samples: int = 1) -> cotrain.Args:
    """4 questions per update (B = 2 per rank), 2 PPO epochs, micro-batches of 1. samples = 1: the
    paper's settings, 2 minibatches of 2 questions; with shuffle seed 7 (cotrain_update) epoch 1's
    minibatches hold one question of each rank, epoch 2's lie on one rank only (global questions
    {2, 0} and {3, 1}): the other rank adds nothing but joins the all-reduce. samples = 2:
    --advantage group, 8 debates in 2 minibatches of 4 (global debates {7, 0, 3, 4} and
    {1, 5, 2, 6}, then {7, 4, 0, 6} and {2, 1, 5, 3}; debate 2q + k is question q's k-th)."""
    settings = (PAPER_PPO if samples == 1
                else ["--advantage", "group", "--samples-per-question", str(samples)])
    return parse_args(cotrain.Args, [
        "--model", "tiny", "--device", "cpu", "--questions-per-update", "4", *settings,
        "--minibatch-questions", str(2 * samples), "--micro-batch-questions", "1",
        "--ppo-epochs", "2", "--max-new-tokens", "6", "--no-penalize-format",
        "--missing-eos-penalty", "0", "--lr", "1e-2", "--max-grad-norm", str(max_grad_norm)])


def ascii_fraction(records, responses):
    return torch.tensor([sum(ord(c) < 128 for c in text) / max(1, len(text)) for text in responses])


def debate_rows(debate, rows: torch.Tensor):
    """The cotrain.Debate of these rows (debates) alone, in their order: what a rank holds."""
    pick = [debate.records, debate.prompts, debate.responses, debate.answers]
    return cotrain.Debate(*([xs[i] for i in rows.tolist()] for xs in pick), debate.correct[rows],
                          None if debate.scores is None else debate.scores[rows],
                          {key: {k: v[rows] for k, v in ro.items()} for key, ro in debate.rollout.items()},
                          debate.generate_s)


def cotrain_update(saved: dict, setting: str, rank: int, world: int) -> dict:
    """A fresh team (identical on every rank: build_team seeds), this rank's share of the saved
    debates (its questions g % world == rank, each with its K debates in a row, as cotrain.main
    deals them), make_experience + one ppo_update (SGD). Returns every trainable tensor by name."""
    samples, max_grad_norm = COTRAIN_SETTINGS[setting]
    args = cotrain_args(max_grad_norm, samples)
    saved = saved[samples]
    team = cotrain.build_team(args, "cpu")
    team.optimizers = {name: torch.optim.SGD(opt.param_groups[0]["params"], lr=args.lr)
                       for name, opt in team.optimizers.items()}
    questions = len(saved["debate"].records) // samples
    rows = torch.tensor([g * samples + k for g in range(rank, questions, world)
                         for k in range(samples)])
    debate = debate_rows(saved["debate"], rows)
    exp = cotrain.make_experience(team, debate, saved["rewards"][rows], args)
    stats = cotrain.ppo_update(team, exp, args, shuffle_seed=7)
    assert stats["skipped"] == 0
    assert max_grad_norm > 1e3 or max(stats["grad_norm/agent0"]) > max_grad_norm  # the clip binds
    params = {f"{name}/{k}": v for name in team.base_adapters[0] for k, v in adapter_state_dict(team.bases[0], name).items()}
    params.update({f"heads/{k}": v.clone() for k, v in team.heads.state_dict().items()})
    return params


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("samples", [1, 2, 3])
def test_rank_rows_take_the_debates_one_process_labels(monkeypatch, world, samples):
    """Row G of one process is question G // K's (G % K)-th debate. Under `world` ranks, each dealt
    questions g % world == rank with their K debates in a row (cotrain.main), rank_rows maps a
    minibatch of labels to the local rows that hold exactly those debates, in the labels' order."""
    questions = 7
    one = [(g, k) for g in range(questions) for k in range(samples)]
    labels = torch.randperm(questions * samples, generator=torch.Generator().manual_seed(0))[:10]
    taken = []
    for rank in range(world):
        monkeypatch.setattr(distributed, "world_info", lambda: (rank, world))
        local = [(g, k) for g in range(questions)[rank::world] for k in range(samples)]
        mine = [local[row] for row in rank_rows(labels, samples).tolist()]
        assert mine == [one[G] for G in labels.tolist() if one[G][0] % world == rank]
        taken += mine
    assert sorted(taken) == sorted(one[G] for G in labels.tolist())


def test_cotrain_two_ranks_equal_one_process(tmp_path):
    saved = {}
    for samples in (1, 2):
        args = cotrain_args(samples=samples)
        team = cotrain.build_team(args, "cpu")
        initial = {name: adapter_state_dict(team.bases[0], name) for name in team.base_adapters[0]}
        records = [r for r in load_task("arith", "train", limit=4) for _ in range(samples)]
        debate, _, r = cotrain.rollout_step(team, args, records, ascii_fraction)
        per_question = r["rewards"].reshape(4, samples, *r["rewards"].shape[1:])
        # advantages not all 0
        assert r["rewards"].std() > 0 and (samples == 1 or (per_question.std(1) > 0).any())
        assert debate.records == records
        saved[samples] = dict(debate=debate, rewards=r["rewards"])
    torch.save(saved, tmp_path / "rollout.pt")

    run_script([*TORCHRUN, HELPER, "cotrain", str(tmp_path / "rollout.pt"), str(tmp_path / "two.pt")], timeout=300)
    two = torch.load(tmp_path / "two.pt")
    for setting in COTRAIN_SETTINGS:
        one = cotrain_update(torch.load(tmp_path / "rollout.pt", weights_only=False), setting, 0, 1)
        assert set(one) == set(two[setting])
        for name in one:
            torch.testing.assert_close(two[setting][name], one[name], atol=ATOL, rtol=RTOL, msg=f"{setting} {name}")
        for adapter in initial:  # the update did move every adapter (the check can fail); shared value heads: no critic
            assert any(not torch.equal(v, one[f"{adapter}/{k}"]) for k, v in initial[adapter].items() if "lora_B" in k)


# ---------------------------------------------------------------- magrpo.py (MAGRPO)

def magrpo_args(loss_agg: str = "seq-sum", max_grad_norm: float = 0.0) -> M.Args:
    """4 problems (2 per rank), G = 2, two turns, a k3 KL to the base."""
    return M.Args(model="tiny", num_generations=2, max_new_tokens=4, chat_template=False, temperature=1.0, top_p=1.0,
                  top_k=0, sandbox_workers=1, lr=0.03, turns=2, problems_per_step=4, termination_threshold=4.0,
                  loss_agg=loss_agg, beta=0.1, max_grad_norm=max_grad_norm)


def toy_reward(problem, texts):
    """Problems 0 and 2 score 5 (above the threshold: no second turn); 1 and 3 score by length. Sharded
    [rank::2], rank 0 then has no node at turn 2 while rank 1 has some: rank 0 must still join that step."""
    if problem["id"] in ("toy/0", "toy/2"):
        return 5.0, {}
    return float(len(texts[0]) + 2 * len(texts[1])) / 10, {}


def echo_feedback(problem, prompt_history, response_history):
    return [f"{problem['id']} agent{i} saw {rh[-1]!r}" for i, rh in enumerate(response_history)]


def magrpo_shard(roots: list, batches: list, num_generations: int, rank: int, world: int) -> tuple[list, list]:
    """This rank's trees (roots[rank::world]) and their rows of every turn's batches (G rows per node, nodes in
    nodes_by_turn order, as rollout() returns them)."""
    index = [{id(node): k for k, node in enumerate(nodes)} for nodes in M.nodes_by_turn(roots)]
    mine = roots[rank::world]
    my_batches = []
    for t, nodes in enumerate(M.nodes_by_turn(mine)):
        rows = torch.tensor([index[t][id(node)] * num_generations + g for node in nodes for g in range(num_generations)])
        my_batches.append([{k: v[rows] for k, v in batch.items()} for batch in batches[t]])
    return mine, my_batches


def magrpo_update(saved: dict, loss_agg: str, max_grad_norm: float, rank: int, world: int) -> dict:
    """Fresh agents (seeded alike on every rank), this rank's trees, one magrpo_update (SGD). Returns the adapters."""
    args = magrpo_args(loss_agg, max_grad_norm)
    seed_everything(0)
    agents = M.build_agents(args, "cpu")
    agents.optimizers = [torch.optim.SGD(params, lr=args.lr) for params in agents.params]
    roots, batches = magrpo_shard(saved["roots"], saved["batches"], args.num_generations, rank, world)
    metrics = M.magrpo_update(agents, roots, batches, args)
    assert not max_grad_norm or metrics["agent0/grad_norm"] > max_grad_norm  # the clip binds
    return {f"{name}/{k}": v for name, state in zip(agents.names, agent_states(agents)) for k, v in state.items()}


def test_magrpo_two_ranks_equal_one_process(tmp_path):
    args = magrpo_args()
    seed_everything(0)
    agents = M.build_agents(args, "cpu")
    initial = agent_states(agents)
    task = M.Task(prompts=lambda p: [p["text"] + " a", p["text"] + " b"], reward=toy_reward, feedback=echo_feedback)
    problems = [dict(id=f"toy/{i}", kind="toy", text=f"Q{i}:") for i in range(4)]
    roots, batches = M.rollout(agents, load_tokenizer("tiny"), problems, task, args)
    depths = [len(M.nodes_by_turn(roots[rank::2])) for rank in range(2)]
    assert depths == [1, 2]  # rank 0's trees stop after turn 1, rank 1's go on (the uneven case is exercised)
    torch.save(dict(roots=roots, batches=batches), tmp_path / "rollout.pt")

    run_script([*TORCHRUN, HELPER, "magrpo", str(tmp_path / "rollout.pt"), str(tmp_path / "two.pt")], timeout=300)
    two = torch.load(tmp_path / "two.pt")
    saved = torch.load(tmp_path / "rollout.pt", weights_only=False)
    for setting, (loss_agg, max_grad_norm) in MAGRPO_SETTINGS.items():  # (magrpo_update recomputes the
        one = magrpo_update(saved, loss_agg, max_grad_norm, 0, 1)          # trees' returns and advantages)
        assert set(one) == set(two[setting])
        for name in one:
            torch.testing.assert_close(two[setting][name], one[name], atol=ATOL, rtol=RTOL, msg=f"{setting} {name}")
        for i, name in enumerate(agents.names):
            assert any(not torch.equal(v, one[f"{name}/{k}"]) for k, v in initial[i].items() if "lora_B" in k)


# ---------------------------------------------------------------- the CLI under torchrun

def test_cotrain_cli_under_torchrun(tmp_path):
    run = tmp_path / "run"
    out = run_script([*TORCHRUN, "cotrain.py", "--model", "tiny", "--questions-per-update", "4", "--max-new-tokens",
                      "6", "--max-steps", "1", "--ppo-epochs", "1", "--sample-every", "1", "--output-dir", str(run)],
                     timeout=300)
    assert out.stdout.count("update 1: ") == 1 and out.stdout.count("sample debate") == 1  # rank 0 prints alone
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1]  # one line per step (0: the held-out eval): only rank 0 writes
    assert "eval/turn2/accuracy" in rows[0] and "eval/turn2/accuracy" in rows[1]  # rank 0 evaluates alone
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    assert state["step"] == 1 and len(state["rng"]) == 2
    assert not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])  # each rank its own sampling seed
    assert (run / "adapters" / "agent0" / "adapter_config.json").exists()


def test_magrpo_cli_under_torchrun(tmp_path):
    data = tmp_path / "tldr.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"post {i}"}) + "\n" for i in range(4)))
    run = tmp_path / "run"
    out = run_script([*TORCHRUN, "magrpo.py", "--model", "tiny", "--dataset", f"jsonl:{data}", "--problems-per-step", "2",
                      "--num-generations", "2", "--max-new-tokens", "8", "--sandbox-workers", "1", "--max-steps", "1",
                      "--output-dir", str(run)], timeout=300)
    assert out.stdout.count("step 1: ") == 1
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1] and rows[0]["tree/nodes"] == 1  # rank 0 logs its own tree
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    assert state["step"] == 1 and len(state["rng"]) == 2
    assert not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])
    assert (run / "adapters" / "agent1" / "adapter_config.json").exists()


# ---------------------------------------------------------------- the helper script of the equivalence tests

def thread_ids() -> set[str]:
    """This process's thread ids, C++ threads included (Linux; elsewhere empty: no check)."""
    task = Path("/proc/self/task")
    return set(os.listdir(task)) if task.exists() else set()


if __name__ == "__main__":  # torchrun ... tests/test_distributed.py cotrain|magrpo ROLLOUT OUT
    torch.set_num_threads(1)
    script, rollout_path, out_path = sys.argv[1:4]
    before = thread_ids()
    rank, world, _ = init_distributed()
    group_threads = thread_ids() - before  # gloo's transport and worker threads
    assert group_threads or not before, "init_distributed started no thread: the check below checks nothing"
    saved = torch.load(rollout_path, weights_only=False)
    if script == "cotrain":
        result = {setting: cotrain_update(saved, setting, rank, world)
                  for setting in COTRAIN_SETTINGS}
    else:
        result = {setting: magrpo_update(saved, loss_agg, norm, rank, world)
                  for setting, (loss_agg, norm) in MAGRPO_SETTINGS.items()}
    if rank == 0:
        torch.save(result, out_path)
    finish_distributed()
    # the group is gone, threads and all: none is left to free a tensor while Python shuts down
    assert not group_threads & thread_ids(), f"rank {rank}: the group's threads outlive finish_distributed"
