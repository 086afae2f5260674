#!/usr/bin/env python3
"""A small *trained* Marian folder (issue 23): tests/fixtures/marian_trained.

    /usr/bin/python3 scripts/make_marian_trained_fixture.py               # trains: ~35 minutes on one thread
    /usr/bin/python3 scripts/make_marian_trained_fixture.py --from-saved  # seconds: no training (see below)

The random fixtures of make_marian_fixtures.py test the arithmetic; this one has outputs that are real French
sentences ending with </s> well before max_length, so that greedy / beam search and the end-of-sentence logic are
tested on the distributions of a real translation model.

Model: the PyTorch reference of modeling_marian.py in make_marian_fixtures.py (MarianMTModel: post-LN, swish,
sinusoidal positions, embed_scale sqrt(d_model), lm_head tied to model.shared, final_logits_bias zero), d_model
128, 2 + 2 layers, 4 heads, ffn 256, a shared vocabulary from two unigram SentencePiece models (source.spm on the
English side, target.spm on the French side, 500 pieces each, Debian's spm_train) joined in vocab.json as
MarianTokenizer reads them (separate_vocabs false).

Training (PyTorch on one thread, seeded; ~4 minutes on a loaded 2-core machine): the first 25,000 pairs of ../shared/data/fra-eng/fra.txt
(the short ones; Tatoeba, CC-BY 2.0 FR), Marian's tokenization (source pieces + </s>; labels: target pieces +
</s>; decoder input: pad (decoder_start_token_id) + labels[:-1]), cross-entropy with label smoothing 0.1, Adam
(0.9, 0.98) with linear warm-up to 1e-3 over 200 steps then inverse square root, batches of ~2,000 tokens
bucketed by length, a fixed number of steps (STEPS), dropout 0.1 on the sublayer outputs (training only;
the saved model is the eval-mode reference). The pad row of the embedding is kept zero (nn.Embedding padding_idx).
A rerun with another torch / BLAS build may give slightly different weights; the expected values are always those
of the saved weights.

The weights are stored as F16 (the fixture stays under 2 MB): the trained fp32 weights are rounded to F16 (round to
nearest even) and every expected value is computed by the reference from the rounded weights. --from-saved skips
the tokenizer training and the model training: it reads the folder's model.safetensors (F32 or F16), vocab.json,
config.json and generation_config.json, rounds the weights to F16 and writes model.safetensors and every expected
file again from them.

Writes the folder files as make_marian_fixtures.write_expected does (expected.safetensors: teacher-forced logits;
expected.json: tokenized sources, greedy and beam runs with scores) plus expected.json["french"]: simple English
sentences, every French translation fra.txt gives for each, and the reference's greedy output (which is one of
them: the script fails otherwise).
"""
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ["OPENBLAS_NUM_THREADS"] = "1"  # OpenBLAS threads under torch's: several times slower (bench/torch_blas.py)

import make_marian_fixtures as mm  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

NAME = "marian_trained"
N_PAIRS = 25000
STEPS = int(os.environ.get("TFM_MARIAN_TRAIN_STEPS", "1000"))
BATCH_TOKENS = 2000
DIMS = {"d_model": 128, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 256, "decoder_ffn_dim": 256, "max_position_embeddings": 64,
        "max_length": 32}
# Simple inputs whose greedy translation must be one of fra.txt's translations of them.
FRENCH = ["Thank you.", "I love you.", "I'm tired.", "Come here.", "Help me.", "I like cats.", "I'm hungry.",
          "Are you sure?", "Are you hurt?", "We lost.", "I've had enough.", "You're safe.", "Please be careful.",
          "You're very good."]
SOURCES = ["I'm tired.", "Are you sure?", "We lost.", "Thank you.", "You're very good.", "I want to know why.",
           "She speaks French and English."]


def spm_encode_all(model, lines):
    out = subprocess.run(["spm_encode", f"--model={model}", "--output_format=piece"], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, check=True).stdout
    rows = out.split("\n")[:len(lines)]
    return [r.split(" ") if r.strip() else [] for r in rows]


def dropout_hooks(model, p):
    """Dropout on the embeddings' sum and each sublayer's output (training only, as MarianMTModel's dropout)."""
    for layers in (model.enc_layers, model.dec_layers):
        for layer in layers:
            for sub in [layer.self_attn, layer.fc2] + ([layer.encoder_attn] if hasattr(layer, "encoder_attn") else []):
                sub.register_forward_hook(lambda m, i, o: F.dropout(o, p, model.training))


