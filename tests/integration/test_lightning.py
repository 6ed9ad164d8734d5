"""A real ``lightning.Trainer`` with accelerated metrics: the values Lightning logs equal plain torchmetrics' values.

Each run trains :class:`tests.integration.lit.LitClassifier`, whose metric sets (plain torchmetrics; the
``torchmetrics_async`` classes; torchmetrics' names under ``patch()``) see the same batches and are logged with
``self.log(name, metric, on_step=True, on_epoch=True)``, ``self.log_dict(collection)`` (epoch) and epoch-level
validation/test metrics. Every value sent to the loggers, at every step, and every ``callback_metrics`` entry must be
equal between the sets. Multi-process runs (``ddp``, ``ddp_spawn``: 2 CPU gloo processes) go through
``tests/integration/ddp_main.py`` in a subprocess with a bounded time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("lightning", reason="Lightning integration tests need `lightning` (pip install '.[lightning]')")

from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

from tests.distributed.harness import free_port
from tests.integration import lit
from torchmetrics_async.lightning import AsyncMetricLogging
from torchmetrics_async.metric import SyncFreeMixin

pytestmark = pytest.mark.slow  # every test here runs Lightning fits (some in 2 processes)

ROOT = Path(__file__).resolve().parents[2]
TRAIN_NAMES = {"loss_step", "loss_epoch", "acc_step", "acc_epoch", "train_f1", "train_prec", "val_acc", "val_loss"}
TEST_NAMES = {"test_acc", "test_recall", "test_loss"}
MULTI_PROCESS_TIMEOUT = 600  # a hang guard, not a speed test: 2 processes share 2 busy cores
STRATEGIES = ("ddp", "ddp_spawn")


def _fit_validate_test(tmp_path: Path) -> dict[str, Any]:
    model = lit.LitClassifier()
    checkpoints = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    trainer = lit.trainer(enable_checkpointing=True, callbacks=[checkpoints])
    trainer.fit(model, lit.loader(20, seed=1), lit.loader(8, seed=2))
    trainer.validate(model, lit.loader(8, seed=2), verbose=False)
    trainer.test(model, lit.loader(8, seed=3), verbose=False)
    # resume: a new module and Trainer continue from the last checkpoint for a third epoch
    resumed_model = lit.LitClassifier()
    resumed = lit.trainer(max_epochs=3)
    resumed.fit(resumed_model, lit.loader(20, seed=1), lit.loader(8, seed=2), ckpt_path=str(tmp_path / "last.ckpt"))
    return {"model": model, "stages": lit.recorder(trainer).stages, "resumed": lit.recorder(resumed).stages["fit"]}


@pytest.fixture(scope="module")
def single_device(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _fit_validate_test(tmp_path_factory.mktemp("checkpoints"))


def test_accelerated_sets_are_accelerated(single_device: dict[str, Any]) -> None:
    model = single_device["model"]
    for kind in ("explicit", "patched"):
        for name in ("loss", "acc", "val_acc", "test_loss"):
            assert isinstance(model.metric(kind, name), SyncFreeMixin), (kind, name)
        assert all(isinstance(member, SyncFreeMixin) for member in model.metric(kind, "train").values())
    assert not isinstance(model.metric("plain", "acc"), SyncFreeMixin)


@pytest.mark.parametrize("stage", ["fit", "validate", "test"])
def test_single_device_logged_values_equal_torchmetrics(single_device: dict[str, Any], stage: str) -> None:
    seen = single_device["stages"][stage]
    names = lit.assert_logs_equal(seen["logged"], stage)
    lit.assert_sets_equal(seen["callback_metrics"], f"{stage} callback_metrics")
    expected = {"fit": TRAIN_NAMES, "validate": {"val_acc", "val_loss"}, "test": TEST_NAMES}[stage]
    assert expected <= names | set(lit.by_set(seen["callback_metrics"])["plain"]), stage


def test_single_device_fit_logs_every_step_and_epoch(single_device: dict[str, Any]) -> None:
    logged = single_device["stages"]["fit"]["logged"]
    steps = [step for step, values in logged if "plain/loss_step" in values]
    assert steps == list(range(10)), steps  # 5 batches x 2 epochs, log_every_n_steps=1
    epochs = [values for _, values in logged if "plain/acc_epoch" in values]
    assert len(epochs) == 2


def test_single_device_resume_from_checkpoint(single_device: dict[str, Any]) -> None:
    resumed = single_device["resumed"]
    assert resumed["global_step"] == 15  # 2 epochs restored + 1 more
    steps = [step for step, values in resumed["logged"] if "plain/loss_step" in values]
    assert steps == list(range(10, 15)), steps
    lit.assert_logs_equal(resumed["logged"], "resumed fit")
    lit.assert_sets_equal(resumed["callback_metrics"], "resumed fit callback_metrics", TRAIN_NAMES)


@pytest.mark.parametrize("bad", ["label", "nan"])
@pytest.mark.parametrize("kind", ["explicit", "patched"])
def test_bad_batch_logged_step_only_raises_by_epoch_end(kind: str, bad: str) -> None:
    """A bad batch at batch 1, logged with ``on_step=True, on_epoch=False``: the batch value is NaN, the error is
    raised when Lightning resets the metric at the end of the epoch (batches 2-4 ran, the next epoch did not)."""
    model = lit.LitClassifier(sets=(kind,), bad=bad, bad_batch=1)
    logger = lit.RecordingLogger()
    trainer = lit.trainer(logger=logger, max_epochs=2)
    message = "Detected more unique values in `target`" if bad == "label" else "Encountered `nan` values in tensor"
    with pytest.raises(RuntimeError, match=f"^{message}"):
        trainer.fit(model, lit.loader(20, seed=1))
    checks = {step: values[f"{kind}/check"] for step, values in logger.records if f"{kind}/check" in values}
    assert sorted(checks) == [0, 1, 2, 3, 4], checks  # the whole first epoch ran; the second never started
    assert torch.isnan(torch.tensor(checks[1])), checks
    assert not any(torch.isnan(torch.tensor(checks[step])) for step in (0, 2, 3, 4)), checks


def _run_multi_process(strategy: str, out_dir: Path) -> dict[str, Any]:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "PYTHONPATH": str(ROOT)}
    env.pop("LOCAL_RANK", None)
    env.pop("WORLD_SIZE", None)
    # Its own session, so that a run past the limit is killed with every process it started (Lightning's relaunched
    # or spawned ranks), not only the launcher.
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.ddp_main", strategy, str(out_dir)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=MULTI_PROCESS_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{strategy} ran past {MULTI_PROCESS_TIMEOUT} s\n{stdout[-4000:]}\n{stderr[-8000:]}")
    assert process.returncode == 0, f"{strategy} exited {process.returncode}\n{stdout[-4000:]}\n{stderr[-8000:]}"
    return {path.stem: torch.load(path, weights_only=False) for path in out_dir.glob("*.pt")}


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run_multi_process("ddp", tmp_path_factory.mktemp("ddp"))


@pytest.fixture(scope="module")
def ddp_spawn_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run_multi_process("ddp_spawn", tmp_path_factory.mktemp("ddp_spawn"))


def _multi_process(request: pytest.FixtureRequest, strategy: str) -> dict[str, Any]:
    return request.getfixturevalue(f"{strategy}_run")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_two_processes_logged_values_equal_torchmetrics(request: pytest.FixtureRequest, strategy: str) -> None:
    """Within each run, on both ranks, for fit, validate and test: every accelerated value equals the plain set's, in
    every logger record and in ``callback_metrics``.

    The plain set is per-rank plain torchmetrics by construction, under ``ddp_spawn`` too: each stage's workers give it
    private states (:meth:`tests.integration.lit.LitClassifier.setup`) instead of the launching process's states,
    which they receive in shared memory. So on each rank both sets see the same batches in the same order, and both
    are synced over the same 2 ranks (a sum of two per-rank partial sums is the same in either order): equal, exactly.
    """
    results = _multi_process(request, strategy)
    for stage, expected in (("fit", TRAIN_NAMES), ("validate", {"val_acc", "val_loss"}), ("test", TEST_NAMES)):
        for rank in (0, 1):
            seen = results[f"rank{rank}-{stage}"]["callback_metrics"]
            lit.assert_sets_equal(seen, f"{strategy} rank {rank} {stage} callback_metrics", expected)
        assert lit.assert_logs_equal(results[f"rank0-{stage}"]["logged"], f"{strategy} rank 0 {stage}")
        # epoch values are synced: both ranks hold the same ones
        rank0, rank1 = (results[f"rank{rank}-{stage}"]["callback_metrics"] for rank in (0, 1))
        epoch_keys = [key for key in rank0 if not key.endswith("_step")]
        assert {key: rank0[key] for key in epoch_keys} == {key: rank1[key] for key in epoch_keys}, stage


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_two_processes_async_metric_logging_equals_blocking_windows(
    request: pytest.FixtureRequest, strategy: str
) -> None:
    results = _multi_process(request, strategy)
    for rank in (0, 1):
        fit = results[f"rank{rank}-fit"]
        lit.assert_windows_equal(fit["async_history"], fit["blocking_windows"])
        # 5 batches per rank per epoch, windows of 3: [0-2], [3-4] (epoch end), [5-7], [8-9]
        assert [(w["first_batch"], w["last_batch"]) for w in fit["async_history"]] == [(0, 2), (3, 4), (5, 7), (8, 9)]
    assert results["rank0-fit"]["async_history"] == results["rank1-fit"]["async_history"]
    _assert_sent_to_loggers(results["rank0-fit"]["async_history"], results["rank0-fit"]["logged"])


def _assert_sent_to_loggers(history: list[dict[str, Any]], logged: list[tuple[int, dict[str, float]]]) -> None:
    """Rank zero's loggers received each window's values, in order, at the step the history says."""
    sent = [
        (step, {key: value for key, value in values.items() if key.startswith("async/")})
        for step, values in logged
        if any(key.startswith("async/") for key in values)
    ]
    assert sent == [(window["step"], window["values"]) for window in history], sent


def test_ddp_spawn_leaves_the_parents_metrics_alone(ddp_spawn_run: dict[str, Any]) -> None:
    """After fit, validate and test under ``ddp_spawn``, the parent's metrics still hold their defaults."""
    changed = ddp_spawn_run["parent"]["changed"]
    # Positive control: the spawned workers received the parent's CPU state tensors in shared memory, and plain
    # torchmetrics' SumMetric.update() adds into them in place, so the parent's probe changed. The accelerated metrics
    # (explicit classes, patch(), the callback's) copy received states before writing; the plain reference metrics
    # were given private states in the workers.
    assert changed == ["shared_probe.sum_value"], changed


