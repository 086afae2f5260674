#!/usr/bin/env node
// Writes the tokenizer-engine golden fixtures with the Hugging Face `tokenizers` library (official Node binding,
// pinned in scripts/package.json), so tests/test_hf_tokenizer.cpp compares against HF, never against us.
//
//   cd scripts && npm install && node make_tokenizer_engine_fixtures.js [DATA_DIR]
//
// 1. Trains small tokenizers of each model kind on the repository's data (Multi30k en/de/fr) with the library:
//      bpe_bytelevel  RoBERTa / GPT-2 style: ByteLevel pre-tokenizer + BPE + RobertaProcessing + ByteLevel decoder
//      unigram        XLM-R / T5 style: Precompiled (nmt_nfkc charsmap) + Metaspace + Unigram + template
//      wordpiece      BERT style: BertNormalizer + BertPreTokenizer + WordPiece + BertProcessing
//      wordlevel      Whitespace + WordLevel
//      unigram_spm    the SentencePiece model of `unigram` alone (sentencepiece.bpe.model, no tokenizer.json)
//    and saves each tokenizer.json under tests/fixtures/tokenizer/<name>/.
//    The Precompiled charsmap is SentencePiece's own: the script trains a Unigram model with Debian's spm_train
//    (package sentencepiece, --normalization_rule_name=nmt_nfkc) and reads precompiled_charsmap and the pieces
//    from the .model protobuf (the npm library cannot build a charsmap). The Unigram tokenizer.json is built from
//    that model the way transformers' XLMRobertaConverter does, then loaded by the npm library.
// 2. Records the library's encodings (ids, tokens, offsets, type ids, special-token masks) and decodes of hard
//    strings, pairs, truncation and padding for each tokenizer and for variants that swap in other
//    normalizers / pre-tokenizers / post-processors / decoders (stored as overrides of the base file).
//    -> tests/fixtures/tokenizer/engine_cases.json
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const zlib = require('zlib');
const { execFileSync } = require('child_process');
const tk = require('tokenizers');

const positional = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const dataDir = positional[0] || process.env.TFM_DATA_DIR || path.join(__dirname, '..', '..', 'shared', 'data');
const outDir = path.join(__dirname, '..', 'tests', 'fixtures', 'tokenizer');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tfm_tok_fix_'));

function gunzipLines(file, n) {
  return zlib.gunzipSync(fs.readFileSync(file)).toString('utf8').split('\n').filter((l) => l.length).slice(0, n);
}

// Training text: Multi30k English, German and French.
const m30k = path.join(dataDir, 'multi30k');
const corpus = [
  ...gunzipLines(path.join(m30k, 'train.en.gz'), 1500),
  ...gunzipLines(path.join(m30k, 'train.de.gz'), 800),
  ...gunzipLines(path.join(m30k, 'train.fr.gz'), 800),
];
const corpusFile = path.join(tmp, 'corpus.txt');
fs.writeFileSync(corpusFile, corpus.join('\n') + '\n');

function writeTokenizer(name, json) {
  const dir = path.join(outDir, name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(json) + '\n');
  return json;
}

