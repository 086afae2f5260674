#!/usr/bin/env python3
"""Golden fixtures for sentence embeddings and task heads (issue 10): tests/fixtures/st_* and tests/fixtures/heads_*.

    /usr/bin/python3 scripts/make_embed_fixtures.py                  # the committed fixtures
    /usr/bin/python3 scripts/make_embed_fixtures.py --bench DIR      # + a MiniLM-sized ST folder (full vocab) for
                                                                     #   BENCHMARKS.md, and a PyTorch throughput run

No transformers / sentence-transformers package exists here, so this script implements what they do, from their
published source semantics:
  * sentence_transformers.models.Pooling.forward (v3.x): modes concatenated in the order cls, max, mean,
    mean_sqrt_len, weightedmean, lasttoken; max sets padding to -1e9; mean divides by clamp(sum(mask), 1e-9);
    weightedmean weights position i (0-based) by i + 1; lasttoken takes the last position whose mask is 1;
    include_prompt=False zeroes the mask of the first prompt_length tokens (prompt_length = tokens of the prompt
    alone with special tokens, minus the final [SEP]).
  * models.Dense: activation(linear(x)); models.Normalize: F.normalize(x, p=2, dim=1).
  * models.Transformer: do_lower_case lowercases the text; max_seq_length truncates (special tokens included).
  * transformers BertForSequenceClassification (pooler -> classifier), BertForTokenClassification (classifier on
    every token, no pooler), BertForMaskedLM (transform dense -> hidden_act -> LayerNorm -> decoder tied to the
    word embeddings + cls.predictions.bias, no pooler), cross-encoder = sequence classification on pairs.
The BERT body is BertModelRef from ../shared/reference/torch. Tokenization: BERT basic tokenizer + WordPiece on
the bert-base-uncased vocab.txt (ASCII test sentences), then a reduced vocab.txt with only the tokens those
sentences use, in bert-base order; greedy longest-match over a subset that contains every piece the full vocab
chose picks the same pieces, so the token strings stay those of bert-base-uncased.
"""
import argparse
import json
import math
import os
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REF = os.path.normpath(os.path.join(ROOT, "..", "shared", "reference", "torch"))
DATA = os.environ.get("TFM_DATA_DIR", os.path.normpath(os.path.join(ROOT, "..", "shared", "data")))
sys.path.insert(0, REF)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import reference_modules as rm  # noqa: E402
import st  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


# ------------------------------------------------------------------------------------------------ tokenizer

def load_vocab(path):
    with open(path, encoding="utf-8") as f:
        return [ln.rstrip("\n") for ln in f]


def is_punct(ch):
    cp = ord(ch)
    return (33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126)


def basic_words(text, lower=True):
    """[(word, start, end)] over ASCII text: whitespace split, every punctuation char its own word; offsets are
    character offsets into `text` (what Hugging Face's offset_mapping gives)."""
    assert all(ord(c) < 128 for c in text), text
    words, i = [], 0
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
        elif is_punct(c):
            words.append((c, i, i + 1))
            i += 1
        else:
            j = i
            while j < len(text) and not text[j].isspace() and not is_punct(text[j]):
                j += 1
            words.append((text[i:j], i, j))
            i = j
    return [((w.lower() if lower else w), s, e) for w, s, e in words]


def wordpiece(word, vocab_set):
    """Greedy longest-match-first; [UNK] for the whole word when a piece is missing. [(piece, start, end)] with
    offsets relative to the word."""
    out, start = [], 0
    while start < len(word):
        end, cur = len(word), None
        while start < end:
            sub = word[start:end]
            if start > 0:
                sub = "##" + sub
            if sub in vocab_set:
                cur = sub
                break
            end -= 1
        if cur is None:
            return [("[UNK]", 0, len(word))]
        out.append((cur, start, end))
        start = end
    return out


