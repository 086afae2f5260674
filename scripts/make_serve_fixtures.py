#!/usr/bin/env python3
"""Reference values for the request fields of `tfm serve` (issue 22): tests/fixtures/serve/expected.safetensors.

    /usr/bin/python3 scripts/make_serve_fixtures.py

Reads the committed folders of make_embed_fixtures.py (st_mean, st_multi: their config, weights and vocab.txt) into
the PyTorch BERT of ../shared/reference/torch and computes, as sentence-transformers and text-embeddings-inference do:
  * st_mean_unnormalized: SentenceTransformer.encode without the Normalize module (TEI "normalize": false);
  * st_mean_dim8 / st_mean_dim8_raw: Matryoshka truncation to 8 values (sentence-transformers truncate_dim: cut the
    output, then F.normalize when normalising; TEI/OpenAI "dimensions");
  * st_mean_passage: encode(prompt_name="passage") (the prompt "passage: " prepended);
  * st_mean_similarity: TEI /similarity of sentence 0 against sentences 1..: cosine of the embeddings;
  * st_multi_left: st_multi without a prompt, every sentence over max_seq_length 16 cut from the left
    (tokenizers' TruncationDirection::Left: [CLS] + the last 14 pieces + [SEP]);
  * mlm_splade: SPLADE pooling of heads_mlm's PyTorch masked-LM logits (expected.safetensors "logits"):
    max over the attended tokens of log(1 + relu(logits)), [texts, vocab_size] (TEI /embed_sparse).
"""
import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_embed_fixtures as mef  # noqa: E402  (its Tok, pooling and the reference BERT)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import st  # noqa: E402

FIX = mef.FIX


def folder_net(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    net = mef.rm.BertModelRef(types.SimpleNamespace(**cfg))
    sd = {k: torch.from_numpy(v.copy()) for k, v in st.load(os.path.join(d, "model.safetensors")).items()}
    net.load_state_dict(sd)
    vocab = [ln.rstrip("\n") for ln in open(os.path.join(d, "vocab.txt"), encoding="utf-8")]
    return net.eval(), mef.Tok(vocab)


def padded(rows):
    L = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), L, dtype=torch.long)
    mask = torch.zeros(len(rows), L, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        mask[i, :len(r)] = 1
    return ids, torch.zeros_like(ids), mask


def main():
    out = {}
    sentences = mef.SENTENCES

    # --- st_mean: Pooling(mean) -> Normalize
    d = os.path.join(FIX, "st_mean")
    net, tok = folder_net(d)
    _, _, _, _, pooled, emb = mef.st_forward(tok, net, sentences, {"mean"}, normalize=True)
    want = st.load(os.path.join(d, "expected.safetensors"))["embeddings"]
    assert (emb - torch.from_numpy(want)).abs().max() < 1e-5, "st_mean weights differ from its expected.safetensors"
    out["st_mean_unnormalized"] = pooled
    out["st_mean_dim8_raw"] = pooled[:, :8]
    out["st_mean_dim8"] = F.normalize(emb[:, :8], p=2, dim=1)
    out["st_mean_passage"] = mef.st_forward(tok, net, sentences, {"mean"}, normalize=True,
                                            prompt=mef.PROMPTS["passage"])[5]
    out["st_mean_similarity"] = F.cosine_similarity(emb[0:1], emb[1:], dim=1)

    # --- st_multi without its prompt, cut from the left to max_seq_length 16
    d = os.path.join(FIX, "st_multi")
    net, tok = folder_net(d)
    limit = 16
    rows = []
    for s in sentences:
        ids = [tok.ids[p] for p, _, _ in tok.pieces(s.lower())]
        ids = ids[-(limit - 2):]
        rows.append([tok.ids["[CLS]"]] + ids + [tok.ids["[SEP]"]])
    assert sum(len(tok.pieces(s.lower())) + 2 > limit for s in sentences) >= 1
    ids, tt, mask = padded(rows)
    dense = st.load(os.path.join(d, "2_Dense", "model.safetensors"))
    W, b = torch.from_numpy(dense["linear.weight"].copy()), torch.from_numpy(dense["linear.bias"].copy())
    with torch.no_grad():
        h, _ = net(ids, tt, mask)
        x = torch.tanh(mef.st_pooling(h, mask, {m for m, _ in mef.POOL_KEYS}) @ W.T + b)
    out["st_multi_left"] = F.normalize(x, p=2, dim=1)
    # sentences that fit give st_multi's own (PyTorch, right-truncated) embeddings
    full = torch.from_numpy(st.load(os.path.join(d, "expected.safetensors"))["embeddings"])
    fits = [i for i, s in enumerate(sentences) if len(tok.pieces(s.lower())) + 2 <= limit]
    assert fits and (out["st_multi_left"][fits] - full[fits]).abs().max() < 1e-5

    # --- SPLADE of the masked-LM head's PyTorch logits
    e = st.load(os.path.join(FIX, "heads_mlm", "expected.safetensors"))
    logits, m = torch.from_numpy(e["logits"]), torch.from_numpy(e["attention_mask"])
    act = torch.log1p(torch.relu(logits)) * m.unsqueeze(-1)
    out["mlm_splade"] = act.max(dim=1).values
    out["mlm_input_ids"] = torch.from_numpy(e["input_ids"])

    os.makedirs(os.path.join(FIX, "serve"), exist_ok=True)
    mef.save(out, os.path.join(FIX, "serve", "expected.safetensors"))
    mef.save_lines(mef.MLM_TEXTS, os.path.join(FIX, "serve", "mlm_texts.txt"))
    print({k: tuple(v.shape) for k, v in out.items()})


if __name__ == "__main__":
    main()
