#!/usr/bin/env python3
"""Golden fixtures for DeBERTa-v3 (model_type deberta-v2, issue 44): tests/fixtures/deberta_v2 and
tests/fixtures/family_heads/deberta_{seqcls,tokcls}.

    (cd scripts && npm install && node make_deberta_tokenizer.js && node make_family_head_encodings.js)
    /usr/bin/python3 scripts/make_deberta_fixtures.py

No transformers package exists here, so deberta_body below implements Hugging Face's modeling_deberta_v2.py
(DebertaV2Model) from its published source:
  * DebertaV2Embeddings: word embeddings (embedding_size wide, default hidden_size); + position embeddings only when
    position_biased_input (DeBERTa-v3: false); + token type embeddings when type_vocab_size > 0 (v3: 0); embed_proj
    (bias-free Linear E -> H) when embedding_size != hidden_size; LayerNorm; times the attention mask.
  * DebertaV2Encoder: rel_embeddings [2 * span, H] (span = position_buckets when > 0, else max_relative_positions,
    itself max_position_embeddings when < 1), passed through encoder.LayerNorm when norm_rel_ebd has "layer_norm";
    relative_pos = build_relative_position(L, L, position_buckets, max_relative_positions), i - j log-bucketed by
    make_log_bucket_position (float32 torch ops, as published); the 2-D mask m_i * m_j; no ConvLayer
    (conv_kernel_size 0).
  * DisentangledSelfAttention: q, k, v = query_proj, key_proj, value_proj (biases); scale_factor = 1 + number of
    pos_att_type entries among c2p / p2c; scores = q k^T / sqrt(head_dim * scale_factor) + c2p + p2c with
      c2p[i, j] = q_i . pos_key[clamp(rel(i, j) + span, 0, 2 span - 1)] / sqrt(head_dim * scale_factor)
      p2c[i, j] = k_j . pos_query[clamp(-rel(j, i) + span, 0, 2 span - 1)] / sqrt(head_dim * scale_factor)
    (torch.gather then transpose, as published), pos_key / pos_query = key_proj / query_proj of rel_embeddings when
    share_att_key, else pos_key_proj / pos_query_proj; XSoftmax (masked entries 0); post-LN output and FFN as BERT.
  * ContextPooler (DebertaV2ForSequenceClassification): dense(h[:, 0]) then ACT2FN[pooler_hidden_act] (gelu), then
    classifier; DebertaV2ForTokenClassification: classifier(h). Checkpoints of the heads prefix the body "deberta.".
Cross-checks (asserted): make_log_bucket_position equals a float64 re-derivation (sign(r) * (mid + ceil(log(|r| / mid)
/ log((max - 1) / mid) * (mid - 1))) beyond mid) at every relative position of the settings used here and of
deberta-v3-base's (256 buckets, 512 positions); the whole forward equals one whose disentangled bias is an explicit
float64 loop over (b, h, i, j) with those float64 buckets. Sensitivity (asserted and saved): dropping c2p or p2c
from pos_att_type moves the outputs clearly.

Writes tests/fixtures/deberta_v2/:
  config.json, model.safetensors   DebertaV2Model (unprefixed names) as deberta-v3: hidden 32, 4 heads, 2 layers,
                                   position_buckets 8, max_relative_positions 16, share_att_key, norm_rel_ebd
                                   layer_norm, no position embeddings, type_vocab_size 0
  model_variant.safetensors        the other options: share_att_key false (pos_key_proj / pos_query_proj),
                                   position_buckets 0 (span max_relative_positions 6, clamped), norm_rel_ebd none,
                                   position_biased_input, type_vocab_size 2, embedding_size 24 (embed_proj),
                                   pos_att_type "p2c|c2p" (the string form); config_variant.json
  tokenizer.json                   make_deberta_tokenizer.js
  expected.safetensors             the classify texts right-padded (input_ids, attention_mask), last_hidden_state,
                                   hidden_states [3, B, L, H]; single_input_ids / single_last_hidden_state; the
                                   same batch with pos_att_type ["c2p"] / ["p2c"] (c2p_only / p2c_only); the
                                   variant on the pairs (variant_input_ids, variant_token_type_ids,
                                   variant_attention_mask, variant_last_hidden_state); buckets_8_16 / buckets_256_512
                                   (make_log_bucket_position of r = -R .. R, R 40 / 2048); the disentangled bias of
                                   one layer: bias_q, bias_k [L, H], bias_pos_query, bias_pos_key [16, H], bias
                                   [heads, L, L] (HF's gather form, scale_factor 3)
and tests/fixtures/family_heads/ (make_family_head_fixtures.py's layout, tokenizer set deberta_v3):
  deberta_seqcls  DebertaV2ForSequenceClassification, 2 labels (also rerank): pooler.dense + classifier
  deberta_tokcls  DebertaV2ForTokenClassification, 5 labels
"""
import copy
import json
import math
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import make_family_head_fixtures as fh  # noqa: E402  (folders, pipelines; puts shared/reference on the path)
import st  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "deberta_v2")
TOKENIZER = os.path.join(OUT, "tokenizer.json")
torch.set_num_threads(1)

