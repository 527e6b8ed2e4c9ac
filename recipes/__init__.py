"""The built-in domain recipes, one folder each with the same rooms: ``recipe.py``, ``model.py``, ``data.py``,
``builtin.py``, ``infer.py``, ``cli.py``, ``configs/``, ``README.md`` (docs/architecture.md, "Every recipe has the same
rooms"). They register themselves with :func:`lavo_zoo.engine.recipe.register_recipe`; the registry
(:data:`lavo_zoo.engine.recipe.RECIPES`) imports each ``<domain>/recipe.py`` on first use. No recipe imports another
recipe."""
