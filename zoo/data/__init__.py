"""Data code the recipes share (a recipe may not import another): the standard-library corpus the built-in text
data is cut from (:mod:`lavo_zoo.data.stdlib`), a document's split fixed by a hash of its name
(:mod:`lavo_zoo.data.split`) and the cache of what is computed from a dataset (:mod:`lavo_zoo.data.cache`)."""
