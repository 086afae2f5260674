#!/usr/bin/env node
// Writes the BERT tokenizer golden fixtures from the Hugging Face `tokenizers` library (official Node
// bindings, pinned in scripts/package.json), so tests/test_tokenizer.cpp compares against HF, not against us.
//
//   cd scripts && npm install && node make_tokenizer_fixtures.js [DATA_DIR]
//     -> tests/fixtures/tokenizer/bert_base_uncased_cases.json
//   node make_tokenizer_fixtures.js --offsets [DATA_DIR]
//     -> tests/fixtures/tokenizer/bert_base_uncased_offsets.json (offset_mapping, for tfm serve's /tokenize)
//   node make_tokenizer_fixtures.js --unicode-tables [DATA_DIR]
//     -> prints the C++ code point tables used by src/text/bert_tokenizer.cpp (see there for why they exist)
//
// DATA_DIR defaults to $TFM_DATA_DIR, else ../../shared/data relative to this script.
'use strict';
const fs = require('fs');
const path = require('path');
const tk = require('tokenizers');

const args = process.argv.slice(2);
const tablesMode = args.includes('--unicode-tables');
const offsetsMode = args.includes('--offsets');
const positional = args.filter((a) => !a.startsWith('--'));
const dataDir = positional[0] || process.env.TFM_DATA_DIR || path.join(__dirname, '..', '..', 'shared', 'data');
const tokenizerJson = path.join(dataDir, 'bert-base-uncased', 'tokenizer.json');

// ---------------------------------------------------------------------------------------------------------
// --unicode-tables: classify every code point with HF's own normalizer / pre-tokenizer.
function rangesOf(cps) {
  const out = [];
  for (const cp of cps) {
    if (out.length && out[out.length - 1][1] === cp - 1) out[out.length - 1][1] = cp;
    else out.push([cp, cp]);
  }
  return out;
}

function printTable(name, comment, cps) {
  const r = rangesOf(cps);
  const hex = (v) => '0x' + v.toString(16).toUpperCase();
  let s = `// ${comment} (${cps.length} code points, ${r.length} ranges)\n`;
  s += `constexpr CodepointRange ${name}[] = {\n`;
  let line = '   ';
  for (const [a, b] of r) {
    const item = ` {${hex(a)}, ${hex(b)}},`;
    if (line.length + item.length > 112) { s += line + '\n'; line = '   '; }
    line += item;
  }
  s += line + '\n};\n';
  process.stdout.write(s);
}

function unicodeTables() {
  const only = (o) => tk.bertNormalizer(Object.assign(
    { cleanText: false, handleChineseChars: false, stripAccents: false, lowercase: false }, o));
  const clean = only({ cleanText: true });
  const strip = only({ stripAccents: true });
  const pre = tk.Tokenizer.fromFile(tokenizerJson).getPreTokenizer();
  const removed = [], nonspacing = [], punct = [];
  for (let cp = 0; cp < 0x110000; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const c = String.fromCodePoint(cp);
    if (clean.normalizeString(c) === '') removed.push(cp);
    // Stripping removes the whole (NFD of the) char only when every part is Mn.
    if (strip.normalizeString(c) === '') nonspacing.push(cp);
    const pieces = pre.preTokenizeString('a' + c + 'b');
    if (pieces.length === 3 && pieces[1][0] === c) punct.push(cp);
  }
  printTable('kCleanTextRemoved', 'clean_text drops: U+0000, U+FFFD, Cc/Cf/Co except \\t \\n \\r', removed);
  printTable('kNonspacingMark', 'strip_accents drops after NFD: Mn', nonspacing);
  printTable('kPunctuation', 'BertPreTokenizer isolates: ASCII punctuation and P*', punct);
}

