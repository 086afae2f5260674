#!/usr/bin/env python3
"""Golden fixtures of embedding quantisation, semantic search and long-input embedding (issue 45 items 5 and 8):
tests/fixtures/tasks/quantization/.

    /usr/bin/python3 scripts/make_quantization_fixtures.py

No sentence-transformers package exists here, so its code is re-implemented below in numpy from
sentence_transformers/quantization.py:
  * quantize_embeddings: int8 / uint8 ranges = np.vstack((min(axis=0), max(axis=0))) of calibration_embeddings or
    else of the embeddings; starts = ranges[0]; steps = (ranges[1] - ranges[0]) / 255; uint8 =
    ((e - starts) / steps).astype(np.uint8), int8 = ((e - starts) / steps - 128).astype(np.int8), all in float32
    (numpy's cast of a value outside the type wraps around on x86-64: those of the calibrated case show it);
    binary = (np.packbits(e > 0).reshape(rows, -1) - 128).astype(np.int8), ubinary = np.packbits(e > 0).reshape(...).
    For a row length that is not a multiple of 8 quantize_embeddings packs the flattened array; the engine packs
    each row (np.packbits(axis=-1)), the odd_dim case below.
  * semantic_search (sentence_transformers.util): cosine similarity, top_k best first.
  * semantic_search_faiss / usearch with an exact binary index and rescoring: the query's packbits(q > 0) against
    the rows by Hamming distance, the top_k * rescore_multiplier closest (ties by row: a stable argsort), then
    scores = q . unpackbits(rows) (or q . int8 rows, the int8 rescoring of the embedding-quantization demo),
    np.argsort(-scores, kind="stable")[:top_k]. An int8 corpus is scored by q . int8 row over all rows.
The float embeddings are the PyTorch reference's (BertModelRef of ../shared/reference/torch, sentence-transformers
mean pooling and Normalize) of the committed tests/fixtures/st_mean folder, also for `tfm embed --chunk`: each
window of the long document (Hugging Face tokenizers' overflowing windows: W text tokens, consecutive windows
sharing `stride`) embedded alone with [CLS] / [SEP], then the mean (or max) over the windows, L2-normalised again.
"""
import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import make_embed_fixtures as mef  # noqa: E402
import st  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "tasks", "quantization")
ST = os.path.join(FIX, "st_mean")


# ------------------------------------------------------------------------------------------------ quantize_embeddings

def quantize(e, precision, calibration=None):
    e = np.asarray(e, dtype=np.float32)
    if precision in ("int8", "uint8"):
        src = calibration if calibration is not None else e
        ranges = np.vstack((np.min(src, axis=0), np.max(src, axis=0)))
        starts = ranges[0, :]
        steps = (ranges[1, :] - ranges[0, :]) / 255
        with np.errstate(invalid="ignore"):
            if precision == "uint8":
                return ((e - starts) / steps).astype(np.uint8)
            return ((e - starts) / steps - 128).astype(np.int8)
    if precision == "binary":
        return (np.packbits(e > 0, axis=-1) - 128).astype(np.int8)
    if precision == "ubinary":
        return np.packbits(e > 0, axis=-1)
    raise ValueError(precision)


def quantize_st(e, precision):
    """quantize_embeddings' own (flattened) packing, to check it equals the per-row one for D % 8 == 0."""
    if precision == "binary":
        return (np.packbits(e > 0).reshape(e.shape[0], -1) - 128).astype(np.int8)
    return np.packbits(e > 0).reshape(e.shape[0], -1)


# ------------------------------------------------------------------------------------------------ search

def cosine_search(q, c, k):
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    cn = c / np.linalg.norm(c, axis=1, keepdims=True)
    s = qn.astype(np.float64) @ cn.astype(np.float64).T
    return [[{"corpus_id": int(i), "score": float(row[i])} for i in np.argsort(-row, kind="stable")[:k]] for row in s]


def int_search(q, c_int, k):
    s = q.astype(np.float64) @ c_int.astype(np.float64).T
    return [[{"corpus_id": int(i), "score": float(row[i])} for i in np.argsort(-row, kind="stable")[:k]] for row in s]


def hamming_search(q, c_bits_u8, k, multiplier, rescore, int8_rows=None):
    qb = np.packbits(q > 0, axis=-1)
    out = []
    for qi in range(len(q)):
        x = np.bitwise_xor(c_bits_u8, qb[qi])
        dist = np.unpackbits(x, axis=-1).sum(axis=1)
        order = np.argsort(dist, kind="stable")
        if not rescore:
            out.append([{"corpus_id": int(i), "hamming_distance": int(dist[i])} for i in order[:k]])
            continue
        cand = order[:k * multiplier]
        if int8_rows is not None:
            rows = int8_rows[cand].astype(int)
        else:
            rows = np.unpackbits(c_bits_u8[cand], axis=-1)[:, :q.shape[1]].astype(int)
        s = rows @ q[qi].astype(np.float64)
        best = np.argsort(-s, kind="stable")[:k]
        out.append([{"corpus_id": int(cand[i]), "score": float(s[i])} for i in best])
    return out


# ------------------------------------------------------------------------------------------------ st_mean reference

def load_st_mean():
    cfg = json.load(open(os.path.join(ST, "config.json")))
    sd = {k: torch.from_numpy(np.array(v)) for k, v in st.load(os.path.join(ST, "model.safetensors")).items()}
    net = mef.rm.BertModelRef(types.SimpleNamespace(**cfg))
    net.load_state_dict(sd)
    vocab = mef.load_vocab(os.path.join(ST, "vocab.txt"))
    return net.eval(), mef.Tok(vocab)


