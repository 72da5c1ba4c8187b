"""The pipeline profile: which lookups of the registry run for a question, and their weights."""

import math
import re

from .registry import BY_NAME, LOOKUPS, SEED_PROFILE

_ENTRY = re.compile(r"^\s*([A-Za-z_]+)\s*(?::\s*(\S+?))?\s*$")
# Weights are bounded so that the merge's credits (sums of weights) stay finite and exact enough
# to keep the proportions: 1e308 would overflow to infinity, a ratio beyond 1e12 would drown in
# rounding.
MIN_WEIGHT = 1e-6
MAX_WEIGHT = 1e6


class ProfileError(ValueError):
    pass


def parse_profile(text: str | None) -> dict[str, float]:
    """Parse `name[:weight], ...` into weights in the tie order; unset means the seed's profile.

    A bare name takes its default weight (the registry's). Unknown names, duplicates and weights
    that are not numbers from MIN_WEIGHT to MAX_WEIGHT are refused.
    """
    if text is None or not text.strip():
        text = SEED_PROFILE
    weights: dict[str, float] = {}
    for entry in text.split(","):
        match = _ENTRY.match(entry)
        if not match:
            raise ProfileError(f"cannot read pipeline profile entry {entry.strip()!r}: write name or name:weight")
        name, weight_text = match.group(1).lower(), match.group(2)
        if name not in BY_NAME:
            known = ", ".join(lookup.name for lookup in LOOKUPS)
            raise ProfileError(f"unknown lookup {name!r} in the pipeline profile; known lookups: {known}")
        if name in weights:
            raise ProfileError(f"lookup {name!r} appears twice in the pipeline profile")
        weights[name] = BY_NAME[name].default_weight if weight_text is None else _bounded_weight(name, weight_text)
    return {lookup.name: weights[lookup.name] for lookup in LOOKUPS if lookup.name in weights}


def _bounded_weight(name: str, text: str) -> float:
    try:
        weight = float(text)
    except ValueError:
        weight = math.nan
    if not MIN_WEIGHT <= weight <= MAX_WEIGHT:
        raise ProfileError(
            f"weight {text!r} of lookup {name!r} must be a number from {MIN_WEIGHT:.6f} to {MAX_WEIGHT:.0f}"
        )
    return weight
