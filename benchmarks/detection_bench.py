"""``MeanAveragePrecision``: our ``compute()`` and ``update()`` against torchmetrics' with both COCO backends.

Run::

    python -m benchmarks.detection_bench [--quick] [--images N] [--json PATH] [--device cuda]

On seeded COCO-shaped scenes (:func:`tools.detection_scenes.scenes`: 80 classes, about 7 ground truths and 100
detections per image; 5,000 images, ``--quick`` 500), in one process:

- ``update()`` host time: every image once, in batches of ``--batch`` images (8), into a fresh metric; the total
  wall time per image, ours and torchmetrics'. (On the CPU the host time is all of it.)
- ``compute()``: for each backend (``pycocotools``, ``faster_coco_eval``) and ``class_metrics`` False and True, the
  wall time of one ``compute()`` of a metric updated with every image: torchmetrics' once (it takes seconds to
  minutes), ours the median of ``--repeat`` runs, each on a fresh copy of the updated metric. The largest absolute
  difference over the output's keys is printed next to it (parity, as a sanity check: the tests judge it).

The table gives the ratios and the issue's targets: ``compute()`` at most 0.1x torchmetrics with faster_coco_eval and
at most 0.01x with pycocotools; ``class_metrics=True`` at most 1.5x ``False`` (ours); ``update()`` at most 1x.

Where torchvision is not installed, torchmetrics' class cannot be built: its side is then
:class:`tools.detection_scenes.CocoReference`, torchmetrics' own update and compute (the same COCO dicts, pycocotools
or faster-coco-eval) with our box conversion; the output says which. Until ``torchmetrics_async.detection`` exports
``MeanAveragePrecision``, only torchmetrics' side is timed.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from tools.detection_scenes import ours_class, reference_class, scenes, torchvision_available
from torchmetrics_async.testing import count_host_syncs

__all__ = ["BACKENDS", "TARGETS", "device_check", "main", "measure", "render"]

BACKENDS = ("pycocotools", "faster_coco_eval")
#: Upper bounds on ours / theirs (issue 28): ``compute()`` per backend, class_metrics True / False, ``update()``.
TARGETS = {"pycocotools": 0.01, "faster_coco_eval": 0.1, "class_metrics": 1.5, "update": 1.0}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(fn: Callable[[], Any], device: str) -> tuple[float, Any]:
    _sync(device)
    start = time.perf_counter()
    value = fn()
    _sync(device)
    return time.perf_counter() - start, value


def _update_all(metric: Any, batches: list[tuple[list, list]]) -> None:
    for preds, target in batches:
        metric.update(preds, target)


def _max_diff(ours: dict[str, Any], theirs: dict[str, Any]) -> float:
    """The largest absolute difference over the keys both results have (``inf`` if keys or shapes differ)."""
    if set(ours) != set(theirs):
        return float("inf")
    worst = 0.0
    for key, value in theirs.items():
        if not isinstance(value, torch.Tensor):
            continue
        mine = ours[key]
        if not isinstance(mine, torch.Tensor) or mine.shape != value.shape:
            return float("inf")
        if value.numel():
            worst = max(worst, float((mine.detach().cpu().double() - value.double()).abs().max()))
    return worst


def measure(
    images: int,
    batch: int = 8,
    repeat: int = 3,
    seed: int = 0,
    device: str = "cpu",
    backends: tuple[str, ...] = BACKENDS,
) -> dict[str, Any]:
    """Time both sides: a dict of seconds (no ``ours`` entries where it does not exist yet), the sides' names."""
    preds, target = scenes(seed, images)
    preds = [{k: v.to(device) for k, v in p.items()} for p in preds]
    target = [{k: v.to(device) for k, v in t.items()} for t in target]
    batches = [(preds[i : i + batch], target[i : i + batch]) for i in range(0, images, batch)]
    theirs_cls, ours_cls = reference_class(), ours_class()
    sides = {"theirs": theirs_cls} | ({"ours": ours_cls} if ours_cls is not None else {})
    result: dict[str, Any] = {
        "images": images,
        "batch": batch,
        "device": device,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg()[0],  # this machine is shared: wall times stretch with the load
        "theirs": "torchmetrics" if torchvision_available() else "CocoReference (no torchvision)",
        "ours": None if ours_cls is None else f"{ours_cls.__module__}.{ours_cls.__name__}",
        "update_s_per_image": {},
        "compute_s": {},
        "max_abs_diff": {},
    }
    warm = batches[0]
    for name, cls in sides.items():  # warm-up: first calls pay imports and allocator growth
        metric = cls().to(device) if name == "ours" else cls()
        metric.update(*warm)
        metric.compute()
        metric = cls().to(device) if name == "ours" else cls()
        seconds, _ = _timed(lambda m=metric: _update_all(m, batches), device)
        result["update_s_per_image"][name] = seconds / images
    for backend in backends:
        for class_metrics in (False, True):
            key = f"{backend}/class_metrics={class_metrics}"
            outputs = {}
            for name, cls in sides.items():
                metric = cls(backend=backend, class_metrics=class_metrics)
                metric = metric.to(device) if name == "ours" else metric
                _update_all(metric, batches)
                runs = 1 if name == "theirs" else repeat
                times = []
                for _ in range(runs):
                    fresh = copy.deepcopy(metric)
                    seconds, outputs[name] = _timed(fresh.compute, device)
                    times.append(seconds)
                result["compute_s"].setdefault(key, {})[name] = statistics.median(times)
                print(f"  {key}: {name} {statistics.median(times):.3f} s", file=sys.stderr, flush=True)
            if "ours" in outputs:
                result["max_abs_diff"][key] = _max_diff(outputs["ours"], outputs["theirs"])
    return result


