"""Central finite differences, the one reference every analytic gradient of the training is checked against."""

from __future__ import annotations

from typing import Callable

import numpy as np


def central_differences(loss: Callable[[], float], value: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """(loss(value + eps·e_i) − loss(value − eps·e_i)) / 2 eps for every entry i of ``value``, changed in place
    and put back: the array ``loss`` reads must be ``value`` itself."""
    numeric = np.empty_like(value)
    for idx in np.ndindex(value.shape):
        old = value[idx]
        value[idx] = old + eps
        plus = loss()
        value[idx] = old - eps
        minus = loss()
        value[idx] = old
        numeric[idx] = (plus - minus) / (2 * eps)
    return numeric
