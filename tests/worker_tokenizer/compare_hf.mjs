// SPDX-License-Identifier: Apache-2.0
// fp8-worker prepare-data --tokenizer against the Hugging Face `tokenizers` library itself (its
// Node binding, tests/deploy/npm): the same ids for a GPT-2-style and a Llama-3-style
// tokenizer.json, on data/corpus.txt and on hostile text, and the tokens/s of both on the corpus.
//
//   node compare_hf.mjs FP8_WORKER CORPUS NPM_DIR WORK_DIR
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const [worker, corpus, npmDir, work] = process.argv.slice(2);
let tk;
try {
  tk = createRequire(path.resolve(npmDir, 'package.json'))('tokenizers');
} catch (e) {
  console.log(`FAIL cannot load the tokenizers package from ${npmDir}/node_modules (run scripts/install-deps.sh): ${e.message}`);
  process.exit(1);
}
fs.rmSync(work, { recursive: true, force: true });
fs.mkdirSync(work, { recursive: true });

const LLAMA3_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// A byte-level BPE trained by the library on the corpus and the hostile text's body (so that a
// pre-token split differently from the library's shows in the ids), every byte in its vocabulary.
function trainByteLevel(files) {
  const t = new tk.Tokenizer(tk.BPE.empty());
  t.setPreTokenizer(tk.byteLevelPreTokenizer(false, true));
  t.train(files);
  const file = path.join(work, 'trained.json');
  t.save(file);
  const j = JSON.parse(fs.readFileSync(file, 'utf8'));
  let next = Object.keys(j.model.vocab).length;
  for (const c of tk.byteLevelAlphabet()) if (!(c in j.model.vocab)) j.model.vocab[c] = next++;
  return j;
}

// GPT-2 style: ByteLevel with its own regex, merges as "a b" strings, <|endoftext|> added.
function gpt2Style(base) {
  const j = structuredClone(base);
  j.model.merges = j.model.merges.map(([a, b]) => `${a} ${b}`);
  j.pre_tokenizer = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  j.added_tokens = [{ id: Object.keys(j.model.vocab).length, content: '<|endoftext|>', single_word: false,
                      lstrip: false, rstrip: false, normalized: true, special: true }];
  return j;
}

// Llama-3 style: Split(the Llama-3 regex, Isolated) then ByteLevel without a regex, merges as
// pairs, ignore_merges, a vocabulary past 65,535 (uint32 shards) with whole-word entries of the
// hostile text's tail that no merge reaches, and special tokens after it.
const WHOLE_WORDS = ['Ġquokka', 'Ġaxolotl', 'Ġwombat'];
function llama3Style(base) {
  const j = structuredClone(base);
  let next = Object.keys(j.model.vocab).length;
  for (const w of WHOLE_WORDS) if (!(w in j.model.vocab)) j.model.vocab[w] = next++;
  while (next < 128000) j.model.vocab[`\u{E000}${next}`] = next++;
  j.model.ignore_merges = true;
  j.pre_tokenizer = { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: LLAMA3_PATTERN }, behavior: 'Isolated', invert: false },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] };
  j.added_tokens = ['<|begin_of_text|>', '<|end_of_text|>', '<|eot_id|>', '<|end|>'].map((content, i) => (
    { id: 128000 + i, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }));
  return j;
}

// Mixed scripts, emoji (with joiners and modifiers), digit runs, every kind of whitespace run,
// contractions in odd cases, added tokens inside words, and ill-formed UTF-8.
function hostileBody() {
  const parts = [
    'Hello world! It\'s, we\'RE, they\'ll, I\'M, she\'D, o\'ſ \u017Fx \'S\'s\'T ',
    'Ελληνικά κείμενα, русский текст, עברית, العربية, हिन्दी, 中文字符，日本語のテキスト、한국어 ',
    '👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🇩🇪🇯🇵 ✊🏿 emoji☃️💩 ',
    '1234567890 3.14159265358979 ١٢٣٤٥ ०१२३ 12,345,678 0x1F 1e10 ',
    '   \t\t  \n\n\n   \r\n  \u00A0\u00A0 \u3000\u3000x\u2003\u2028\u2029\u0085\v\f end  \n ',
    'tabs\tand\u00A0nbsp\u202Fnarrow\u205F\u1680 ',
    '<|endoftext|>mid<|endoftext|><|begin_of_text|>x<|end_of_text|><|end|><|eot_id|>< |end|>',
    'combining: e\u0301 a\u0308 \u0915\u094D\u0937 zero\u200Bwidth\uFEFFbom ',
    '((([[[{{{!!!???...,,,;;;::: --- ___ *** ### @@@ $$$ %%% ^^^ &&& ~~~ ``` \'\'\' """ ',
    'CamelCaseWordsAndALLCAPS mixed123digits456and789 ',
  ];
  const chunks = [];
  for (let i = 0; i < 40; ++i) {
    chunks.push(Buffer.from(parts[i % parts.length] + `${i}`.repeat(i % 7) + ' '.repeat(i % 5), 'utf8'));
    // Ill-formed UTF-8: lone continuation bytes, truncated sequences, overlongs, surrogates,
    // bytes past U+10FFFF, 0xFF.
    chunks.push(Buffer.from([[0x80], [0xC3], [0xE2, 0x82], [0xF0, 0x9F, 0x98], [0xC0, 0xAF],
                             [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xFF, 0xFE], [0xE0, 0x80, 0x41]][i % 9]));
  }
  return Buffer.concat(chunks);
}

