"""plot.py: draw a run's training curves to RUN/training_curves.png.

    python plot.py --run runs/cotrain-RUN

One panel per group of metrics.jsonl's numbers (reward, training accuracy, KL, losses, and the
held-out eval rows against the step: step 0 is the untrained team). cotrain.py, magrpo.py and
train_verifier.py draw it themselves at the end of a run when matplotlib is installed; this redraws
it, e.g. for a run still going.
"""
from dataclasses import dataclass
from pathlib import Path

from nanomarl.cli import arg_error, parse_args
from nanomarl.trackers import plot_run


@dataclass
class Args:
    run: str = ""  # the run folder (it holds metrics.jsonl)


def main(args: Args):
    if not (Path(args.run) / "metrics.jsonl").is_file():
        arg_error("--run", f"{args.run or repr('')} has no metrics.jsonl (give the folder of a "
                           "cotrain.py, magrpo.py or train_verifier.py run)")
    plot_run(args.run)  # prints where the PNG went, or why there is none


if __name__ == "__main__":
    main(parse_args(Args))