# microsoft/deberta-v3-base's config.json keys, at a tiny size.
CONFIG = {
    "architectures": ["DebertaV2Model"],
    "model_type": "deberta-v2",
    "vocab_size": 2002,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 64,
    "type_vocab_size": 0,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-7,
    "relative_attention": True,
    "max_relative_positions": 16,
    "position_buckets": 8,
    "pad_token_id": 0,
    "position_biased_input": False,
    "pos_att_type": ["p2c", "c2p"],
    "norm_rel_ebd": "layer_norm",
    "share_att_key": True,
}
VARIANT = dict(CONFIG, share_att_key=False, position_buckets=0, max_relative_positions=6, norm_rel_ebd="none",
               position_biased_input=True, type_vocab_size=2, embedding_size=24, pos_att_type="p2c|c2p")
TOKENIZER_CONFIG = {"tokenizer_class": "DebertaV2Tokenizer", "do_lower_case": False, "split_by_punct": False,
                    "bos_token": "[CLS]", "eos_token": "[SEP]", "unk_token": "[UNK]", "sep_token": "[SEP]",
                    "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]", "model_max_length": 64}


def npy(t):
    return np.ascontiguousarray(t.detach().numpy())


# ------------------------------------------------------------------------------------------------ positions

def make_log_bucket_position(relative_pos, bucket_size, max_position):
    """modeling_deberta_v2.py, as published (float32 torch ops)."""
    sign = torch.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = torch.where((relative_pos < mid) & (relative_pos > -mid), torch.tensor(mid - 1).type_as(relative_pos),
                          torch.abs(relative_pos))
    log_pos = torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid)) * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, relative_pos.type_as(log_pos), log_pos * sign)


def build_relative_position(query_size, key_size, bucket_size=-1, max_position=-1):
    q_ids = torch.arange(0, query_size)
    k_ids = torch.arange(0, key_size)
    rel_pos_ids = q_ids[:, None] - k_ids[None, :]
    if bucket_size > 0 and max_position > 0:
        rel_pos_ids = make_log_bucket_position(rel_pos_ids, bucket_size, max_position)
    return rel_pos_ids.to(torch.long)[:query_size, :].unsqueeze(0)


def bucket64(r, bucket_size, max_position):
    """The bucket of relative position r re-derived in float64 (the second way)."""
    mid = bucket_size // 2
    if abs(r) <= mid:
        return r
    v = math.ceil(math.log(abs(r) / mid) / math.log((max_position - 1) / mid) * (mid - 1)) + mid
    return int(math.copysign(v, r))


def check_buckets(bucket_size, max_position, R):
    r = torch.arange(-R, R + 1)
    got = make_log_bucket_position(r, bucket_size, max_position).to(torch.long)
    want = torch.tensor([bucket64(int(x), bucket_size, max_position) for x in r])
    bad = (got != want).nonzero().flatten().tolist()
    assert not bad, f"make_log_bucket_position({bucket_size}, {max_position}) differs from float64 at r {bad[:8]}"
    return got


