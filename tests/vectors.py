"""Hand-made vectors for the tests (PYTEST_DONT_REWRITE: a helper module, no assertions)."""

import math


def unit(*values: float) -> list[float]:
    """The vector at unit length, as emem stores vectors."""
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]
