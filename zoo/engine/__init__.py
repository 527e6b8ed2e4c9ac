"""The engine: what every recipe shares, below the recipes and above the evaluators.

    recipe.py        the recipe contract (``Recipe``) and the recipe registry (``register_recipe``, ``get_recipe``)
    builtin_data.py  the built-in data protocol (``BuiltinData``), its cache and ``lavo-zoo data``'s safe writing
    configs.py       named configs: ``<domain>/<name>`` or a path -> (recipe, validated config)
    predictor.py     the ``Predictor`` base class of each recipe's ``infer.py`` (what ``lavo_zoo.load`` returns) and
                     the rules every predictor keeps (one input or a list, memory that fits, finite outputs)
    trainer.py       the training loop (resumable, distributed, validated); interrupt.py: a clean stop on a signal
    checkpoint_io.py saving and loading a run's checkpoints (atomic, verified); run_dir.py: a run directory's rules
    evaluate.py      ``lavo-zoo eval`` and ``lavo-zoo score``: the results JSON
    dry_run.py       ``train --dry-run``
    data.py          the trainer's resumable batching; optim.py: optimisers and schedules; logging.py: metrics.jsonl
    env.py           versions, git revision, device, cache root; distributed.py; memory.py: peak memory, and the
                     memory a device has left for a request
"""
