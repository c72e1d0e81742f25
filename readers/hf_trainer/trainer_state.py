"""``trainer_state.json`` (``TrainerState.save_to_json``): what a checkpoint says about itself.

Keys (sorted, as Trainer writes them): ``best_global_step``, ``best_metric``,
``best_model_checkpoint`` (a path as the training process saw it, e.g.
``out/checkpoint-16``), ``epoch``, ``global_step``, ``log_history`` (every logged dict so far:
``{loss, grad_norm, learning_rate, epoch, step}``, ``{eval_loss, eval_runtime…, step}``, the final
``{train_runtime, train_loss…}``), ``max_steps``, ``save_steps``, ``stateful_callbacks``
(``TrainerControl.args.should_training_stop``), ``train_batch_size``, ``trial_params``…
"""

from __future__ import annotations

import json
import math
import posixpath
import statistics
from collections.abc import Callable, Mapping
from typing import Any

from lastgood.checks import Check
from lastgood.readers.base import MetricPoint
from lastgood.readers.modelfiles.checks import Problem

SPIKE_FACTOR = 2.0  # a loss at least twice the median of the ones logged before it …
SPIKE_WINDOW = 8    # … over the last this many …
SPIKE_MIN_HISTORY = 4  # … once that many have been logged
LOSS_KEYS = ("loss", "eval_loss")
WATCHED_KEYS = ("loss", "eval_loss", "grad_norm")


def trigger(state: Mapping[str, Any], is_best: bool) -> str:
    """``final`` when this save ended training (its own state: ``should_training_stop``, or the
    step reached ``max_steps``), ``best`` for the run's ``best_model_checkpoint``, else
    ``periodic``."""
    callbacks = state.get("stateful_callbacks")
    control = callbacks.get("TrainerControl") if isinstance(callbacks, Mapping) else None
    args = control.get("args") if isinstance(control, Mapping) else None
    stop = isinstance(args, Mapping) and args.get("should_training_stop") is True
    step, most = state.get("global_step"), state.get("max_steps")
    if stop or (isinstance(step, int) and isinstance(most, int) and 0 < most <= step):
        return "final"
    return "best" if is_best else "periodic"


def best_name(state: Mapping[str, Any]) -> str | None:
    """The folder name ``best_model_checkpoint`` points at (a path as training saw it)."""
    best = state.get("best_model_checkpoint")
    if not isinstance(best, str) or not best.strip():
        return None
    return posixpath.basename(best.replace("\\", "/").rstrip("/")) or None


def logged_at(state: Mapping[str, Any], step: int) -> dict[str, Any]:
    """The numbers logged at ``step`` (training and evaluation dicts merged), and ``epoch``."""
    out: dict[str, Any] = {}
    for item in reversed(_history(state)):
        at = item.get("step")
        if isinstance(at, int) and at < step:
            break
        if at == step:
            for key, value in item.items():
                if key != "step" and _number(value) and key not in out:
                    out[key] = value
    if "epoch" not in out and _number(state.get("epoch")):
        out["epoch"] = state["epoch"]
    return out


def metadata(state: Mapping[str, Any], step: int) -> dict[str, Any]:
    meta = logged_at(state, step)
    for key in ("global_step", "best_metric", "best_global_step"):
        if _number(state.get(key)):
            meta[key] = state[key]
    return meta


def summary(state: Mapping[str, Any], step: int) -> dict[str, Any]:
    """The state without its history: the history's length and what was logged at ``step``."""
    out = {k: v for k, v in state.items() if k != "log_history"}
    history = _history(state)
    out["log_history_entries"] = len(history)
    out["logged_at_step"] = [item for item in history if item.get("step") == step]
    return out


def metrics(state: Mapping[str, Any], run_id: str) -> list[MetricPoint]:
    points = []
    for item in _history(state):
        step = item.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            continue
        points += [MetricPoint(step, key, float(value), run_id) for key, value in item.items()
                   if key != "step" and _number(value)]
    return points


def log_problems(state: Mapping[str, Any], after: int, upto: int) -> list[Problem]:
    """NaN/Inf among watched values and loss spikes logged in ``(after, upto]`` (the steps this
    checkpoint added to the history)."""
    problems: list[Problem] = []
    series: dict[str, list[float]] = {key: [] for key in LOSS_KEYS}
    for item in _history(state):
        step = item.get("step")
        new = isinstance(step, int) and after < step <= upto
        for key in WATCHED_KEYS:
            value = item.get(key)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if not math.isfinite(value):
                if new:
                    problems.append(Problem(Check.NON_FINITE, "warning", f"{key} is {value} at step {step}"))
                continue
            if key in series:
                spike = _spike(series[key], float(value))
                if new and spike is not None:
                    problems.append(Problem(Check.LOSS_SPIKE, "warning",
                                            f"{key} {value:.4g} at step {step}: {value / spike:.2f}× the median "
                                            f"{spike:.4g} of the {min(len(series[key]), SPIKE_WINDOW)} before it"))
                series[key].append(float(value))
    return problems


