"""Data code the recipes share (a recipe may not import another): the standard-library corpus the built-in text
data is cut from (:mod:`lavo_zoo.data.stdlib`) and the key of a cache of features computed from a dataset
(:mod:`lavo_zoo.data.cache`)."""
