"""The training-loop comparison: torchmetrics vs torchmetrics-async on the profiling article's loop.

``python -m torchmetrics_async.demo`` trains a model on synthetic images and labels and logs the article's five
metrics (``avg_loss`` through ``MeanMetric``; ``accuracy``, ``precision``, ``recall``, ``f1_score`` over 1000 classes)
(computed, printed and reset every ``--log-every`` steps), once per mode, with the same seed and data:

- ``torchmetrics``: the installed torchmetrics classes;
- ``accelerated``: the same classes after :func:`torchmetrics_async.accelerate`.

With CUDA it is the article's setup (ResNet-18, 224x224 images, batch 128); on the CPU a small CNN on 32x32 images so
a run takes about a minute. Per mode it reports the mean step time, the host syncs per step made by the metric calls
in the loop (``update``/``forward``), the host syncs per logging step (``compute`` and ``.item()``), and the final
metric values, which must match across modes.

Example:
    >>> from torchmetrics_async.demo import run
    >>> report = run(steps=3, device="cpu", log_every=2, modes=("torchmetrics", "accelerated"), image_size=8)
    >>> sorted(report["modes"]), report["steps"]
    (['accelerated', 'torchmetrics'], 3)
"""

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torchmetrics
from torch import nn

from torchmetrics_async import accelerate
from torchmetrics_async.testing import count_host_syncs

__all__ = ["MODES", "build_metrics", "main", "run", "update_metrics"]

MODES: dict[str, Callable[[dict], dict]] = {
    "torchmetrics": lambda metrics: metrics,
    "accelerated": accelerate,
}


def build_metrics(num_classes: int = 1000, average: str | None = None) -> dict[str, torchmetrics.Metric]:
    """The article's metrics, as plain torchmetrics objects: the loss mean and four multiclass scores.

    Args:
        num_classes: classes of the classification task.
        average: the scores' ``average``; ``None`` keeps the task wrappers' default (``"micro"``), as the article.

    Returns:
        Name -> metric.

    Example:
        >>> sorted(build_metrics(10))
        ['accuracy', 'avg_loss', 'f1_score', 'precision', 'recall']
    """
    task: dict[str, Any] = {"task": "multiclass", "num_classes": num_classes}
    if average is not None:
        task["average"] = average
    return {
        "avg_loss": torchmetrics.MeanMetric(),
        "accuracy": torchmetrics.Accuracy(**task),
        "precision": torchmetrics.Precision(**task),
        "recall": torchmetrics.Recall(**task),
        "f1_score": torchmetrics.F1Score(**task),
    }


def update_metrics(
    metrics: dict[str, torchmetrics.Metric], loss: torch.Tensor, output: torch.Tensor, target: torch.Tensor
) -> None:
    """One training step's metric updates, as the article makes them: the loss mean, and the scores on the logits.

    Args:
        metrics: what :func:`build_metrics` returned (possibly accelerated).
        loss: the step's loss.
        output: the model's logits ``(N, C)``.
        target: the labels ``(N,)``.

    Example:
        >>> metrics = build_metrics(4)
        >>> update_metrics(metrics, torch.tensor(1.2), torch.randn(8, 4), torch.randint(0, 4, (8,)))
        >>> metrics["avg_loss"].compute()
        tensor(1.2000)
    """
    for name, metric in metrics.items():
        if name == "avg_loss":
            metric.update(loss.detach())
        else:
            metric.update(output.detach(), target)


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.down(x))


def resnet18(num_classes: int = 1000) -> nn.Module:
    """ResNet-18 (torchvision's layout), so the demo needs no torchvision.

    Args:
        num_classes: output classes.

    Returns:
        The model.

    Example:
        >>> sum(p.numel() for p in resnet18().parameters())
        11689512
    """
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [_BasicBlock(cin, cout, stride), _BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers)


def small_cnn(num_classes: int = 1000) -> nn.Module:
    """A small CNN for CPU runs.

    Args:
        num_classes: output classes.

    Returns:
        The model.

    Example:
        >>> small_cnn(10)(torch.zeros(2, 3, 32, 32)).shape
        torch.Size([2, 10])
    """
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, 2, 1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, num_classes),
    )


def _batches(steps: int, batch_size: int, image_size: int, num_classes: int, seed: int) -> list:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(steps * batch_size) % num_classes  # the article's FakeDataset: label = index % 1000
    return [
        (
            torch.randn(batch_size, 3, image_size, image_size, generator=generator),
            labels[i * batch_size : (i + 1) * batch_size],
        )
        for i in range(steps)
    ]


def _run_mode(mode: str, device: torch.device, steps: int, log_every: int, cfg: dict, batches: list) -> dict:
    torch.manual_seed(cfg["seed"])
    model = (resnet18 if cfg["model"] == "resnet18" else small_cnn)(cfg["num_classes"]).to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    metrics = build_metrics(cfg["num_classes"], cfg["average"])
    metrics = MODES[mode]({name: metric.to(device) for name, metric in metrics.items()})
    step_syncs = log_syncs = logs = 0
    step_times: list[float] = []
    last: dict[str, float] = {}
    for idx, (images, labels) in enumerate(batches):
        t0 = time.perf_counter()
        data, target = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        optimizer.zero_grad()
        output = model(data)
        loss = criterion(output, target)
        loss.backward()
        optimizer.step()
        with count_host_syncs(record_events=False) as syncs:
            update_metrics(metrics, loss, output, target)
        step_syncs += syncs.total
        if (idx + 1) % log_every == 0 or idx + 1 == steps:
            with count_host_syncs(record_events=False) as syncs:
                last = {name: metric.compute().item() for name, metric in metrics.items()}
                for metric in metrics.values():
                    metric.reset()
            log_syncs += syncs.total
            logs += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        step_times.append(time.perf_counter() - t0)
    warm = step_times[min(len(step_times) - 1, cfg["warmup"]) :]
    return {
        "step_ms": 1000 * sum(warm) / len(warm),
        "host_syncs_per_step": step_syncs / steps,
        "host_syncs_per_log": log_syncs / max(logs, 1),
        "metrics": last,
    }