def device_check(cls: type, device: str, images: int, batch: int = 8, repeat: int = 3) -> dict[str, Any]:
    """``scripts/gpu-check``'s detection section: host syncs in ``update()`` and the time of one ``compute()``.

    Every image is updated twice into fresh metrics: once under ``count_host_syncs()``, once under
    ``torch.cuda.set_sync_debug_mode("error")`` on CUDA (its error, if any, is returned); then ``compute()`` runs on
    ``repeat`` fresh copies of the updated metric (median wall time, the device synchronized).
    """
    preds, target = scenes(0, images)
    preds = [{k: v.to(device) for k, v in p.items()} for p in preds]
    target = [{k: v.to(device) for k, v in t.items()} for t in target]
    batches = [(preds[i : i + batch], target[i : i + batch]) for i in range(0, images, batch)]
    warm = cls().to(device)
    warm.update(*batches[0])
    warm.compute()
    counted = cls().to(device)  # built outside the count: constructors may read Python numbers off tensors
    with count_host_syncs(record_events=False) as syncs:
        _update_all(counted, batches)
    metric, error = cls().to(device), None
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_sync_debug_mode("error")
    try:
        _update_all(metric, batches)
    except RuntimeError as err:
        error = f"{type(err).__name__}: {err}"[:300]
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode(0)
    times = [_timed(copy.deepcopy(metric).compute, device)[0] for _ in range(repeat)]
    return {
        "images": images,
        "update_host_syncs": syncs.total,
        "update_sync_debug_error": error,
        "compute_s": statistics.median(times),
        "compute_runs_s": times,
    }


def _row(what: str, ours: float | None, theirs: float | None, target: float, unit: str, diff: str = "") -> str:
    ratio = None if ours is None or not theirs else ours / theirs
    cells = [
        what,
        "n/a" if ours is None else f"{ours:.4g} {unit}",
        "n/a" if theirs is None else f"{theirs:.4g} {unit}",
        "n/a" if ratio is None else f"{ratio:.4f}x",
        f"<= {target}x",
        "n/a" if ratio is None else ("yes" if ratio <= target else "**no**"),
        diff,
    ]
    return "| " + " | ".join(cells) + " |"


_MISSING = "not importable yet (torchmetrics_async.detection.MeanAveragePrecision)"


def render(result: dict[str, Any]) -> str:
    """The Markdown table of ratios and targets."""
    lines = [
        f"{result['images']} images, batches of {result['batch']}, device {result['device']}, torch "
        f"{result['torch']} ({result['threads']} threads, load average {result['load_average']:.1f}); "
        f"theirs: {result['theirs']}; ours: {result['ours'] or _MISSING}",
        "",
        "| measurement | ours | theirs | ours / theirs | target | met | max abs diff |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    update = result["update_s_per_image"]
    ours_update = update.get("ours")
    lines.append(_row("`update()` per image", _us(ours_update), _us(update["theirs"]), TARGETS["update"], "µs"))
    compute = result["compute_s"]
    backends = [b for b in BACKENDS if f"{b}/class_metrics=False" in compute]
    for backend in backends:
        for class_metrics in (False, True):
            key = f"{backend}/class_metrics={class_metrics}"
            diff = result["max_abs_diff"].get(key)
            lines.append(
                _row(
                    f"`compute()` {backend}, class_metrics={class_metrics}",
                    compute[key].get("ours"),
                    compute[key]["theirs"],
                    TARGETS[backend],
                    "s",
                    "" if diff is None else f"{diff:.1e}",
                )
            )
    for backend in backends:  # the target is on ours; torchmetrics' own ratio for scale
        true, false = (compute[f"{backend}/class_metrics={c}"] for c in (True, False))
        ours = None if "ours" not in true else true["ours"] / false["ours"]
        met = "n/a" if ours is None else ("yes" if ours <= TARGETS["class_metrics"] else "**no**")
        lines.append(
            f"| `compute()` class_metrics True / False, {backend} | {'n/a' if ours is None else f'{ours:.2f}x'} | "
            f"{true['theirs'] / false['theirs']:.2f}x | | ours <= {TARGETS['class_metrics']}x | {met} | |"
        )
    return "\n".join(lines)


def _us(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e6


def main(argv: list[str] | None = None) -> int:
    """Run, print the table (and write ``--json``)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.detection_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="500 images instead of 5,000")
    parser.add_argument("--images", type=int, default=None, help="this many images (overrides --quick)")
    parser.add_argument("--batch", type=int, default=8, help="images per update() (default 8)")
    parser.add_argument("--repeat", type=int, default=3, help="compute() runs of ours, median (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="where ours keeps its states (default cpu)")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS), help="(default: both)")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    images = args.images or (500 if args.quick else 5000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchmetrics' warnings (e.g. about many detections) are not measured here
        result = measure(images, args.batch, args.repeat, args.seed, args.device, tuple(args.backends))
    print(render(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
