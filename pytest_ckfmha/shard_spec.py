"""``--ckfmha-shard``'s value: ``K/N``, or ``auto`` from the CI's variables (sharding.py's table says what a shard
keeps).  Plain parsing with no other plugin module imported, so options.py (the option table's converters) and
sharding.py (the selection) both use it.
"""

from __future__ import annotations

import pytest

#: the most shards a run is split into
MAX_SHARDS = 10_000
#: the CI variables ``--ckfmha-shard auto`` reads (GitLab's, then a Kubernetes Indexed Job's)
GITLAB_VARS = ("CI_NODE_INDEX", "CI_NODE_TOTAL")
K8S_INDEX_VAR = "JOB_COMPLETION_INDEX"


def _bad(option: str, value, rule: str) -> pytest.UsageError:
    return pytest.UsageError(f"--ckfmha-{option}: {value!r} {rule}")


def check_count(option: str, value, n: int) -> int:
    """``n`` as a shard count: 1 <= n <= MAX_SHARDS, else a usage error naming ``option`` and ``value``."""
    if not 1 <= n <= MAX_SHARDS:
        raise _bad(option, value, f"needs 1 <= N <= {MAX_SHARDS:,} (the most shards a run is split into)")
    return n


def parse_shard(value, total: int | None, environ) -> tuple[int, int]:
    """``--ckfmha-shard``'s (K, N): ``K/N`` or ``auto`` (:func:`shard_from_env`; ``total``:
    ``--ckfmha-shard-total``)."""
    import re

    text = str(value).strip()
    if text == "auto":
        return shard_from_env(environ, total)
    m = re.fullmatch(r"([0-9]+)\s*/\s*([0-9]+)", text)
    if not m:
        raise _bad("shard", value, "is not K/N (shard K of N, e.g. 2/4) or auto (from the CI's variables)")
    n = check_count("shard", value, int(m.group(2)))
    k = int(m.group(1))
    if not 1 <= k <= n:
        raise _bad("shard", value, "needs 1 <= K <= N")
    return k, n


def _env_int(environ, var: str) -> int:
    text = environ[var].strip()
    if not text.isascii() or not text.isdigit():
        raise _bad("shard", "auto", f"reads ${var}, which is {environ[var]!r}: not a non-negative integer")
    return int(text)


def shard_from_env(environ, total: int | None) -> tuple[int, int]:
    """(K, N) of ``--ckfmha-shard auto`` (module doc)."""
    if environ.get(GITLAB_VARS[0]) or environ.get(GITLAB_VARS[1]):
        missing = [v for v in GITLAB_VARS if not environ.get(v)]
        if missing:
            raise _bad("shard", "auto", f"needs both {' and '.join(GITLAB_VARS)} (GitLab's); {missing[0]} is unset")
        k, n = _env_int(environ, GITLAB_VARS[0]), _env_int(environ, GITLAB_VARS[1])
        check_count("shard", f"auto (CI_NODE_TOTAL={n})", n)
        if not 1 <= k <= n:
            raise _bad("shard", "auto", f"needs 1 <= CI_NODE_INDEX <= CI_NODE_TOTAL; they are {k} and {n}")
        return k, n
    if environ.get(K8S_INDEX_VAR):
        i = _env_int(environ, K8S_INDEX_VAR)
        if total is None:
            raise _bad("shard", "auto", f"reads ${K8S_INDEX_VAR} (0-based); give the count with --ckfmha-shard-total N")
        if i >= total:
            raise _bad("shard", "auto", f"needs {K8S_INDEX_VAR} < --ckfmha-shard-total; they are {i} and {total}")
        return i + 1, total
    raise _bad(
        "shard",
        "auto",
        f"finds no CI variables: set {' and '.join(GITLAB_VARS)} (GitLab, 1-based), or {K8S_INDEX_VAR} "
        "(a Kubernetes Indexed Job, 0-based) with --ckfmha-shard-total N, or give K/N",
    )
