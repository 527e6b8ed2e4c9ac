"""lavo_zoo: LAVO (linear attention via orthogonal memory), its baselines and a multi-domain model zoo."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lavo-zoo")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"
