"""Writes tests/fixtures/nmt/d2l_600.json from the d2l reference (shared/reference/torch/d2lnmt.py).

Run from the repository root with a Python that has torch:  /usr/bin/python3 scripts/make_nmt_fixtures.py
The C++ tests (tests/test_nmt_data.cpp, tests/test_bleu.cpp) compare against this file.
"""
import json, os, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, '..', 'shared', 'reference', 'torch'))
import d2lnmt  # noqa: E402

DATA = os.environ.get('TFM_DATA_DIR', os.path.join(ROOT, '..', 'shared', 'data'))
FRA = os.path.join(DATA, 'fra-eng', 'fra.txt')

# Strings where a naive port goes wrong: narrow/no-break spaces, punctuation at index 0 or after a
# space, non-ASCII capitals, Python's full lowercase (U+0130 -> 2 code points, final sigma), tabs/newlines.
PREPROCESS_CASES = [
    'Va\u202f!', 'Au\xa0feu\xa0!', 'Va !', 'Hello,world.', '\u00c9', '\u00c7A VA?', '.Leading', ',,!?',
    'a  b   c.', 'Wait...!', '', 'x\u202f\u202f?', '\u202f!', 'Go.\tVa !\nRun!\tCours\u202f!\n',
    '\u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3', '\u03a3\u0391\u03a3.', '\u03a3', '\u0391\u03a3 \u0392',
    "\u0391\u03a3'\u0392", '\u0391\u03a3.\u0392', '\u0130stanbul!', 'STRASSE \u00df', '\u01c4 \u01c5 \u01c6',
    '\u2160\u216b \u24b6', '\u0410\u0411\u0412?', 'Qu\u2019est-ce\u00a0?',
]

BLEU_CASES = [
    ('va !', 'va !', 2), ("j'ai perdu .", "j'ai perdu .", 2), ('il est riche .', 'il est calme .', 2),
    ('je suis chez moi .', 'je suis chez moi .', 2),
    ('the cat sat on the mat', 'the cat is on the mat', 2), ('the cat the cat', 'the cat the mat', 2), ('the the the the', 'the cat the mat', 2),
    ('the the the the', 'the cat the mat', 1), ('a b c d e f', 'a b c', 3), ('a b', 'a b c d', 2),
    ('x y z', 'a b c', 1), ('il est riche .', 'il est calme .', 1), ('il est riche .', 'il est calme .', 3), ('a b a b a', 'a b a', 3),
    ('va !', 'va', 1), ('a  b', 'a b', 1), ('a  b', 'a  b', 2), ('je suis chez moi .', 'je suis chez moi', 3),
    ('il est malade .', "c'est un malade .", 2), ('b a', 'a b', 2),
]


def main():
    (src, src_len, tgt, tgt_len), src_vocab, tgt_vocab = d2lnmt.load_data_nmt(FRA, num_steps=10, num_examples=600)
    with open(FRA, encoding='utf-8') as f:
        full_text = d2lnmt.preprocess_nmt(f.read())
    full_src, full_tgt = d2lnmt.tokenize_nmt(full_text)
    full_src_vocab = d2lnmt.Vocab(full_src, min_freq=2, reserved_tokens=['<pad>', '<bos>', '<eos>'])
    full_tgt_vocab = d2lnmt.Vocab(full_tgt, min_freq=2, reserved_tokens=['<pad>', '<bos>', '<eos>'])
    out = {
        'source': 'd2lnmt.load_data_nmt(fra.txt, num_steps=10, num_examples=600)',
        'num_steps': 10, 'num_examples': 600, 'num_pairs': int(src.shape[0]),
        'src_vocab': src_vocab.idx_to_token, 'tgt_vocab': tgt_vocab.idx_to_token,
        # All rows (601 x 10 ids each, ~30 KB): every row is checked, not only a sample.
        'src': src.tolist(), 'src_valid_len': src_len.tolist(),
        'tgt': tgt.tolist(), 'tgt_valid_len': tgt_len.tolist(),
        'full_file': {
            'num_pairs': len(full_src),
            'src_vocab_size': len(full_src_vocab), 'tgt_vocab_size': len(full_tgt_vocab),
            'src_vocab_head': full_src_vocab.idx_to_token[:30], 'tgt_vocab_head': full_tgt_vocab.idx_to_token[:30],
            'src_vocab_tail': full_src_vocab.idx_to_token[-10:], 'tgt_vocab_tail': full_tgt_vocab.idx_to_token[-10:],
        },
        'preprocess': [{'input': s, 'output': d2lnmt.preprocess_nmt(s)} for s in PREPROCESS_CASES],
        'bleu': [{'pred': p, 'label': l, 'k': k, 'bleu': d2lnmt.bleu(p, l, k)} for p, l, k in BLEU_CASES],
    }
    path = os.path.join(ROOT, 'tests', 'fixtures', 'nmt', 'd2l_600.json')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(out, f, ensure_ascii=False, separators=(',', ':'))
        f.write('\n')
    print(f'wrote {path} ({os.path.getsize(path)} bytes)')


if __name__ == '__main__':
    main()
