#!/usr/bin/env node
// Writes the MPNet-kind tokenizer of the MPNet fixtures with the Hugging Face `tokenizers` library (npm, pinned in
// scripts/package.json), and the library's encodings of the fixture sentences, so tests compare against HF.
//
//   cd scripts && npm install && node make_mpnet_tokenizer.js && /usr/bin/python3 make_mpnet_fixtures.py
//
// The layout is all-mpnet-base-v2's (transformers' MPNetConverter): BertNormalizer (lowercase), BertPreTokenizer,
// WordPiece (unk_token "[UNK]", "##"), TemplateProcessing "<s> $A </s>" / "<s> $A </s> </s> $B </s>", WordPiece
// decoder; vocabulary <s> 0, <pad> 1, </s> 2, <unk> 3, then the pieces of the BERT-style WordPiece fixture
// (tests/fixtures/tokenizer/wordpiece, trained by make_tokenizer_engine_fixtures.js), then <mask> last.
// -> tests/fixtures/mpnet/tokenizer.json, tests/fixtures/mpnet/tokenizer_cases.json
'use strict';
const fs = require('fs');
const path = require('path');
const tk = require('tokenizers');

const fix = path.join(__dirname, '..', 'tests', 'fixtures');
const outDir = path.join(fix, 'mpnet');
const base = JSON.parse(fs.readFileSync(path.join(fix, 'tokenizer', 'wordpiece', 'tokenizer.json'), 'utf8'));

const vocab = { '<s>': 0, '<pad>': 1, '</s>': 2, '<unk>': 3 };
const pieces = Object.entries(base.model.vocab).sort((a, b) => a[1] - b[1]).map((e) => e[0]);
for (const p of pieces) vocab[p] = Object.keys(vocab).length;
const maskId = Object.keys(vocab).length;
vocab['<mask>'] = maskId;

const special = (id, content, lstrip = false) =>
  ({ id, content, single_word: false, lstrip, rstrip: false, normalized: false, special: true });
const json = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [special(0, '<s>'), special(1, '<pad>'), special(2, '</s>'), special(3, '<unk>'),
    special(vocab['[UNK]'], '[UNK]'), special(maskId, '<mask>', true)],
  normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null,
    lowercase: true },
  pre_tokenizer: { type: 'BertPreTokenizer' },
  post_processor: {
    type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
      { SpecialToken: { id: '</s>', type_id: 0 } }],
    pair: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
      { SpecialToken: { id: '</s>', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } },
      { Sequence: { id: 'B', type_id: 1 } }, { SpecialToken: { id: '</s>', type_id: 1 } }],
    special_tokens: {
      '<s>': { id: '<s>', ids: [0], tokens: ['<s>'] },
      '</s>': { id: '</s>', ids: [2], tokens: ['</s>'] },
    },
  },
  decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
  model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100,
    vocab },
};

const text = JSON.stringify(json);
const tok = tk.Tokenizer.fromString(text);  // the library must accept the file
const sentences = [
  'A man in a blue shirt is standing on a ladder.',
  'Two young, White males are outside near many bushes.',
  'Several men in hard hats are operating a giant pulley system.',
  'A little girl climbing into a wooden playhouse.',
];
async function main() {
const cases = [];
for (const s of sentences) {
  const e = await tok.encode(s);
  cases.push({ text: s, input_ids: e.getIds(), tokens: e.getTokens(), attention_mask: e.getAttentionMask() });
}
const pair = await tok.encode(sentences[0], sentences[1]);
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, 'tokenizer.json'), text + '\n');
fs.writeFileSync(path.join(outDir, 'tokenizer_cases.json'), JSON.stringify({
  cases,
  pair: { text: sentences[0], text_pair: sentences[1], input_ids: pair.getIds(), type_ids: pair.getTypeIds() },
}, null, 1) + '\n');
console.log(`wrote ${path.relative(path.join(__dirname, '..'), outDir)}: vocab ${maskId + 1}, ${cases.length} cases`);
}
main();
