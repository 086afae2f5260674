// ONNX Runtime (npm onnxruntime-node) side of bench/encoder_peers.sh: fp32 forward latency of MODEL.onnx.
//   node bench/ort_bench.js MODEL.onnx THREADS WARMUP REPS SHAPES(1x128,8x128,...) VOCAB
// One JSON line per shape, as bench_encoder prints.
//   node bench/ort_bench.js MODEL.onnx THREADS WARMUP REPS --batches FILE BATCH_SIZE
// The length mix of bench/length_mix.sh instead (MODEL exported with attention_mask: peers_pytorch.py export
// --with-mask): FILE holds one sentence per line as token ids, cut into batches of BATCH_SIZE in file order, each
// padded to its longest sentence with its attention_mask; one timed rep runs every batch; one JSON line
// {"kind":"length_mix","impl":"onnxruntime","mode":"padded",...}. Needs NODE_PATH pointing at a node_modules that holds
// onnxruntime-node (encoder_peers.sh installs it into a temporary folder).
const ort = require('onnxruntime-node');
const fs = require('fs');

function peakRssMb() {
  const m = fs.readFileSync('/proc/self/status', 'utf8').match(/VmHWM:\s+(\d+)/);
  return m ? Number(m[1]) / 1024 : -1;
}

(async () => {
  const [model, threads, warmup, reps, shapes, vocab] = process.argv.slice(2);
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: Number(threads), interOpNumThreads: 1, graphOptimizationLevel: 'all',
    executionMode: 'sequential'});
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  console.log(JSON.stringify({kind: 'model', impl: 'onnxruntime', mode: 'fp32', threads: Number(threads),
                              load_ms: loadMs, version: require('onnxruntime-node/package.json').version}));
  if (shapes === '--batches') {
    const [file, bsArg] = [vocab, process.argv[8]];
    const bs = Number(bsArg || 32);
    const sents = fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.trim())
                      .map((l) => l.trim().split(/\s+/).map(Number));
    const batches = [];
    let real = 0, padded = 0;
    for (let s0 = 0; s0 < sents.length; s0 += bs) {
      const part = sents.slice(s0, s0 + bs);
      const L = Math.max(...part.map((x) => x.length));
      const ids = new BigInt64Array(part.length * L), mask = new BigInt64Array(part.length * L);
      part.forEach((x, i) => x.forEach((id, j) => { ids[i * L + j] = BigInt(id); mask[i * L + j] = 1n; ++real; }));
      padded += part.length * L;
      batches.push({input_ids: new ort.Tensor('int64', ids, [part.length, L]),
                    attention_mask: new ort.Tensor('int64', mask, [part.length, L])});
    }
    const pass = async () => { for (const b of batches) await session.run(b); };
    for (let i = 0; i < Number(warmup); ++i) await pass();
    const ts = [];
    for (let i = 0; i < Number(reps); ++i) {
      const t = process.hrtime.bigint();
      await pass();
      ts.push(Number(process.hrtime.bigint() - t) / 1e6);
    }
    ts.sort((a, b) => a - b);
    const med = ts.length % 2 ? ts[(ts.length - 1) / 2] : (ts[ts.length / 2 - 1] + ts[ts.length / 2]) / 2;
    console.log(JSON.stringify({kind: 'length_mix', impl: 'onnxruntime', dtype: 'fp32', mode: 'padded', batch_size: bs,
                                batches: batches.length, sentences: sents.length, real_tokens: real,
                                padded_tokens: padded, reps: Number(reps), median_ms: med, min_ms: ts[0],
                                peak_rss_mb: peakRssMb()}));
    return;
  }
  let seed = 12345;
  const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  for (const s of shapes.split(',')) {
    const [B, L] = s.split('x').map(Number);
    const ids = new BigInt64Array(B * L);
    for (let i = 0; i < ids.length; ++i) ids[i] = BigInt(Math.floor(rand() * Number(vocab)));
    const feeds = {input_ids: new ort.Tensor('int64', ids, [B, L])};
    for (let i = 0; i < Number(warmup); ++i) await session.run(feeds);
    const ts = [];
    for (let i = 0; i < Number(reps); ++i) {
      const t = process.hrtime.bigint();
      await session.run(feeds);
      ts.push(Number(process.hrtime.bigint() - t) / 1e6);
    }
    ts.sort((a, b) => a - b);
    const med = ts.length % 2 ? ts[(ts.length - 1) / 2] : (ts[ts.length / 2 - 1] + ts[ts.length / 2]) / 2;
    console.log(JSON.stringify({kind: 'encoder', impl: 'onnxruntime', mode: 'fp32', B, L, reps: Number(reps),
                                median_ms: med, min_ms: ts[0], peak_rss_mb: peakRssMb()}));
  }
})().catch((e) => { console.error('ort_bench: ' + e.message); process.exit(1); });
