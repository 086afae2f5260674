// Hugging Face tokenizers' encodings of the texts the encoder-family head fixtures use (issue 21):
// tests/fixtures/family_heads/encodings.json, read by scripts/make_family_head_fixtures.py (the PyTorch
// references take these ids) and by the tests (the CLI tokenizes the same texts with our engine).
//
//   cd scripts && npm install && node make_family_head_encodings.js
//
// Tokenizers: the byte-level BPE (RoBERTa-style: <s> A </s></s> B </s>, <mask>) and the WordPiece
// (BERT / DistilBERT-style: [CLS] A [SEP] B [SEP], [MASK]) fixtures of make_tokenizer_engine_fixtures.js, and
// MPNet's (tests/fixtures/mpnet/tokenizer.json), and DeBERTa-v3's (tests/fixtures/deberta_v2/tokenizer.json).
const fs = require('fs');
const path = require('path');
const tk = require('tokenizers');

const ROOT = path.resolve(__dirname, '..');
const FIX = path.join(ROOT, 'tests', 'fixtures');
const OUT = path.join(FIX, 'family_heads', 'encodings.json');

// The same texts for every tokenizer; fill-mask texts with the tokenizer's mask token.
const TEXTS = {
  classify: ['A man in a blue shirt is standing on a ladder.', 'Two young, White males are outside near many bushes.',
             'A little girl climbing into a wooden playhouse.'],
  tag: ['A man in New York is riding a bike.', 'Two dogs play in the grass.'],
  query: 'A man is riding a bike.',
  passages: ['A man rides a bicycle down the street.', 'Two dogs play in the grass.',
             'A woman is cooking dinner.', 'A boy on a bike jumps a ramp.'],
};
const fill = (m) => [`A man in a ${m} shirt.`, `Two ${m} are playing in the ${m}.`, `${m} dog runs on the beach.`];

const SETS = {
  bpe_bytelevel: { file: path.join(FIX, 'tokenizer', 'bpe_bytelevel', 'tokenizer.json'), ...TEXTS, fill: fill('<mask>') },
  wordpiece: { file: path.join(FIX, 'tokenizer', 'wordpiece', 'tokenizer.json'), ...TEXTS, fill: fill('[MASK]') },
  // MPNet's WordPiece (lower-cased, <s> A </s></s> B </s>, <mask>) of make_mpnet_tokenizer.js.
  mpnet: { file: path.join(FIX, 'mpnet', 'tokenizer.json'), ...TEXTS, fill: fill('<mask>') },
  // DeBERTa-v3's Unigram / Metaspace ([CLS] A [SEP] B [SEP], pair type ids 1, [MASK]) of make_deberta_tokenizer.js.
  deberta_v3: { file: path.join(FIX, 'deberta_v2', 'tokenizer.json'), ...TEXTS, fill: fill('[MASK]') },
};

async function encode(t, text, pair) {
  const e = await t.encode(text, pair, { addSpecialTokens: true });
  return {
    text, pair, input_ids: e.getIds(), tokens: e.getTokens(), offsets: e.getOffsets(),
    token_type_ids: e.getTypeIds(), special_tokens_mask: e.getSpecialTokensMask(),
  };
}

async function main() {
  const out = { generator: 'tokenizers (npm) ' + require('tokenizers/package.json').version, tokenizers: {} };
  for (const [name, s] of Object.entries(SETS)) {
    const t = tk.Tokenizer.fromFile(s.file);
    const r = { classify: [], tag: [], fill: [], pairs: [] };
    for (const x of s.classify) r.classify.push(await encode(t, x, null));
    for (const x of s.tag) r.tag.push(await encode(t, x, null));
    for (const x of s.fill) r.fill.push(await encode(t, x, null));
    for (const p of s.passages) r.pairs.push(await encode(t, s.query, p));
    r.query = s.query;
    r.passages = s.passages;
    // Decodes of every cased check the Python decoders of the fixture script against Hugging Face's.
    r.decode_checks = [];
    for (const e of [...r.classify, ...r.tag, ...r.fill, ...r.pairs]) {
      r.decode_checks.push({ ids: e.input_ids, skip_special: await t.decode(e.input_ids, true),
                             with_special: await t.decode(e.input_ids, false) });
    }
    out.tokenizers[name] = r;
  }
  fs.mkdirSync(path.dirname(OUT), { recursive: true });
  fs.writeFileSync(OUT, JSON.stringify(out, null, 1) + '\n');
  console.log('wrote ' + path.relative(ROOT, OUT));
}

main().catch((e) => { console.error(e); process.exit(1); });
