"""Marian's config.json and generation defaults in mtkit's recipe fields."""

from __future__ import annotations

import dataclasses

import pytest

from mtkit.config import load_recipe
from mtkit.hf.importer import decode_fields
from mtkit.hf.marian import ModelFolderError, transformer_fields
from tests.helpers import RECIPES

# Helsinki-NLP/opus-mt-en-de's config.json, as far as the architecture goes
OPUS_EN_DE = {
    "model_type": "marian", "architectures": ["MarianMTModel"], "d_model": 512,
    "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 8,
    "decoder_attention_heads": 8, "encoder_ffn_dim": 2048, "decoder_ffn_dim": 2048,
    "activation_function": "swish", "dropout": 0.1, "attention_dropout": 0.0,
    "activation_dropout": 0.0, "max_position_embeddings": 512, "scale_embedding": True,
    "vocab_size": 58101, "pad_token_id": 58100, "decoder_start_token_id": 58100,
    "eos_token_id": 0, "num_beams": 4, "max_length": 512, "bad_words_ids": [[58100]],
}


def test_the_fine_tuning_recipe_holds_what_the_import_writes_for_opus_mt() -> None:
    recipe = load_recipe(RECIPES / "opus-mt-en-de-finetune.yaml")
    assert dataclasses.asdict(recipe.model.transformer) == transformer_fields(OPUS_EN_DE)
    assert recipe.data.spm.vocab_size == OPUS_EN_DE["vocab_size"] + 1  # and the PAD row
    decode, unmapped = decode_fields({}, OPUS_EN_DE)
    assert decode == {"method": "beam", "beam_size": 4, "max_len_a": 0.0, "max_len_b": 510,
                      "length_penalty": "average"} and unmapped == {}
    assert (recipe.decode.beam_size, recipe.decode.length_penalty) == (4, "average")


def test_generation_defaults_map_or_are_listed_as_not_mapped() -> None:
    generation = {"num_beams": 6, "max_length": 200, "min_length": 3, "length_penalty": 0.6,
                  "no_repeat_ngram_size": 3, "bad_words_ids": [[7]], "pad_token_id": 9,
                  "transformers_version": "4.40"}
    decode, unmapped = decode_fields(generation, {"pad_token_id": 9})
    assert decode == {"method": "beam", "beam_size": 6, "max_len_a": 0.0, "max_len_b": 198,
                      "min_len": 2, "length_penalty": "power", "alpha": 0.6}
    assert unmapped == {"no_repeat_ngram_size": 3, "bad_words_ids": [[7]]}
    assert decode_fields({"length_penalty": -1.0}, {})[1] == {"length_penalty": -1.0}
    # what transformers bans that mtkit never produces (the padding and start symbols, as
    # mtkit's Hugging Face export writes them) is no setting left out; other ids are
    marian = {"pad_token_id": 0, "decoder_start_token_id": 2}
    assert decode_fields({"suppress_tokens": [0, 2], "bad_words_ids": [[2], [0]]},
                         marian)[1] == {}
    assert decode_fields({"suppress_tokens": [0, 5], "bad_words_ids": [[0, 2]]}, marian)[1] == {
        "suppress_tokens": [0, 5], "bad_words_ids": [[0, 2]]}
    sample, _ = decode_fields({"do_sample": True, "top_k": 20, "temperature": 0.7}, {})
    assert sample == {"method": "sample", "top_k": 20, "temperature": 0.7,
                      "length_penalty": "average"}


@pytest.mark.parametrize(("change", "says"), [
    ({"decoder_ffn_dim": 1024}, "encoder_ffn_dim (2048) differs from decoder_ffn_dim (1024)"),
    ({"activation_function": "tanh"}, "activation_function 'tanh'"),
    ({"tie_word_embeddings": False}, "share_encoder_decoder_embeddings with tie_word_embeddings"),
    ({"d_model": None}, "config.json: "),
])
def test_what_mtkits_transformer_cannot_hold_is_refused(change, says) -> None:
    config = {**OPUS_EN_DE, **change}
    if change.get("d_model", 1) is None:
        del config["d_model"]
    with pytest.raises(ModelFolderError, match=says.replace("(", r"\(").replace(")", r"\)")):
        transformer_fields(config)
