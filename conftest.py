"""Root conftest.

Under CI (``CI`` set), Hypothesis runs derandomized: the same examples every run, so a submission's result does
not depend on which random examples a run happened to draw (explore locally, where runs stay random).
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
