"""The YAML reader of recipe files and ``--set`` values."""

from __future__ import annotations

import re

import yaml

MERGE_TAG = "tag:yaml.org,2002:merge"  # the key of `<<: *anchor`


class RecipeLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (YAML wants unique
    keys; PyYAML kept the last: `vocab_size: 500` above `vocab_size: 400` went unnoticed), and
    reading YAML 1.1's base-60 numbers as text: `max_time: 1:30` was 90 seconds, whichever of
    1 h 30 or 1 min 30 was meant; as text, it is refused with the durations mtkit reads."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        # The mapping's own scalar keys only: a merge (`<<: *base`) may be overridden by a key
        # written beside it, and other keys are left to PyYAML to accept or refuse.
        seen: set = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice in one mapping", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.1's sexagesimal ints and floats (1:30, 1:30.5): first in line, they resolve to text.
_BASE_60 = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
RecipeLoader.yaml_implicit_resolvers = {
    first: ([("tag:yaml.org,2002:str", _BASE_60)] if first in "+-0123456789" else []) + rules
    for first, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()}