def run(
    steps: int = 200,
    device: str = "auto",
    log_every: int = 50,
    modes: Sequence[str] = tuple(MODES),
    seed: int = 0,
    image_size: int = 0,
    average: str | None = None,
) -> dict[str, Any]:
    """Run every mode on the same data and return the report (the ``--json`` document).

    Args:
        steps: training steps per mode.
        device: ``"auto"`` (CUDA when available), ``"cpu"`` or ``"cuda"``.
        log_every: compute, log and reset the metrics every this many steps (and after the last step).
        modes: which modes to run.
        seed: seed for the model and the data.
        image_size: image side; 0 picks 224 with CUDA and 32 on the CPU.
        average: the classification scores' ``average`` (``None``: torchmetrics' task-wrapper default, micro).

    Returns:
        ``{"device", "world_size", "steps", "model", "modes": {mode: {"step_ms", "host_syncs_per_step",
        "host_syncs_per_log", "metrics"}}}``.

    Example:
        >>> run(steps=2, device="cpu", log_every=1, modes=("accelerated",), image_size=8)["world_size"]
        1
    """
    dev = torch.device(
        "cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device)
    )
    cuda = dev.type == "cuda"
    cfg = {
        "seed": seed,
        "num_classes": 1000,
        "model": "resnet18" if cuda else "small_cnn",
        "batch_size": 128 if cuda else 64,
        "image_size": image_size or (224 if cuda else 32),
        "warmup": 10 if steps > 20 else 0,
        "average": average,
    }
    if cuda:
        torch.backends.cudnn.benchmark = True
    batches = _batches(steps, cfg["batch_size"], cfg["image_size"], cfg["num_classes"], seed)
    report: dict[str, Any] = {
        "device": str(dev),
        "world_size": 1,
        "steps": steps,
        "model": cfg["model"],
        "average": average or "micro",
        "modes": {},
    }
    for mode in modes:
        report["modes"][mode] = _run_mode(mode, dev, steps, log_every, cfg, batches)
    return report


def format_report(report: dict[str, Any]) -> str:
    """The report as a table, with the final metric values side by side.

    Args:
        report: what :func:`run` returned.

    Returns:
        Printable text.

    Example:
        >>> report = {"device": "cpu", "world_size": 1, "steps": 1, "model": "m", "modes": {}}
        >>> print(format_report(report).splitlines()[0])
        device cpu, world size 1, model m, 1 steps, average micro
    """
    modes = report["modes"]
    lines = [f"device {report['device']}, world size {report['world_size']}, model {report['model']},"]
    lines[0] += f" {report['steps']} steps, average {report.get('average', 'micro')}"
    header = f"{'mode':<22}{'step ms':>10}{'syncs/step':>12}{'syncs/log':>11}"
    names = sorted({name for result in modes.values() for name in result["metrics"]})
    lines.append(header + "".join(f"{name:>16}" for name in names))
    for mode, result in modes.items():
        row = f"{mode:<22}{result['step_ms']:>10.2f}"
        row += f"{result['host_syncs_per_step']:>12.2f}{result['host_syncs_per_log']:>11.2f}"
        lines.append(row + "".join(f"{result['metrics'].get(name, float('nan')):>16.6f}" for name in names))
    values = [result["metrics"] for result in modes.values()]
    same = all(v == values[0] for v in values[1:])
    lines.append("final metric values match across modes" if same else "FINAL METRIC VALUES DIFFER ACROSS MODES")
    return "\n".join(lines)


def main(argv: Sequence[str] = ()) -> int:
    """Command line entry point: ``python -m torchmetrics_async.demo [--steps N] [--device D] [--json PATH]``.

    Args:
        argv: arguments (without the program name).

    Returns:
        0 when the final metric values match across modes, 1 otherwise.

    Example:
        >>> main(["--steps", "2", "--device", "cpu", "--log-every", "1", "--image-size", "8"])  # doctest: +ELLIPSIS
        device cpu, world size 1, model small_cnn, 2 steps, average micro
        ...
        0
    """
    parser = argparse.ArgumentParser(prog="python -m torchmetrics_async.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="training steps per mode (default 200)")
    parser.add_argument("--device", default="auto", help="auto (CUDA if available), cpu or cuda")
    parser.add_argument("--log-every", type=int, default=50, help="compute/log/reset interval in steps (default 50)")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--image-size", type=int, default=0, help="image side (default: 224 on CUDA, 32 on CPU)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--average",
        choices=["micro", "macro", "weighted"],
        help="average of the four scores (default: the task wrappers' default, micro, as in the article)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the report as JSON to PATH")
    args = parser.parse_args(list(argv))
    report = run(args.steps, args.device, args.log_every, args.modes, args.seed, args.image_size, args.average)
    print(format_report(report))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
    values = [result["metrics"] for result in report["modes"].values()]
    return 0 if all(v == values[0] for v in values[1:]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
