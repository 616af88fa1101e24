"""Loading recipes: YAML and ``--set`` overrides to the typed sections of `sections`, every
problem collected and reported at once (see the package's doc); and back to YAML."""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from mtkit.config.overrides import apply_override, ignored_overrides
from mtkit.config.ranges import out_of_range, shown
from mtkit.config.recipe_yaml import RecipeLoader, SafeLoader, Unbounded
from mtkit.config.sections import FileSource, ModelConfig, Recipe
from mtkit.errors import ConfigError

# --------------------------------------------------------------------------- loading


class _Problems:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, key: str, msg: str) -> None:
        self.items.append((key, msg))


class Valid:
    """Which fields of the object being validated converted without a problem, for its
    cross-field rules: ``valid("d_model", "heads")`` is False when either (or anything under
    it) has a problem, so a rule never reasons from a default that stands in for a bad value."""

    def __init__(self, bad_keys: list[str]) -> None:
        self._bad = bad_keys

    def __call__(self, *names: str) -> bool:
        return not any(k == n or k.startswith((n + ".", n + "["))
                       for k in self._bad for n in names)


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix and key else prefix or key


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _type_name(a)
                           for a in typing.get_args(tp))
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            item = _type_name(args[0]).removeprefix("a ").removeprefix("an ")
            return f"a list of {item}s"
        return f"a list of {len(args)} items ({', '.join(_type_name(a) for a in args)})"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(
        tp, str(tp))


def _convert(tp: Any, value: Any, key: str, problems: _Problems, base: Path | None) -> Any:
    """Convert a YAML value to `tp`, recording problems; returns a usable value or None."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        choices = typing.get_args(tp)
        if isinstance(value, bool) and {"on", "off"} <= set(choices):
            value = "on" if value else "off"  # YAML 1.1 reads a bare on/off as a boolean
        if value in choices:
            return value
        problems.add(key, f"invalid choice {shown(value)}; expected one of "
                     + ", ".join(str(c) for c in choices))
        return None
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        shaped = [a for a in inner if _shape_fits(a, value)]
        if len(inner) == 1 or len(shaped) == 1:
            # One branch takes this shape of value: convert with it, so that problems deep
            # inside (a bad sha256 in one corpus of a list) keep their own key and message.
            return _convert((shaped or inner)[0], value, key, problems, base)
        for a in inner:
            trial = _Problems()
            out = _convert(a, value, key, trial, base)
            if not trial.items:
                return out
        problems.add(key, f"expected {_type_name(tp)}, got {shown(value)}")
        return None
    if origin is tuple and len(typing.get_args(tp)) == 2 and typing.get_args(tp)[1] is Ellipsis:
        item = typing.get_args(tp)[0]
        if not isinstance(value, list | tuple):
            problems.add(key, f"expected {_type_name(tp)}, got {shown(value)}")
            return None
        return tuple(_convert(item, v, f"{key}[{i}]", problems, base) for i, v in enumerate(value))
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list | tuple) or len(value) != len(args):
            problems.add(key, f"expected {_type_name(tp)}, got {shown(value)}")
            return None
        return tuple(_convert(a, v, f"{key}[{i}]", problems, base)
                     for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if origin is dict:
        _, vtype = typing.get_args(tp)
        if value is None:
            return {}
        if not isinstance(value, dict):
            problems.add(key, f"expected a mapping, got {shown(value)}")
            return {}
        return {str(k): _convert(vtype, v, _join(key, str(k)), problems, base)
                for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key, problems, base)
    return _scalar(tp, value, key, problems)


def _shape_fits(tp: Any, value: Any) -> bool:
    """Whether `value` has the YAML shape `tp` is written in: a list for a tuple, a mapping for
    a section or a dict. Scalars fit anything else (their conversion checks them)."""
    origin = typing.get_origin(tp)
    if origin is tuple:
        return isinstance(value, list | tuple)
    if origin is dict or dataclasses.is_dataclass(tp):
        return isinstance(value, dict)
    return not isinstance(value, list | tuple | dict)


def _scalar(tp: Any, value: Any, key: str, problems: _Problems) -> Any:
    if tp is float and isinstance(value, str):
        # YAML 1.1 reads "1e-3" (no dot) as a string; accept what Python reads as a number.
        try:
            value = float(value)
        except ValueError:
            pass
    ok = (
        (tp is bool and isinstance(value, bool))
        or (tp is int and isinstance(value, int) and not isinstance(value, bool))
        or (tp is float and isinstance(value, int | float) and not isinstance(value, bool))
        or (tp is str and isinstance(value, str | int | float) and not isinstance(value, bool))
    )
    if not ok:
        problems.add(key, f"expected {_type_name(tp)}, got {shown(value)}")
        return None
    return tp(value)


def _check_range(meta: Any, value: Any, key: str, problems: _Problems) -> bool:
    """Whether `value` is within its field's bounds (`meta`); a problem added where not."""
    wrong = out_of_range(meta, value)
    for msg in wrong:
        problems.add(key, msg)
    return not wrong


