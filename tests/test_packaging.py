"""The dependency floors of pyproject.toml are the versions CI's floor pass installs (.ci/floors.txt)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _requirements(text: str) -> list[str]:
    found = []
    for key in ("dependencies", "dev"):
        m = re.search(rf"^{key} = \[(.*?)\]", text, re.M | re.S)
        assert m, key
        found += re.findall(r'"([^"]+)"', m.group(1))
    return found


def test_every_floor_is_pinned_for_ci() -> None:
    reqs = _requirements((ROOT / "pyproject.toml").read_text())
    pins = dict(line.split("==") for line in (ROOT / ".ci" / "floors.txt").read_text().splitlines()
                if line.strip() and not line.startswith("#"))
    for r in reqs:
        name, _, floor = r.partition(">=")
        assert floor, f"{r}: every dependency needs a tested floor"
        assert pins.get(name.strip().lower().replace("_", "-"), pins.get(name.strip())) == floor, r


def test_ci_builds_fresh_venvs_and_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "python3 -m pytest tests -q" in readme and '-m pytest tests -q' in ci
    assert ci.count("-m venv") == 2 and "floors.txt" in ci
