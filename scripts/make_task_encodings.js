// Hugging Face tokenizers' encodings of the texts of the task-pipeline fixtures (issue 45):
// tests/fixtures/tasks/encodings.json, read by scripts/make_task_fixtures.py (the PyTorch references of the
// text-classification, zero-shot-classification and token-classification pipelines take these ids, offsets and
// special-token masks) and by the tests (texts, labels, templates).
//
//   cd scripts && npm install && node make_task_encodings.js
//
// The tokenizer is the one transformers' BertTokenizerFast builds from the heads fixtures' vocab.txt
// (do_lower_case true: BertNormalizer lowercase + strip accents, BertPreTokenizer, WordPiece "##" with [UNK],
// [CLS] A [SEP] B [SEP], WordPiece decoder with cleanup), written here as its tokenizer.json.
const fs = require('fs');
const path = require('path');
const tk = require('tokenizers');

const ROOT = path.resolve(__dirname, '..');
const FIX = path.join(ROOT, 'tests', 'fixtures');
const OUT = path.join(FIX, 'tasks', 'encodings.json');

const vocab = fs.readFileSync(path.join(FIX, 'heads_tokcls', 'vocab.txt'), 'utf8').split('\n').filter((l) => l.length);
const id = (t) => vocab.indexOf(t);
const tokenizerJson = {
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

// text-classification: single texts and (text, text_pair) pairs.
const CLASSIFY = ['The cat sat on the mat.', 'hello', 'What time is it?'];
const PAIRS = [['The cat sat on the mat.', 'A dog is running in the park!'],
               ['Paris is the capital of France.', 'London is the capital of England.']];
// zero-shot-classification: sequences, candidate labels as the CLI gets them ("a, b" split on commas and
// stripped, as the pipeline's argument handler does), hypothesis templates.
const ZERO_SHOT = {
  sequences: ['The cat sat on the mat.', 'Two men are playing football on a sunny afternoon.'],
  candidate_labels: ' dog, football ,london,',
  templates: ['This example is {}.', 'The topic is {}!'],
  single_label: 'football',
};
// token-classification: words of several pieces (un ##bel ##ie ##va ##bly, x ##yl ##op ##hon ##ist), a word the
// vocabulary lacks ([UNK] standing for "Zürich"), accents, punctuation.
const NER = ['Unbelievably, the xylophonist kept playing in Paris.', 'Zürich and London are sunny, said the man.',
             'Two men watch football from the benches in England.',
             'The unva manist dogie sat on the xva in Parisie.'];
// Candidates for a text without entities: the fixture script keeps the first the model tags all O.
const NER_EMPTY = ['hello', 'the', 'a', 'it', 'of', 'and', 'time', 'is', 'on', 'from', 'about', 'what'];

async function encode(t, text, pair) {
  const e = await t.encode(text, pair, { addSpecialTokens: true });
  return {
    text, pair, input_ids: e.getIds(), tokens: e.getTokens(), offsets: e.getOffsets(),
    token_type_ids: e.getTypeIds(), special_tokens_mask: e.getSpecialTokensMask(),
  };
}

async function main() {
  const t = tk.Tokenizer.fromString(JSON.stringify(tokenizerJson));
  const out = { generator: 'tokenizers (npm) ' + require('tokenizers/package.json').version };
  out.classify = [];
  for (const x of CLASSIFY) out.classify.push(await encode(t, x, null));
  out.pairs = [];
  for (const [a, b] of PAIRS) out.pairs.push(await encode(t, a, b));
  const labels = ZERO_SHOT.candidate_labels.split(',').map((s) => s.trim()).filter((s) => s.length);
  out.zero_shot = { ...ZERO_SHOT, labels, encodings: {} };
  for (const tpl of ZERO_SHOT.templates) {
    const rows = [];
    for (const seq of ZERO_SHOT.sequences)
      for (const l of [...labels, ZERO_SHOT.single_label]) rows.push(await encode(t, seq, tpl.replace('{}', l)));
    out.zero_shot.encodings[tpl] = rows;
  }
  out.ner = [];
  for (const x of NER) out.ner.push(await encode(t, x, null));
  out.ner_empty = [];
  for (const x of NER_EMPTY) out.ner_empty.push(await encode(t, x, null));
  // convert_tokens_to_string of every NER text's pieces (and of a piece list starting with "##"): the decoder's
  // joins, which the fixture script's Python join is checked against.
  out.decode_checks = [];
  const decoder = tk.wordPieceDecoder('##', true);
  for (const e of out.ner) {
    const pieces = e.tokens.slice(1, -1);
    out.decode_checks.push({ tokens: pieces, text: decoder.decode(pieces) });
  }
  out.decode_checks.push({ tokens: ['##ist', 'kept', ',', 'x', '##yl'], text: decoder.decode(['##ist', 'kept', ',', 'x', '##yl']) });
  fs.mkdirSync(path.dirname(OUT), { recursive: true });
  fs.writeFileSync(OUT, JSON.stringify(out, null, 1) + '\n');
  console.log('wrote', OUT);
}

main().catch((e) => { console.error(e); process.exit(1); });