def _build(cls: Any, value: Any, prefix: str, problems: _Problems, base: Path | None) -> Any:
    coerce = getattr(cls, "_coerce", None)
    if coerce is not None:
        value = coerce(value)
    if value is None:
        value = {}
    if not isinstance(value, dict):
        problems.add(prefix or "(top level)", f"expected a mapping, got {shown(value)}")
        value = {}
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for k in value:
        if k not in fields:
            close = difflib.get_close_matches(str(k), list(fields), n=1, cutoff=0.6)
            hint = f"; did you mean `{_join(prefix, close[0])}`?" if close else \
                f"; valid keys: {', '.join(fields)}"
            problems.add(_join(prefix, str(k)), f"unknown key{hint}")
    kwargs = {}
    before = len(problems.items)
    for name, f in fields.items():
        key = _join(prefix, name)
        if name not in value:
            if dataclasses.is_dataclass(hints[name]):  # a missing section: check its defaults
                _build(hints[name], {}, key, problems, base)
            continue
        converted = _convert(hints[name], value[name], key, problems, base)
        # a value out of bounds is reported, not passed on: the field keeps its default, so
        # that a section checking itself on construction (`DecodeConfig`) does not raise here
        if not _check_range(f.metadata, converted, key, problems):
            continue
        if converted is not None or value[name] is None:
            kwargs[name] = converted
    if cls is FileSource and base is not None and kwargs.get("path"):
        p = Path(kwargs["path"]).expanduser()
        kwargs["path"] = str(p if p.is_absolute() else (base / p).resolve())
    try:
        obj = cls(**kwargs)
    except TypeError as e:  # pragma: no cover - a field left None by a reported problem
        problems.add(prefix, str(e))
        return None
    if hasattr(obj, "_problems"):
        bad = [_relative(key, prefix) for key, _ in problems.items[before:]]
        for key, msg in obj._problems(Valid(bad)):
            problems.add(_join(prefix, key) or "(top level)", msg)
    return obj


def _relative(key: str, prefix: str) -> str:
    """`key` relative to the object at `prefix` ("" for a problem of the object itself)."""
    if not prefix:
        return key
    return key[len(prefix) + 1:] if key.startswith(prefix + ".") else ""


def recipe_from_dict(raw: Any, *, source: str = "<recipe>", base: Path | None = None,
                     overrides: tuple[str, ...] = (), flags: Mapping[str, str] | None = None,
                     created: Mapping[str, list[str]] | None = None,
                     corpora: bool = True) -> Recipe:
    """Validate a raw mapping into a `Recipe`, raising one ConfigError listing every problem.
    A problem at a key that an override set is attributed to that ``--set`` instead of the
    recipe file, or to the command-line flag `flags` names for the override (e.g.
    ``{"train.device=tpu": "--device tpu"}``). corpora False: a model's recipe, which may
    lack the train and valid splits that preparing data needs (`recipe_from_yaml_text`)."""
    problems = _Problems()
    recipe = _build(Recipe, raw, "", problems, base)
    if not corpora:
        problems.items = [(k, m) for k, m in problems.items
                          if not (k in ("data.train", "data.valid") and m.startswith("missing"))]
    # from the raw mapping: said beside the other problems, not only once they are mended
    model = raw.get("model") if isinstance(raw, dict) else None
    arch = model.get("arch", ModelConfig.arch) if isinstance(model, dict) else ModelConfig.arch
    for key, msg in ignored_overrides(arch, overrides):
        problems.add(key, msg)
    if problems.items:
        lines = [f"{_origin(key, msg, source, overrides, flags, created)}: {key}: {msg}"
                 for key, msg in problems.items]
        head = f"{len(lines)} problems in recipe:\n" if len(lines) > 1 else ""
        raise ConfigError(head + "\n".join(lines))
    return recipe


def updated_section(section: Any, changes: dict[str, Any], *, prefix: str, source: str,
                    origins: dict[str, str]) -> Any:
    """`section` (a recipe section, e.g. the recipe's `DecodeConfig`) with `changes` applied,
    validated again like a recipe section: one ConfigError listing every problem. A problem at
    a changed field is named by its origin (``origins[field]``, e.g. the command-line flag that
    set it: ``--beam (decode.beam_size): ...``), any other by `source`."""
    raw = recipe_to_dict(section)
    raw.update(changes)
    problems = _Problems()
    obj = _build(type(section), raw, prefix, problems, None)
    if problems.items:
        lines = []
        for key, msg in problems.items:
            name = _relative(key, prefix)
            read = next((f for f in changes if f in origins and f != name and _names(msg, f)),
                        None)
            if name in changes and name in origins:
                lines.append(f"{origins[name]} ({key}): {msg}")
            elif read is not None:
                lines.append(f"{origins[read]}: {key}: {msg}")
            else:
                lines.append(f"{source}: {key}: {msg}")
        raise ConfigError("\n".join(lines))
    return obj


