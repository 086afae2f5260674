#!/usr/bin/env python3
"""Writes tests/fixtures/bleu/sacrebleu_cases.json: sacreBLEU's default corpus BLEU and 13a tokenization of small
corpora (English and French), for tests/test_corpus_bleu.cpp.

Needs an importable `sacrebleu` (2.x): `pip install sacrebleu`, or put a copy of the package on PYTHONPATH.
Uses only the public corpus_bleu(hyps, [refs]) with default arguments and Tokenizer13a, applied as
BLEU._preprocess_segment does (to line.rstrip()). Run from the repository root:

    python3 scripts/make_bleu_fixtures.py

The output records sacrebleu.__version__ so that the generator of the committed file is known.
"""
import json
import os
import random

import sacrebleu
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'fixtures', 'bleu',
                   'sacrebleu_cases.json')

NBSP = '\u00a0'
NNBSP = '\u202f'  # narrow no-break space, French typography before ; : ! ? and inside guillemets

TOKENIZER_CASES = [
    "Il a dit : « bonjour », n'est-ce pas ?",
    "Le prix est 3,50 euros.",
    "1.000.000 de personnes.",
    "l'homme",
    "Il a dit &quot;oui&quot;.",
    "A &amp; B &lt;tag&gt; &amp;quot;",
    "&lt;skipped&gt; <skipped>rien",
    "inter-\nnational\nsuite",
    f"Il a dit{NBSP}: «{NBSP}bonjour{NBSP}»{NNBSP}!",
    "fin.Début, 12.Mars et a.5",
    "x.,5 a.,b a... 3..",
    "1990-2000 et 3.5-4 ans, -5 et a-b",
    "Prix : 12,5 % (TTC) ; total = 100$ / mois @ 9h",
    "tab\there  many   spaces \t ",
    "zero\u200bwidth and thin\u2009space and ideographic\u3000space",
    "trailing hyphen-\n",
    "",
    "   ",
    "C'est l'été... «\u00a0Ça va\u00a0?\u00a0» — oui !",
    "[crochets] {accolades} `backtick` ^chapeau_ ~tilde| \\backslash",
]

CORPORA = [
    ("identical_english",
     ["The cat sat on the mat.", "It is raining today, isn't it?", "We paid $3.50 for 2 coffees."],
     ["The cat sat on the mat.", "It is raining today, isn't it?", "We paid $3.50 for 2 coffees."]),
    ("french_punctuation",
     ["Il a dit : « bonjour », n'est-ce pas ?", "Le prix est de 3,50 euros.", "1.000.000 de personnes sont venues."],
     ["Il a dit : « bonsoir », n'est-ce pas ?", "Le prix est 3,50 euros.", "Un million de personnes sont venues."]),
    ("french_nbsp",
     [f"Il a dit{NBSP}: «{NBSP}bonjour{NBSP}»{NNBSP}!", "C'est l'été."],
     ["Il a dit : « bonjour » !", "C'est l'été..."]),
    ("short_hyps_bp",
     ["le chat", "il pleut aujourd'hui"],
     ["le chat est sur le tapis", "il pleut beaucoup aujourd'hui à Paris"]),
    ("zero_high_order_matches",
     ["a b c d e", "f g h"],
     ["a b x c y", "f z h"]),
    ("all_hyps_empty",
     ["", "", ""],
     ["une phrase", "deux phrases ici", "trois"]),
    ("no_fourgrams_at_all",
     ["a b", "c d e"],
     ["a b", "c d e"]),
    ("html_entities",
     ["Il a dit &quot;oui&quot; &amp; non.", "x &lt; y &gt; z"],
     ['Il a dit "oui" & non.', "x < y > z"]),
    ("clipping_repeats",
     ["the the the the the the the", "le le le chat"],
     ["the cat is on the mat", "le chat et le chien"]),
    ("long_hyps_case_sensitive",
     ["The Cat sat on the Mat and then it slept all day long", "Bonjour Paris, bonjour la France."],
     ["the cat sat on the mat", "bonjour Paris , bonjour la France ."]),
    ("whitespace_only_reference",
     ["quelque chose", "le reste du texte est ici"],
     ["   ", "le reste du texte est là"]),
    ("numbers_and_dashes",
     ["Entre 1990-2000, 45.5% des gens (env.) ont voté.", "Le 3-4 mars: 12.000 km/h!"],
     ["Entre 1990 - 2000, 45,5 % des gens ont voté.", "Le 3-4 mars : 12.000 km / h !"]),
]


def random_corpus(seed, n_lines):
    rng = random.Random(seed)
    words = ["le", "la", "les", "un", "une", "chat", "chien", "maison", "est", "sont", "grand", "petite",
             "il", "elle", "a", "mangé", "vu", "très", ",", ".", "?", "!", "l'", "été", "3,5", "10.000", "-",
             "«", "»", ":", "(", ")", "Paris", "paris"]
    hyps, refs = [], []
    for _ in range(n_lines):
        ref = [rng.choice(words) for _ in range(rng.randint(3, 14))]
        hyp = [w if rng.random() < 0.7 else rng.choice(words) for w in ref]
        if rng.random() < 0.3:
            hyp = hyp[: rng.randint(1, len(hyp))]
        if rng.random() < 0.2:
            hyp = hyp + [rng.choice(words) for _ in range(rng.randint(1, 4))]
        hyps.append(" ".join(hyp).replace(" ,", ",").replace(" .", "."))
        refs.append(" ".join(ref))
    return hyps, refs


def main():
    tok = Tokenizer13a()
    out = {
        "generator": "scripts/make_bleu_fixtures.py",
        "sacrebleu_version": sacrebleu.__version__,
        "call": "sacrebleu.corpus_bleu(hyps, [refs]) with defaults; tokenized = Tokenizer13a()(line.rstrip())",
        "tokenize_13a": [{"input": s, "tokenized": tok(s.rstrip())} for s in TOKENIZER_CASES],
        "corpora": [],
    }
    cases = list(CORPORA)
    for seed, n in [(1, 40), (2, 200)]:
        hyps, refs = random_corpus(seed, n)
        cases.append((f"random_french_seed{seed}_{n}", hyps, refs))
    for name, hyps, refs in cases:
        res = sacrebleu.corpus_bleu(hyps, [refs])
        out["corpora"].append({
            "name": name, "hyps": hyps, "refs": refs,
            "score": res.score, "bp": res.bp, "ratio": res.ratio,
            "hyp_len": res.sys_len, "ref_len": res.ref_len,
            "precisions": list(res.precisions), "counts": list(res.counts), "totals": list(res.totals),
            "format": res.format(),
        })
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(out['tokenize_13a'])} tokenizer cases, {len(out['corpora'])} corpora")


if __name__ == "__main__":
    main()
