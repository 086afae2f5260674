#!/usr/bin/python3
"""The PyTorch side of bench/translate_peers.sh: an OPUS-MT-size Marian folder with random weights, and a PyTorch
reference generate over it.

    marian_pytorch.py make-folder DIR SPM_TEXT   # config.json, model.safetensors, source.spm / target.spm, vocab.json
    marian_pytorch.py generate DIR INPUT OUTPUT [--beam 4] [--batch 32] [--max-new-tokens 64]

make-folder: transformers' MarianConfig of the OPUS-MT models (d_model 512, 6 + 6 layers, 8 heads, FFN 2048, swish,
post-LN, scale_embedding, tied embeddings; vocabulary 59,514 as Helsinki-NLP/opus-mt-en-fr, pad last),
weights drawn N(0, 0.02) (seed 0), HF tensor names (model.shared.weight, model.encoder.layers.N.self_attn.q_proj...,
final_logits_bias; positions not stored). One joint SentencePiece unigram model (Debian's spm_train, up to 8,000
pieces on SPM_TEXT) is saved as source.spm and target.spm; vocab.json maps its pieces, then filler tokens up to the vocabulary
size, "<pad>" last.

generate: the sentences of INPUT in batches of --batch (sorted by length), torch.inference_mode, torch threads from
OMP_NUM_THREADS, a batched beam search with a key/value cache as transformers' generate runs it for Marian (decoder
start = pad, log_softmax scores, length_penalty 1: sum / length, early_stopping False heuristic, at most
--max-new-tokens tokens; random weights rarely emit </s>, so most hypotheses run to the limit). The source pieces
come from `spm_encode` (the same tool the folder was trained with); the output is ids, one line per sentence. Prints
one JSON line: {"sentences", "target_tokens", "seconds", "tokens_per_s", "peak_rss_mb", "blas"}.
"""
import json
import math
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_blas  # noqa: E402

torch_blas.prepare()
import torch  # noqa: E402

VOCAB, D, LAYERS, HEADS, FFN = 59514, 512, 6, 8, 2048


def config():
    return dict(model_type="marian", architectures=["MarianMTModel"], vocab_size=VOCAB, d_model=D,
                encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=HEADS,
                decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN,
                activation_function="swish", max_position_embeddings=512, scale_embedding=True,
                normalize_before=False, static_position_embeddings=True, share_encoder_decoder_embeddings=True,
                tie_word_embeddings=True, pad_token_id=VOCAB - 1, eos_token_id=0, decoder_start_token_id=VOCAB - 1,
                bos_token_id=0, forced_eos_token_id=0, num_beams=4, max_length=512, dropout=0.1)


def make_folder(out, text):
    import numpy as np
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    t = {}

    def lin(name, o, i):
        t[name + ".weight"] = torch.randn(o, i, generator=g) * 0.02
        t[name + ".bias"] = torch.zeros(o)

    def ln(name):
        t[name + ".weight"] = torch.ones(D)
        t[name + ".bias"] = torch.zeros(D)

    t["model.shared.weight"] = torch.randn(VOCAB, D, generator=g) * 0.02
    t["model.shared.weight"][VOCAB - 1] = 0
    for side in ("encoder", "decoder"):
        for n in range(LAYERS):
            p = f"model.{side}.layers.{n}."
            attns = ["self_attn"] + (["encoder_attn"] if side == "decoder" else [])
            for a in attns:
                for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    lin(p + a + "." + proj, D, D)
                ln(p + a + "_layer_norm")
            lin(p + "fc1", FFN, D)
            lin(p + "fc2", D, FFN)
            ln(p + "final_layer_norm")
    t["final_logits_bias"] = torch.zeros(1, VOCAB)
    write_safetensors(os.path.join(out, "model.safetensors"), {k: v.numpy().astype(np.float32) for k, v in t.items()})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config(), f, indent=1)
    prefix = os.path.join(out, "spm")
    subprocess.run(["spm_train", f"--input={text}", f"--model_prefix={prefix}", "--vocab_size=8000",
                    "--model_type=unigram", "--character_coverage=1.0", "--input_sentence_size=200000",
                    "--shuffle_input_sentence=true", "--bos_id=-1", "--eos_id=-1", "--unk_id=0",
                    "--hard_vocab_limit=false", "--minloglevel=2"], check=True)  # fra-eng English: ~7,200
    pieces = [line.split("\t")[0] for line in open(prefix + ".vocab", encoding="utf-8")]
    vocab = {"</s>": 0, "<unk>": 1}
    for p in pieces:
        if p not in vocab and p != "<unk>":
            vocab[p] = len(vocab)
    while len(vocab) < VOCAB - 1:
        vocab[f"<fill_{len(vocab)}>"] = len(vocab)
    vocab["<pad>"] = VOCAB - 1
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    for name in ("source.spm", "target.spm"):
        with open(prefix + ".model", "rb") as src, open(os.path.join(out, name), "wb") as dst:
            dst.write(src.read())
    os.remove(prefix + ".model")
    os.remove(prefix + ".vocab")
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(dict(source_lang="en", target_lang="fr", model_max_length=512, separate_vocabs=False), f)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(dict(bos_token_id=0, decoder_start_token_id=VOCAB - 1, eos_token_id=0, forced_eos_token_id=0,
                       max_length=512, num_beams=4, pad_token_id=VOCAB - 1), f)


