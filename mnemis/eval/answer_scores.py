"""Answer scores no judge decides: token F1 and BLEU-1 against the gold answer, per question.

Three scores, each computed the way a reference evaluation computes it (our implementation):

* ``f1``: the Mem0 evaluation's token F1. Lower-case, ``. , ! ?`` become spaces, split on whitespace; the
  token SETS of answer and gold are compared (precision = shared / answer tokens, recall = shared /
  gold tokens). 0 when either side is empty.
* ``bleu1``: the Mem0 evaluation's BLEU-1 (NLTK ``sentence_bleu`` with weights (1, 0, 0, 0)): the
  clipped unigram precision of the answer times the brevity penalty ``exp(1 - r / c)`` when the answer
  (``c`` tokens) is not longer than the gold (``r`` tokens). Tokens: lower-cased words, numbers (dates
  such as ``2023-05-07`` stay whole), contractions (``n't``, ``'s``) and punctuation marks, close to
  NLTK's ``word_tokenize``.
* ``locomo_f1``: the LoCoMo paper's QA F1. Lower-case, commas and punctuation removed, the articles
  ``a an the`` and the word ``and`` removed, Porter-stemmed tokens compared as MULTISETS. Per category as
  in LoCoMo: multi-hop splits answer and gold at commas and averages, over gold parts, the best F1 of any
  answer part; open-domain keeps the gold up to its first ``;``; adversarial scores 1 when the answer
  says "no information available" or "not mentioned", else 0. (Stemming uses the Snowball project's
  original Porter stemmer, which differs from NLTK's extended one on a few rare words.)
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

SCORES = ("f1", "bleu1", "locomo_f1")
_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_BLEU_TOKEN = re.compile(
    r"\d+(?:[.,:/-]\d+)+"          # 2023-05-07, 7:30, 3.5, 1,000
    r"|[a-z0-9]+(?=n't\b)|n't\b"   # do|n't
    r"|'[a-z]+\b"                  # 's 're 'll
    r"|\w+(?:-\w+)*"               # words, hyphenated words
    r"|[^\w\s]"                    # any other mark, one per token
)
ADVERSARIAL_MARKERS = ("no information available", "not mentioned")


def mem0_tokens(text: str) -> list[str]:
    """The Mem0 evaluation's tokens: lower-case, ``. , ! ?`` as spaces, whitespace split."""
    t = str(text).lower()
    for ch in ".,!?":
        t = t.replace(ch, " ")
    return t.split()


def token_f1(answer: str, gold: str) -> float:
    """Mem0's token F1 over token sets (0 when either side is empty)."""
    a, g = set(mem0_tokens(answer.strip())), set(mem0_tokens(gold.strip()))
    if not a or not g:
        return 0.0
    common = len(a & g)
    if not common:
        return 0.0
    p, r = common / len(a), common / len(g)
    return 2 * p * r / (p + r)


def bleu_tokens(text: str) -> list[str]:
    return _BLEU_TOKEN.findall(str(text).lower())


def bleu1(answer: str, gold: str) -> float:
    """BLEU-1 of ``answer`` against the single reference ``gold`` (0 when nothing matches)."""
    hyp, ref = bleu_tokens(answer), bleu_tokens(gold)
    if not hyp or not ref:
        return 0.0
    ref_counts = Counter(ref)
    clipped = sum(min(n, ref_counts[w]) for w, n in Counter(hyp).items())
    if not clipped:
        return 0.0
    c, r = len(hyp), len(ref)
    brevity = 1.0 if c > r else math.exp(1 - r / c)
    return brevity * clipped / c


@lru_cache(maxsize=1)
def _stemmer():
    import Stemmer  # PyStemmer (a dependency: BM25 uses its English stemmer)

    return Stemmer.Stemmer("porter")


def locomo_normalize(text: str) -> str:
    """LoCoMo's answer normalisation: no commas, lower-case, no punctuation, no articles / 'and'."""
    t = str(text).replace(",", "").lower()
    t = "".join(ch for ch in t if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", t).split())


def _locomo_pair_f1(answer: str, gold: str) -> float:
    stem = _stemmer().stemWord
    a = [stem(w) for w in locomo_normalize(answer).split()]
    g = [stem(w) for w in locomo_normalize(gold).split()]
    same = sum((Counter(a) & Counter(g)).values())
    if not same:
        return 0.0
    p, r = same / len(a), same / len(g)
    return 2 * p * r / (p + r)


def locomo_f1(answer: str, gold: str, category: str = "") -> float:
    """LoCoMo's QA F1 with its per-category rules (``category`` by name, e.g. ``multi-hop``)."""
    if category == "adversarial":
        low = answer.lower()
        return 1.0 if any(m in low for m in ADVERSARIAL_MARKERS) else 0.0
    if category == "open-domain":
        gold = gold.split(";")[0].strip()
    if category == "multi-hop":
        parts = [p.strip() for p in answer.split(",")]
        golds = [g.strip() for g in gold.split(",")]
        return sum(max(_locomo_pair_f1(p, g) for p in parts) for g in golds) / len(golds)
    return _locomo_pair_f1(answer, gold)


def answer_scores(answer: str, gold: str, category: str = "") -> dict[str, float]:
    """``{"f1", "bleu1", "locomo_f1"}`` of one answer (an empty or failed answer scores 0)."""
    answer, gold = str(answer or ""), str(gold or "")
    if not answer.strip():
        return {k: 0.0 for k in SCORES}
    return {"f1": token_f1(answer, gold), "bleu1": bleu1(answer, gold), "locomo_f1": locomo_f1(answer, gold, category)}


def mean_scores(rows: Iterable[dict[str, float]]) -> dict[str, float | int | None]:
    """Mean of each score over ``rows`` plus ``n``."""
    rows = list(rows)
    out: dict[str, float | int | None] = {k: (sum(r[k] for r in rows) / len(rows)) if rows else None for k in SCORES}
    out["n"] = len(rows)
    return out
