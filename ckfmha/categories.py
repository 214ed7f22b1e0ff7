"""The testing-matrix categories, smallest first: each category holds the smaller ones (``full`` runs the
``smoke`` shapes too).  The one list: the matrix files (ckfmha.matrix) and the plugin's ``--ckfmha-category``
read it.  This module imports nothing, so the plugin can name the choices when pytest loads it."""

CATEGORIES: tuple[str, ...] = ("smoke", "full", "nightly")