class Tok:
    """bert-base-uncased tokenization over a vocab (list of strings, id = index)."""

    def __init__(self, vocab):
        self.vocab = vocab
        self.ids = {t: i for i, t in enumerate(vocab)}
        self.set = set(vocab)

    def pieces(self, text):
        """[(token, start, end)] of one text, no special tokens; "[MASK]" is matched as an added token."""
        out = []
        parts = text.split("[MASK]")
        base = 0
        for k, part in enumerate(parts):
            for w, s, e in basic_words(part):
                for p, ps, pe in wordpiece(w, self.set):
                    out.append((p, base + s + ps, base + s + pe))
            base += len(part)
            if k + 1 < len(parts):
                out.append(("[MASK]", base, base + 6))
                base += 6
        return out

    def encode(self, text, pair=None, max_length=0):
        a = self.pieces(text)
        b = self.pieces(pair) if pair is not None else None
        if max_length:
            budget = max_length - (3 if b is not None else 2)
            if b is None:
                a = a[:budget]
            else:  # drop from the longer one (approximates HF longest_first; no fixture pair is truncated)
                while len(a) + len(b) > budget:
                    if len(a) > len(b):
                        a = a[:-1]
                    else:
                        b = b[:-1]
        toks = [("[CLS]", 0, 0)] + a + [("[SEP]", 0, 0)]
        tt = [0] * len(toks)
        if b is not None:
            toks += b + [("[SEP]", 0, 0)]
            tt += [1] * (len(b) + 1)
        return [self.ids[t] for t, _, _ in toks], tt, toks

    def batch(self, texts, pairs=None, max_length=0):
        enc = [self.encode(t, pairs[i] if pairs else None, max_length) for i, t in enumerate(texts)]
        L = max(len(e[0]) for e in enc)
        ids = torch.zeros(len(enc), L, dtype=torch.long)
        tt = torch.zeros(len(enc), L, dtype=torch.long)
        mask = torch.zeros(len(enc), L, dtype=torch.long)
        for i, (a, t, _) in enumerate(enc):
            ids[i, :len(a)] = torch.tensor(a)
            tt[i, :len(a)] = torch.tensor(t)
            mask[i, :len(a)] = 1
        return ids, tt, mask, [e[2] for e in enc]


def reduced_vocab(full, texts):
    """Specials + every piece the full vocab gives `texts`, in bert-base-uncased order."""
    tok = Tok(full)
    used = set(SPECIALS)
    for t in texts:
        used.update(p for p, _, _ in tok.pieces(t))
        used.update(p for p, _, _ in tok.pieces(t.lower()))
    # a few extra whole words so fill-mask has real candidates
    used.update(["dog", "cat", "car", "house", "paris", "london", "red", "blue", "good", "bad"])
    return [t for t in full if t in used]


# ------------------------------------------------------------------------------------------------ helpers

SUMMARY = []


def npy(t):
    a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    if a.dtype.kind == "f":
        return np.ascontiguousarray(a.astype(np.float32))
    return np.ascontiguousarray(a.astype(np.int64))


