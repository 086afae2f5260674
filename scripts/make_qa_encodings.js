// Hugging Face tokenizers' encodings of the question-answering fixtures (issue 45 item 1):
// tests/fixtures/qa/encodings.json, read by scripts/make_qa_fixtures.py (the PyTorch reference of the
// question-answering pipeline takes these ids, offsets, word ids and sequence ids) and by tests/test_qa.cpp.
//
//   cd scripts && npm install && node make_qa_encodings.js
//
// Per tokenizer and case: the whole (question, context) pair encoded without truncation ("full"), and the first
// window with truncation only_second at the case's max_length / stride ("first_window"). The pipeline's windows are
// cut from "full" by the fixture script as tokenizers <= 0.22's Encoding::truncate cuts them (transformers 4.54-4.57
// pin those); the npm package here is 0.23, whose overflowing windows differ, so only its first window is compared.
const fs = require('fs');
const path = require('path');
const tk = require('tokenizers');

const ROOT = path.resolve(__dirname, '..');
const FIX = path.join(ROOT, 'tests', 'fixtures');
const OUT = path.join(FIX, 'qa', 'encodings.json');

// BertTokenizerFast of heads_tokcls/vocab.txt (as make_task_encodings.js writes it).
const vocab = fs.readFileSync(path.join(FIX, 'heads_tokcls', 'vocab.txt'), 'utf8').split('\n').filter((l) => l.length);
const id = (t) => vocab.indexOf(t);
const bertJson = {
  version: '1.0', truncation: null, padding: null,
  added_tokens: ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'].map((t) => ({
    id: id(t), content: t, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
  normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
  pre_tokenizer: { type: 'BertPreTokenizer' },
  post_processor: { type: 'BertProcessing', sep: ['[SEP]', id('[SEP]')], cls: ['[CLS]', id('[CLS]')] },
  decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
  model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100,
           vocab: Object.fromEntries(vocab.map((t, i) => [t, i])) },
};
const TOKENIZERS = {
  bert: JSON.stringify(bertJson),
  roberta: fs.readFileSync(path.join(FIX, 'family_heads', 'roberta_tokcls', 'tokenizer.json'), 'utf8'),
  distilbert: fs.readFileSync(path.join(FIX, 'family_heads', 'distilbert_tokcls', 'tokenizer.json'), 'utf8'),
};

const LONG = 'The man said the house in Paris is good. Two men are playing football in the park while people ' +
             'watch from the benches. The capital of England is London, and the capital of France is Paris. ' +
             'Many friends live in London; their car is red and blue. About two million people live there.';
// name, question, context, max_length (0: the pipeline default), stride (0: default), options for the CLI
const CASES = [
  ['short', 'Where is the house?', 'The man said the house in Paris is good.', {}],
  ['long', 'What is the capital of England?', LONG, { max_seq_length: 32, doc_stride: 6, top_k: 3 }],
  ['long_default', 'Where do many friends live?', LONG, { top_k: 2 }],
  ['impossible', 'What is the dog dream?', 'Two men kept playing football in the sunny park.',
   { handle_impossible_answer: true, top_k: 20 }],
  ['accents', 'Who said it?', 'Zürich café ☕ said: the crème brûlée 😀 is good in Paris, señor Ünal.', { top_k: 4 }],
  ['answer_length', 'What is it?', 'The capital of France is Paris, the capital of England is London.',
   { max_answer_length: 2, top_k: 3 }],
];

function enc(e) {
  return { input_ids: e.getIds(), tokens: e.getTokens(), offsets: e.getOffsets(), type_ids: e.getTypeIds(),
           words: e.getWordIds().map((w) => (w === null || w === undefined ? -1 : w)),
           sequence_ids: e.getSequenceIds().map((s) => (s === null || s === undefined ? -1 : s)) };
}

async function main() {
  const out = { generator: 'tokenizers (npm) ' + require('tokenizers/package.json').version, cases: CASES.map(
    ([name, question, context, options]) => ({ name, question, context, options })), encodings: {} };
  for (const [name, json] of Object.entries(TOKENIZERS)) {
    const t = tk.Tokenizer.fromString(json);
    const rows = {};
    for (const [cname, q, c, opt] of CASES) {
      t.setTruncation(1 << 20, { strategy: 'OnlySecond' });
      const full = enc(await t.encode(q, c));
      const row = { full };
      if (opt.max_seq_length) {
        t.setTruncation(opt.max_seq_length, { stride: opt.doc_stride, strategy: 'OnlySecond' });
        row.first_window = enc(await t.encode(q, c));
      }
      rows[cname] = row;
    }
    out.encodings[name] = rows;
  }
  fs.mkdirSync(path.dirname(OUT), { recursive: true });
  fs.writeFileSync(OUT, JSON.stringify(out) + '\n');
  console.log('wrote', OUT);
}

main().catch((e) => { console.error(e); process.exit(1); });
