"""The shape checks of the classification metrics: one per task, run at the door of every ``update`` and ``forward``.

torchmetrics checks shapes in its ``_*_tensor_validation``, only with ``validate_args=True``, and its multiclass
validation never compares the batch sizes of scores ``(N, C, ...)`` and labels ``(M, ...)``: mismatched batches then
fail in a kernel with a message about its internals, or broadcast silently (scores ``(1, C)`` against ``(4,)``
labels) into a wrong number. A shape is metadata, so checking it costs no host sync: here how ``preds`` and ``target``
fit together is checked always, whatever ``validate_args``; the checks against the metric's arguments (``num_classes``,
``multidim_average``) and the dtypes stay behind ``validate_args``, as in torchmetrics. The messages are torchmetrics'
own, raised with torchmetrics' exception types: ``ValueError`` for multiclass inputs, and for binary and multilabel
inputs of different shapes a :class:`~torchmetrics_async.errors.ShapeMismatchError`, both torchmetrics'
``RuntimeError`` (``_check_same_shape``) and a ``ValueError``.

Example:
    >>> import torch
    >>> try:
    ...     check_multiclass_shapes(torch.rand(4, 3), torch.tensor([0]), 3, "global", validate_args=True)
    ... except ValueError as err:
    ...     print(err)
    If `preds` have one dimension more than `target`, the shape of `preds` should be (N, C, ...), and the shape of \
`target` should be (N, ...). Got `preds` with shape=torch.Size([4, 3]) and `target` with shape=torch.Size([1]).
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
    """Binary inputs: ``preds`` and ``target`` of one shape (always); at least 2-D for ``samplewise`` (validated).

    Args:
        preds: the predictions.
        target: the targets.
        samplewise: ``multidim_average="samplewise"``.
        validate_args: the metric's ``validate_args``.

    Raises:
        ShapeMismatchError: for different shapes (torchmetrics' ``_check_same_shape`` message; a ``RuntimeError``).
        ValueError: for 1-D ``samplewise`` inputs, under ``validate_args``.

    Example:
        >>> import torch
        >>> check_binary_shapes(torch.rand(4), torch.tensor([0, 1, 1, 0]), samplewise=False, validate_args=False)
    """
    if preds.shape != target.shape:  # the call only where it raises: the hot path stays one call long
        check_same_shape(preds, target)
    if validate_args and samplewise and preds.ndim < 2:
        raise ValueError(BINARY_SAMPLEWISE_NDIM_MESSAGE)


def check_multilabel_shapes(
    preds: Tensor, target: Tensor, num_labels: int, samplewise: bool, validate_args: bool
) -> None:
    """Multilabel inputs: one shape ``(N, L, ...)``, ``L = num_labels`` (always); 3-D for ``samplewise`` (validated).

    The labels are the states' dimension: any other ``L`` makes torchmetrics fail or broadcast the batch's counts over
    every label, so it is checked always.

    Args:
        preds: the predictions.
        target: the targets.
        num_labels: the metric's ``num_labels``.
        samplewise: ``multidim_average="samplewise"``.
        validate_args: the metric's ``validate_args``.

    Raises:
        ShapeMismatchError: for different shapes (torchmetrics' ``_check_same_shape`` message; a ``RuntimeError``).
        IndexError: for inputs of fewer than 2 dimensions (as torchmetrics' validation).
        ValueError: for ``preds.shape[1] != num_labels``, and for ``samplewise`` inputs of fewer than 3 dimensions under
            ``validate_args`` (torchmetrics' messages).

    Example:
        >>> import torch
        >>> try:
        ...     check_multilabel_shapes(torch.rand(4, 1), torch.ones(4, 1), 3, samplewise=False, validate_args=False)
        ... except ValueError as err:
        ...     print(err.args[0].split(" but ")[1])
        got 1 and expected 3
    """
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

    Under ``validate_args`` torchmetrics' tensor validation runs first without its value checks (same errors, same
    order: float scores, ``C = num_classes``, ``samplewise`` dimensions); then, always, how the two fit together, batch
    size included.

    Args:
        preds: the predictions.
        target: the targets.
        num_classes: the metric's ``num_classes``.
        multidim_average: the metric's ``multidim_average``.
        validate_args: the metric's ``validate_args``.
        confusion_matrix: word the validated errors as ``MulticlassConfusionMatrix`` does.

    Raises:
        ValueError: for shapes that do not fit, with torchmetrics' message.

    Example:
        >>> import torch
        >>> check_multiclass_shapes(torch.rand(4, 3, 2), torch.zeros(4, 2), None, "global", validate_args=False)
        >>> try:
        ...     check_multiclass_shapes(torch.rand(4, 2), torch.tensor([0, 1, 2, 0]), 3, "global", validate_args=True)
        ... except ValueError as err:
        ...     print(err)
        If `preds` have one dimension more than `target`, `preds.shape[1]` should be equal to number of classes.
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
    elif preds.ndim == target.ndim:
        if preds.shape != target.shape:
            raise ValueError(
                "The `preds` and `target` should have the same shape,"
                f" got `preds` with shape={preds.shape} and `target` with shape={target.shape}."
            )
    else:
        raise ValueError(f"{_NDIM_MESSAGE} {_shapes(preds, target)}")
