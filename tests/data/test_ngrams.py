import random

from elfreg.data.ngrams import NgramIndex, jaccard, mask_numbers, ngram_set, normalize, words


def test_normalisation():
    assert words("Janet’s  DUCKS lay 16\neggs!") == ["janet", "s", "ducks", "lay", "16", "eggs"]
    assert normalize("A  b,\tC.") == "a b c"
    assert mask_numbers("Pay $1,250.50 for 3 pens") == "Pay $0 for 0 pens"


def test_ngrams_and_jaccard_by_hand():
    a = ngram_set("a b c d".split(), 2)  # {ab, bc, cd}
    b = ngram_set("b c d e".split(), 2)  # {bc, cd, de}
    assert a == {"a b", "b c", "c d"}
    assert jaccard(a, b) == 2 / 4
    assert ngram_set(["x", "y"], 8) == {"x y"} and ngram_set([], 8) == frozenset()


def test_index_agrees_with_brute_force():
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(12)]
    docs = [ngram_set([rng.choice(vocab) for _ in range(rng.randint(3, 30))], 3) for _ in range(40)]
    index = NgramIndex()
    for d in docs:
        index.add(d)
    for _ in range(20):
        q = ngram_set([rng.choice(vocab) for _ in range(rng.randint(3, 30))], 3)
        got = {h.doc: h.jaccard for h in index.hits(q)}
        want = {i: jaccard(q, d) for i, d in enumerate(docs) if q & d}
        assert got.keys() == want.keys()
        assert all(abs(got[i] - want[i]) < 1e-12 for i in want)
