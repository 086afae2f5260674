// A DeBERTa-v3 tokenizer.json (issue 44): tests/fixtures/deberta_v2/tokenizer.json, the layout transformers'
// DebertaV2Converter writes for microsoft/deberta-v3-* (a SentencePiece Unigram model): normalizer Strip,
// Precompiled, Replace(" {2,}", " "); pre-tokenizer Sequence[Metaspace(always)]; TemplateProcessing
// "[CLS]:0 $A:0 [SEP]:0" / "[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1"; decoder Metaspace; [PAD] 0, [CLS] 1, [SEP] 2,
// [UNK] 3 and [MASK] last, as deberta-v3's spm.model numbers them. The pieces and scores are the Unigram fixture's
// (tests/fixtures/tokenizer/unigram, an XLM-R-style conversion of a small trained model) with its four
// special pieces renamed. Hugging Face tokenizers loads the result and encodes the fixture texts
// (make_family_head_encodings.js, set deberta_v3).
//
//   cd scripts && npm install && node make_deberta_tokenizer.js
const fs = require('fs');
const path = require('path');
const tk = require('tokenizers');

const ROOT = path.resolve(__dirname, '..');
const FIX = path.join(ROOT, 'tests', 'fixtures');
const OUT = path.join(FIX, 'deberta_v2', 'tokenizer.json');

async function main() {
  const j = JSON.parse(fs.readFileSync(path.join(FIX, 'tokenizer', 'unigram', 'tokenizer.json'), 'utf8'));
  const names = { '<s>': '[CLS]', '<pad>': '[PAD]', '</s>': '[SEP]', '<unk>': '[UNK]', '<mask>': '[MASK]' };
  const vocab = j.model.vocab.map(([piece, score]) => [names[piece] || piece, score]);
  // [PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3 (the fixture has <s> 0, <pad> 1): swap the first two.
  [vocab[0], vocab[1]] = [vocab[1], vocab[0]];
  const id = (p) => vocab.findIndex((v) => v[0] === p);
  const special = (p, lstrip) => ({ id: id(p), content: p, single_word: false, lstrip, rstrip: false,
                                    normalized: false, special: true });
  const precompiled = j.normalizer.normalizers.find((n) => n.type === 'Precompiled');
  const out = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [special('[PAD]', false), special('[CLS]', false), special('[SEP]', false),
                   special('[UNK]', false), special('[MASK]', false)],
    normalizer: { type: 'Sequence', normalizers: [
      { type: 'Strip', strip_left: true, strip_right: true }, precompiled,
      { type: 'Replace', pattern: { Regex: ' {2,}' }, content: ' ' }] },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true }] },
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
               { SpecialToken: { id: '[SEP]', type_id: 0 } }],
      pair: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
             { SpecialToken: { id: '[SEP]', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } },
             { SpecialToken: { id: '[SEP]', type_id: 1 } }],
      special_tokens: { '[CLS]': { id: '[CLS]', ids: [id('[CLS]')], tokens: ['[CLS]'] },
                        '[SEP]': { id: '[SEP]', ids: [id('[SEP]')], tokens: ['[SEP]'] } },
    },
    decoder: { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true },
    model: { type: 'Unigram', unk_id: id('[UNK]'), vocab, byte_fallback: false },
  };
  fs.mkdirSync(path.dirname(OUT), { recursive: true });
  fs.writeFileSync(OUT, JSON.stringify(out, null, 1) + '\n');
  const t = tk.Tokenizer.fromFile(OUT);  // Hugging Face tokenizers must load it
  const e = await t.encode('  A man in a blue shirt.  ', 'Two dogs.', { addSpecialTokens: true });
  console.log('wrote', path.relative(ROOT, OUT), e.getTokens().join(' '), e.getTypeIds().join(''));
}
main().catch((e) => { console.error(e); process.exit(1); });