def _spike(previous: list[float], value: float) -> float | None:
    """The baseline median when ``value`` is a spike over it, else None."""
    if len(previous) < SPIKE_MIN_HISTORY:
        return None
    median = statistics.median(previous[-SPIKE_WINDOW:])
    return median if median > 0 and value >= SPIKE_FACTOR * median else None


def last_step_only(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with ``log_history`` cut to the entries of its last logged step (what a
    listing needs, kept for a thousand checkpoints without holding a thousand histories)."""
    history = _history(state)
    last = history[-1].get("step") if history else None
    kept = [item for item in history[-8:] if item.get("step") == last]
    return {**{k: v for k, v in state.items() if k not in ("log_history", "log_history_cut")}, "log_history": kept}


def _history(state: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    history = state.get("log_history")
    return [item for item in history if isinstance(item, Mapping)] if isinstance(history, list) else []


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ---- reading only the ends of a long trainer_state.json ----------------------------------------

PARTIAL_MIN_BYTES = 64 * 1024  # smaller files are parsed whole
HEAD_BYTES = 16 * 1024
TAIL_BYTES = 64 * 1024
FIRST_HEAD_BYTES = 4 * 1024  # each end is first read this short (a save's keys, its newest entries) …
FIRST_TAIL_BYTES = 8 * 1024  # … and again at full length only when what is needed is not in it
_HISTORY_START = '\n  "log_history": ['
_HISTORY_END = '\n  ],\n  "'
_ENTRY = "\n    {\n"
_ENTRY_TWICE = "\n    {\n    {\n"  # two openings sharing a newline (never in a valid file)
DIGEST_ENTRIES = 16  # the newest log entries kept (a step logs one to three)


def digest(read_range: Callable[[int, int], bytes], size: int) -> dict[str, Any] | None:
    """The state without the middle of its history: every key, and ``log_history`` cut to its
    newest entries (those of the last steps, in the file's last 64 KiB). Trainer writes the file with
    ``indent=2, sort_keys=True`` (``TrainerState.save_to_json``): the keys before
    ``log_history`` are in the first bytes, the ones after it and the newest entries in the last
    ones. None when the file does not have that shape (the caller parses it whole).

    Each end is read short first (4 KiB, 8 KiB) and whole (16 KiB, 64 KiB) only when the short
    read lacks what the whole one is used for — the history's opening, or its end and more entries
    than are kept — so the answer is the one the whole windows give (see :func:`_tail`)."""
    if size < PARTIAL_MIN_BYTES:
        return None
    head = _head(read_range)
    tail, end = _tail(read_range, size)
    start = head.find(_HISTORY_START)
    if not head.startswith("{") or start < 0 or end < 0:
        return None
    try:
        before = json.loads(head[:start].rstrip().rstrip(",") + "\n}")
        after = json.loads("{" + tail[end + len("\n  ],"):])
        parts = tail[:end].split(_ENTRY)[1:][-DIGEST_ENTRIES:]  # the first piece is cut: never parsed
        entries = [json.loads("{\n" + part.rstrip().rstrip(",")) for part in parts]
    except (ValueError, RecursionError):
        return None
    if not isinstance(before, dict) or not isinstance(after, dict) or "log_history" in after or not entries \
            or not all(isinstance(e, dict) for e in entries):
        return None
    return {**before, **after, "log_history": entries, "log_history_cut": True}


def _head(read_range: Callable[[int, int], bytes]) -> str:
    """The file's first bytes as text, far enough to hold the history's opening when the first
    16 KiB do (the first occurrence of an ASCII marker in a prefix is the same as in the whole)."""
    head = read_range(0, FIRST_HEAD_BYTES).decode("utf-8", "replace")
    return head if _HISTORY_START in head else read_range(0, HEAD_BYTES).decode("utf-8", "replace")


def _tail(read_range: Callable[[int, int], bytes], size: int) -> tuple[str, int]:
    """The file's last bytes as text, and where the history's end is in them (-1: not there).

    A short tail stands for the 64 KiB one when it holds the history's end (the last occurrence:
    the same one) and more entry openings before it than are kept: the pieces after the first
    opening it finds are the whole window's pieces (a scan for the opening from another start
    falls in step at the next one unless two openings overlap: then the whole window is read), so the
    newest ``DIGEST_ENTRIES`` of them are the same."""
    short = read_range(size - FIRST_TAIL_BYTES, FIRST_TAIL_BYTES).decode("utf-8", "replace")
    end = short.rfind(_HISTORY_END)
    if end >= 0 and short.count(_ENTRY, 0, end) > DIGEST_ENTRIES and _ENTRY_TWICE not in short:
        return short, end
    tail = read_range(size - TAIL_BYTES, TAIL_BYTES).decode("utf-8", "replace")
    return tail, tail.rfind(_HISTORY_END)
