"""The shape checks of the classification metrics, one per task, with torchmetrics' messages and exception types.

How ``preds`` and ``target`` fit together is checked always (torchmetrics' multiclass validation never compares batch
sizes: mismatches broadcast into wrong numbers); checks against the metric's arguments stay behind ``validate_args``.
"""

from torch import Tensor

from torchmetrics_async._torchmetrics import (
    BINARY_SAMPLEWISE_NDIM_MESSAGE,
    MULTICLASS_NUM_CLASSES_SHAPE_MESSAGE,
    MULTILABEL_SAMPLEWISE_NDIM_MESSAGE,
    _multiclass_stat_scores_tensor_validation,
    check_same_shape,
    num_labels_mismatch_message,
)

__all__ = ["check_binary_shapes", "check_multiclass_shapes", "check_multilabel_shapes"]

# torchmetrics' multiclass wordings (_multiclass_stat_scores_tensor_validation), followed by the shapes where
# torchmetrics' own message does not print them.
_EXTRA_DIM_MESSAGE = (
    "If `preds` have one dimension more than `target`, the shape of `preds` should be (N, C, ...), and the shape of"
    " `target` should be (N, ...)."
)
_NDIM_MESSAGE = (
    "Either `preds` and `target` both should have the (same) shape (N, ...), or `target` should be (N, ...) and `preds`"
    " should be (N, C, ...)."
)


def _shapes(preds: Tensor, target: Tensor) -> str:
    return f"Got `preds` with shape={preds.shape} and `target` with shape={target.shape}."


def check_binary_shapes(preds: Tensor, target: Tensor, samplewise: bool, validate_args: bool) -> None:
    """Binary inputs: one shape (always); at least 2-D for ``samplewise`` (under ``validate_args``)."""
    if preds.shape != target.shape:  # the call only where it raises: the hot path stays one call long
        check_same_shape(preds, target)
    if validate_args and samplewise and preds.ndim < 2:
        raise ValueError(BINARY_SAMPLEWISE_NDIM_MESSAGE)


def check_multilabel_shapes(
    preds: Tensor, target: Tensor, num_labels: int, samplewise: bool, validate_args: bool
) -> None:
    """Multilabel inputs: one shape ``(N, num_labels, ...)`` (always); 3-D if ``samplewise`` (if ``validate_args``)."""
    if preds.shape != target.shape:
        check_same_shape(preds, target)
    # A 0-D or 1-D input has no label dimension (torchmetrics' validation fails reading it: IndexError, kept; its
    # unvalidated path broadcasts one count over every label).
    if preds.shape[1] != num_labels:
        raise ValueError(num_labels_mismatch_message(preds.shape[1], num_labels))
    if validate_args and samplewise and preds.ndim < 3:
        raise ValueError(MULTILABEL_SAMPLEWISE_NDIM_MESSAGE)


def check_multiclass_shapes(
    preds: Tensor,
    target: Tensor,
    num_classes: int | None,
    multidim_average: str,
    validate_args: bool,
    confusion_matrix: bool = False,
) -> None:
    """Multiclass inputs: labels ``(N, ...)`` and ``(N, ...)``, or scores ``(N, C, ...)`` and labels ``(N, ...)``.

    Under ``validate_args`` torchmetrics' tensor validation runs first (same errors, same order), then, always, ours.
    """
    extra_dim = preds.ndim == target.ndim + 1
    if validate_args:
        if extra_dim and preds.is_floating_point() and num_classes is not None and preds.shape[1] != num_classes:
            raise ValueError(MULTICLASS_NUM_CLASSES_SHAPE_MESSAGE)
        if confusion_matrix and preds.ndim == target.ndim and preds.shape != target.shape:
            # MulticlassConfusionMatrix gives ValueError two arguments (the message prints as a tuple); kept as it is.
            raise ValueError(
                "The `preds` and `target` should have the same shape,",
                f" got `preds` with shape={preds.shape} and `target` with shape={target.shape}.",
            )
        # num_classes=None skips the unique-value counts (host reads): what is left are the shape checks.
        _multiclass_stat_scores_tensor_validation(preds, target, None, multidim_average)
    if extra_dim:
        if preds.shape[0] != target.shape[0] or preds.shape[2:] != target.shape[1:]:
            raise ValueError(f"{_EXTRA_DIM_MESSAGE} {_shapes(preds, target)}")
    elif preds.ndim != target.ndim:
        raise ValueError(f"{_NDIM_MESSAGE} {_shapes(preds, target)}")
    elif preds.shape != target.shape:
        raise ValueError(
            "The `preds` and `target` should have the same shape,"
            f" got `preds` with shape={preds.shape} and `target` with shape={target.shape}."
        )