def write_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for k in sorted(tensors):
        a = tensors[k]
        b = a.tobytes()
        header[k] = dict(dtype="F32", shape=list(a.shape), data_offsets=[off, off + len(b)])
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def load_safetensors(path):
    import numpy as np
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    return {k: torch.from_numpy(np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]],
                                              dtype=np.float32).reshape(v["shape"]).copy())
            for k, v in header.items() if k != "__metadata__"}


def sinusoidal(n, dim):
    """MarianSinusoidalPositionalEmbedding: sin in the first half, cos in the second."""
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    j = torch.arange(dim // 2, dtype=torch.float64)[None, :]
    angle = pos / torch.pow(10000.0, 2 * j / dim)
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1).float()


class Marian:
    def __init__(self, w):
        self.w = w
        self.pos = sinusoidal(512, D)
        self.scale = math.sqrt(D)

    def lin(self, x, name):
        return torch.nn.functional.linear(x, self.w[name + ".weight"], self.w[name + ".bias"])

    def ln(self, x, name):
        return torch.nn.functional.layer_norm(x, (D,), self.w[name + ".weight"], self.w[name + ".bias"], 1e-5)

    def heads(self, x):
        B, L, _ = x.shape
        return x.view(B, L, HEADS, D // HEADS).transpose(1, 2)

    def attend(self, q, k, v, mask, name):
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D // HEADS)
        if mask is not None:
            s = s + mask
        o = torch.matmul(torch.softmax(s, dim=-1), v)
        B, H, L, hd = o.shape
        return self.lin(o.transpose(1, 2).reshape(B, L, D), name + ".out_proj")

    def encode(self, ids, mask):
        x = self.w["model.shared.weight"][ids] * self.scale + self.pos[:ids.shape[1]]
        bias = (1.0 - mask[:, None, None, :].float()) * -1e9
        for n in range(LAYERS):
            p = f"model.encoder.layers.{n}."
            a = self.attend(self.heads(self.lin(x, p + "self_attn.q_proj")), self.heads(self.lin(x, p + "self_attn.k_proj")),
                            self.heads(self.lin(x, p + "self_attn.v_proj")), bias, p + "self_attn")
            x = self.ln(x + a, p + "self_attn_layer_norm")
            f = self.lin(torch.nn.functional.silu(self.lin(x, p + "fc1")), p + "fc2")
            x = self.ln(x + f, p + "final_layer_norm")
        return x

    def cross_kv(self, enc):
        return [(self.heads(self.lin(enc, f"model.decoder.layers.{n}.encoder_attn.k_proj")),
                 self.heads(self.lin(enc, f"model.decoder.layers.{n}.encoder_attn.v_proj"))) for n in range(LAYERS)]

    def step(self, tok, t, cache, cross, bias):
        """tok [R]: one decoder step; cache: per layer (k, v) [R, H, t, hd] or None; returns log-probs [R, V]."""
        x = self.w["model.shared.weight"][tok][:, None, :] * self.scale + self.pos[t]
        new = []
        for n in range(LAYERS):
            p = f"model.decoder.layers.{n}."
            k, v = self.heads(self.lin(x, p + "self_attn.k_proj")), self.heads(self.lin(x, p + "self_attn.v_proj"))
            if cache[n] is not None:
                k, v = torch.cat([cache[n][0], k], 2), torch.cat([cache[n][1], v], 2)
            new.append((k, v))
            a = self.attend(self.heads(self.lin(x, p + "self_attn.q_proj")), k, v, None, p + "self_attn")
            x = self.ln(x + a, p + "self_attn_layer_norm")
            ck, cv = cross[n]
            a = self.attend(self.heads(self.lin(x, p + "encoder_attn.q_proj")), ck, cv, bias, p + "encoder_attn")
            x = self.ln(x + a, p + "encoder_attn_layer_norm")
            f = self.lin(torch.nn.functional.silu(self.lin(x, p + "fc1")), p + "fc2")
            x = self.ln(x + f, p + "final_layer_norm")
        logits = torch.nn.functional.linear(x[:, 0], self.w["model.shared.weight"]) + self.w["final_logits_bias"][0]
        return torch.log_softmax(logits, dim=-1), new


def beam_generate(m, ids, mask, K, max_new):
    """transformers' beam search (length_penalty 1, early_stopping False) for a batch; returns the best ids."""
    B = ids.shape[0]
    pad, eos = VOCAB - 1, 0
    enc = m.encode(ids, mask)
    rep = lambda x: x.repeat_interleave(K, dim=0)
    cross = [(rep(k), rep(v)) for k, v in m.cross_kv(enc)]
    bias = rep((1.0 - mask[:, None, None, :].float()) * -1e9)
    scores = torch.zeros(B, K)
    scores[:, 1:] = -1e9
    scores = scores.view(-1)
    seqs = torch.full((B * K, 1), pad, dtype=torch.long)
    cache = [None] * LAYERS
    done = [[] for _ in range(B)]
    finished = [False] * B
    for t in range(max_new):
        lp, cache = m.step(seqs[:, -1], t, cache, cross, bias)
        V = lp.shape[1]
        cand = (lp + scores[:, None]).view(B, K * V)
        top, idx = torch.topk(cand, 2 * K, dim=1)
        beam, tok = idx // V, idx % V
        next_scores, next_rows, next_tok = [], [], []
        for b in range(B):
            kept = 0
            for j in range(2 * K):
                row = b * K + int(beam[b, j])
                if int(tok[b, j]) == eos:
                    if j < K and not finished[b]:
                        done[b].append((float(top[b, j]) / (t + 1), seqs[row, 1:].tolist()))
                    continue
                next_scores.append(float(top[b, j]))
                next_rows.append(row)
                next_tok.append(int(tok[b, j]))
                kept += 1
                if kept == K:
                    break
            if len(done[b]) >= K:
                best_possible = float(top[b, 0]) / (t + 1)
                done[b].sort(key=lambda d: -d[0])
                done[b] = done[b][:K]
                finished[b] = finished[b] or done[b][-1][0] >= best_possible
        rows = torch.tensor(next_rows)
        seqs = torch.cat([seqs[rows], torch.tensor(next_tok)[:, None]], 1)
        scores = torch.tensor(next_scores)
        cache = [(k[rows], v[rows]) for k, v in cache]
        if all(finished):
            break
    out = []
    for b in range(B):
        if not finished[b]:
            for k in range(K):
                r = b * K + k
                done[b].append((float(scores[r]) / seqs.shape[1], seqs[r, 1:].tolist()))
        out.append(max(done[b], key=lambda d: d[0])[1])
    return out


def generate(folder, inp, outp, K, batch, max_new):
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    blas = torch_blas.check()
    vocab = json.load(open(os.path.join(folder, "vocab.json"), encoding="utf-8"))
    lines = [line.rstrip("\n") for line in open(inp, encoding="utf-8")]
    t0 = time.perf_counter()
    pieces = subprocess.run(["spm_encode", "--model", os.path.join(folder, "source.spm")], input="\n".join(lines) + "\n",
                            capture_output=True, text=True, check=True).stdout.split("\n")[:len(lines)]
    src = [[vocab.get(p, 1) for p in s.split(" ") if p][:511] + [0] for s in pieces]
    m = Marian(load_safetensors(os.path.join(folder, "model.safetensors")))
    order = sorted(range(len(src)), key=lambda i: len(src[i]))
    res, tokens = [None] * len(src), 0
    with torch.inference_mode():
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            L = max(len(src[i]) for i in idx)
            ids = torch.full((len(idx), L), VOCAB - 1, dtype=torch.long)
            mask = torch.zeros(len(idx), L, dtype=torch.long)
            for r, i in enumerate(idx):
                ids[r, :len(src[i])] = torch.tensor(src[i])
                mask[r, :len(src[i])] = 1
            for i, o in zip(idx, beam_generate(m, ids, mask, K, max_new)):
                res[i] = o
                tokens += len(o)
    sec = time.perf_counter() - t0
    with open(outp, "w") as f:
        for o in res:
            f.write(" ".join(map(str, o)) + "\n")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(dict(sentences=len(src), target_tokens=tokens, seconds=round(sec, 3),
                          tokens_per_s=round(tokens / sec, 1), peak_rss_mb=round(rss, 1), blas=blas)))


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "make-folder":
        return make_folder(sys.argv[2], sys.argv[3])
    if len(sys.argv) >= 5 and sys.argv[1] == "generate":
        args = sys.argv[5:]
        opt = {"--beam": 4, "--batch": 32, "--max-new-tokens": 64}
        for k, v in zip(args[::2], args[1::2]):
            opt[k] = int(v)
        return generate(sys.argv[2], sys.argv[3], sys.argv[4], opt["--beam"], opt["--batch"], opt["--max-new-tokens"])
    sys.exit(__doc__)


if __name__ == "__main__":
    main()
