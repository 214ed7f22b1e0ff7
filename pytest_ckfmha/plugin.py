"""The ckfmha pytest plugin entry module.

It is loaded by every pytest run in an environment where ckfmha is installed, so it imports nothing heavy at
load time (no numpy, no torch): hooks import what they need when they run.
"""
