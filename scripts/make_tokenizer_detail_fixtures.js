#!/usr/bin/env node
// Writes tokenizer details golden fixtures with the Hugging Face `tokenizers` library (official Node binding,
// pinned in scripts/package.json), so tests/test_unigram.cpp and tests/test_hf_tokenizer.cpp compare against HF:
//   - Unigram models written by hand so that one detail decides the result: the unknown-piece score of the Viterbi
//     search (min_score - 10), byte_fallback, fuse_unk, pieces of equal scores;
//   - the Nmt normalizer (control characters removed, other whitespace-like code points turned into spaces);
//   - the Whitespace pre-tokenizer (\w+|[^\w\s]+) on superscripts, fractions and other numbers (x², m³, ½);
//   - decode of ids the vocabulary does not have.
//
//   cd scripts && npm install && node make_tokenizer_detail_fixtures.js
//     -> tests/fixtures/tokenizer/detail_cases.json
'use strict';
const fs = require('fs');
const path = require('path');
const tk = require('tokenizers');

function unigram(vocab, extra = {}) {
  return {
    version: '1.0', truncation: null, padding: null, added_tokens: [
      { id: 0, content: '<unk>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
    ],
    normalizer: null, pre_tokenizer: { type: 'WhitespaceSplit' }, post_processor: null, decoder: null,
    model: { type: 'Unigram', unk_id: 0, vocab: [['<unk>', 0.0], ...vocab], byte_fallback: false, ...extra },
  };
}

const bytePieces = [];
for (let b = 0; b < 256; b++) bytePieces.push([`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`, 0.0]);

const tokenizers = [
  {
    // min_score is -10 ("z"). "x" and "q" have no piece: "xab" is the piece "xab" (-15) because <unk> costs
    // min_score - 10 = -20 and <unk> + "ab" totals -21; with <unk> at min_score (-10) it would be <unk> + "ab" (-11).
    name: 'unigram_unknown_penalty',
    json: unigram([['a', -2.0], ['b', -2.0], ['ab', -1.0], ['xab', -15.0], ['qa', -12.0], ['z', -10.0],
                   ['abq', -14.0], ['c', -3.0], ['bc', -2.5], ['ya', -15.0]]),
    // "yab": ya + b scores -17; <unk> + ab scores min_score - 10 - 1 = -26 (an <unk> scored min_score, -16, would win).
    texts: ['xab', 'xabc', 'qab', 'abqa', 'xxab', 'zxab', 'x', 'q', 'ab xab qab abq', 'cxabq', 'yab', 'zyab'],
  },
  {
    // Unknown characters next to each other are one <unk>: tokenizers' Unigram always fuses them (fuse_unk is not
    // a field of its tokenizer.json).
    name: 'unigram_fuse_unk',
    json: unigram([['a', -2.0], ['b', -2.0], ['ab', -1.0], ['é', -3.0]]),
    texts: ['xyz', 'axyzb', 'xyéz', '日本語ab', 'a x y b', 'éé€€'],
  },
  {
    // byte_fallback: a character without a piece is its UTF-8 bytes <0xNN>; the ByteFallback decoder turns them back.
    name: 'unigram_byte_fallback',
    json: Object.assign(unigram([...bytePieces, ['a', -2.0], ['b', -2.0], ['ab', -1.0], ['é', -3.0]],
                                { byte_fallback: true }),
                        { decoder: { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Fuse' }] } }),
    texts: ['xab', 'aéb€', '日本ab', 'a\u0301b', '🤗', 'ab x'],
  },
  {
    // Equal totals: "abc" is a + bc, ab + c or a + b + c... with equal scores; the search keeps the first best
    // path as tokenizers does.
    name: 'unigram_equal_scores',
    json: unigram([['a', -1.0], ['b', -1.0], ['c', -1.0], ['ab', -2.0], ['bc', -2.0], ['abc', -3.0],
                   ['d', -1.0], ['cd', -2.0], ['bcd', -3.0]]),
    texts: ['abc', 'abcd', 'bcd', 'cab', 'dabc', 'abcabc', 'bcbc'],
  },
  {
    // The Nmt normalizer before NFKC, as sentencepiece conversions write it.
    name: 'nmt_normalizer',
    json: Object.assign(unigram([['a', -2.0], ['b', -2.0], ['ab', -1.0], ['▁', -1.5], ['▁a', -1.2], ['▁b', -1.2],
                                 ['1', -3.0], ['ﬁ', -4.0], ['fi', -2.0], ['f', -3.0], ['i', -3.0]]),
                        {
                          normalizer: { type: 'Sequence', normalizers: [{ type: 'Nmt' }, { type: 'NFKC' }] },
                          pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true },
                          decoder: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true },
                        }),
    texts: ['a\u0001b\u0007a', 'a\tb\nab\rb\u000cab', 'a\u000bb\u000e\u001fa\u007fb', 'a\u0085b\u008fa\u009fb',
            'a\u1680b\u200ba\u200fb\u2028a\u2029b', 'a\u2581b\ufeffa\ufffdb', 'ﬁ a\u00a0b\u3000a', '\u0001\u0002',
            'a\u200cb\u200db\u2060a'],
  },
  {
    // Whitespace pre-tokenizer (\w+|[^\w\s]+) and WordLevel: numbers of category No (superscripts, fractions,
    // circled digits) are not word characters, letter numbers (Nl: Ⅻ) and decimal digits of other scripts are.
    name: 'wordlevel_whitespace_numbers',
    json: {
      version: '1.0', truncation: null, padding: null, added_tokens: [
        { id: 0, content: '[UNK]', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
      ],
      normalizer: null, pre_tokenizer: { type: 'Whitespace' }, post_processor: null, decoder: null,
      model: { type: 'WordLevel', vocab: { '[UNK]': 0, x: 1, m: 2, '²': 3, '³': 4, '½': 5, '1': 6, 'x²': 7, 'm²': 8,
                                            '¼': 9, '¹': 10, '2': 11, 'km': 12, 'Ⅻ': 13, '٣': 14, 'ª': 15, 'µm': 16,
                                            '.': 17, '/': 18, '①': 19 },
               unk_token: '[UNK]' },
    },
    texts: ['x²', 'm² m³', '1½', 'x¹ x¼ x¾', '10 km²', '½/2', 'Ⅻx ٣x', 'ªx µm', 'x①', 'x² + y³ = z½.'],
  },
];

async function main() {
  const out = [];
  for (const t of tokenizers) {
    const tok = tk.Tokenizer.fromString(JSON.stringify(t.json));
    const cases = [];
    for (const text of t.texts) {
      const e = await tok.encode(text, null, { addSpecialTokens: true });
      cases.push({ text, input_ids: e.getIds(), tokens: e.getTokens(), offsets: e.getOffsets(),
                   decoded: await tok.decode(e.getIds(), true) });
    }
    out.push({ name: t.name, tokenizer: t.json, cases });
  }
  // decode of ids past the vocabulary (and of none): tokenizers skips the ids it has no token for.
  const wl = tk.Tokenizer.fromString(JSON.stringify(tokenizers[tokenizers.length - 1].json));
  const decodes = [];
  for (const ids of [[], [1, 999, 2], [999], [1, 20, 2, 0], [0, 1]]) {
    for (const skip of [true, false]) decodes.push({ ids, skip_special_tokens: skip, decoded: await wl.decode(ids, skip) });
  }
  const doc = {
    source: `Hugging Face tokenizers ${require('tokenizers/package.json').version} (npm); written by ` +
            'scripts/make_tokenizer_detail_fixtures.js',
    tokenizers: out,
    decode_tokenizer: 'wordlevel_whitespace_numbers',
    decodes,
  };
  const p = path.join(__dirname, '..', 'tests', 'fixtures', 'tokenizer', 'detail_cases.json');
  fs.writeFileSync(p, JSON.stringify(doc, null, 1) + '\n');
  console.log(`wrote ${p}`);
}
main().catch((e) => { console.error(e); process.exit(1); });