def embed_ids(net, ids):
    """SentenceTransformer(st_mean) on one token-id sequence: mean pooling, Normalize. [32] float32."""
    x = torch.tensor([ids])
    with torch.no_grad():
        h, _ = net(x, torch.zeros_like(x), torch.ones_like(x))
        v = mef.st_pooling(h, torch.ones_like(x), {"mean"})
        return F.normalize(v, p=2, dim=1)[0].numpy()


def windows(n, content, stride):
    """Hugging Face tokenizers' overflowing windows of n text tokens: [start, end)."""
    out, start = [], 0
    while True:
        out.append((start, min(n, start + content)))
        if start + content >= n:
            return out
        start += content - stride


def main():
    os.makedirs(OUT, exist_ok=True)
    exp = {}
    ref = st.load(os.path.join(ST, "expected.safetensors"))["embeddings"].astype(np.float32)  # [8, 32]

    # quantize_embeddings of the reference embeddings of st_mean/sentences.txt, ranges from themselves ...
    q = {p: quantize(ref, p) for p in ("int8", "uint8", "binary", "ubinary")}
    for p in ("binary", "ubinary"):
        assert (quantize_st(ref, p) == q[p]).all()
    # ... and from calibration embeddings that do not cover them (values outside wrap around)
    rng = np.random.default_rng(45)
    calibration = (rng.standard_normal((50, 32)) * 0.12).astype(np.float32)
    np.save(os.path.join(OUT, "calibration.npy"), calibration)
    q["int8_calibrated"] = quantize(ref, "int8", calibration)
    q["uint8_calibrated"] = quantize(ref, "uint8", calibration)
    scaled = (ref - calibration.min(0)) / ((calibration.max(0) - calibration.min(0)) / 255)
    assert ((scaled < 0) | (scaled >= 256)).any(), "the calibrated case should show the wrap-around"
    exp["quantize"] = {k: v.astype(int).tolist() for k, v in q.items()}
    exp["quantize"]["calibrated_out_of_range"] = int(((scaled < 0) | (scaled >= 256)).sum())
    # the library function on given values: a row length that is not a multiple of 8, zeros (not > 0), a
    # constant dimension (step 0: NaN / inf before the cast)
    odd = (rng.standard_normal((4, 12)) * 0.5).astype(np.float32)
    odd[1, 3] = 0.0
    odd[:, 5] = 0.25
    exp["odd_dim"] = {"embeddings": odd.tolist()}
    for p in ("int8", "uint8", "binary", "ubinary"):
        exp["odd_dim"][p] = quantize(odd, p).astype(int).tolist()

    # search: a random corpus at every precision, three query vectors
    corpus = rng.standard_normal((200, 32)).astype(np.float32)
    queries = rng.standard_normal((3, 32)).astype(np.float32)
    np.save(os.path.join(OUT, "corpus_f32.npy"), corpus)
    np.save(os.path.join(OUT, "queries.npy"), queries)
    c8 = quantize(corpus, "int8")
    cu = quantize(corpus, "ubinary")
    np.save(os.path.join(OUT, "corpus_int8.npy"), c8)
    np.save(os.path.join(OUT, "corpus_binary.npy"), quantize(corpus, "binary"))
    np.save(os.path.join(OUT, "corpus_ubinary.npy"), cu)
    exp["search"] = {
        "cosine": cosine_search(queries, corpus, 5),
        "int8": int_search(queries, c8, 5),
        "hamming_float": hamming_search(queries, cu, 5, 2, True),
        "hamming_float_x4": hamming_search(queries, cu, 5, 4, True),
        "hamming_int8": hamming_search(queries, cu, 5, 3, True, c8),
        "hamming_only": hamming_search(queries, cu, 5, 1, False),
    }
    # query texts over st_mean's reference embeddings of its sentences
    np.save(os.path.join(OUT, "st_corpus.npy"), ref)
    sentences = open(os.path.join(ST, "sentences.txt"), encoding="utf-8").read().splitlines()
    qtexts = [sentences[0], sentences[2]]
    qref = np.stack([ref[0], ref[2]])
    exp["search"]["texts"] = {"queries": qtexts, "hits": cosine_search(qref, ref, 3)}

    # long inputs: a document longer than st_mean's 64 tokens, and a short line
    net, tok = load_st_mean()
    doc = " ".join(sentences * 2)
    short = sentences[1]
    with open(os.path.join(OUT, "long.txt"), "w", encoding="utf-8") as f:
        f.write(doc + "\n" + short + "\n")
    ids_doc = tok.encode(doc)[0]
    ids_short = tok.encode(short)[0]
    assert len(ids_doc) > 64 and len(ids_short) <= 16, (len(ids_doc), len(ids_short))
    exp["long"] = {"tokens": len(ids_doc), "truncated": embed_ids(net, ids_doc[:63] + ids_doc[-1:]).tolist(),
                   "short": embed_ids(net, ids_short).tolist()}
    chunk, stride = 16, 4
    text = ids_doc[1:-1]
    wins = windows(len(text), chunk - 2, stride)
    vecs = np.stack([embed_ids(net, [ids_doc[0]] + text[a:b] + [ids_doc[-1]]) for a, b in wins])
    exp["long"]["chunk"] = chunk
    exp["long"]["stride"] = stride
    exp["long"]["windows"] = [list(w) for w in wins]
    for mode, v in (("mean", vecs.mean(0)), ("max", vecs.max(0))):
        exp["long"][mode] = (v / np.linalg.norm(v)).tolist()
    with open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(exp, f, indent=1)
        f.write("\n")
    print("wrote", OUT, "windows", len(wins), "doc tokens", len(ids_doc))


if __name__ == "__main__":
    main()
