"""The installed package's version (``lavo_zoo.__version__``), in a module of its own so that any layer can read it
without importing the package root."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lavo-zoo")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"
