"""critic.py: V(s) for --advantage gae, both critics behind one function: value heads on the last
hidden states of the policy's own forward (--value-model shared) or of the critic LoRA adapter's
(separate: the paper's critic). The default, --advantage group, reads no values: cotrain.py calls it
only with gae (make_experience, ppo_loss); its gae and value_loss use what it returns. A learner may
skip this module."""
from __future__ import annotations

import torch


def critic_values(forward_pairs, team, exp: dict, rows: torch.Tensor, args, policy: dict | None,
                  chunk: int = 0) -> dict:
    """V(s) at every response token of the chosen rows, per trained (turn, agent): its turn's value
    head on the last hidden states of `policy` (cotrain.forward_pairs' outputs; None: a forward
    here) or, with --value-model separate, of a forward on the critic adapter."""
    if args.value_model == "separate":
        policy = forward_pairs(team, exp, rows, args, "critic", chunk, output_hidden=True)
    elif policy is None:
        policy = forward_pairs(team, exp, rows, args, None, chunk, output_hidden=True)
    return {key: team.heads[team.head_keys[key]](policy[key]["hidden"]) * e.response_mask[rows]
            for key, e in exp.items()}