function trainJson(model, setup) {
  const t = new tk.Tokenizer(model);
  setup(t);
  t.train([corpusFile]);
  const file = path.join(tmp, 'trained.json');
  t.save(file);
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

// Keeps the first `n` merges of a trained BPE and the vocabulary they reach (base alphabet first), renumbered.
function pruneBpe(j, n, alphabet) {
  const merges = j.model.merges.slice(0, n).map((m) => (Array.isArray(m) ? m : m.split(' ')));
  const base = Object.entries(j.model.vocab).filter(([t]) => [...t].length === 1).sort((a, b) => a[1] - b[1]).map(([t]) => t);
  const vocab = {};
  let id = 0;
  for (const t of [...base, ...alphabet]) if (!(t in vocab)) vocab[t] = id++;
  for (const [a, b] of merges) if (!((a + b) in vocab)) vocab[a + b] = id++;
  j.model.vocab = vocab;
  j.model.merges = merges;
  return j;
}

function addedToken(id, content, special, extra = {}) {
  return Object.assign({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: !special, special }, extra);
}

// ---------------------------------------------------------------------------------------------------------
// BPE, byte level (RoBERTa).
function makeBpe() {
  let j = trainJson(tk.BPE.empty(), (t) => t.setPreTokenizer(tk.byteLevelPreTokenizer(false, true)));
  j = pruneBpe(j, 3000, tk.byteLevelAlphabet());
  let id = Object.keys(j.model.vocab).length;
  const specials = ['<s>', '<pad>', '</s>', '<unk>'].map((s) => addedToken(id++, s, true));
  specials.push(addedToken(id++, '<mask>', true, { lstrip: true }));
  specials.push(addedToken(id++, 'New York', false));
  j.added_tokens = specials;
  j.normalizer = null;
  j.pre_tokenizer = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  j.post_processor = { type: 'RobertaProcessing', sep: ['</s>', specials[2].id], cls: ['<s>', specials[0].id],
    trim_offsets: true, add_prefix_space: false };
  j.decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
  j.model.unk_token = null;
  j.truncation = null;
  j.padding = null;
  return writeTokenizer('bpe_bytelevel', j);
}

// ---------------------------------------------------------------------------------------------------------
// Unigram from SentencePiece (XLM-R conversion).

function readVarint(buf, pos) {
  let v = 0, shift = 0, b;
  do {
    b = buf[pos++];
    v += (b & 0x7f) * 2 ** shift;
    shift += 7;
  } while (b & 0x80);
  return [v, pos];
}
// Top-level fields of a protobuf message: [{field, wire, value (Buffer for length-delimited, number else)}].
function protoFields(buf) {
  const out = [];
  let pos = 0;
  while (pos < buf.length) {
    let key;
    [key, pos] = readVarint(buf, pos);
    const field = Math.floor(key / 8), wire = key & 7;
    if (wire === 0) { let v; [v, pos] = readVarint(buf, pos); out.push({ field, wire, value: v }); }
    else if (wire === 1) { out.push({ field, wire, value: buf.subarray(pos, pos + 8) }); pos += 8; }
    else if (wire === 2) { let len; [len, pos] = readVarint(buf, pos); out.push({ field, wire, value: buf.subarray(pos, pos + len) }); pos += len; }
    else if (wire === 5) { out.push({ field, wire, value: buf.readFloatLE(pos) }); pos += 4; }
    else throw new Error('unsupported wire type ' + wire);
  }
  return out;
}

function spmModel() {
  const prefix = path.join(tmp, 'spm');
  execFileSync('spm_train', [`--input=${corpusFile}`, `--model_prefix=${prefix}`, '--vocab_size=2000',
    '--model_type=unigram', '--normalization_rule_name=nmt_nfkc', '--character_coverage=0.9995',
    '--minloglevel=2', '--num_threads=1'], { stdio: 'ignore' });
  const buf = fs.readFileSync(prefix + '.model');
  // The model itself, as an XLM-R style folder without tokenizer.json (tests load it through from_dir).
  fs.mkdirSync(path.join(outDir, 'unigram_spm'), { recursive: true });
  fs.writeFileSync(path.join(outDir, 'unigram_spm', 'sentencepiece.bpe.model'), buf);
  const top = protoFields(buf);
  const pieces = top.filter((f) => f.field === 1).map((f) => {
    const p = protoFields(f.value);
    const piece = p.find((x) => x.field === 1).value.toString('utf8');
    const scoreF = p.find((x) => x.field === 2);
    const typeF = p.find((x) => x.field === 3);
    return { piece, score: scoreF ? scoreF.value : 0, type: typeF ? typeF.value : 1 };
  });
  const norm = protoFields(top.find((f) => f.field === 3).value);
  const charsmap = norm.find((f) => f.field === 2).value;
  return { pieces, charsmap };
}

function makeUnigram() {
  const { pieces, charsmap } = spmModel();
  // XLMRobertaConverter: <s> <pad> </s> <unk>, then the pieces after SentencePiece's own 3 controls, then <mask>.
  const vocab = [['<s>', 0.0], ['<pad>', 0.0], ['</s>', 0.0], ['<unk>', 0.0]];
  for (const p of pieces.slice(3)) vocab.push([p.piece, p.score]);
  vocab.push(['<mask>', 0.0]);
  const mask = vocab.length - 1;
  const j = {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [addedToken(0, '<s>', true), addedToken(1, '<pad>', true), addedToken(2, '</s>', true),
      addedToken(3, '<unk>', true), addedToken(mask, '<mask>', true, { lstrip: true })],
    normalizer: { type: 'Sequence', normalizers: [
      { type: 'Replace', pattern: { String: '``' }, content: '"' },
      { type: 'Replace', pattern: { String: "''" }, content: '"' },
      { type: 'Precompiled', precompiled_charsmap: Buffer.from(charsmap).toString('base64') },
      { type: 'Replace', pattern: { Regex: ' {2,}' }, content: ' ' }] },
    pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true },
    post_processor: { type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }],
      pair: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } },
        { SpecialToken: { id: '</s>', type_id: 0 } }, { Sequence: { id: 'B', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }],
      special_tokens: { '<s>': { id: '<s>', ids: [0], tokens: ['<s>'] }, '</s>': { id: '</s>', ids: [2], tokens: ['</s>'] } } },
    decoder: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true },
    model: { type: 'Unigram', unk_id: 3, vocab, byte_fallback: false },
  };
  tk.Tokenizer.fromString(JSON.stringify(j));  // the library must accept it
  return writeTokenizer('unigram', j);
}

