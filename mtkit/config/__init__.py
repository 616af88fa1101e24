"""Recipes: typed, frozen dataclasses loaded from YAML and validated once, here.

A recipe has a top-level `name` and four sections, `data`, `model`, `train` and `decode`.
Everything below this module receives a `Recipe` (or one of its sections), never a dict.

Validation is driven by the dataclass fields themselves: the type annotation gives the
expected type (``Literal`` lists the valid choices), ``field(metadata=...)`` gives numeric
ranges (``ge``, ``gt``, ``le``, ``lt``), and a section may add cross-field rules with a
``_problems(valid)`` method. Every problem found is collected and reported together in one
`ConfigError`, each with its dotted key and the recipe's path: a rule runs whenever the
fields it reads are valid (``valid(*names)``), whatever else is wrong in the recipe, and a
missing section is validated as its defaults, so one run shows every problem.

Modules: `sections` (the dataclasses), `loading` (validation, dumping), `overrides`
(``--set``) and `recipe_yaml` (the YAML reader).
"""

from mtkit.config.loading import (
    Valid,
    dump_recipe,
    load_recipe,
    recipe_from_dict,
    recipe_from_yaml_text,
    recipe_to_dict,
    updated_section,
)
from mtkit.config.overrides import apply_override
from mtkit.config.sections import (
    CleanConfig,
    DataConfig,
    DecodeConfig,
    FileSource,
    ModelConfig,
    Recipe,
    RNNConfig,
    SplitConfig,
    SpmConfig,
    TrainConfig,
    TransformerConfig,
    parse_duration,
    split_corpora,
)

__all__ = ["CleanConfig", "DataConfig", "DecodeConfig", "FileSource", "ModelConfig", "RNNConfig",
           "Recipe", "SplitConfig", "SpmConfig", "TrainConfig", "TransformerConfig", "Valid",
           "apply_override", "dump_recipe", "load_recipe", "parse_duration", "recipe_from_dict",
           "recipe_from_yaml_text", "recipe_to_dict", "split_corpora", "updated_section"]