def settings(c):
    """(span, bucket_size, max_relative_positions) as DisentangledSelfAttention reads them."""
    max_rel = c.get("max_relative_positions", -1)
    if max_rel < 1:
        max_rel = c["max_position_embeddings"]
    buckets = c.get("position_buckets", -1)
    return (buckets if buckets > 0 else max_rel), buckets, max_rel


def pos_att_types(c):
    p = c.get("pos_att_type") or []
    if isinstance(p, str):  # DebertaV2Config: "p2c|c2p"
        p = [x.strip() for x in p.lower().split("|")]
    return p


# ------------------------------------------------------------------------------------------------ the model

def weights(c, seed):
    """DebertaV2Model's state dict (unprefixed names), random (std 0.3; LayerNorm around 1)."""
    torch.manual_seed(seed)
    H, I, E = c["hidden_size"], c["intermediate_size"], c.get("embedding_size", c["hidden_size"])
    span, _, _ = settings(c)
    g = lambda *s: torch.randn(*s) * 0.3  # noqa: E731
    sd = {"embeddings.word_embeddings.weight": g(c["vocab_size"], E),
          "embeddings.LayerNorm.weight": 1 + 0.1 * torch.randn(H), "embeddings.LayerNorm.bias": 0.1 * torch.randn(H),
          "encoder.rel_embeddings.weight": torch.randn(2 * span, H)}
    if c.get("position_biased_input", True):
        sd["embeddings.position_embeddings.weight"] = g(c["max_position_embeddings"], E)
    if c["type_vocab_size"] > 0:
        sd["embeddings.token_type_embeddings.weight"] = g(c["type_vocab_size"], E)
    if E != H:
        sd["embeddings.embed_proj.weight"] = g(H, E) / math.sqrt(E) * 3
    if "layer_norm" in c.get("norm_rel_ebd", "none"):
        sd["encoder.LayerNorm.weight"] = 1 + 0.1 * torch.randn(H)
        sd["encoder.LayerNorm.bias"] = 0.1 * torch.randn(H)
    linears = {"attention.self.query_proj": (H, H), "attention.self.key_proj": (H, H),
               "attention.self.value_proj": (H, H), "attention.output.dense": (H, H),
               "intermediate.dense": (I, H), "output.dense": (H, I)}
    if not c.get("share_att_key", False):
        linears.update({"attention.self.pos_key_proj": (H, H), "attention.self.pos_query_proj": (H, H)})
    for l in range(c["num_hidden_layers"]):
        p = f"encoder.layer.{l}."
        for n, (o, i) in linears.items():
            sd[p + n + ".weight"] = g(o, i) / math.sqrt(i) * 3
            sd[p + n + ".bias"] = g(o)
        for n in ("attention.output.LayerNorm", "output.LayerNorm"):
            sd[p + n + ".weight"] = 1 + 0.1 * torch.randn(H)
            sd[p + n + ".bias"] = 0.1 * torch.randn(H)
    return sd


def transpose_for_scores(x, heads):
    x = x.view(x.size()[:-1] + (heads, -1))
    return x.permute(0, 2, 1, 3).contiguous().view(-1, x.size(1), x.size(-1))