def _origin(key: str, msg: str, source: str, overrides: tuple[str, ...],
            flags: Mapping[str, str] | None = None,
            created: Mapping[str, list[str]] | None = None) -> str:
    for o in reversed(overrides):  # the last --set of a key wins
        k = o.split("=", 1)[0].strip()
        named = (flags or {}).get(o, f"--set {o}")
        if key == k or key.startswith((k + ".", k + "[")):
            return named
        if k.startswith(key + ".") and msg.startswith("unknown key"):
            return named  # the override created an unknown section
        if msg.startswith("missing") and key.rpartition(".")[0] in (created or {}).get(o, ()):
            return named  # ... or a section without the field it lacks
    # A rule across fields names the others it read, in its section by name ("d_model (33) must
    # be divisible by heads (4)"), elsewhere in full ("data.spm.joint"): an override's caused it.
    for o in reversed(overrides):
        k = o.split("=", 1)[0].strip()
        where, _, field = k.rpartition(".")
        if (where == key.rpartition(".")[0] and _names(msg, field)) or _names(msg, k):
            return (flags or {}).get(o, f"--set {o}")
    return source


def _names(msg: str, field: str) -> bool:  # a word of the message, or a dotted key in full
    return re.search(rf"(?<![\w.]){re.escape(field)}\b", msg) is not None


def load_recipe(path: str | Path, overrides: list[str] | tuple[str, ...] = (),
                flags: Mapping[str, str] | None = None) -> Recipe:
    """Read a YAML recipe, apply ``--set`` overrides, validate. Relative paths in the recipe
    are relative to the recipe file; `flags` names the command-line flag behind an override
    (see `recipe_from_dict`)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder; expected a recipe file (YAML)")
    if not path.is_file():
        raise ConfigError(f"{path}: recipe file not found")
    try:
        raw = _parse(path.read_text(encoding="utf-8"), str(path), RecipeLoader)
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with sections data, model, train, decode")
    stem = path.stem if re.fullmatch(r"[A-Za-z0-9_.-]+", path.stem) and path.stem.strip(".") \
        else re.sub(r"[^A-Za-z0-9_.-]+", "-", path.stem).strip(".-")  # 'my toy' -> 'my-toy'
    if "name" not in raw and stem:
        # a plain folder name, as `Recipe.name` must be: runs/NAME/ then tells runs of
        # different recipes apart (every nameless one shared runs/run/)
        raw["name"] = stem
    created = {o: apply_override(raw, o) for o in overrides}
    return recipe_from_dict(raw, source=str(path), base=path.resolve().parent,
                            overrides=tuple(overrides), flags=flags, created=created)


def recipe_to_dict(recipe: Any) -> Any:
    """A plain, YAML-safe structure of a recipe or section (tuples become lists)."""
    if dataclasses.is_dataclass(recipe):
        return {f.name: recipe_to_dict(getattr(recipe, f.name))
                for f in dataclasses.fields(recipe)}
    if isinstance(recipe, dict):
        return {k: recipe_to_dict(v) for k, v in recipe.items()}
    if isinstance(recipe, list | tuple):
        return [recipe_to_dict(v) for v in recipe]
    return recipe


def dump_recipe(recipe: Recipe) -> str:
    """The resolved recipe as YAML: every field, defaults included, paths absolute."""
    return yaml.safe_dump(recipe_to_dict(recipe), sort_keys=False, allow_unicode=True)


def recipe_from_yaml_text(text: str, *, source: str) -> Recipe:
    """Rebuild a recipe saved by `dump_recipe` (e.g. inside a checkpoint, or an export's): a
    model's, which names its corpora when it was trained by mtkit, and none when it was
    imported (`mtkit.hf`)."""
    return recipe_from_dict(_parse(text, source, SafeLoader), source=source, corpora=False)


def _parse(text: str, source: str, loader: type) -> Any:
    """YAML text -> its object; ConfigError naming `source` and the line when it is not YAML."""
    try:
        return yaml.load(text, Loader=loader)  # SafeLoader or RecipeLoader, a safe one
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        said = "refused" if isinstance(e, Unbounded) else "not valid YAML"
        raise ConfigError(f"{source}:{where} {said} ({getattr(e, 'problem', e)})") from None