def save(tensors, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    st.save({k: npy(v) for k, v in tensors.items()}, path)
    SUMMARY.append((os.path.relpath(path, ROOT), os.path.getsize(path)))


def save_json(obj, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def save_lines(lines, path):
    with open(path, "w", encoding="utf-8") as f:
        for ln in lines:
            f.write(ln + "\n")


def bert_config(V, **extra):
    c = {"architectures": ["BertModel"], "hidden_act": "gelu", "hidden_size": 32, "intermediate_size": 64,
         "layer_norm_eps": 1e-12, "max_position_embeddings": 64, "model_type": "bert", "num_attention_heads": 4,
         "num_hidden_layers": 2, "pad_token_id": 0, "position_embedding_type": "absolute", "type_vocab_size": 2,
         "vocab_size": V}
    c.update(extra)
    return c


def make_bert(cfg, seed):
    torch.manual_seed(seed)
    net = rm.BertModelRef(types.SimpleNamespace(**cfg))
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
    return net.eval()


def write_tokenizer(folder, vocab, lower=True):
    os.makedirs(folder, exist_ok=True)
    save_lines(vocab, os.path.join(folder, "vocab.txt"))
    save_json({"do_lower_case": lower, "model_max_length": 64, "tokenizer_class": "BertTokenizer"},
              os.path.join(folder, "tokenizer_config.json"))


def body_sd(net, prefix="", pooler=True):
    return {prefix + k: v for k, v in net.state_dict().items() if pooler or not k.startswith("pooler.")}


# ------------------------------------------------------------------------------------------------ pooling (ST)

def st_pooling(tok_emb, mask, modes):
    tok_emb = tok_emb.clone()
    m = mask.unsqueeze(-1).to(tok_emb.dtype).expand(tok_emb.size())
    out = []
    if "cls" in modes:
        out.append(tok_emb[:, 0])
    if "max" in modes:
        t = tok_emb.clone()
        t[m == 0] = -1e9
        out.append(torch.max(t, 1)[0])
    if "mean" in modes or "mean_sqrt_len" in modes:
        s = torch.sum(tok_emb * m, 1)
        n = torch.clamp(m.sum(1), min=1e-9)
        if "mean" in modes:
            out.append(s / n)
        if "mean_sqrt_len" in modes:
            out.append(s / torch.sqrt(n))
    if "weightedmean" in modes:
        w = torch.arange(1, tok_emb.shape[1] + 1).unsqueeze(0).unsqueeze(-1).expand(tok_emb.size()).to(tok_emb.dtype)
        mw = m * w
        out.append(torch.sum(tok_emb * mw, 1) / torch.clamp(mw.sum(1), min=1e-9))
    if "lasttoken" in modes:
        seq_len = mask.shape[1]
        values, indices = mask.flip(1).max(1)
        indices = torch.where(values == 0, seq_len - 1, indices)
        gi = seq_len - indices - 1
        gi = gi.unsqueeze(-1).repeat(1, tok_emb.shape[2]).unsqueeze(1)
        out.append(torch.gather(tok_emb * m, 1, gi).squeeze(1))
    return torch.cat(out, 1)


POOL_KEYS = [("cls", "pooling_mode_cls_token"), ("max", "pooling_mode_max_tokens"),
             ("mean", "pooling_mode_mean_tokens"), ("mean_sqrt_len", "pooling_mode_mean_sqrt_len_tokens"),
             ("weightedmean", "pooling_mode_weightedmean_tokens"), ("lasttoken", "pooling_mode_lasttoken")]


def pooling_config(H, modes, include_prompt=True):
    c = {"word_embedding_dimension": H}
    for mode, key in POOL_KEYS:
        c[key] = mode in modes
    c["include_prompt"] = include_prompt
    return c


SENTENCES = [
    "The cat sat on the mat.",
    "A dog is running in the park!",
    "Paris is the capital of France, and London is the capital of England.",
    "hello",
    "Two men are playing football on a sunny afternoon while their friends watch from the benches.",
    "What time is it?",
    "I have a dream.",
    "Unbelievably, the xylophonist kept playing.",
]
PROMPTS = {"query": "query: ", "passage": "passage: "}


def st_forward(tok, net, texts, modes, dense=None, dense_act=None, normalize=False, max_len=0, lower=False,
               prompt=None, include_prompt=True):
    if lower:
        texts = [t.lower() for t in texts]
    if prompt:
        texts = [prompt + t for t in texts]
    ids, tt, mask, _ = tok.batch(texts, max_length=max_len)
    with torch.no_grad():
        h, _ = net(ids, tt, mask)
        pmask = mask.clone()
        if prompt and not include_prompt:
            plen = len(tok.encode(prompt)[0]) - 1
            pmask[:, :plen] = 0
        x = st_pooling(h, pmask, modes)
        pooled = x
        if dense is not None:
            x = dense_act(dense(x))
        if normalize:
            x = F.normalize(x, p=2, dim=1)
    return ids, tt, mask, h, pooled, x


def make_st(full):
    """st_mean: Transformer + Pooling(mean) + Normalize, prompts. st_multi: every pooling mode concatenated +
    Dense(tanh) + Normalize, do_lower_case, max_seq_length 16, include_prompt false."""
    vocab = reduced_vocab(full, SENTENCES + list(PROMPTS.values()) + QUERIES + PASSAGES + MLM_TEXTS + NER_TEXTS)
    tok = Tok(vocab)
    V = len(vocab)

    # --- st_mean
    d = os.path.join(FIX, "st_mean")
    cfg = bert_config(V)
    net = make_bert(cfg, 3000)
    save_json(cfg, os.path.join(d, "config.json"))
    save(body_sd(net), os.path.join(d, "model.safetensors"))
    write_tokenizer(d, vocab)
    save_json([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
              os.path.join(d, "modules.json"))
    save_json(pooling_config(32, {"mean"}), os.path.join(d, "1_Pooling", "config.json"))
    os.makedirs(os.path.join(d, "2_Normalize"), exist_ok=True)
    save_lines([], os.path.join(d, "2_Normalize", ".keep"))
    save_json({"max_seq_length": 64, "do_lower_case": False}, os.path.join(d, "sentence_bert_config.json"))
    save_json({"prompts": PROMPTS, "default_prompt_name": None, "similarity_fn_name": "cosine"},
              os.path.join(d, "config_sentence_transformers.json"))
    ids, tt, mask, h, pooled, emb = st_forward(tok, net, SENTENCES, {"mean"}, normalize=True)
    out = dict(input_ids=ids, token_type_ids=tt, attention_mask=mask, last_hidden_state=h, pooled=pooled,
               embeddings=emb)
    # each pooling mode alone on the same hidden states (the C++ Pooling is tested mode by mode)
    for mode, _ in POOL_KEYS:
        out["pool_" + mode] = st_pooling(h, mask, {mode})
    out["pool_all"] = st_pooling(h, mask, {m for m, _ in POOL_KEYS})
    _, _, _, _, _, emb_q = st_forward(tok, net, SENTENCES, {"mean"}, normalize=True, prompt=PROMPTS["query"])
    out["embeddings_query"] = emb_q
    # every sentence alone (no padding): the same vectors within float error
    alone = torch.cat([st_forward(tok, net, [s], {"mean"}, normalize=True)[5] for s in SENTENCES])
    assert (alone - emb).abs().max() < 1e-5
    save(out, os.path.join(d, "expected.safetensors"))
    save_lines(SENTENCES, os.path.join(d, "sentences.txt"))

    # --- st_multi
    d = os.path.join(FIX, "st_multi")
    net2 = make_bert(cfg, 3100)
    save_json(cfg, os.path.join(d, "config.json"))
    save(body_sd(net2), os.path.join(d, "model.safetensors"))
    write_tokenizer(d, vocab)
    save_json([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
               {"idx": 3, "name": "3", "path": "3_Normalize", "type": "sentence_transformers.models.Normalize"}],
              os.path.join(d, "modules.json"))
    modes = {m for m, _ in POOL_KEYS}
    save_json(pooling_config(32, modes, include_prompt=False), os.path.join(d, "1_Pooling", "config.json"))
    torch.manual_seed(3150)
    dense = nn.Linear(6 * 32, 16)
    save_json({"in_features": 192, "out_features": 16, "bias": True,
               "activation_function": "torch.nn.modules.activation.Tanh"}, os.path.join(d, "2_Dense", "config.json"))
    save({"linear.weight": dense.weight, "linear.bias": dense.bias}, os.path.join(d, "2_Dense", "model.safetensors"))
    save_json({"max_seq_length": 16, "do_lower_case": True}, os.path.join(d, "sentence_bert_config.json"))
    save_json({"prompts": PROMPTS, "default_prompt_name": "query"},
              os.path.join(d, "config_sentence_transformers.json"))
    # the tokenizer of this folder does not lowercase: do_lower_case of sentence_bert_config.json must
    write_tokenizer(d, vocab, lower=False)
    ids, tt, mask, h, pooled, emb = st_forward(tok, net2, SENTENCES, modes, dense, torch.tanh, True, 16, True)
    _, _, _, _, _, emb_q = st_forward(tok, net2, SENTENCES, modes, dense, torch.tanh, True, 16, True,
                                      prompt=PROMPTS["query"], include_prompt=False)
    save(dict(input_ids=ids, attention_mask=mask, pooled=pooled, embeddings=emb, embeddings_query=emb_q),
         os.path.join(d, "expected.safetensors"))
    return vocab, tok


# ------------------------------------------------------------------------------------------------ heads

QUERIES = ["how many people live in paris?"]
PASSAGES = ["Paris has about two million people.", "The cat sat on the mat.",
            "London is the capital of England.", "About two million people live in Paris, the capital of France."]
MLM_TEXTS = ["The cat sat on the [MASK].", "Paris is the [MASK] of France.", "[MASK] is running in the park!"]
NER_TEXTS = ["Paris is the capital of France.", "I have a dream, said the man in London."]


def make_heads(vocab, tok):
    V = len(vocab)
    H = 32

    # --- sequence classification (bert. prefix, pooler present)
    d = os.path.join(FIX, "heads_seqcls")
    labels = ["negative", "neutral", "positive"]
    cfg = bert_config(V, architectures=["BertForSequenceClassification"],
                      id2label={str(i): l for i, l in enumerate(labels)},
                      label2id={l: i for i, l in enumerate(labels)})
    net = make_bert(cfg, 4000)
    torch.manual_seed(4050)
    clf = nn.Linear(H, 3)
    with torch.no_grad():
        clf.weight.mul_(8.0)  # spread the logits so the argmax is not a tie
    sd = body_sd(net, "bert.")
    sd["classifier.weight"], sd["classifier.bias"] = clf.weight, clf.bias
    save_json(cfg, os.path.join(d, "config.json"))
    save(sd, os.path.join(d, "model.safetensors"))
    write_tokenizer(d, vocab)
    ids, tt, mask, _ = tok.batch(SENTENCES)
    with torch.no_grad():
        _, pooled = net(ids, tt, mask)
        logits = clf(pooled)
    save(dict(input_ids=ids, attention_mask=mask, logits=logits, scores=logits.softmax(-1)),
         os.path.join(d, "expected.safetensors"))

    # --- token classification (no pooler, no prefix)
    d = os.path.join(FIX, "heads_tokcls")
    tl = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    cfg = bert_config(V, architectures=["BertForTokenClassification"],
                      id2label={str(i): l for i, l in enumerate(tl)}, label2id={l: i for i, l in enumerate(tl)})
    net = make_bert(cfg, 4100)
    torch.manual_seed(4150)
    clf = nn.Linear(H, 5)
    with torch.no_grad():
        clf.weight.mul_(6.0)
    sd = body_sd(net, "bert.", pooler=False)
    sd["classifier.weight"], sd["classifier.bias"] = clf.weight, clf.bias
    save_json(cfg, os.path.join(d, "config.json"))
    save(sd, os.path.join(d, "model.safetensors"))
    write_tokenizer(d, vocab)
    ids, tt, mask, toks = tok.batch(NER_TEXTS)
    with torch.no_grad():
        h, _ = net(ids, tt, mask)
        logits = clf(h)
    probs = logits.softmax(-1)
    # the pipeline's output (aggregation_strategy "none", ignore_labels ["O"], special tokens left out)
    entities = []
    for b, text in enumerate(NER_TEXTS):
        ents = []
        for i, (t, s, e) in enumerate(toks[b]):
            if t in ("[CLS]", "[SEP]"):
                continue
            k = int(probs[b, i].argmax())
            if tl[k] == "O":
                continue
            ents.append({"entity": tl[k], "score": float(probs[b, i, k]), "index": i, "word": t, "start": s,
                         "end": e})
        entities.append(ents)
    save_json({"texts": NER_TEXTS, "entities": entities}, os.path.join(d, "expected.json"))
    save(dict(input_ids=ids, attention_mask=mask, logits=logits), os.path.join(d, "expected.safetensors"))

    # --- masked LM (no pooler, decoder tied to the word embeddings and not stored)
    d = os.path.join(FIX, "heads_mlm")
    cfg = bert_config(V, architectures=["BertForMaskedLM"])
    net = make_bert(cfg, 4200)
    torch.manual_seed(4250)
    tdense = nn.Linear(H, H)
    tln = nn.LayerNorm(H, eps=1e-12)
    g = torch.Generator().manual_seed(4251)
    with torch.no_grad():
        tln.weight.copy_(torch.rand(H, generator=g) + 0.5)
        tln.bias.copy_(torch.randn(H, generator=g) * 0.1)
    bias = torch.randn(V, generator=g) * 0.5
    untied = torch.randn(V, H, generator=g)
    sd = body_sd(net, "bert.", pooler=False)
    sd.update({"cls.predictions.transform.dense.weight": tdense.weight,
               "cls.predictions.transform.dense.bias": tdense.bias,
               "cls.predictions.transform.LayerNorm.weight": tln.weight,
               "cls.predictions.transform.LayerNorm.bias": tln.bias, "cls.predictions.bias": bias})
    save_json(cfg, os.path.join(d, "config.json"))
    save(sd, os.path.join(d, "model.safetensors"))
    sd2 = dict(sd)
    sd2["cls.predictions.decoder.weight"] = untied
    save(sd2, os.path.join(d, "model_untied.safetensors"))
    write_tokenizer(d, vocab)
    ids, tt, mask, toks = tok.batch(MLM_TEXTS)
    with torch.no_grad():
        h, _ = net(ids, tt, mask)
        t = tln(F.gelu(tdense(h)))
        logits = t @ net.embeddings.word_embeddings.weight.T + bias
        logits_untied = t @ untied.T + bias
    mask_id = vocab.index("[MASK]")
    results = []
    for b, text in enumerate(MLM_TEXTS):
        pos = int((ids[b] == mask_id).nonzero()[0])
        p = logits[b, pos].softmax(-1)
        top = torch.topk(p, 5)
        row = []
        for sc, k in zip(top.values.tolist(), top.indices.tolist()):
            row.append({"score": sc, "token": k, "token_str": vocab[k],
                        "sequence": decode([vocab[int(x)] if int(x) != mask_id else vocab[k]
                                            for x in ids[b][mask[b] == 1]])})
        results.append(row)
    save_json({"texts": MLM_TEXTS, "results": results}, os.path.join(d, "expected.json"))
    save(dict(input_ids=ids, attention_mask=mask, logits=logits, logits_untied=logits_untied),
         os.path.join(d, "expected.safetensors"))

    # --- cross-encoder (one label, sigmoid)
    d = os.path.join(FIX, "heads_cross")
    cfg = bert_config(V, architectures=["BertForSequenceClassification"], id2label={"0": "LABEL_0"},
                      label2id={"LABEL_0": 0},
                      sentence_transformers={"activation_fn": "torch.nn.modules.activation.Sigmoid"})
    net = make_bert(cfg, 4300)
    torch.manual_seed(4350)
    clf = nn.Linear(H, 1)
    with torch.no_grad():
        clf.weight.mul_(8.0)
    sd = body_sd(net, "bert.")
    sd["classifier.weight"], sd["classifier.bias"] = clf.weight, clf.bias
    save_json(cfg, os.path.join(d, "config.json"))
    save(sd, os.path.join(d, "model.safetensors"))
    write_tokenizer(d, vocab)
    ids, tt, mask, _ = tok.batch(QUERIES * len(PASSAGES), PASSAGES)
    with torch.no_grad():
        _, pooled = net(ids, tt, mask)
        logits = clf(pooled)[:, 0]
    scores = torch.sigmoid(logits)
    order = sorted(range(len(PASSAGES)), key=lambda i: -float(scores[i]))
    save_json({"query": QUERIES[0], "passages": PASSAGES,
               "ranking": [{"index": i, "score": float(scores[i])} for i in order]},
              os.path.join(d, "expected.json"))
    save(dict(input_ids=ids, token_type_ids=tt, attention_mask=mask, logits=logits, scores=scores),
         os.path.join(d, "expected.safetensors"))


def decode(tokens):
    """tokenizer.decode(ids, skip_special_tokens=True) of BERT: WordPiece decoder + clean_up_tokenization."""
    toks = [t for t in tokens if t not in SPECIALS]  # skip_special_tokens: [UNK] is special too
    s = ""
    for i, t in enumerate(toks):
        if t.startswith("##") and i:  # the first piece keeps its "##" (WordPiece decoder, i != 0)
            s += t[2:]
        else:
            s += (" " if i else "") + t
    for a, b in [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
                 (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")]:
        s = s.replace(a, b)
    return s


# ------------------------------------------------------------------------------------------------ benchmark model

def make_bench(out, n_lines, threads, batch, sample):
    """MiniLM-L6-sized ST folder (hidden 384, 6 layers, 12 heads, full bert-base-uncased vocab, mean pooling +
    Normalize) and PyTorch's throughput on the same lines with the same pooling, batch size and threads."""
    import gzip
    full = load_vocab(os.path.join(DATA, "bert-base-uncased", "vocab.txt"))
    cfg = bert_config(len(full), hidden_size=384, intermediate_size=1536, num_attention_heads=12,
                      num_hidden_layers=6, max_position_embeddings=512)
    net = make_bert(cfg, 5000)
    os.makedirs(out, exist_ok=True)
    save_json(cfg, os.path.join(out, "config.json"))
    save(body_sd(net), os.path.join(out, "model.safetensors"))
    write_tokenizer(out, full)
    save_json([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
              os.path.join(out, "modules.json"))
    save_json(pooling_config(384, {"mean"}), os.path.join(out, "1_Pooling", "config.json"))
    save_json({"max_seq_length": 128, "do_lower_case": False}, os.path.join(out, "sentence_bert_config.json"))
    # English sentences: Multi30k (train, val, test_2016_flickr) then the English side of fra-eng.
    lines = []
    for name in ["train.en.gz", "val.en.gz", "test_2016_flickr.en.gz"]:
        with gzip.open(os.path.join(DATA, "multi30k", name), "rt", encoding="utf-8") as f:
            lines += [ln.rstrip("\n") for ln in f]
    with open(os.path.join(DATA, "fra-eng", "fra.txt"), encoding="utf-8") as f:
        lines += [ln.rstrip("\n").split("\t")[0] for ln in f]
    lines = [ln for ln in lines if ln.strip()][:n_lines]
    save_lines(lines, os.path.join(out, "lines.txt"))
    if sample:  # every k-th line: the same length mix as the whole file, for a PyTorch run that fits the time
        lines = lines[::max(1, len(lines) // sample)][:sample]
        save_lines(lines, os.path.join(out, "sample.txt"))
    if not all(ord(c) < 128 for ln in lines for c in ln):
        print("note: non-ASCII lines; the PyTorch timing tokenizes them with this script's ASCII-safe path")
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(False)
    tok = Tok(full)
    t0 = time.time()
    enc = [tok.encode(_ascii(s), max_length=128)[0] for s in lines]
    t_tok = time.time() - t0
    order = sorted(range(len(enc)), key=lambda i: len(enc[i]))  # the same length sorting tfm embed does
    t0 = time.time()
    with torch.inference_mode():
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            L = max(len(enc[i]) for i in idx)
            ids = torch.zeros(len(idx), L, dtype=torch.long)
            mask = torch.zeros(len(idx), L, dtype=torch.long)
            for r, i in enumerate(idx):
                ids[r, :len(enc[i])] = torch.tensor(enc[i])
                mask[r, :len(enc[i])] = 1
            h, _ = net(ids, torch.zeros_like(ids), mask)
            F.normalize(st_pooling(h, mask, {"mean"}), p=2, dim=1)
    t_model = time.time() - t0
    print(json.dumps({"lines": len(lines), "threads": threads, "batch": batch, "tokenize_s": round(t_tok, 2),
                      "model_s": round(t_model, 2), "sentences_per_s_model": round(len(lines) / t_model, 1)}))


def _ascii(s):
    import unicodedata
    s = "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")
    return "".join(c if ord(c) < 128 else " " for c in s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", help="write the benchmark folder here and time PyTorch")
    ap.add_argument("--lines", type=int, default=100000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--sample", type=int, default=0, help="time PyTorch on this many evenly spaced lines only")
    a = ap.parse_args()
    if a.bench:
        make_bench(a.bench, a.lines, a.threads, a.batch, a.sample)
        return
    full = load_vocab(os.path.join(DATA, "bert-base-uncased", "vocab.txt"))
    assert [full.index(t) for t in SPECIALS] == [0, 100, 101, 102, 103]
    vocab, tok = make_st(full)
    make_heads(vocab, tok)
    total = 0
    for p, n in SUMMARY:
        total += n
    print(f"vocab {len(vocab)} tokens; {len(SUMMARY)} tensor files, {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
