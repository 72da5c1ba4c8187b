"""The pipeline profile: which lookups run for a question, and their weights."""

import re

# The seed's lookups and proportions, in the fixed tie order of the merge
# (record vector, tag or edge property, window, full text). The one source of these figures.
SEED_WEIGHTS: dict[str, float] = {
    "record_vectors": 40,
    "tags": 35,
    "window_vectors": 20,
    "fulltext": 5,
}
SEED_PROFILE = ", ".join(SEED_WEIGHTS)

# Opt-in components that put exact matches first. A bare name takes the weight of the seed
# lookup it refines; each ties right after that lookup.
OPT_IN_WEIGHTS: dict[str, float] = {
    "tags_by_terms": SEED_WEIGHTS["tags"],
    "fulltext_by_rarity": SEED_WEIGHTS["fulltext"],
    "fulltext_words": SEED_WEIGHTS["fulltext"],
}
LOOKUPS = (
    "record_vectors",
    "tags",
    "tags_by_terms",
    "window_vectors",
    "fulltext",
    "fulltext_by_rarity",
    "fulltext_words",
)
DEFAULT_WEIGHTS = {name: {**SEED_WEIGHTS, **OPT_IN_WEIGHTS}[name] for name in LOOKUPS}
VECTOR_LOOKUPS = frozenset({"record_vectors", "window_vectors"})

_ENTRY = re.compile(r"^\s*([A-Za-z_]+)\s*(?::\s*(\S+?))?\s*$")


class ProfileError(ValueError):
    pass


def parse_profile(text: str | None) -> dict[str, float]:
    """Parse `name[:weight], ...` into weights in the tie order; unset means the seed's profile.

    A bare name takes its default weight (the seed's, for the seed's lookups). Unknown names,
    duplicates and weights that are not positive numbers are refused.
    """
    if text is None or not text.strip():
        text = SEED_PROFILE
    weights: dict[str, float] = {}
    for entry in text.split(","):
        match = _ENTRY.match(entry)
        if not match:
            raise ProfileError(f"cannot read pipeline profile entry {entry.strip()!r}: write name or name:weight")
        name, weight_text = match.group(1).lower(), match.group(2)
        if name not in DEFAULT_WEIGHTS:
            raise ProfileError(f"unknown lookup {name!r} in the pipeline profile; known lookups: {', '.join(LOOKUPS)}")
        if name in weights:
            raise ProfileError(f"lookup {name!r} appears twice in the pipeline profile")
        weights[name] = DEFAULT_WEIGHTS[name] if weight_text is None else _positive_weight(name, weight_text)
    return {name: weights[name] for name in LOOKUPS if name in weights}


def _positive_weight(name: str, text: str) -> float:
    try:
        weight = float(text)
    except ValueError:
        weight = float("nan")
    if not weight > 0 or weight == float("inf"):
        raise ProfileError(f"weight {text!r} of lookup {name!r} must be a positive number")
    return weight
