"""The JSON the server takes and gives, as pydantic models: FastAPI validates requests with
them and documents them in its OpenAPI schema (`/docs`, `/openapi.json`).

Decoding options are the recipe's `decode` fields, their types, ranges and descriptions
taken from `DecodeConfig`; a value that pydantic accepts is then validated by `DecodeConfig`
itself (`TranslationModel.options`), as a recipe's is.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from mtkit.align.links import AlignerMethod
from mtkit.config import DecodeConfig
from mtkit.config.guided import Readout
from mtkit.fileio import unicode_problem
from mtkit.translation.terms import TermsMethod


def _utf8(text: str) -> str:
    """A string that can be written as UTF-8: JSON's escapes can spell a lone surrogate
    (``"\\ud800"``), which no UTF-8 text holds."""
    if problem := unicode_problem(text):
        raise ValueError(problem)
    return text


def _glossary(terms: dict[str, str] | None) -> dict[str, str] | None:
    """None, or source term -> target term, each valid text."""
    for src, tgt in (terms or {}).items():
        for side, text in (("source", src), ("target", tgt)):
            if problem := unicode_problem(text):
                raise ValueError(f"the {side} term {text!r} is {problem}")
    return terms


def _sentences(value: str | list[str]) -> str | list[str]:
    """One sentence or a non-empty list of them, each valid text."""
    if isinstance(value, list):
        if not value:
            raise ValueError("an empty list; give at least one sentence")
        return [_utf8(t) for t in value]
    return _utf8(value)


def _texts(value: str | list[str] | None) -> str | list[str] | None:
    """None, one text or a list of them (any of them empty), each valid text."""
    if value is None:
        return None
    return [_utf8(t) for t in value] if isinstance(value, list) else _utf8(value)


def _decode_options() -> type[BaseModel]:
    """The request model of the decoding options, derived from `DecodeConfig`'s fields (but
    batching's: the server's batcher batches): each its type and range, and its help as its
    description; every field optional."""
    hints = get_type_hints(DecodeConfig)
    declared: dict[str, Any] = {}
    for f in dataclasses.fields(DecodeConfig):
        if f.metadata["kind"] == "batching":
            continue
        # a whole bound as an int: pydantic's message says "greater than 0", as DecodeConfig
        bounds = {k: int(v) if float(v).is_integer() else v for k, v in f.metadata.items()
                  if k in ("ge", "gt", "le", "lt")}
        described = {"description": f.metadata["help"]} if "help" in f.metadata else {}
        declared[f.name] = (hints[f.name] | None, Field(None, **bounds, **described))
    # NaN and infinities (which Python's JSON reads) are refused as not finite, not by a bound
    config = ConfigDict(extra="forbid", allow_inf_nan=False)
    return create_model("DecodeOptions", __config__=config,
                        __doc__="Decoding options of one request; a field left out takes the "
                        "model's default (`GET /v1/models`).", **declared)


DecodeOptions = _decode_options()


class TranslateRequest(DecodeOptions):
    """`POST /v1/translate`: one sentence or a list, decoding options, and what to return
    beside the text."""

    text: str | list[str] = Field(description="a sentence, or a list of sentences")
    widen: bool = Field(False, description="with nbest: change the search so that it gives "
                        "that many hypotheses (greedy becomes a beam search, a narrower beam "
                        "is widened to nbest; LibreTranslate's alternatives follow the same "
                        "rule); false: a search that gives fewer is refused")
    align: bool = Field(False, description="Pharaoh word links of each hypothesis")
    align_method: AlignerMethod | None = None
    readout: Readout | None = None
    attention: bool = Field(False, description="attention matrices of each hypothesis, at "
                            "subword and word level")
    layer: int | None = Field(None, description="with attention: a decoder layer's "
                              "cross-attention (negative from the top; default: the model's "
                              "alignment layer)")
    head: int | Literal["mean"] | None = Field(None, description="with attention: one head, "
                                               "or mean")
    prefix: str | list[str] | None = Field(
        None, description="target text the translation starts with (forced, then continued "
        "by the model): a string for one sentence, a list of one per sentence (\"\" for none) "
        "for a list")

    terms: dict[str, str] | None = Field(
        None, description="glossary, source term -> target term: every translation of a "
        "sentence holding a source term uses its target term")
    terms_method: TermsMethod | None = Field(
        None, description="how a missing term is placed (default: prefix)")
    tag: str | None = Field(None, description="for a model trained with language tags: the "
                            "direction (one of the model's tags; default: its data.tag)")

    source: str | None = Field(None, description="the source language, or auto (detected); "
                               "with target, it chooses the model (GET /languages)")
    target: str | None = Field(None, description="the target language")
    model: str | None = Field(None, description="a model by name (GET /v1/models), in place "
                              "of source and target")

    _text = field_validator("text")(_sentences)
    _prefix = field_validator("prefix")(_texts)
    _terms = field_validator("terms")(_glossary)

    def lines(self) -> list[str]:
        return [self.text] if isinstance(self.text, str) else list(self.text)

    def prefixes(self) -> str | list[str] | None:
        """The prefix per sentence (None: none given); a string for a list of sentences, or
        a list for one sentence, is given as it came for `checked_prefixes` to refuse."""
        if isinstance(self.prefix, str) and isinstance(self.text, str):
            return [self.prefix]
        return self.prefix

    def decode_changes(self) -> dict[str, object]:
        """The decoding options given (with `widen`, nbest is `alternatives`' instead)."""
        changes = self.model_dump(include=set(DecodeOptions.model_fields), exclude_none=True)
        if self.widen:
            changes.pop("nbest", None)
        return changes

    def alternatives(self) -> int:
        """With `widen`: the hypotheses asked for beside the best, for the server to widen
        the search to (`routing.nbest_changes`); else 0."""
        return (self.nbest or 1) - 1 if self.widen else 0


class SplitRequest(BaseModel):
    """`POST /v1/split`: a text to split into sentences."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="a paragraph, or several lines (each line break ends a "
                      "sentence)")

    _text = field_validator("text")(_utf8)


class SplitResponse(BaseModel):
    sentences: list[str] = Field(description="in order, each as it stands in its line")


class MatrixOut(BaseModel):
    level: Literal["subword", "word"]
    source: list[str] = Field(description="column labels")
    target: list[str] = Field(description="row labels")
    weights: list[list[float]] = Field(description="weights[j][i]: target j to source i")


class AttentionOut(BaseModel):
    what: str
    subword: MatrixOut
    word: MatrixOut


class CandidateOut(BaseModel):
    text: str
    score: float = Field(description="log-probability over the length penalty")
    logprob: float
    tokens: list[str]
    token_logprobs: list[float]
    alignment: str | None = Field(None, description="Pharaoh links, 0-based source-target")
    attention: AttentionOut | None = None


class TranslationOut(BaseModel):
    source: str
    source_tokens: list[str]
    truncated: bool = Field(description="cut to the model's longest source")
    text: str = Field(description="the best hypothesis")
    candidates: list[CandidateOut] = Field(description="best first")


class DetectedOut(BaseModel):
    language: str
    confidence: float = Field(description="0-100")


class LegOut(TranslationOut):
    model: str
    source_lang: str
    target_lang: str


class RoutedOut(TranslationOut):
    source_lang: str
    target_lang: str
    detected: DetectedOut | None = Field(None, description="the source language detected "
                                         "(source: auto)")
    pivot: str | None = Field(None, description="the language translated through, if any")
    legs: list[LegOut] | None = Field(None, description="a pivot's legs, each model's "
                                      "translation (the last is this one)")


class TranslateResponse(BaseModel):
    model: str = Field(description="the model (or models, comma-separated) that gave the "
                       "translations")
    translations: list[RoutedOut] = Field(description="one per sentence, in order")


class LibreRequest(BaseModel):
    """`POST /translate` as LibreTranslate takes it (JSON or a form)."""

    model_config = ConfigDict(extra="ignore")

    q: str | list[str]
    source: str = "auto"
    target: str
    format: Literal["text", "html"] = "text"
    alternatives: int = Field(0, ge=0)
    api_key: str | None = None

    _q = field_validator("q")(_sentences)


class DetectRequest(BaseModel):
    """`POST /detect` as LibreTranslate takes it (JSON or a form)."""

    model_config = ConfigDict(extra="ignore")

    q: str
    api_key: str | None = None

    _q = field_validator("q")(_utf8)


class ErrorOut(BaseModel):
    error: str
