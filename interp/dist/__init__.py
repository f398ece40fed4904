"""``python -m interp.dist``: the torchrun entry point of the distributed corpus statistics."""