def test_single_device_async_metric_logging_equals_blocking_windows() -> None:
    model = lit.LitClassifier(sets=("plain",), callback_metrics=True)
    callback = AsyncMetricLogging(metrics=["cb_loss", "cb_metrics"], prefix="async/")  # every log_every_n_steps
    blocking = lit.BlockingWindows(2, prefix="async/")
    trainer = lit.trainer(max_epochs=2, log_every_n_steps=2, callbacks=[callback, blocking])
    trainer.fit(model, lit.loader(20, seed=1))
    lit.assert_windows_equal(callback.history, blocking.windows)
    # 5 batches per epoch, windows of 2, cut at epoch ends
    windows = [(w["first_batch"], w["last_batch"]) for w in callback.history]
    assert windows == [(0, 1), (2, 3), (4, 4), (5, 6), (7, 8), (9, 9)]
    _assert_sent_to_loggers(callback.history, lit.recorder(trainer).stages["fit"]["logged"])
    last = callback.history[-1]["values"]
    assert {key: float(trainer.callback_metrics[key]) for key in last} == last


MONITOR = "async/cb_loss"


def _fit_monitored(
    tmp_path: Path, every: int, at: str, monitor: Any, **options: Any
) -> tuple[list[float], lit.MonitorProbe]:
    """3 epochs of 5 training batches with ``monitor`` (a ``ModelCheckpoint`` or ``EarlyStopping``) on :data:`MONITOR`,
    a window of the callback every ``every`` batches (``0``: epoch ends only). ``at``: where the monitors run:
    ``"train_epoch_end"`` (no validation) or ``"validation_end"`` (validation after each epoch, before Lightning's
    ``on_train_epoch_end``). Returns each epoch's last window from the blocking path (plain torchmetrics) and the
    probe of what the monitors saw. ``options``: more Trainer arguments."""
    model = lit.LitClassifier(sets=(), callback_metrics=True)
    callback = AsyncMetricLogging(metrics=["cb_loss", "cb_metrics"], every_n_steps=every, prefix="async/")
    blocking = lit.BlockingWindows(every, prefix="async/")
    probe = lit.MonitorProbe(MONITOR)
    callbacks = [callback, blocking, monitor, probe]
    options = {"max_epochs": 3, "enable_checkpointing": True, "default_root_dir": tmp_path, **options}
    trainer = lit.trainer(callbacks=callbacks, **options)
    trainer.fit(model, lit.loader(20, seed=1), lit.loader(8, seed=2) if at == "validation_end" else None)
    last = {window["epoch"]: window["values"][MONITOR] for window in blocking.windows}
    return [last[epoch] for epoch in sorted(last)], probe