function readShards(dir) {
  const ids = [];
  const kinds = new Set();
  for (const name of ['train_000.bin', 'val_000.bin']) {
    const b = fs.readFileSync(path.join(dir, name));
    const magic = b.readInt32LE(0), n = b.readInt32LE(8);
    const width = magic === 20240520 ? 2 : magic === 20240801 ? 4 : 0;
    if (!width) throw new Error(`${name}: magic ${magic}`);
    kinds.add(width);
    for (let i = 0; i < n; ++i) ids.push(width === 2 ? b.readUInt16LE(1024 + 2 * i) : b.readUInt32LE(1024 + 4 * i));
  }
  if (kinds.size !== 1) throw new Error(`${dir}: mixed shard kinds`);
  return { ids, width: [...kinds][0] };
}

function prepare(tokenizerFile, textFile, out, extra = []) {
  const run = spawnSync(worker, ['prepare-data', '--text', textFile, '--tokenizer', tokenizerFile, '--out', out,
                                 ...extra], { encoding: 'utf8' });
  if (run.status !== 0) throw new Error(`prepare-data exited ${run.status}: ${run.stderr}`);
  const stderr = run.stderr;
  const rate = /\(([0-9]+) tokens\/s\)/.exec(stderr);
  return { ...readShards(out), rate: rate ? Number(rate[1]) : NaN };
}

async function libraryIds(t, text) {
  const e = await t.encode(text, null, { addSpecialTokens: false });
  return e.getIds();
}

function firstDifference(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; ++i) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

let failures = 0;
function check(label, ours, theirs) {
  const at = firstDifference(ours, theirs);
  if (at < 0) {
    console.log(`ok   ${label}: ${ours.length} ids equal`);
    return;
  }
  ++failures;
  console.log(`FAIL ${label}: first difference at ${at} of ${ours.length} (ours) / ${theirs.length} (library): ` +
              `ours ${JSON.stringify(ours.slice(Math.max(0, at - 3), at + 5))}, ` +
              `library ${JSON.stringify(theirs.slice(Math.max(0, at - 3), at + 5))}`);
}

const bodyFile = path.join(work, 'hostile-body.txt'), hostileFile = path.join(work, 'hostile.txt');
fs.writeFileSync(bodyFile, hostileBody().toString('utf8'));  // the trainer reads valid UTF-8 only
fs.writeFileSync(hostileFile, Buffer.concat([hostileBody(), Buffer.from(
  ' a quokka, an axolotl and a wombat ' + '9'.repeat(1000) + ' '.repeat(300) + 'tail\n')]));
// What the library is given for a file: its bytes decoded as UTF-8, ill-formed ones replaced.
const texts = { corpus: fs.readFileSync(corpus).toString('utf8'), hostile: fs.readFileSync(hostileFile).toString('utf8') };
const files = { corpus, hostile: hostileFile };
const base = trainByteLevel([corpus, bodyFile]);
const styles = { gpt2: [gpt2Style(base), 2], llama3: [llama3Style(base), 4] };

for (const [style, [json, width]] of Object.entries(styles)) {
  const file = path.join(work, `${style}.json`);
  fs.writeFileSync(file, JSON.stringify(json));
  const lib = tk.Tokenizer.fromFile(file);
  if (json.model.ignore_merges) {
    // The hostile text must reach ignore_merges, or its comparison would not test it.
    const merged = tk.Tokenizer.fromString(JSON.stringify({ ...json, model: { ...json.model, ignore_merges: false } }));
    if (firstDifference(await libraryIds(lib, texts.hostile), await libraryIds(merged, texts.hostile)) < 0) {
      ++failures;
      console.log(`FAIL ${style}: ignore_merges changes nothing on the hostile text`);
    }
  }
  for (const name of Object.keys(texts)) {
    const ours = prepare(file, files[name], path.join(work, `${style}-${name}`));
    if (ours.width !== width) {
      ++failures;
      console.log(`FAIL ${style}/${name}: ${ours.width}-byte tokens, want ${width}`);
    }
    const t0 = process.hrtime.bigint();
    const theirs = await libraryIds(lib, texts[name]);
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    check(`${style}/${name}`, ours.ids, theirs);
    if (name === 'corpus')
      console.log(`     tokens/s on ${path.basename(corpus)}: fp8-worker ${ours.rate}, ` +
                  `tokenizers ${Math.round(theirs.length / secs)} (one encode call, Node binding)`);
  }
  // Documents split at blank lines, the EOS token between them.
  const eos = style === 'gpt2' ? '<|endoftext|>' : '<|end_of_text|>';
  const ours = prepare(file, corpus, path.join(work, `${style}-docs`), ['--doc-separator', '\\n\\n', '--eos', eos]);
  const theirs = [];
  const docs = texts.corpus.split('\n\n');
  for (let i = 0; i < docs.length; ++i) {
    if (i > 0) theirs.push(lib.tokenToId(eos));
    theirs.push(...await libraryIds(lib, docs[i]));
  }
  check(`${style}/corpus documents (${docs.length}, ${eos} between)`, ours.ids, theirs);
}

if (failures) {
  console.log(`${failures} comparison(s) failed`);
  process.exit(1);
}
