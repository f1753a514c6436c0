"""nanomarl's support package: the machinery every script needs and no learner needs to read.

The teaching path is the top-level scripts and common.py; they import from here, never the other
way. Each module is named for what it holds, for example:
  cli.py          flags from a dataclass, --config files, one-line refusals
  runs.py         the run folder, metrics, checkpoints, --resume, clean stops, RNG state, threads
  trackers.py     --report-to (wandb, trackio, tensorboard) and training_curves.png
  distributed.py  torchrun helpers, the default device, seeding
  models.py       model aliases (tiny, smollm2-135m), tokenizer, quantisation workarounds, adapters
  fast.py         the stacked-LoRA routing of generation
  sandbox.py      where generated programs run
  tasks/          the datasets and rewards of the tasks
"""
