"""rlsim: a discrete-event simulator of GPU clusters running RL post-training of large language models."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rlsim")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
