"""The server's request model is derived from DecodeConfig; the n-best rule of LibreTranslate's
alternatives."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("fastapi")

from pydantic import ValidationError  # noqa: E402

from mtkit.config import DecodeConfig  # noqa: E402
from mtkit.serve.app import nbest_changes  # noqa: E402
from mtkit.serve.schema import DecodeOptions, TranslateRequest  # noqa: E402


def test_the_request_model_has_every_decoding_field_but_batching_with_its_range():
    fields = {f.name: f for f in dataclasses.fields(DecodeConfig)}
    served = {n for n, f in fields.items() if f.metadata["kind"] != "batching"}
    assert set(DecodeOptions.model_fields) == served and "batch_tokens" not in served
    for name in served:
        for bound in ("ge", "gt", "le", "lt"):
            if bound in fields[name].metadata:
                limit = fields[name].metadata[bound]
                outside = limit - 1 if bound in ("ge", "gt") else limit + 1
                if bound in ("gt", "lt"):
                    outside = limit
                with pytest.raises(ValidationError, match=name):
                    TranslateRequest.model_validate({"text": "a", name: outside})
    with pytest.raises(ValidationError, match="length_penalty"):
        TranslateRequest.model_validate({"text": "a", "length_penalty": "long"})
    assert TranslateRequest.model_validate({"text": "a", "top_p": 1}).decode_changes() == {
        "top_p": 1}


def test_n_hypotheses_turn_greedy_into_beam_and_widen_a_beam():
    beam4 = DecodeConfig(beam_size=4)
    assert nbest_changes(beam4, 2) == {"nbest": 2, "beam_size": 4}
    assert nbest_changes(beam4, 6) == {"nbest": 6, "beam_size": 6}
    assert nbest_changes(DecodeConfig(method="greedy", beam_size=4), 6) == {
        "nbest": 6, "method": "beam", "beam_size": 6}
    assert nbest_changes(DecodeConfig(method="sample"), 3) == {"nbest": 3}