def disentangled_attention_bias(c, q, k, relative_pos, pos_query, pos_key, scale_factor):
    """DisentangledSelfAttention.disentangled_attention_bias (HF's gather form). q, k: [B * heads, L, d];
    pos_query / pos_key: [2 span, H] projections of rel_embeddings (or None when the term is off)."""
    heads = c["num_attention_heads"]
    span, _, _ = settings(c)
    relative_pos = relative_pos.unsqueeze(0)  # [1, 1, L, L]
    types = pos_att_types(c)
    score = 0
    if "c2p" in types:
        pk = transpose_for_scores(pos_key[: 2 * span].unsqueeze(0), heads).repeat(q.size(0) // heads, 1, 1)
        scale = torch.sqrt(torch.tensor(pk.size(-1), dtype=torch.float) * scale_factor)
        c2p_att = torch.bmm(q, pk.transpose(-1, -2))
        c2p_pos = torch.clamp(relative_pos + span, 0, span * 2 - 1)
        c2p_att = torch.gather(c2p_att, dim=-1,
                               index=c2p_pos.squeeze(0).expand([q.size(0), q.size(1), relative_pos.size(-1)]))
        score += c2p_att / scale.to(c2p_att.dtype)
    if "p2c" in types:
        pq = transpose_for_scores(pos_query[: 2 * span].unsqueeze(0), heads).repeat(q.size(0) // heads, 1, 1)
        scale = torch.sqrt(torch.tensor(pq.size(-1), dtype=torch.float) * scale_factor)
        p2c_pos = torch.clamp(-relative_pos + span, 0, span * 2 - 1)
        p2c_att = torch.bmm(k, pq.transpose(-1, -2))
        p2c_att = torch.gather(p2c_att, dim=-1,
                               index=p2c_pos.squeeze(0).expand([q.size(0), k.size(-2), k.size(-2)])).transpose(-1, -2)
        score += p2c_att / scale.to(p2c_att.dtype)
    return score


def loop_bias(c, q, k, _relative_pos, pos_query, pos_key, scale_factor):
    """The same bias as an explicit float64 loop over (b * heads, i, j) with bucket64 (the second way)."""
    heads = c["num_attention_heads"]
    span, buckets, max_rel = settings(c)
    types = pos_att_types(c)
    q, k = q.double(), k.double()
    BH, L, d = q.shape
    pk = transpose_for_scores(pos_key.double().unsqueeze(0), heads)[:, : 2 * span]  # [heads, 2 span, d]
    pq = transpose_for_scores(pos_query.double().unsqueeze(0), heads)[:, : 2 * span]
    inv = 1.0 / math.sqrt(d * scale_factor)
    out = torch.zeros(BH, L, L, dtype=torch.float64)
    for i in range(L):
        for j in range(L):
            r = bucket64(i - j, buckets, max_rel) if buckets > 0 else i - j
            idx = min(max(r + span, 0), 2 * span - 1)
            for bh in range(BH):
                h = bh % heads
                v = 0.0
                if "c2p" in types:
                    v += float(q[bh, i] @ pk[h, idx])
                if "p2c" in types:
                    v += float(k[bh, j] @ pq[h, idx])
                out[bh, i, j] = v * inv
    return out


def deberta_body(c, sd, ids, token_type_ids=None, attention_mask=None, all_layers=False, bias=None,
                 dtype=torch.float32):
    """DebertaV2Model.forward (eval): last_hidden_state [B, L, H], or every hidden state [NL + 1, B, L, H] when
    all_layers. bias: the disentangled bias function (HF's gather form by default)."""
    bias = bias or disentangled_attention_bias
    sd = {k: v.to(dtype) for k, v in sd.items()}
    H, nh, eps = c["hidden_size"], c["num_attention_heads"], c["layer_norm_eps"]
    E = c.get("embedding_size", H)
    B, L = ids.shape
    mask = torch.ones_like(ids) if attention_mask is None else attention_mask
    tt = torch.zeros_like(ids) if token_type_ids is None else token_type_ids
    # DebertaV2Embeddings
    x = F.embedding(ids, sd["embeddings.word_embeddings.weight"])
    if c.get("position_biased_input", True):
        x = x + sd["embeddings.position_embeddings.weight"][:L]
    if c["type_vocab_size"] > 0:
        x = x + F.embedding(tt, sd["embeddings.token_type_embeddings.weight"])
    if E != H:
        x = F.linear(x, sd["embeddings.embed_proj.weight"])
    x = F.layer_norm(x, (H,), sd["embeddings.LayerNorm.weight"], sd["embeddings.LayerNorm.bias"], eps)
    x = x * mask.unsqueeze(2).to(x.dtype)
    # DebertaV2Encoder
    ext = mask.unsqueeze(1).unsqueeze(2)
    att_mask = (ext * ext.squeeze(-2).unsqueeze(-1)).byte()
    rmask = ~(att_mask.to(torch.bool))
    span, buckets, max_rel = settings(c)
    relative_pos = build_relative_position(L, L, buckets, max_rel)
    rel = sd["encoder.rel_embeddings.weight"]
    if "layer_norm" in [s.strip() for s in c.get("norm_rel_ebd", "none").lower().split("|")]:
        rel = F.layer_norm(rel, (H,), sd["encoder.LayerNorm.weight"], sd["encoder.LayerNorm.bias"], eps)
    types = pos_att_types(c)
    scale_factor = 1 + ("c2p" in types) + ("p2c" in types)
    hs = [x]
    for l in range(c["num_hidden_layers"]):
        p = f"encoder.layer.{l}."
        lin = lambda n, t: F.linear(t, sd[p + n + ".weight"], sd[p + n + ".bias"])  # noqa: E731
        q = transpose_for_scores(lin("attention.self.query_proj", x), nh)
        k = transpose_for_scores(lin("attention.self.key_proj", x), nh)
        v = transpose_for_scores(lin("attention.self.value_proj", x), nh)
        scale = torch.sqrt(torch.tensor(q.size(-1), dtype=torch.float) * scale_factor)
        scores = torch.bmm(q, k.transpose(-1, -2)) / scale.to(dtype)
        if c.get("relative_attention", False):
            if c.get("share_att_key", False):
                pq, pk = lin("attention.self.query_proj", rel), lin("attention.self.key_proj", rel)
            else:
                pq = lin("attention.self.pos_query_proj", rel) if "p2c" in types else None
                pk = lin("attention.self.pos_key_proj", rel) if "c2p" in types else None
            scores = scores + bias(c, q, k, relative_pos, pq, pk, scale_factor).to(dtype)
        scores = scores.view(-1, nh, L, L)
        probs = torch.softmax(scores.masked_fill(rmask, torch.finfo(dtype).min), -1).masked_fill(rmask, 0)  # XSoftmax
        ctx = torch.bmm(probs.view(-1, L, L), v).view(-1, nh, L, H // nh).permute(0, 2, 1, 3).reshape(B, L, H)
        a = F.layer_norm(lin("attention.output.dense", ctx) + x, (H,), sd[p + "attention.output.LayerNorm.weight"],
                         sd[p + "attention.output.LayerNorm.bias"], eps)
        i = F.gelu(lin("intermediate.dense", a))
        x = F.layer_norm(lin("output.dense", i) + a, (H,), sd[p + "output.LayerNorm.weight"],
                         sd[p + "output.LayerNorm.bias"], eps)
        hs.append(x)
    return torch.stack(hs) if all_layers else x


def padded(encs, pad_id, pair_types=False):
    L = max(len(e["input_ids"]) for e in encs)
    ids = torch.tensor([e["input_ids"] + [pad_id] * (L - len(e["input_ids"])) for e in encs])
    mask = torch.tensor([[1] * len(e["input_ids"]) + [0] * (L - len(e["input_ids"])) for e in encs])
    tt = torch.tensor([e["token_type_ids"] + [0] * (L - len(e["input_ids"])) for e in encs])
    return ids, mask, tt


def valid_max(a, b, mask):
    return (a - b)[mask.bool()].abs().max().item()


# ------------------------------------------------------------------------------------------------ fixtures

def make_base():
    enc = fh.ENC["deberta_v3"]
    c = CONFIG
    b8 = check_buckets(8, 16, 40)
    b256 = check_buckets(256, 512, 2048)
    ids, mask, _ = padded(enc["classify"], c["pad_token_id"])
    single = torch.tensor([enc["classify"][0]["input_ids"]])
    sd = weights(c, 4501)
    with torch.no_grad():
        hs = deberta_body(c, sd, ids, None, mask, all_layers=True)
        h = hs[-1]
        h_single = deberta_body(c, sd, single)
        h64 = deberta_body(c, sd, ids, None, mask, bias=loop_bias, dtype=torch.float64)
        c2p_only = deberta_body(dict(c, pos_att_type=["c2p"]), sd, ids, None, mask)
        p2c_only = deberta_body(dict(c, pos_att_type=["p2c"]), sd, ids, None, mask)
    second = valid_max(h.double(), h64, mask)
    assert second < 1e-4, f"deberta_body differs from the float64 loop-bias forward by {second}"
    n = single.size(1)
    assert (h[0, :n] - h_single[0]).abs().max() < 1e-5
    moved = {"without p2c": valid_max(c2p_only, h, mask), "without c2p": valid_max(p2c_only, h, mask)}
    for what, m in moved.items():
        assert m > 0.3, f"{what}, the outputs barely move ({m})"

    # One layer's disentangled bias on its own (the nn/ option's test data): layer 0's q, k of text 0.
    H, nh = c["hidden_size"], c["num_attention_heads"]
    L0 = len(enc["classify"][0]["input_ids"])
    g = torch.Generator().manual_seed(4502)
    bq, bk = torch.randn(L0, H, generator=g), torch.randn(L0, H, generator=g)
    bpq, bpk = torch.randn(16, H, generator=g), torch.randn(16, H, generator=g)
    rp = build_relative_position(L0, L0, 8, 16)
    with torch.no_grad():
        bias = disentangled_attention_bias(c, transpose_for_scores(bq.unsqueeze(0), nh),
                                           transpose_for_scores(bk.unsqueeze(0), nh), rp, bpq, bpk, 3)
        bias64 = loop_bias(c, transpose_for_scores(bq.unsqueeze(0), nh), transpose_for_scores(bk.unsqueeze(0), nh),
                           rp, bpq, bpk, 3)
    assert (bias.double() - bias64).abs().max() < 1e-5

    # The variant's options, on the pairs (token types 0 / 1).
    v = VARIANT
    vsd = weights(v, 4503)
    vids, vmask, vtt = padded(enc["pairs"][:3], v["pad_token_id"])
    with torch.no_grad():
        vh = deberta_body(v, vsd, vids, vtt, vmask)
        vh64 = deberta_body(v, vsd, vids, vtt, vmask, bias=loop_bias, dtype=torch.float64)
    vsecond = valid_max(vh.double(), vh64, vmask)
    assert vsecond < 1e-4, f"variant: deberta_body differs from the float64 loop-bias forward by {vsecond}"
    assert vids.size(1) > 2 * settings(v)[0], "the variant's texts must reach the clamped relative positions"

    os.makedirs(OUT, exist_ok=True)
    fh.save_json(c, os.path.join(OUT, "config.json"))
    fh.save_json(v, os.path.join(OUT, "config_variant.json"))
    fh.save_json(TOKENIZER_CONFIG, os.path.join(OUT, "tokenizer_config.json"))
    st.save({k: npy(t) for k, t in sd.items()}, os.path.join(OUT, "model.safetensors"))
    st.save({k: npy(t) for k, t in vsd.items()}, os.path.join(OUT, "model_variant.safetensors"))
    st.save({"input_ids": npy(ids), "attention_mask": npy(mask), "last_hidden_state": npy(h),
             "hidden_states": npy(hs), "single_input_ids": npy(single), "single_last_hidden_state": npy(h_single),
             "c2p_only": npy(c2p_only), "p2c_only": npy(p2c_only),
             "variant_input_ids": npy(vids), "variant_token_type_ids": npy(vtt), "variant_attention_mask": npy(vmask),
             "variant_last_hidden_state": npy(vh),
             "buckets_8_16": npy(b8), "buckets_256_512": npy(b256),
             "bias_q": npy(bq), "bias_k": npy(bk), "bias_pos_query": npy(bpq), "bias_pos_key": npy(bpk),
             "bias": npy(bias)}, os.path.join(OUT, "expected.safetensors"))
    return max(second, vsecond), moved


def make_heads():
    enc = fh.ENC["deberta_v3"]
    H = CONFIG["hidden_size"]
    labels = ["entailment", "not_entailment"]
    cfg = dict(CONFIG, architectures=["DebertaV2ForSequenceClassification"], pooler_hidden_size=H,
               pooler_hidden_act="gelu", pooler_dropout=0, id2label={str(i): lb for i, lb in enumerate(labels)},
               label2id={lb: i for i, lb in enumerate(labels)})
    sd = weights(cfg, 4511)
    g = torch.Generator().manual_seed(4512)
    head = {"pooler.dense.weight": torch.randn(H, H, generator=g) * 0.3,
            "pooler.dense.bias": torch.randn(H, generator=g) * 0.1,
            "classifier.weight": torch.randn(2, H, generator=g) * 0.5, "classifier.bias": torch.randn(2, generator=g)}

    def seq_head(h, act=F.gelu):  # ContextPooler, then the classifier
        x = act(F.linear(h[:, 0], head["pooler.dense.weight"], head["pooler.dense.bias"]))
        return F.linear(x, head["classifier.weight"], head["classifier.bias"])

    def body_of(cfg, sd):
        def body(e):
            with torch.no_grad():
                return deberta_body(cfg, sd, torch.tensor([e["input_ids"]]), torch.tensor([e["token_type_ids"]]))
        return body

    with torch.no_grad():
        h = body_of(cfg, sd)(enc["classify"][0])
        head_moved = (seq_head(h) - seq_head(h, torch.tanh)).abs().max().item()
    assert head_moved > 0.05, f"gelu vs tanh barely matters in the pooler ({head_moved})"
    d = fh.family_folder("deberta_seqcls", cfg, dict({"deberta." + k: t for k, t in sd.items()}, **head), TOKENIZER,
                         TOKENIZER_CONFIG)
    fh.write_classifier(d, enc, body_of(cfg, sd), seq_head, labels)
    ids, mask, _ = padded(enc["classify"], cfg["pad_token_id"])
    with torch.no_grad():
        blg = seq_head(deberta_body(cfg, sd, ids, None, mask))
    exp = st.load(os.path.join(d, "expected.safetensors"))
    for i in range(len(enc["classify"])):
        assert (blg[i] - torch.tensor(exp[f"classify_logits_{i}"][0])).abs().max() < 1e-5
    exp.update(batch_input_ids=npy(ids), batch_attention_mask=npy(mask), batch_logits=npy(blg))
    st.save(exp, os.path.join(d, "expected.safetensors"))

    cfg = dict(CONFIG, architectures=["DebertaV2ForTokenClassification"],
               id2label={str(i): lb for i, lb in enumerate(fh.TAGS)}, label2id={lb: i for i, lb in enumerate(fh.TAGS)})
    sd = weights(cfg, 4521)
    g = torch.Generator().manual_seed(4522)
    thead = {"classifier.weight": torch.randn(5, H, generator=g) * 1.2, "classifier.bias": torch.randn(5, generator=g)}
    d = fh.family_folder("deberta_tokcls", cfg, dict({"deberta." + k: t for k, t in sd.items()}, **thead), TOKENIZER,
                         TOKENIZER_CONFIG)
    fh.write_tagger(d, enc, body_of(cfg, sd),
                    lambda h: F.linear(h, thead["classifier.weight"], thead["classifier.bias"]), fh.TAGS)
    return head_moved


def main():
    err, moved = make_base()
    head_moved = make_heads()
    print(f"wrote {os.path.relpath(OUT, ROOT)} and family_heads/deberta_*; forward vs the float64 loop-bias forward "
          f"max |diff| {err:.2e}; " + ", ".join(f"{k} outputs move {m:.2f}" for k, m in moved.items()) +
          f"; tanh instead of gelu in the pooler moves logits {head_moved:.2f}")


if __name__ == "__main__":
    main()
