"""``interp.rome``: the public face of fact editing (temporary star re-export during the move)."""
from .editing.rome import *  # noqa: F401,F403
from .editing.rome import __getattr__  # noqa: F401
