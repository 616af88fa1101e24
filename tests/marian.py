"""Tiny random `MarianMTModel` folders in the Hugging Face layout, made as OPUS-MT's are: two
sentencepiece models (sentencepiece's own ids: unk 0, bos 1, eos 2) trained on toy text, and a
vocab.json by Marian's rules (``</s>`` 0, ``<unk>`` 1, the pieces of both models once each in an
order of Marian's own, ``<pad>`` last; or, for separate vocabularies, vocab.json and
target_vocab.json, one per side). transformers builds the model; the tests import it.
"""

from __future__ import annotations

import io
import json
import random
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm
import torch

WORDS_SRC = ("the a cat dog sat on mat house big small red blue green runs jumps quickly slowly "
             "under over and with river tree bird sings loud quiet old new").split()
WORDS_TGT = ("der die das Katze Hund saß auf Matte Haus groß klein rot blau grün läuft springt "
             "schnell langsam unter über und mit Fluss Baum Vogel singt laut leise alt neu").split()


def toy_lines(words: tuple[str, ...] | list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        line = [rng.choice(words) for _ in range(rng.randint(2, 9))]
        if rng.random() < 0.3:
            line.insert(rng.randrange(len(line)), str(rng.randint(0, 2000)))
        if rng.random() < 0.3:
            line[-1] += rng.choice(".,!?")
        out.append(" ".join(line))
    return out


def hard_lines(n: int, seed: int) -> list[str]:
    """Sentences with what a vocabulary lacks: unknown letters, emoji, digits, odd spacing."""
    rng = random.Random(seed)
    extra = ["😀", "🚀🚀", "Ωμέγα", "東京", "naïve", "ß", "123", "4,5", "x²", "—", "  ", "\t",
             "Zebra", "QUIET", "e-mail", "(brackets)", "«quotes»", "co-op", "€20"]
    base = toy_lines(WORDS_SRC, n, seed)
    out = []
    for line in base:
        words = line.split(" ")
        for _ in range(rng.randint(1, 3)):
            words.insert(rng.randrange(len(words) + 1), rng.choice(extra))
        out.append(" ".join(words).strip() if rng.random() < 0.8 else " " + " ".join(words))
    return out


def train_spm(lines: list[str], vocab_size: int) -> bytes:
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out,
                                   vocab_size=vocab_size, character_coverage=1.0,
                                   model_type="unigram", minloglevel=2)
    return out.getvalue()


def _pieces(proto: bytes) -> list[str]:
    p = spm.SentencePieceProcessor(model_proto=proto)
    return [p.id_to_piece(i) for i in range(p.get_piece_size())
            if not (p.is_control(i) or p.is_unknown(i))]


def marian_vocab(pieces: list[str], seed: int) -> dict[str, int]:
    """Marian's numbering: </s> 0, <unk> 1, the pieces shuffled (not sentencepiece's order),
    <pad> last."""
    rest = sorted(dict.fromkeys(pieces))
    random.Random(seed).shuffle(rest)
    vocab = {"</s>": 0, "<unk>": 1}
    for p in rest:
        vocab.setdefault(p, len(vocab))
    vocab["<pad>"] = len(vocab)
    return vocab


@dataclass(frozen=True)
class MarianFolder:
    path: Path
    shared: bool
    activation: str


def build_marian(path: Path, *, shared: bool = True, activation: str = "swish",
                 d_model: int = 32, heads: int = 4, layers: tuple[int, int] = (2, 2),
                 ffn: int = 64, seed: int = 0, scale: float = 0.3, eos_bias: float = 2.7
                 ) -> MarianFolder:
    """A random MarianMTModel saved with its tokenizer files into `path`; weights drawn with
    std `scale` (transformers' 0.02 gives near-uniform outputs that say little), and `eos_bias`
    added to the end token's logit, so that outputs of several lengths end before a limit."""
    from transformers import MarianConfig, MarianMTModel

    path.mkdir(parents=True, exist_ok=True)
    src_spm = train_spm(toy_lines(WORDS_SRC, 400, seed), 60)
    # the same size on both sides: separate vocabularies then have <pad> at one id, which
    # config.json names for both
    tgt_spm = train_spm(toy_lines(WORDS_TGT, 400, seed + 1), 60)
    (path / "source.spm").write_bytes(src_spm)
    (path / "target.spm").write_bytes(tgt_spm)
    if shared:
        vocab = marian_vocab(_pieces(src_spm) + _pieces(tgt_spm), seed)
        target_vocab = None
        (path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    else:
        vocab = marian_vocab(_pieces(src_spm), seed)
        target_vocab = marian_vocab(_pieces(tgt_spm), seed + 1)
        (path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
        (path / "target_vocab.json").write_text(json.dumps(target_vocab, ensure_ascii=False))
    pad = vocab["<pad>"] if shared else target_vocab["<pad>"]
    if not shared:
        assert vocab["<pad>"] == len(vocab) - 1
    config = MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(target_vocab or vocab),
        d_model=d_model, encoder_layers=layers[0], decoder_layers=layers[1],
        encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn, max_position_embeddings=128, activation_function=activation,
        scale_embedding=True, pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0,
        forced_eos_token_id=0, share_encoder_decoder_embeddings=shared, dropout=0.1,
        init_std=scale)
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():  # a bias on the logits, so that its mapping is tested
        model.final_logits_bias.normal_(0, 1.0)
        model.final_logits_bias[0, 0] += eos_bias  # </s> is Marian's id 0
    # generation defaults as OPUS-MT's (which have 4 or 6 beams and max_length 512)
    model.generation_config.num_beams = 4
    model.generation_config.max_length = 60
    model.generation_config.bad_words_ids = [[pad]]
    model.save_pretrained(path)
    (path / "tokenizer_config.json").write_text(json.dumps(
        {"source_lang": "en", "target_lang": "de", "separate_vocabs": not shared,
         "tokenizer_class": "MarianTokenizer"}))
    (path / "README.md").write_text("---\nlanguage:\n- en\n- de\nlicense: cc-by-4.0\n---\n"
                                    "# a tiny random Marian model for tests\n")
    return MarianFolder(path, shared, activation)


def marian_tokenizer(folder: Path):
    from transformers import MarianTokenizer

    return MarianTokenizer.from_pretrained(str(folder))
