"""Source generators (CK Tile instances and their C ABI wrappers)."""