def main():
    out = os.path.join(mm.FIX, NAME)
    os.makedirs(out, exist_ok=True)
    config, gen, encode, decode, _, fr_all = mm.build_marian(out, spm_size=500, dims=DIMS, n_pairs=N_PAIRS,
                                                             codes=False)
    import json
    vocab = json.load(open(os.path.join(out, "vocab.json"), encoding="utf-8"))
    en, fr = mm.read_pairs(N_PAIRS)
    unk, pad, eos = vocab["<unk>"], config["pad_token_id"], config["eos_token_id"]
    src = [[vocab.get(p, unk) for p in ps] + [eos] for ps in spm_encode_all(os.path.join(out, "source.spm"), en)]
    tgt = [[vocab.get(p, unk) for p in ps] + [eos] for ps in spm_encode_all(os.path.join(out, "target.spm"), fr)]
    keep = [i for i in range(len(src)) if len(src[i]) <= 24 and len(tgt[i]) <= 24]
    print(f"{len(keep)} pairs, vocab {len(vocab)}", flush=True)

    torch.manual_seed(1)
    random.seed(1)
    torch.set_num_threads(1)
    model = mm.Seq2Seq(config)
    d = config["d_model"]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name == "shared.weight":
                p.normal_(0, d ** -0.5)
                p[pad].zero_()
            elif p.dim() == 2:
                torch.nn.init.xavier_uniform_(p)
            elif "norm" not in name:
                p.zero_()
    dropout_hooks(model, 0.1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / 200, (200 / (s + 1)) ** 0.5))

    def batches():
        order = sorted(keep, key=lambda i: (len(tgt[i]), random.random()))
        out_b, cur, longest = [], [], 0
        for i in order:
            longest2 = max(longest, len(tgt[i]), len(src[i]))
            if cur and longest2 * (len(cur) + 1) > BATCH_TOKENS:
                out_b.append(cur)
                cur, longest2 = [], max(len(tgt[i]), len(src[i]))
            cur.append(i)
            longest = longest2
        if cur:
            out_b.append(cur)
        random.shuffle(out_b)
        return out_b

    step, t0, queue = 0, time.time(), []
    model.train()
    while step < STEPS:
        if not queue:
            queue = batches()
        b = queue.pop()
        Ls, Lt = max(len(src[i]) for i in b), max(len(tgt[i]) for i in b)
        s = torch.full((len(b), Ls), pad, dtype=torch.long)
        m = torch.zeros(len(b), Ls, dtype=torch.long)
        dec = torch.full((len(b), Lt), pad, dtype=torch.long)
        lab = torch.full((len(b), Lt), -100, dtype=torch.long)
        for k, i in enumerate(b):
            s[k, :len(src[i])] = torch.tensor(src[i])
            m[k, :len(src[i])] = 1
            dec[k, :len(tgt[i])] = torch.tensor([pad] + tgt[i][:-1])
            lab[k, :len(tgt[i])] = torch.tensor(tgt[i])
        logits = model.decode(dec, model.encode(s, m), m)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), lab.view(-1), ignore_index=-100,
                               label_smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        model.shared.weight.grad[pad].zero_()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
        if step % 100 == 0 or step == 10:
            print(f"step {step} loss {loss.item():.3f} {time.time() - t0:.0f}s", flush=True)
    model.eval()
    with torch.no_grad():
        model.shared.weight[pad].zero_()
    write_expected(out, model, config, gen, encode, decode, fr_all)


def from_saved():
    """Re-derives the folder's weights (rounded to F16) and expected files from its saved model, without training."""
    import json
    out = os.path.join(mm.FIX, NAME)
    load = lambda f: json.load(open(os.path.join(out, f), encoding="utf-8"))  # noqa: E731
    config, gen, vocab = load("config.json"), load("generation_config.json"), load("vocab.json")
    encode, decode = mm.marian_codec(out, vocab)
    _, fr_all = mm.read_pairs(N_PAIRS)
    model = mm.Seq2Seq(config)
    model.load_state_dict_hf(mm.st.load(os.path.join(out, "model.safetensors")))
    model.eval()
    write_expected(out, model, config, gen, encode, decode, fr_all)


def write_expected(out, model, config, gen, encode, decode, fr_all):
    """Rounds the model's weights to F16, then writes the folder's model.safetensors (F16) and expected files."""
    import numpy as np
    with torch.no_grad():
        for p in list(model.parameters()) + [model.final_logits_bias]:
            p.copy_(p.half().float())
    meta = mm.write_expected(out, NAME, model, config, gen, encode, decode, SOURCES, fr_all, None,
                             weight_dtype=np.float16)
    refs = {}
    with open(mm.DATA, encoding="utf-8") as f:
        for line in f:
            a, b = line.rstrip("\n").split("\t")[:2]
            refs.setdefault(a, []).append(b)
    french = []
    for text in FRENCH:
        ids = mm.greedy(model, torch.tensor([encode(text)]), dict(gen, num_beams=1))
        got = decode(ids)
        print(f"{text!r} -> {got!r} {'OK' if got in refs[text] else 'not in fra.txt'}")
        if got in refs[text]:
            french.append({"source": text, "translations": refs[text], "greedy": got})
    assert len(french) >= 6, "the trained model translates too few simple sentences as fra.txt does"
    meta["french"] = french
    mm.save_expected(out, NAME, meta)
    for c in meta["cases"]:
        print(c["source"], "->", [r["text"] for r in c["runs"][:2]])


if __name__ == "__main__":
    from_saved() if "--from-saved" in sys.argv[1:] else main()
