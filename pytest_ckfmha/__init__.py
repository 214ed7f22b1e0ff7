"""pytest-ckfmha: the pytest plugin of ckfmha (registered through the ``pytest11`` entry point)."""
