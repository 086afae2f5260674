// Hugging Face tokenizers' encodings of the NomicBERT fixture's texts (issue 44):
// tests/fixtures/nomic_bert/encodings.json, read by scripts/make_nomic_bert_fixtures.py (the PyTorch reference
// takes these ids) and by tests/test_nomic_bert.cpp (tfm tokenizes the same texts with its own engine).
//
//   cd scripts && npm install && node make_nomic_bert_encodings.js
//
// The tokenizer is the WordPiece fixture (tests/fixtures/tokenizer/wordpiece, BERT-style as nomic-embed's
// bert-base-uncased); each text is encoded as is and with the prompts of nomic-embed-text-v1.5's
// config_sentence_transformers.json ("search_query: ", "search_document: ") prepended, as sentence-transformers'
// encode(prompt_name=...) does (the prompt string + the text, one sequence).
const fs = require('fs');
const path = require('path');
const tk = require('tokenizers');

const ROOT = path.resolve(__dirname, '..');
const FIX = path.join(ROOT, 'tests', 'fixtures');
const OUT = path.join(FIX, 'nomic_bert', 'encodings.json');
const PROMPTS = { query: 'search_query: ', document: 'search_document: ' };
const TEXTS = ['A man in a blue shirt is standing on a ladder.', 'Two dogs play in the grass.',
               'A little girl climbing into a wooden playhouse.'];

async function main() {
  const t = tk.Tokenizer.fromFile(path.join(FIX, 'tokenizer', 'wordpiece', 'tokenizer.json'));
  const out = { tokenizer: 'tokenizers/wordpiece', prompts: PROMPTS, texts: TEXTS, encodings: {} };
  for (const [name, prefix] of [['none', ''], ...Object.entries(PROMPTS)]) {
    out.encodings[name] = [];
    for (const text of TEXTS) {
      const e = await t.encode(prefix + text, null, { addSpecialTokens: true });
      out.encodings[name].push({ text: prefix + text, input_ids: e.getIds(), token_type_ids: e.getTypeIds() });
    }
  }
  fs.writeFileSync(OUT, JSON.stringify(out, null, 1) + '\n');
  console.log('wrote', path.relative(ROOT, OUT));
}
main();
