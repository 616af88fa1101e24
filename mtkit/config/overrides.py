"""``--set KEY=VALUE`` overrides: applied to a recipe's raw mapping before it is validated, and
checked once it is for values that nothing reads."""

from __future__ import annotations

import re
from typing import Any

import yaml

from mtkit.config.recipe_yaml import RecipeLoader, Unbounded
from mtkit.errors import ConfigError

# A key part naming one entry of a list, as problems name it: train[1]
_ENTRY = re.compile(r"([^\[\]]+)\[(\d+)\]")


def apply_override(raw: dict, assignment: str) -> list[str]:
    """Apply one ``dotted.key=value`` override in place; the value is parsed as YAML. A key
    part may name an entry of a list by its position, as problems do: data.train[1].tgt.
    Returns the sections it created (dotted keys): a field missing in them is its doing."""
    created: list[str] = []
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected KEY=VALUE, e.g. train.lr=3e-4")
    key, text = assignment.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"--set {assignment!r}: empty key part in {key!r}")
    try:
        value = yaml.load(text, Loader=RecipeLoader) if text.strip() else ""
    except Unbounded as e:  # YAML, but past a bound: not to be taken as text either
        cut = assignment if len(assignment) <= 60 else assignment[:60] + "..."
        raise ConfigError(f"--set {cut}: {e.problem}") from None
    except yaml.YAMLError:
        value = text
    node: Any = raw
    for i, p in enumerate(parts):
        entry = _ENTRY.fullmatch(p)
        name, index = entry.groups() if entry else (p, None)
        where = ".".join(parts[:i + 1])
        last = i == len(parts) - 1
        if index is None and last:
            node[name] = value
            break
        if index is None:
            child = node.get(name)
            if child is None:
                child = node[name] = {}
                created.append(where)
            elif not isinstance(child, dict):
                raise ConfigError(f"--set {assignment!r}: `{where}` is not a section" + (
                    f"; it is a list: name an entry, `{where}[0]`" * isinstance(child, list)))
            node = child
            continue
        entries, k = node.get(name), int(index)  # one entry of a list: data.train[1].tgt
        if not isinstance(entries, list) or k >= len(entries):
            raise ConfigError(f"--set {assignment!r}: `{where}` is no entry of a list in the "
                              "recipe (entries count from 0)")
        if last:
            entries[k] = value
        elif isinstance(entries[k], dict):
            node = entries[k]
        else:
            raise ConfigError(f"--set {assignment!r}: `{where}` is not a section")
    return created


def ignored_overrides(arch: str, overrides: tuple[str, ...]) -> list[tuple[str, str]]:
    """(key, problem) for each override that sets a value nothing reads: the section of the
    architecture the recipe does not train, `arch` (`--set model.rnn.hidden_dim=512` on a
    Transformer recipe had no effect). A recipe file may hold both sections, to switch with
    model.arch."""
    if arch not in ("rnn", "transformer"):  # itself a problem, said as such
        return []
    idle = "model.rnn" if arch == "transformer" else "model.transformer"
    keys = [o.split("=", 1)[0].strip() for o in overrides]
    return [(k, f"model.arch is {arch}, which does not read {idle}; set model.arch too, or "
             "drop this --set") for k in keys if k == idle or k.startswith(idle + ".")]