@pytest.mark.parametrize("at", ["train_epoch_end", "validation_end"])
@pytest.mark.parametrize("every", [0, 2])
def test_monitors_see_each_epochs_last_window(tmp_path: Path, every: int, at: str) -> None:
    """``ModelCheckpoint`` and ``EarlyStopping`` monitoring a managed metric see, at each epoch's end, that epoch's last
    window (``every=0``: the whole epoch; ``2``: its last batch), equal to plain torchmetrics' over the same batches:
    the best epoch's checkpoint is kept, and early stopping stops at the epoch that crossed its threshold."""
    on_train_epoch_end = at == "train_epoch_end"
    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "best",
        filename="{epoch}",
        monitor=MONITOR,
        mode="min",
        save_top_k=1,
        save_on_train_epoch_end=on_train_epoch_end,
    )
    values, probe = _fit_monitored(tmp_path, every, at, checkpoint)
    assert len(values) == 3, values
    assert [(epoch, value) for epoch, hook, value in probe.seen if hook == at] == list(enumerate(values)), probe.seen
    best = values.index(min(values))  # (the first of equal ones: ModelCheckpoint replaces only a worse one)
    assert float(checkpoint.best_model_score) == values[best]
    assert Path(checkpoint.best_model_path).name == f"epoch={best}.ckpt"

    # The same fit (same seeds and batches: the same values) with EarlyStopping, its threshold between the first epoch
    # that beats all earlier ones and the best before it: it must stop at that epoch.
    stop = next(epoch for epoch in range(1, 3) if values[epoch] < min(values[:epoch]))
    threshold = (values[stop] + min(values[:stop])) / 2
    stopping = EarlyStopping(
        MONITOR, mode="min", stopping_threshold=threshold, check_on_train_epoch_end=on_train_epoch_end
    )
    stopped_values, stopped_probe = _fit_monitored(tmp_path, every, at, stopping)
    assert stopped_values == values[: stop + 1]
    assert stopping.stopped_epoch == stop
    assert [value for _, hook, value in stopped_probe.seen if hook == at] == values[: stop + 1]


def test_monitors_see_the_window_of_an_epoch_cut_short(tmp_path: Path) -> None:
    """``max_steps=7`` ends the second epoch after 2 of its 5 batches, none of them known to be the last: the window is
    ended and collected at ``on_train_epoch_end``, before the monitors there read it."""
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "best", monitor=MONITOR, save_top_k=1, save_on_train_epoch_end=True)
    values, probe = _fit_monitored(tmp_path, 0, "train_epoch_end", checkpoint, max_steps=7)
    assert len(values) == 2, values
    assert [(epoch, value) for epoch, hook, value in probe.seen] == list(enumerate(values)), probe.seen