// ---------------------------------------------------------------------------------------------------------
// WordPiece (BERT, cased) and WordLevel.
function makeWordPiece() {
  const j = trainJson(tk.WordPiece.empty(), (t) => {
    t.setNormalizer(tk.bertNormalizer({ cleanText: true, handleChineseChars: true, stripAccents: false, lowercase: false }));
    t.setPreTokenizer(tk.bertPreTokenizer());
  });
  const keep = Object.entries(j.model.vocab).sort((a, b) => a[1] - b[1]).slice(0, 2500);
  const vocab = {};
  let id = 0;
  for (const t of ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']) vocab[t] = id++;
  for (const [t] of keep) if (!(t in vocab)) vocab[t] = id++;
  j.model.vocab = vocab;
  j.model.unk_token = '[UNK]';
  j.model.max_input_chars_per_word = 100;
  j.added_tokens = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'].map((t) => addedToken(vocab[t], t, true));
  j.post_processor = { type: 'BertProcessing', sep: ['[SEP]', vocab['[SEP]']], cls: ['[CLS]', vocab['[CLS]']] };
  j.decoder = { type: 'WordPiece', prefix: '##', cleanup: true };
  j.truncation = null;
  j.padding = null;
  return writeTokenizer('wordpiece', j);
}

function makeWordLevel() {
  const j = trainJson(tk.WordLevel.empty(), (t) => t.setPreTokenizer(tk.whitespacePreTokenizer()));
  const keep = Object.entries(j.model.vocab).sort((a, b) => a[1] - b[1]).slice(0, 1500);
  const vocab = { '[UNK]': 0, '[PAD]': 1 };
  let id = 2;
  for (const [t] of keep) if (!(t in vocab)) vocab[t] = id++;
  j.model = { type: 'WordLevel', vocab, unk_token: '[UNK]' };
  j.added_tokens = [addedToken(0, '[UNK]', true), addedToken(1, '[PAD]', true)];
  j.normalizer = { type: 'Lowercase' };
  j.post_processor = null;
  j.decoder = null;
  j.truncation = null;
  j.padding = null;
  return writeTokenizer('wordlevel', j);
}

// ---------------------------------------------------------------------------------------------------------
// Cases.

const hard = [
  'A man in a blue shirt is standing on a ladder.',
  'Two young, White males are outside near many bushes.',
  'Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.',
  'Une femme vêtue d\'une robe rose fait du vélo.',
  '',
  ' ',
  '   leading and trailing   ',
  'tabs\tand\nnewlines\r\nand  double  spaces',
  '\t\t\n\n   \u3000\u00a0',
  'Café naïve Ångström résumé façade',          // NFC accents
  'Cafe\u0301 nai\u0308ve A\u030angstro\u0308m',   // NFD accents
  'e\u0301\u0323 o\u0338\u0301 \u0301start',
  'ﬁnance ﬂuid ½ ² Ⅻ ＡＢＣ ｶﾀｶﾅ ㍿',            // compatibility characters (NFKC)
  '中文字符 我爱北京天安门。你好，世界！',
  '日本語のテキスト、カタカナとひらがな。한국어 텍스트입니다.',
  'I love 🤗 and 🚀! 👍🏽 👨‍👩‍👧 🇫🇷 ❤️',
  'العربية עברית مرحبا بالعالم',                 // right to left
  'a\u0000b\u0007c\u200bd\ufffde\u00adf\u2060g\ufeffh',   // control and format characters
  'x'.repeat(200),
  'supercalifragilisticexpialidocious'.repeat(6),
  'xyzzyqqqj \u{10330}\u{10331} ᚠᚢᚦ ⵣ ꙮ',       // unknown characters
  "don't won't it's we're I'm they've y'all ''quoted'' ``tex``",
  'price: $1,299.99 (20% off!) email@example.com http://x.io/a?b=c&d=e#f',
  '123 4567 3.14159 1e-10 ٣٤ १२३',
  'ΣΑΣ σας İstanbul Straße ẞ Dž',
  'hello <mask> world <s>x</s> <pad><unk> [CLS] [SEP] [MASK][PAD] New York',
  'snake_case-and-kebab--case!!!??? ...',
  'A man, a woman and a mann: man-made <ent>  New   York <ent>x  ',
];

const pairs = [
  ['A man in a blue shirt.', 'Ein Mann in einem blauen Hemd.'],
  ['', ''],
  ['Hello!', ''],
  ['', 'World?'],
  ['中文字符 🤗', 'Café naïve'],
];

const truncations = [
  // [text, pair, max_length, strategy, direction]
  ['the quick brown fox jumps over the lazy dog', null, 6, 'LongestFirst', 'Right'],
  ['the quick brown fox jumps over the lazy dog', null, 6, 'LongestFirst', 'Left'],
  ['the quick brown fox jumps over the lazy dog', 'a short one', 10, 'LongestFirst', 'Right'],
  ['a short one', 'the quick brown fox jumps over the lazy dog', 10, 'LongestFirst', 'Right'],
  ['one two three four five six seven', 'eight nine ten eleven twelve', 9, 'LongestFirst', 'Left'],
  ['one two three four five six seven', 'eight nine ten eleven twelve', 9, 'OnlyFirst', 'Right'],
  ['one two three', 'eight nine ten eleven twelve thirteen fourteen', 9, 'OnlySecond', 'Right'],
  ['one two three', 'eight nine ten eleven twelve thirteen fourteen', 9, 'OnlySecond', 'Left'],
  ['a a a a a a a a a a a a a', 'b b b b b b b b b b b b', 12, 'LongestFirst', 'Right'],
];

async function encodeCase(t, text, pair, addSpecial, trunc) {
  if (trunc) t.setTruncation(trunc.max_length, { strategy: trunc.strategy, direction: trunc.direction.toLowerCase() });
  else t.disableTruncation();
  const c = { text };
  if (pair !== null) c.pair = pair;
  c.add_special_tokens = addSpecial;
  if (trunc) Object.assign(c, trunc);
  let e;
  try {
    e = await t.encode(text, pair, { addSpecialTokens: addSpecial });
  } catch (err) {
    t.disableTruncation();
    c.error = String(err.message || err);
    return c;
  }
  t.disableTruncation();
  const ids = e.getIds();
  Object.assign(c, {
    input_ids: ids, tokens: e.getTokens(), offsets: e.getOffsets(), token_type_ids: e.getTypeIds(),
    special_tokens_mask: e.getSpecialTokensMask(), attention_mask: e.getAttentionMask(),
    decoded: await t.decode(ids, true), decoded_with_special: await t.decode(ids, false),
  });
  return c;
}

async function casesFor(json) {
  const t = tk.Tokenizer.fromString(JSON.stringify(json));
  const cases = [];
  for (const s of hard) {
    cases.push(await encodeCase(t, s, null, true, null));
    cases.push(await encodeCase(t, s, null, false, null));
  }
  for (const [a, b] of pairs) {
    cases.push(await encodeCase(t, a, b, true, null));
    cases.push(await encodeCase(t, a, b, false, null));
  }
  for (const [a, b, m, s, d] of truncations)
    cases.push(await encodeCase(t, a, b, true, { max_length: m, strategy: s, direction: d }));
  // A batch padded to the longest.
  const batchTexts = [hard[0], hard[4], hard[13]];
  t.setPadding({ padId: 1, padToken: '<pad>', direction: 'left' });
  const enc = await t.encodeBatch(batchTexts);
  t.disablePadding();
  const batch = { texts: batchTexts, pad_id: 1, pad_token: '<pad>', direction: 'Left',
    input_ids: enc.map((e) => e.getIds()), attention_mask: enc.map((e) => e.getAttentionMask()),
    tokens: enc.map((e) => e.getTokens()) };
  return { cases, batch };
}

// "[CLS] $A [SEP] $B:1 [SEP]:1" as the piece list a tokenizer.json stores.
function tmpl(spec) {
  return spec.split(' ').map((w) => {
    const [name, type] = w.split(':');
    const type_id = type ? Number(type) : 0;
    if (name === '$A' || name === '$B') return { Sequence: { id: name.slice(1), type_id } };
    return { SpecialToken: { id: name, type_id } };
  });
}

// Variants: the same model behind other components, stored as overrides of the base file.
function variants(bases) {
  const v = [];
  const bpeAdd = (name, over) => v.push({ name, base: 'bpe_bytelevel', override: over });
  bpeAdd('bpe_bytelevel', {});
  bpeAdd('bpe_bytelevel_prefix_space', { pre_tokenizer: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true } });
  bpeAdd('bpe_split_gpt4_regex', { pre_tokenizer: { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" }, behavior: 'Isolated', invert: false },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false }] },
    post_processor: { type: 'TemplateProcessing', single: tmpl('<s> $A'), pair: tmpl('<s> $A </s> $B:1 </s>:1'),
      special_tokens: { '<s>': { id: '<s>', ids: [bases.bpe_bytelevel.added_tokens[0].id], tokens: ['<s>'] },
        '</s>': { id: '</s>', ids: [bases.bpe_bytelevel.added_tokens[2].id], tokens: ['</s>'] } } } });
  bpeAdd('bpe_nfkc_lowercase', { normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKC' }, { type: 'Lowercase' }] } });
  bpeAdd('bpe_ignore_merges', { model_patch: { ignore_merges: true } });

  {
    // Hand-made BPE models for end_of_word_suffix, continuing_subword_prefix, fuse_unk and unk (the trainer of the
    // npm binding has no options); HF checks at load that every merge result is in the vocabulary.
    const letters = 'abcdefghijklmnopqrstuvwxyz'.split('');
    const suffixVocab = { '<unk>': 0 };
    let id = 1;
    for (const c of letters) { suffixVocab[c] = id++; suffixVocab[c + '</w>'] = id++; }
    const sm = [['h', 'e'], ['l', 'o</w>'], ['he', 'l'], ['hel', 'lo</w>'], ['t', 'h'], ['th', 'e</w>'], ['a', 'n'], ['an', 'd</w>'], ['m', 'a'], ['ma', 'n</w>']];
    for (const [a, b] of sm) if (!((a + b) in suffixVocab)) suffixVocab[a + b] = id++;
    bpeAdd('bpe_end_of_word_suffix', {
      model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: '</w>',
        fuse_unk: true, byte_fallback: false, ignore_merges: false, vocab: suffixVocab, merges: sm },
      added_tokens: [addedToken(0, '<unk>', true)], normalizer: { type: 'Lowercase' },
      pre_tokenizer: { type: 'Whitespace' }, post_processor: null, decoder: { type: 'BPEDecoder', suffix: '</w>' } });
    const prefixVocab = { '<unk>': 0, '<pad>': 1 };
    id = 2;
    for (const c of letters) { prefixVocab[c] = id++; prefixVocab['##' + c] = id++; }
    const pm = [['h', '##e'], ['##l', '##l'], ['he', '##ll'], ['hell', '##o'], ['t', '##h'], ['th', '##e'], ['##a', '##n'], ['m', '##an']];
    for (const [a, b] of pm) if (!((a + b.slice(2)) in prefixVocab)) prefixVocab[a + b.slice(2)] = id++;
    bpeAdd('bpe_continuing_subword_prefix', {
      model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: '##', end_of_word_suffix: null,
        fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab: prefixVocab, merges: pm },
      added_tokens: [addedToken(0, '<unk>', true), addedToken(1, '<pad>', true)],
      normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
      pre_tokenizer: { type: 'BertPreTokenizer' }, post_processor: null, decoder: { type: 'WordPiece', prefix: '##', cleanup: false } });
  }

  const uni = (name, over) => v.push({ name, base: 'unigram', override: over });
  uni('unigram', {});
  const byteVocab = bases.unigram.model.vocab.concat(Array.from({ length: 256 }, (_, b) => ['<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>', 0.0]));
  uni('unigram_byte_fallback', { model_patch: { byte_fallback: true }, vocab_append: byteVocab.slice(bases.unigram.model.vocab.length),
    decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '▁' }, content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] } });
  uni('unigram_t5', { normalizer: { type: 'Sequence', normalizers: [bases.unigram.normalizer.normalizers[2], { type: 'Strip', strip_left: true, strip_right: true }] },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'WhitespaceSplit' }, { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true }] },
    post_processor: { type: 'TemplateProcessing', single: tmpl('$A </s>'), pair: tmpl('$A </s> $B:1 </s>:1'),
      special_tokens: { '</s>': { id: '</s>', ids: [2], tokens: ['</s>'] } } } });
  uni('unigram_metaspace_first_nosplit', { pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: false },
    normalizer: { type: 'Sequence', normalizers: [{ type: 'NFD' }, { type: 'StripAccents' }, { type: 'Prepend', prepend: '▁' }, { type: 'Replace', pattern: { String: ' ' }, content: '▁' }] },
    decoder: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'never', split: false } });

  const wp = (name, over) => v.push({ name, base: 'wordpiece', override: over });
  wp('wordpiece', {});
  wp('wordpiece_uncased_template', {
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    post_processor: { type: 'TemplateProcessing', single: tmpl('[CLS] $A [SEP]'), pair: tmpl('[CLS] $A [SEP] [SEP] $B:1 [SEP]:1'),
      special_tokens: { '[CLS]': { id: '[CLS]', ids: [2], tokens: ['[CLS]'] }, '[SEP]': { id: '[SEP]', ids: [3], tokens: ['[SEP]'] } } } });
  wp('wordpiece_pretok_sequence', {
    normalizer: { type: 'Sequence', normalizers: [{ type: 'NFD' }, { type: 'StripAccents' }, { type: 'Strip', strip_left: true, strip_right: false }] },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'WhitespaceSplit' }, { type: 'Punctuation', behavior: 'Isolated' }, { type: 'Digits', individual_digits: true }] } });
  wp('wordpiece_split_behaviours', {
    normalizer: { type: 'NFC' },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { String: ' ' }, behavior: 'Removed', invert: false },
      { type: 'Split', pattern: { Regex: '[,.!?]' }, behavior: 'MergedWithPrevious', invert: false },
      { type: 'Split', pattern: { String: '-' }, behavior: 'MergedWithNext', invert: false },
      { type: 'Split', pattern: { Regex: '\\d' }, behavior: 'Contiguous', invert: false },
      { type: 'Punctuation', behavior: 'Contiguous' }] } });
  wp('wordpiece_whitespace_digits', { pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Whitespace' }, { type: 'Digits', individual_digits: false }] },
    normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKD' }, { type: 'Replace', pattern: { Regex: '\\s+' }, content: ' ' }, { type: 'Lowercase' }] } });
  {
    // Added tokens with single_word / lstrip / rstrip / normalized, matched before the model.
    const vocab = bases.wordpiece.model.vocab;
    let next = Math.max(...Object.values(vocab)) + 1;
    const idOf = (t) => (t in vocab ? vocab[t] : next++);
    wp('wordpiece_added_token_options', {
      added_tokens: bases.wordpiece.added_tokens.concat([
        addedToken(idOf('man'), 'man', false, { single_word: true, normalized: false }),
        addedToken(idOf('<ent>'), '<ent>', true, { lstrip: true, rstrip: true }),
        addedToken(idOf('York'), 'York', false, { lstrip: true, normalized: true }),
      ]) });
  }

  const wl = (name, over) => v.push({ name, base: 'wordlevel', override: over });
  wl('wordlevel', {});
  wl('wordlevel_split_invert', { pre_tokenizer: { type: 'Split', pattern: { Regex: '\\w+' }, behavior: 'Removed', invert: true },
    post_processor: { type: 'TemplateProcessing', single: tmpl('[PAD] $A [PAD]'), pair: tmpl('[PAD] $A [PAD] $B:1'),
      special_tokens: { '[PAD]': { id: '[PAD]', ids: [1], tokens: ['[PAD]'] } } } });
  return v;
}

// Top-level keys replace the base's; model_patch merges into the model; vocab_append extends a Unigram vocab.
// tests/test_hf_tokenizer.cpp applies overrides the same way.
function applyOverride(j, over) {
  for (const [k, val] of Object.entries(over)) {
    if (k === 'model_patch') Object.assign(j.model, val);
    else if (k === 'vocab_append') j.model.vocab = j.model.vocab.concat(val);
    else j[k] = val;
  }
  return j;
}

async function main() {
  const bases = {
    bpe_bytelevel: makeBpe(),
    unigram: makeUnigram(),
    wordpiece: makeWordPiece(),
    wordlevel: makeWordLevel(),
  };
  const out = [];
  for (const v of variants(bases)) {
    const j = applyOverride(JSON.parse(JSON.stringify(bases[v.base])), v.override);
    const { cases, batch } = await casesFor(j);
    out.push({ name: v.name, base: v.base + '/tokenizer.json', override: v.override, cases, batch });
    console.log(`${v.name}: ${cases.length} cases`);
  }
  const outPath = path.join(outDir, 'engine_cases.json');
  fs.writeFileSync(outPath, JSON.stringify({ generator: 'tokenizers (npm) ' + require('tokenizers/package.json').version,
    tokenizers: out }) + '\n');
  fs.rmSync(tmp, { recursive: true, force: true });
  console.log('wrote ' + outPath);
}

main().catch((e) => { console.error(e); process.exit(1); });
