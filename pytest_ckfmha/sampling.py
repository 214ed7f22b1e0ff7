"""``--ckfmha-sample FRACTION[:SEED]``: a deterministic sample of any suite's collected items (ckfmha's own
categories and foreign test files alike), chosen by a hash of each item's node id.

| rule | what |
|---|---|
| which items | an item is kept when ``sha256("<seed>:<node id>")``'s first 8 bytes, read as an unsigned big-endian integer and divided by 2**64, are ``< FRACTION``: the choice of one item depends on its node id and the seed only, so it is the same on every machine, in every xdist worker and whatever else was collected or deselected |
| how many | about ``FRACTION`` of the items (each is kept with that probability over seeds); ``FRACTION = 1`` keeps all |
| FRACTION | a number in (0, 1] (``0.02``, ``2e-2``, ``1``); anything else is a usage error naming the value and this rule |
| SEED | an integer >= 0 (default 0); another seed draws another sample |
| order | after ``-k`` / ``-m`` deselection and before ``--ckfmha-shard`` (the sample is taken over the items that would run, then sharded) |
| empty sample | a sample that keeps none of the (non-empty) collected items is a usage error (exit 4) naming the fraction, the seed and the item count; raise the fraction or change the seed |
| reporting | the items left out are reported as deselected (``pytest_deselected``), so pytest's summary counts them |

The option is command-line only (no ini key): a project's ``pytest`` run never turns into a sample by accident.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import pytest

OPTION = "sample"
RULE = "must be FRACTION[:SEED] with FRACTION a number in (0, 1] and SEED an integer >= 0 (e.g. 0.02 or 0.02:7)"


@dataclass(frozen=True)
class Sample:
    fraction: float
    seed: int = 0

    def keeps(self, nodeid: str) -> bool:
        """Whether the item ``nodeid`` is in the sample (module table)."""
        digest = hashlib.sha256(f"{self.seed}:{nodeid}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2.0**64 < self.fraction

    def __str__(self) -> str:
        return f"{self.fraction:g}:{self.seed}"


def parse_sample(value: Any) -> Sample:
    """``FRACTION[:SEED]`` -> :class:`Sample`; a ``pytest.UsageError`` naming the option, the value and the rule."""
    text = str(value).strip()
    frac_text, _, seed_text = text.partition(":")
    try:
        fraction = float(frac_text)
    except ValueError:
        raise _bad(value, f"has no number as FRACTION; {RULE}") from None
    if not (math.isfinite(fraction) and 0.0 < fraction <= 1.0):
        raise _bad(value, f"has FRACTION {frac_text} outside (0, 1]; {RULE}")
    seed = 0
    if seed_text.strip() or text.endswith(":"):
        try:
            seed = int(seed_text.strip(), 10)
        except ValueError:
            raise _bad(value, f"has no integer as SEED; {RULE}") from None
        if seed < 0:
            raise _bad(value, f"has a negative SEED; {RULE}")
    return Sample(fraction, seed)


def _bad(value: Any, rule: str) -> pytest.UsageError:
    return pytest.UsageError(f"--ckfmha-{OPTION}: {value!r} {rule}")


def to_sample(given: Any) -> Sample:
    """The option table's converter (``pytest_ckfmha.options``): a :class:`~pytest_ckfmha.options.Given` -> Sample."""
    return parse_sample(given.value)


def sample_items(config: pytest.Config, items: list) -> Sample | None:
    """Keep the sampled items in ``items`` (in place) and report the others as deselected; the sample, or None
    when the option is not given."""
    value = config.getoption("ckfmha_sample", None)
    if value is None:
        return None
    sample = parse_sample(value)
    if not items:
        return sample
    kept = [it for it in items if sample.keeps(it.nodeid)]
    if not kept:
        raise pytest.UsageError(
            f"--ckfmha-{OPTION}: {value!r} keeps none of the {len(items)} collected items (fraction "
            f"{sample.fraction:g}, seed {sample.seed}); a sample must select at least one item: raise the fraction "
            "or change the seed"
        )
    dropped = [it for it in items if not sample.keeps(it.nodeid)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept
    return sample
