"""Package list for the one import package ``lavo_zoo`` (metadata lives in pyproject.toml).

The repository's top-level folders install under ``lavo_zoo`` through ``package-dir``:
``zoo/`` -> ``lavo_zoo``, ``recipes/`` -> ``lavo_zoo.recipes``, ``evaluators/`` -> ``lavo_zoo.evaluators``,
``checkpoints/`` -> ``lavo_zoo.checkpoints``. ``find_packages`` cannot rename folders, so the names are built here.
"""
from setuptools import find_packages, setup

ROOTS = {"zoo": "lavo_zoo", "recipes": "lavo_zoo.recipes", "evaluators": "lavo_zoo.evaluators",
         "checkpoints": "lavo_zoo.checkpoints"}
packages = []
for folder, name in ROOTS.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]
setup(packages=packages)
