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
| reporting | the items left out are reported as deselected (``pytest_deselected``), so pytest's summary counts them; with generation pruning (below) the parametrizations never generated are not items, so not deselected: a terminal summary line ``ckfmha-sample FRACTION:SEED: N parametrizations not generated`` counts them (per collecting process: without xdist, or each worker's own), and selected + deselected + not generated is the count without pruning |

The option is command-line only (no ini key): a project's ``pytest`` run never turns into a sample by accident.

**Generation pruning.** Creating every item of a large parametrized suite only to keep 2% of them costs most of
its collection (FA's CK file: ~413,000 items). While this module is registered as a plugin
(:func:`register_pruning`, from ckfmha's ``pytest_configure`` when the option is given; or ``-p
pytest_ckfmha.sampling``), its ``pytest_generate_tests`` wrapper runs after every ``pytest_generate_tests``
implementation (pytest's parametrize marks and fixture params, conftests, the module's and the class's own) and
drops the parametrizations whose future node id ``<function definition's node id>[<callspec id>]`` the sample
does not keep, so their items are never created. :func:`sample_items` in ``pytest_collection_modifyitems`` stays
the final authority: whatever the pruning misses is sampled there, so the kept items are exactly those without
pruning.

| pruning rule | what |
|---|---|
| exact | ``Sample.keeps`` depends on the node id only, so the pruned items are exactly those ``sample_items`` would drop; ``-k`` / ``-m`` after it select the same items as before (the sample and the selection commute) |
| a function none of whose parametrizations is kept | keeps its first one (pytest would otherwise create one unparametrized item); ``sample_items`` deselects it |
| off | ``-p no:ckfmha-sample``; and for a run whose selection looks for given node ids among the created items: a node id argument naming a parametrization (``file.py::test[id]``), ``--lf``, ``--sw`` / ``--sw-skip`` (their items must exist to be found) |
| pytest internals | pytest has no public API to drop a parametrization: :func:`_pending_calls` / :func:`_set_pending_calls` read and write ``Metafunc._calls`` (and ``CallSpec._idlist`` for the item name); when these are absent the pruning is off and the sampling is today's, in ``pytest_collection_modifyitems`` only |
| empty sample | as above when the sample keeps none of the items that reach it, or when none reach it, parametrizations were not generated and nothing was deselected before the sample (the collection without pruning was non-empty and the sample kept none of it); the message counts the not-generated parametrizations apart. When ``-k`` / ``-m`` (or another plugin) left none of the generated items, whether one of the not-generated ones would have survived them can't be told without generating them: no usage error, pytest ends the run as one that selects nothing (exit 5) and the summary line counts the not-generated |
"""

from __future__ import annotations

import hashlib
import math
import sys
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
    when the option is not given. The final authority of the sample, also after generation pruning (module
    table)."""
    value = config.getoption("ckfmha_sample", None)
    if value is None:
        return None
    sample = parse_sample(value)
    pruning = config.stash.get(_PRUNING_KEY, None)
    not_generated = pruning.not_generated if pruning is not None else 0
    # items left before the sample: -k / -m (or another plugin) narrowed the collection when fewer items reach the
    # sample than entered pytest_collection_modifyitems
    narrowed = pruning is not None and pruning.items_before is not None and len(items) < pruning.items_before
    kept = [it for it in items if sample.keeps(it.nodeid)]
    if not kept and (items or (not_generated and not narrowed)):
        if not not_generated:
            what = f"the {len(items)} collected items"
        elif not narrowed:
            what = f"the {len(items) + not_generated} collected items ({not_generated} parametrizations not generated)"
        else:
            what = f"the {len(items)} collected items (nor the {not_generated} parametrizations not generated)"
        raise pytest.UsageError(
            f"--ckfmha-{OPTION}: {value!r} keeps none of {what} (fraction "
            f"{sample.fraction:g}, seed {sample.seed}); a sample must select at least one item: raise the fraction "
            "or change the seed"
        )
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[it for it in items if not sample.keeps(it.nodeid)])
        items[:] = kept
    return sample


# --- generation pruning (module docstring, "Generation pruning") ---------------------------------------------

#: the plugin name of this module when :func:`register_pruning` registers it (``-p no:ckfmha-sample`` blocks it)
PLUGIN_NAME = "ckfmha-sample"


@dataclass
class _Pruning:
    """One process's generation pruning: the sample (None: off), why it is off, what it left out."""

    sample: Sample | None
    off_reason: str | None = None
    not_generated: int = 0
    items_before: int | None = None


_PRUNING_KEY = pytest.StashKey[_Pruning]()


def register_pruning(config: pytest.Config) -> None:
    """Register this module as the plugin ``ckfmha-sample`` (its ``pytest_generate_tests`` wrapper prunes), unless
    it is registered already (``-p pytest_ckfmha.sampling``) or blocked (``-p no:ckfmha-sample``). Called from
    ckfmha's ``pytest_configure`` when ``--ckfmha-sample`` is given, after the options were validated."""
    module = sys.modules[__name__]
    pm = config.pluginmanager
    if pm.is_registered(module) or pm.is_blocked(PLUGIN_NAME):
        return
    pm.register(module, PLUGIN_NAME)


def _pruning(config: pytest.Config) -> _Pruning:
    state = config.stash.get(_PRUNING_KEY, None)
    if state is None:
        value = config.getoption("ckfmha_sample", None)
        sample = None if value is None else parse_sample(value)
        reason = None if sample is None else _off_reason(config)
        state = _Pruning(None if reason else sample, reason)
        config.stash[_PRUNING_KEY] = state
    return state


def _off_reason(config: pytest.Config) -> str | None:
    """Why generation pruning must stay off for this run (module table, "off"), or None: selections that look
    for given node ids among the created items would not find the pruned ones."""
    for arg in config.args:
        _, sep, rest = str(arg).partition("::")
        if sep and "[" in rest:
            return f"the argument {arg!r} names a parametrization"
    if config.getoption("lf", False):
        return "--lf"
    if config.getoption("stepwise", False) or config.getoption("stepwise_skip", False):
        return "--sw"
    return None


def prune_calls(metafunc: pytest.Metafunc, sample: Sample) -> int:
    """Drop ``metafunc``'s parametrizations whose future node id ``sample`` does not keep (keeping the first one
    when it keeps none); how many were dropped. Nothing when pytest's internals are absent (0)."""
    calls = _pending_calls(metafunc)
    if not calls:  # not parametrized (one item, sampled in modifyitems), or the internals are absent
        return 0
    base = metafunc.definition.nodeid
    keeps = sample.keeps
    kept = [c for c in calls if keeps(_future_nodeid(base, c))]
    if not kept:
        kept = calls[:1]  # pytest would create the unparametrized item instead; sample_items deselects this one
    if len(kept) == len(calls) or not _set_pending_calls(metafunc, kept):
        return 0
    return len(calls) - len(kept)


def _pending_calls(metafunc: pytest.Metafunc) -> list | None:
    """PYTEST INTERNALS (pytest 7-9): ``Metafunc._calls``, the callspecs ``pytest_generate_tests`` produced, one
    item each (``PyCollector._genfunctions``). None when absent: no pruning, today's modifyitems sampling."""
    calls = getattr(metafunc, "_calls", None)
    if not isinstance(calls, list):
        return None
    if calls and not (hasattr(calls[0], "id") and hasattr(calls[0], "_idlist")):  # one CallSpec class: the first tells
        return None
    return calls


def _set_pending_calls(metafunc: pytest.Metafunc, calls: list) -> bool:
    """PYTEST INTERNALS: replace ``Metafunc._calls`` (see :func:`_pending_calls`)."""
    try:
        metafunc._calls = calls
    except AttributeError:
        return False
    return True


def _future_nodeid(base: str, callspec: Any) -> str:
    """PYTEST INTERNALS: the node id pytest gives the item of ``callspec`` -- ``PyCollector._genfunctions`` names it
    ``f"{name}[{callspec.id}]"``, or ``name`` when ``callspec._idlist`` is empty, under the definition's parent."""
    return f"{base}[{callspec.id}]" if callspec._idlist else base


@pytest.hookimpl(wrapper=True)
def pytest_generate_tests(metafunc: pytest.Metafunc):
    """After every other ``pytest_generate_tests`` implementation: prune (module docstring)."""
    result = yield
    state = _pruning(metafunc.config)
    if state.sample is not None:
        state.not_generated += prune_calls(metafunc, state.sample)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list):
    """Record how many items enter ``pytest_collection_modifyitems`` (:func:`sample_items` tells -k / -m apart)."""
    state = config.stash.get(_PRUNING_KEY, None)
    if state is not None:
        state.items_before = len(items)
    return (yield)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash.get(_PRUNING_KEY, None)
    if state is None or state.sample is None or not state.not_generated:
        return
    terminalreporter.write_line(
        f"ckfmha-sample {state.sample}: {state.not_generated} parametrizations not generated (left out of the "
        "sample before their items were created; not counted as deselected)"
    )
