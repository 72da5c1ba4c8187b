"""The pipeline profile: which lookups of the registry run for a question, and their weights."""

import math
import re

from emem_db.registry import BY_NAME, LOOKUPS, SEED_PROFILE

_ENTRY = re.compile(r"^\s*([A-Za-z_]+)\s*(?::\s*(\S+?))?\s*$")


class ProfileError(ValueError):
    pass


def parse_profile(text: str | None) -> dict[str, float]:
    """Parse `name[:weight], ...` into weights in the tie order; unset means the seed's profile.

    A bare name takes its default weight (the registry's). Unknown names, duplicates and weights
    that are not positive numbers are refused.
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
        weights[name] = BY_NAME[name].default_weight if weight_text is None else _positive_weight(name, weight_text)
    return {lookup.name: weights[lookup.name] for lookup in LOOKUPS if lookup.name in weights}


def _positive_weight(name: str, text: str) -> float:
    try:
        weight = float(text)
    except ValueError:
        weight = math.nan
    if not weight > 0 or math.isinf(weight):
        raise ProfileError(f"weight {text!r} of lookup {name!r} must be a positive number")
    return weight