// ---------------------------------------------------------------------------------------------------------
// Fixture cases.
function mulberry32(seed) {
  return function () {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const handCases = [
  'time flies like an arrow',
  'I have a dream.',
  'Hello, World! How are you doing today?',
  '',
  ' ',
  '   \t\n\r  ',
  // accents, ligatures, compatibility characters (NFD does not expand ligatures)
  'Café naïve Ångström résumé coöperate façade',
  'ﬁnance ﬂuid ﬀ Ǆemal Å (angstrom sign) Ω (ohm sign)',
  'ÀÉÎÕÜ àéîõü Çç Ññ Øø Łł Đđ',
  // combining marks, decomposed input
  'cafe\u0301 e\u0300\u0301\u0302 a\u0308\u0323 o\u0338 \u0301start',
  'Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dalgo',
  // CJK and other East Asian scripts
  '中文字符',
  '我爱北京天安门。你好，世界！',
  '日本語のテキスト、カタカナとひらがな。',
  '한국어 텍스트입니다. 안녕하세요!',
  '\u3400\u4dbf \u{20000}\u{2a6df} \u{2a700}\u{2b81f} \u{2b920}\u{2ceaf} \uf900\ufaff \u{2f800}\u{2fa1f} \u{2b820}\u{31350}',
  'mixed中文and English字符',
  // control and format characters
  'a\u0000b\u0007c\u200bd\ufffde\tf\ng\rh',
  'zero\u200cwidth\u200djoiner\ufeffbom\u00adsoft\u2060wj',
  '\u0001\u0002\u001f\u007f\u0080\u0085\u009f\u000b\u000c',
  '\ue000private\uf8ff use \u{f0000}\u{10fffd}',
  // whitespace of every kind
  'a\u00a0b\u1680c\u2000d\u2003e\u200af\u2028g\u2029h\u202fi\u205fj\u3000k',
  // punctuation classes: Pc Pd Ps Pe Pi Pf Po
  'snake_case\u203fundertie\u2040x\ufe4fy',
  'en\u2013dash em\u2014dash hyphen\u2010x minus-sign \u2e3a\u301c',
  '(paren) [bracket] {brace} \u300cquote\u300d \u2045x\u2046 \uff08wide\uff09',
  '\u00abguillemets\u00bb \u2018single\u2019 \u201cdouble\u201d \u2039angle\u203a \u2e02x\u2e03',
  'a!b"c#d%e&f\'g*h,i.j/k:l;m?n@o\\p\u00a1q\u00a7r\u00b6s\u00b7t\u00bfu\u2020v\u2022w\u2026x\u203by\u3001z\u3002',
  // ASCII symbols are punctuation for BERT even though Unicode calls them S*
  '$5 + 3 < 4 = 7 > 2 ^ x ` y | z ~ w',
  'price: $1,299.99 (20% off!) email@example.com http://x.io/a?b=c&d=e#f',
  // non-ASCII symbols (S*) are not split
  '\u20ac100 \u00a3 \u00a5 \u00a9 \u00ae \u2122 \u00b0C \u00b1 \u00d7 \u00f7 \u221e \u2211',
  // emoji
  'I love 🤗 and 🚀! 👍🏽 👨‍👩‍👧 🇫🇷 ❤️',
  '😀😃😄😁',
  // very long words: > 100 chars -> [UNK]; exactly 100 chars is still split into word pieces
  'a'.repeat(100),
  'a'.repeat(101),
  'supercalifragilisticexpialidocious'.repeat(3) + ' short ' + 'x'.repeat(150) + ' end',
  'é'.repeat(101),
  'e\u0301'.repeat(60),
  // mixed scripts
  'Москва is the capital of Россия and Αθήνα of Ελλάδα',
  'ΣΑΣ σας ΟΔΥΣΣΕΥΣ',
  'İstanbul İİ IıiI Diyarbakır',
  'Straße STRASSE ẞ Fuß',
  'Dž dž ǅ ǈ ǋ',
  'Ⅻ ⅻ Ⓐ ⓐ 𝐀𝐁𝐂 ＡＢＣ ａｂｃ',
  'العربية עברית हिन्दी ภาษาไทย ქართული Հայերեն',
  'Tiếng Việt có dấu: Nguyễn',
  // numbers
  '123 4,567.89 3.14159 1e-10 ٣٤ १२३ 一二三 ½ ²',
  '2024-01-01T12:34:56Z',
  // unknown pieces
  'xyzzyqqqj \u{10330}\u{10331} ᚠᚢᚦ',
  // special tokens in raw text are matched before normalisation
  'hello [MASK] world[SEP]x [unk] [ CLS] [CLS][PAD]',
  '[UNK]',
  'unaffable runner\'s isn\'t don\'t',
];

const pairCases = [
  ['I have a dream.', 'time flies like an arrow'],
  ['', ''],
  ['Hello!', ''],
  ['', 'World?'],
  ['中文字符', 'Café naïve'],
  ['How old are you?', 'I am 6 years old [SEP] really'],
];

const truncationCases = [
  // [text, pair, max_length]
  ['the quick brown fox jumps over the lazy dog', null, 5],
  ['the quick brown fox jumps over the lazy dog', null, 2],
  ['the quick brown fox jumps over the lazy dog', null, 100],
  ['the quick brown fox jumps over the lazy dog', 'a short one', 8],
  ['a short one', 'the quick brown fox jumps over the lazy dog', 8],
  ['a short one', 'the quick brown fox jumps over the lazy dog', 9],
  ['one two three four five', 'six seven eight nine ten', 7],
  ['one two three four five', 'six seven eight nine ten', 8],
  ['one two three four five', 'six seven eight nine ten eleven', 8],
  ['one two three four five six', 'six seven eight nine ten', 8],
  ['one two', 'six seven eight nine ten', 3],
  ['one two', 'six seven eight nine ten', 4],
  ['a b c', 'd e', 4],
  ['unaffable', 'supercalifragilistic', 6],
  // HF stops tokenizing a sequence after the word that reaches max_length tokens; the shortened lengths decide
  // who gets the odd token of the budget.
  ['a a a a a a a a a a a a a', 'b b b b b b b b b b b b', 12],
  ['a a a a a a a a a a a a a', 'b b b b b b b b b b b', 12],
  ['unaffable unaffable unaffable unaffable unaffable', 'b b b b b b b b b b b b b', 12],
  ['a a a a a a a a a a a unaffable', 'b b b b b b b b b b b b b', 12],
  ['a a a a a a a a [SEP] b b b b b b b b', 'c c c c c c c c c c c c c c', 12],
  ['a a a a a a a a a a a [PAD] b c d', 'c c c c c c c c c c c c c c', 12],
];

function randomStrings(rng, vocabTokens, n) {
  const pick = (arr) => arr[Math.floor(rng() * arr.length)];
  const rint = (a, b) => a + Math.floor(rng() * (b - a + 1));
  const ranges = [
    [0x20, 0x7e], [0x20, 0x7e], [0x20, 0x7e], [0x00, 0x1f], [0x7f, 0x9f], [0xa0, 0xff], [0x100, 0x24f],
    [0x250, 0x2ff], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff], [0x530, 0x58f], [0x590, 0x5ff],
    [0x600, 0x6ff], [0x700, 0x8ff], [0x900, 0x97f], [0xe00, 0xe7f], [0x10a0, 0x10ff], [0x1100, 0x11ff],
    [0x1ab0, 0x1aff], [0x1dc0, 0x1dff], [0x1e00, 0x1fff], [0x2000, 0x206f], [0x2070, 0x21ff], [0x2460, 0x24ff],
    [0x2e00, 0x2e7f], [0x3000, 0x303f], [0x3040, 0x30ff], [0x3400, 0x4dbf], [0x4e00, 0x9fff], [0xa000, 0xa4cf],
    [0xa700, 0xa7ff], [0xac00, 0xd7a3], [0xe000, 0xf8ff], [0xf900, 0xfaff], [0xfb00, 0xfb4f], [0xfe00, 0xfe6f],
    [0xff00, 0xffef], [0xfff0, 0xffff], [0x10000, 0x1ffff], [0x1f300, 0x1faff], [0x20000, 0x2ffff],
    [0xe0000, 0xe007f], [0x0, 0x10ffff],
  ];
  const specials = ['[CLS]', '[SEP]', '[MASK]', '[PAD]', '[UNK]'];
  const out = [];
  for (let i = 0; i < n; i++) {
    const parts = [];
    const nparts = rint(1, 12);
    for (let j = 0; j < nparts; j++) {
      const kind = rng();
      if (kind < 0.35) {
        let w = pick(vocabTokens);
        if (rng() < 0.3) w = w[0].toUpperCase() + w.slice(1);
        parts.push(w);
      } else if (kind < 0.9) {
        const [a, b] = pick(ranges);
        let s = '';
        const len = rint(1, 8);
        for (let k = 0; k < len; k++) {
          let cp = rint(a, b);
          if (cp >= 0xd800 && cp <= 0xdfff) cp = 0x41;  // lone surrogates cannot be UTF-8
          s += String.fromCodePoint(cp);
        }
        parts.push(s);
      } else if (kind < 0.95) {
        parts.push(pick(specials));
      } else {
        parts.push(pick(vocabTokens).repeat(rint(10, 40)));
      }
    }
    let text = '';
    for (const p of parts) text += (rng() < 0.7 ? pick([' ', ' ', ' ', '\t', '\n', '  ', '\u3000']) : '') + p;
    out.push(text);
  }
  return out;
}

async function encodeCase(tokenizer, text, pair, addSpecialTokens, maxLength) {
  if (maxLength > 0) tokenizer.setTruncation(maxLength);
  else tokenizer.disableTruncation();
  const enc = await tokenizer.encode(text, pair, { addSpecialTokens });
  const c = { text };
  if (pair !== null) c.pair = pair;
  c.add_special_tokens = addSpecialTokens;
  if (maxLength > 0) c.max_length = maxLength;
  c.input_ids = enc.getIds();
  c.token_type_ids = enc.getTypeIds();
  c.tokens = enc.getTokens();
  if (enc.getAttentionMask().some((m) => m !== 1)) throw new Error('unexpected padding in ' + JSON.stringify(text));
  return c;
}

async function fixtures() {
  const tokenizer = tk.Tokenizer.fromFile(tokenizerJson);
  const vocabTokens = Object.keys(tokenizer.getVocab(false)).filter((t) => /^[a-z]{2,}$/.test(t));
  vocabTokens.sort();
  const cases = [];
  for (const text of handCases) {
    cases.push(await encodeCase(tokenizer, text, null, false, 0));
    cases.push(await encodeCase(tokenizer, text, null, true, 0));
  }
  for (const [a, b] of pairCases) {
    cases.push(await encodeCase(tokenizer, a, b, true, 0));
    cases.push(await encodeCase(tokenizer, a, b, false, 0));
  }
  for (const [a, b, m] of truncationCases) cases.push(await encodeCase(tokenizer, a, b, true, m));
  cases.push(await encodeCase(tokenizer, 'one two three four five', 'six seven', false, 4));

  const rng = mulberry32(20240607);
  const randomTexts = randomStrings(rng, vocabTokens, 300);
  const randomCases = [];
  for (let i = 0; i < randomTexts.length; i++) {
    const text = randomTexts[i];
    if (i % 5 === 4) randomCases.push(await encodeCase(tokenizer, randomTexts[i - 1], text, true, 0));
    else if (i % 7 === 6) randomCases.push(await encodeCase(tokenizer, text, randomTexts[i - 2], true, 12 + (i % 9)));
    else randomCases.push(await encodeCase(tokenizer, text, null, i % 3 !== 0, 0));
  }

  // Padded batches, as encode_batch returns them.
  tokenizer.disableTruncation();
  tokenizer.setPadding({ padId: tokenizer.tokenToId('[PAD]'), padToken: '[PAD]' });
  const batches = [];
  const batchInputs = [
    [['time flies like an arrow', 'I have a dream.', ''], true, 0],
    [['a', 'b c d e f g', 'Café 中文'], false, 0],
    [['the quick brown fox jumps over the lazy dog', 'short'], true, 6],
  ];
  for (const [texts, addSpecialTokens, maxLength] of batchInputs) {
    if (maxLength > 0) tokenizer.setTruncation(maxLength);
    else tokenizer.disableTruncation();
    const encs = await tokenizer.encodeBatch(texts, { addSpecialTokens });
    const b = { texts, add_special_tokens: addSpecialTokens };
    if (maxLength > 0) b.max_length = maxLength;
    b.input_ids = encs.map((e) => e.getIds());
    b.token_type_ids = encs.map((e) => e.getTypeIds());
    b.attention_mask = encs.map((e) => e.getAttentionMask());
    b.tokens = encs.map((e) => e.getTokens());
    batches.push(b);
  }

  // BertNormalizer alone under other option sets (cased models, strip_accents without lowercase, ...).
  const normalizerCases = [];
  const normTexts = handCases.concat(randomTexts.slice(0, 40));
  const optionSets = [
    { cleanText: true, handleChineseChars: true, stripAccents: false, lowercase: true },
    { cleanText: true, handleChineseChars: true, stripAccents: true, lowercase: false },
    { cleanText: true, handleChineseChars: false, stripAccents: false, lowercase: false },
    { cleanText: false, handleChineseChars: true, stripAccents: false, lowercase: true },
  ];
  for (const o of optionSets) {
    const n = tk.bertNormalizer(o);
    for (const text of normTexts) {
      normalizerCases.push({
        text, clean_text: o.cleanText, handle_chinese_chars: o.handleChineseChars, strip_accents: o.stripAccents,
        lowercase: o.lowercase, normalized: n.normalizeString(text),
      });
    }
  }

  const doc = {
    source: `Hugging Face tokenizers ${require('tokenizers/package.json').version} (npm), ` +
            'bert-base-uncased/tokenizer.json; written by scripts/make_tokenizer_fixtures.js',
    cases,
    random_cases: randomCases,
    batches,
    normalizer_cases: normalizerCases,
  };
  const outDir = path.join(__dirname, '..', 'tests', 'fixtures', 'tokenizer');
  fs.mkdirSync(outDir, { recursive: true });
  const outPath = path.join(outDir, 'bert_base_uncased_cases.json');
  fs.writeFileSync(outPath, JSON.stringify(doc, null, 0).replace(/\},\{/g, '},\n{') + '\n');
  console.log(`wrote ${outPath}: ${cases.length} cases, ${randomCases.length} random cases, ${batches.length} batches`);
}

// --offsets: character offsets [start, stop) of every token in the original text (special tokens: [0, 0]).
async function offsets() {
  const tok = tk.Tokenizer.fromFile(tokenizerJson);
  const texts = ['Héllo, wörld! Ça va?', 'Crème brûlée — déjà vu...', 'naïve café\'s “quotes” (ok)',
                 'Paris is the capital of France.', '  Ångström,  résumé;coöperate!  '];
  const cases = [];
  for (const text of texts) {
    const e = await tok.encode(text);
    cases.push({ text, tokens: e.getTokens(), ids: e.getIds(), offsets: e.getOffsets(),
                 special: e.getSpecialTokensMask() });
  }
  const outPath = path.join(__dirname, '..', 'tests', 'fixtures', 'tokenizer', 'bert_base_uncased_offsets.json');
  fs.writeFileSync(outPath, JSON.stringify({
    source: `Hugging Face tokenizers ${require('tokenizers/package.json').version} (npm), ` +
            'bert-base-uncased/tokenizer.json; written by scripts/make_tokenizer_fixtures.js --offsets',
    cases }, null, 1) + '\n');
  console.log(`wrote ${outPath}: ${cases.length} cases`);
}

if (tablesMode) unicodeTables();
else if (offsetsMode) offsets().catch((e) => { console.error(e); process.exit(1); });
else fixtures().catch((e) => { console.error(e); process.exit(1); });
