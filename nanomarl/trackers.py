"""Where the metrics go besides metrics.jsonl: --report-to wandb, trackio or tensorboard (each an
optional install, imported only when asked for), and training_curves.png drawn from metrics.jsonl.

runs.log_metrics feeds the open tracker; plot.py and the trainers draw the curves. A learner may
skip this module.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import re
from pathlib import Path

from nanomarl.cli import arg_error
from nanomarl.distributed import is_main_process

REPORT_TO = ("none", "wandb", "trackio", "tensorboard")  # --report-to's trackers, each optional

_TRACKER = dict(name="none", handle=None)  # the open tracker: its name, its run / module / writer


def check_report_to(report_to: str):
    """--report-to is none or a known tracker that is installed (checked without importing it)."""
    if report_to not in REPORT_TO:
        arg_error("--report-to", f"expected one of {', '.join(REPORT_TO)}, got {report_to!r}")
    if report_to != "none" and importlib.util.find_spec(report_to) is None:
        arg_error("--report-to", f"{report_to} is not installed (pip install {report_to}, "
                                 f"or --report-to none)")


def start_tracker(report_to: str, run_dir: Path, config: dict):
    """--report-to: besides metrics.jsonl, send every log_metrics row to wandb (offline mode, files
    in RUN/wandb; `wandb sync` uploads them later; WANDB_MODE=online logs live), trackio (a local
    project `nanomarl`; `trackio show` opens it; TRACKIO_DIR sets its folder) or tensorboard (event
    files in RUN/tensorboard; `tensorboard --logdir RUN`). Each is an optional dependency, imported
    here only when asked for; a missing one stops the run with one line. Only rank 0 reports."""
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
    """One metrics.jsonl row to the open tracker: its `step` as the tracker's step (trackio reserves
    the key), the rest as metrics (tensorboard keeps the numbers only)."""
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


# the panels of training_curves.png: (title, the metrics it draws as a regex); empty ones left out
CURVE_PANELS = [  # (title, the metrics it draws); a title with (%) draws fractions as 0-100 %
    ("reward", r"objective/scores|objective/rewards|reward/mean"),
    ("training accuracy (%)", r"turn\d+/accuracy|train/accuracy"),
    ("KL to the reference (nats)", r"objective/kl"),
    ("loss", r"loss/policy|loss/value|agent\d+/loss|train/loss"),
    ("held-out mean agent accuracy (%; step 0: untrained)", r"eval/turn\d+/agent_accuracy"),
    ("held-out vote, the authors' tie rule (%)", r"eval/turn\d+/accuracy"),
    ("held-out pass rate, accuracy (%; step 0: untrained)", r"eval/pass_rate|eval/accuracy"),
    ("held-out reward, calibration (step 0: untrained)",
     r"eval/reward/mean|eval/(auroc|brier|ece)"),
    ("held-out reward levels", r"eval/reward/(?!mean$).+"),
]


def run_curves(rows: list[dict]) -> dict[str, dict[str, tuple[list, list]]]:
    """metrics.jsonl rows -> {panel title: {metric: (steps, values)}}, in the order of the rows.
    Rows without a `step`, values that are not finite numbers and panels without data are left
    out."""
    curves = {title: {} for title, _ in CURVE_PANELS}
    for row in rows:
        if not isinstance(row.get("step"), (int, float)):
            continue
        for key, value in row.items():
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or not math.isfinite(value):
                continue
            panel = next((title for title, pattern in CURVE_PANELS if re.fullmatch(pattern, key)),
                         None)
            if panel is not None:
                steps, values = curves[panel].setdefault(key, ([], []))
                steps.append(row["step"])
                values.append(value)
    return {title: series for title, series in curves.items() if series}


def plot_run(run_dir: str | Path) -> Path | None:
    """RUN/training_curves.png from RUN/metrics.jsonl: one panel per group of run_curves (the
    training curves and the held-out eval curves against the step). Without matplotlib: a note and
    None. Only rank 0 draws."""
    run_dir = Path(run_dir)
    if not is_main_process():
        return None
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no training curves (pip install matplotlib; "
              f"then python plot.py --run {run_dir})")
        return None
    rows, path = [], run_dir / "metrics.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        with contextlib.suppress(json.JSONDecodeError):
            rows.append(json.loads(line))
    curves = run_curves([row for row in rows if isinstance(row, dict)])
    if not curves:
        print(f"{path} has no curves to draw")
        return None
    cols = min(3, len(curves))
    rows = math.ceil(len(curves) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(curves):]:
        ax.set_axis_off()
    for ax, (title, series) in zip(axes.flat, curves.items()):
        scale = 100 if "(%" in title else 1
        for key, (steps, values) in series.items():
            marker = "o" if len(steps) <= 30 else None
            ax.plot(steps, [v * scale for v in values], marker=marker, markersize=3, label=key)
        ax.set(xlabel="step", **(dict(ylim=(0, 100)) if scale == 100 else {}))
        ax.set_title(title, fontsize=9)
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
