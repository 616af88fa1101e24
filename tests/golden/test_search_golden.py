"""Every search gives what the decoder gave before its cache was preallocated (issue 14): the
same tokens, and scores, token log-probabilities and attention within float32 noise, for
Transformers, an RNN and ensembles, over beam sizes 1-5 and several length limits.
`tests/golden/make_search_golden.py` wrote the values from the old decoder."""

from __future__ import annotations

import json

import pytest
import torch

from tests.golden import make_search_golden as golden
from tests.helpers import REPO

VALUES = json.loads((REPO / "tests" / "golden" / "search.json").read_text(encoding="utf-8"))
CASES = [(name, search) for name, _, _ in golden.SYSTEMS for search in golden.SEARCHES]


def _close(got: list, want: list, what: str) -> None:
    torch.testing.assert_close(torch.tensor(got, dtype=torch.float64),
                               torch.tensor(want, dtype=torch.float64),
                               rtol=0, atol=2e-5, msg=what)


@pytest.mark.parametrize(("name", "search"), CASES)
def test_search_outputs_equal_the_old_decoders(name: str, search: str) -> None:
    got = golden.search_outputs(name, search)
    want = VALUES[name]["searches"][search]
    assert [[h["tokens"] for h in hyps] for hyps in got] == \
        [[h["tokens"] for h in hyps] for hyps in want]
    for i, (g_hyps, w_hyps) in enumerate(zip(got, want, strict=True)):
        for j, (g, w) in enumerate(zip(g_hyps, w_hyps, strict=True)):
            where = f"{name} {search} sentence {i} hypothesis {j}"
            _close([g["score"]], [w["score"]], f"{where} score")
            _close(g["token_logprobs"], w["token_logprobs"], f"{where} token log-probs")
            _close(g["attn"], w["attn"], f"{where} attention")


@pytest.mark.parametrize("name", [name for name, _, _ in golden.SYSTEMS])
def test_forced_scores_equal_the_old_decoders(name: str) -> None:
    for i, (got, want) in enumerate(zip(golden.forced_outputs(name), VALUES[name]["forced"],
                                        strict=True)):
        _close(got, want, f"{name} sentence {i}")
