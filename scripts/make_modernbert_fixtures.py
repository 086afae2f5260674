#!/usr/bin/env python3
"""Golden fixtures for ModernBERT (issue 21): tests/fixtures/modernbert.

    /usr/bin/python3 scripts/make_modernbert_fixtures.py

No transformers package exists here, so ModernBertRef below implements Hugging Face's modeling_modernbert.py
(ModernBertModel, ModernBertForMaskedLM, ModernBertForSequenceClassification) from its published source, on the
eager attention path (attn_implementation="eager": padded inputs, 4-D additive masks):
  * ModernBertEmbeddings: norm(tok_embeddings(input_ids)); norm = nn.LayerNorm(H, eps=norm_eps, bias=norm_bias).
    No position or token type embeddings.
  * Rotary (ModernBertRotaryEmbedding, the default rope of modeling_rope_utils): inv_freq = 1 / theta **
    (arange(0, head_dim, 2).float() / head_dim), freqs = position_ids.float() x inv_freq in float32,
    emb = cat(freqs, freqs), cos = emb.cos(), sin = emb.sin(); position_ids = arange(seq_len) in every row.
    apply_rotary_pos_emb: q * cos + rotate_half(q) * sin, rotate_half(x) = cat(-x[d/2:], x[:d/2]).
    Full-attention layers use global_rope_theta, sliding layers local_rope_theta.
  * Layer i is "full_attention" when i % global_attn_every_n_layers == 0, else "sliding_attention".
    ModernBertEncoderLayer: attn_norm (nn.Identity for layer 0), attn, residual; mlp_norm, mlp, residual.
    ModernBertAttention: qkv = Wqkv(x).view(B, L, 3, heads, head_dim); q, k rotated; eager attention
    softmax(q k^T * head_dim**-0.5 + mask) v; Wo. Masks: full = (1 - attention_mask) * finfo(float32).min over
    keys; sliding = the same with finfo.min also where |i - j| > local_attention // 2 (the older
    _update_attention_mask: window_mask = distance <= local_attention // 2; masking_utils'
    sliding_window_bidirectional_overlay with sliding_window = local_attention // 2 + 1: |i - j| < window).
    ModernBertMLP: input, gate = Wi(x).chunk(2, dim=-1); Wo(act(input) * gate), act = ACT2FN[hidden_activation]
    ("gelu": the exact erf GELU). final_norm after the last layer.
  * ModernBertPredictionHead: norm(act(dense(x))) (dense bias = classifier_bias, act = classifier_activation).
    ForMaskedLM: decoder(head(last_hidden_state)), decoder.weight tied to model.embeddings.tok_embeddings.weight
    (not stored), decoder.bias stored (decoder_bias). ForSequenceClassification: pooled = last_hidden_state[:, 0]
    ("cls") or the attention-masked mean ("mean"), then head, then classifier (Linear with bias).
Cross-checks (asserted): the sliding layers' mask form equals an explicit loop over each query's window; with
local_attention >= 2 L every layer is global and the result equals a model whose layers are all full attention.

Inputs: token ids the Hugging Face tokenizers library (npm, tests/fixtures/tokenizer/engine_cases.json) produced
for the byte-level BPE tokenizer tests/fixtures/tokenizer/bpe_bytelevel/tokenizer.json (ModernBERT's tokenizer
is a byte-level BPE too), copied into the fixture folder. local_attention 8 (4 keys each side) is smaller than
the 14- and 17-token inputs, so the window matters. The padded row has 3 pads (< 4): every pad query still sees
a real key in its window (with none, Hugging Face averages uniformly over all keys, we give zeros).

Writes tests/fixtures/modernbert/:
  config.json            model_type modernbert, architectures [ModernBertForMaskedLM]
  tokenizer.json         copy of the bpe_bytelevel fixture
  model.safetensors      ModernBertForMaskedLM layout: model.* + head.dense.weight, head.norm.weight, decoder.bias
  model_base.safetensors ModernBertModel layout: unprefixed names
  expected.safetensors   input_ids_single [1, 14], last_hidden_state_single [1, 14, 64];
                         input_ids [2, 17] (row 0 padded with 3257), attention_mask [2, 17],
                         last_hidden_state [2, 17, 64]; mlm_logits_single [1, 14, vocab];
                         seqcls_logits_cls [2, 3], seqcls_logits_mean [2, 3] (the padded batch)
and tests/fixtures/modernbert_seqcls/: config.json (ModernBertForSequenceClassification, 3 labels, pooling cls),
  tokenizer.json, model.safetensors (model.* + head.* + classifier.*)
and tests/fixtures/config_keys/modernbert_{seqcls,layer_types}/ (config keys at values other than their defaults;
  `--config-keys` writes only these): config.json, model.safetensors, expected.safetensors (input_ids,
  attention_mask, and logits [2, 3] or last_hidden_state [2, 17, 32]); hidden 32, vocabulary 128; see
  config_key_fixtures().
"""
import json
import math
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REF = os.path.normpath(os.path.join(ROOT, "..", "shared", "reference", "torch"))
sys.path.insert(0, REF)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import st  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "modernbert")
torch.set_num_threads(1)
torch.manual_seed(2112)

CONFIG = {
    "architectures": ["ModernBertForMaskedLM"],
    "model_type": "modernbert",
    "vocab_size": 3262,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "hidden_activation": "gelu",
    "max_position_embeddings": 8192,
    "initializer_range": 0.02,
    "initializer_cutoff_factor": 2.0,
    "norm_eps": 1e-05,
    "norm_bias": False,
    "pad_token_id": 3257,
    "eos_token_id": 3258,
    "bos_token_id": 3256,
    "cls_token_id": 3256,
    "sep_token_id": 3258,
    "global_rope_theta": 160000.0,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "global_attn_every_n_layers": 3,
    "local_attention": 8,
    "local_rope_theta": 10000.0,
    "embedding_dropout": 0.0,
    "mlp_bias": False,
    "mlp_dropout": 0.0,
    "decoder_bias": True,
    "classifier_pooling": "cls",
    "classifier_dropout": 0.0,
    "classifier_bias": False,
    "classifier_activation": "gelu",
    "deterministic_flash_attn": False,
    "sparse_prediction": False,
    "sparse_pred_ignore_index": -100,
    "tie_word_embeddings": True,
}
NUM_LABELS = 3


class Cfg:
    def __init__(self, d):
        self.__dict__.update(d)


def random_weights(c):
    """ModernBertModel's state dict (unprefixed names), random values (LayerNorm weights around 1)."""
    H, I = c.hidden_size, c.intermediate_size
    g = lambda o, i: torch.randn(o, i) / math.sqrt(i)  # noqa: E731
    ln = lambda: 1 + 0.1 * torch.randn(H)  # noqa: E731
    sd = {"embeddings.tok_embeddings.weight": torch.randn(c.vocab_size, H), "embeddings.norm.weight": ln(),
          "final_norm.weight": ln()}
    for i in range(c.num_hidden_layers):
        p = f"layers.{i}."
        if i > 0:
            sd[p + "attn_norm.weight"] = ln()
        sd[p + "attn.Wqkv.weight"] = g(3 * H, H)
        sd[p + "attn.Wo.weight"] = g(H, H)
        sd[p + "mlp_norm.weight"] = ln()
        sd[p + "mlp.Wi.weight"] = g(2 * I, H)
        sd[p + "mlp.Wo.weight"] = g(H, I)
    return sd


def act(x, name):
    """ACT2FN[name]: "gelu" the exact erf GELU, "gelu_new" / "gelu_pytorch_tanh" the tanh form, "silu", "relu"."""
    if name == "gelu":
        return F.gelu(x)
    if name in ("gelu_new", "gelu_pytorch_tanh"):  # NewGELUActivation
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    if name in ("silu", "swish"):
        return F.silu(x)
    if name == "relu":
        return F.relu(x)
    raise ValueError(name)


def rope_cos_sin(L, head_dim, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    position_ids = torch.arange(L).unsqueeze(0)
    freqs = (inv_freq[None, :, None].float() @ position_ids[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()  # [1, L, head_dim]


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class ModernBertRef:
    """modeling_modernbert.py ModernBertModel.forward, eager attention, eval mode."""

    def __init__(self, c, sd):
        self.c, self.sd = c, sd

    def act(self, x, name):
        return act(x, name)

    def ln(self, x, n):  # nn.LayerNorm(H, eps=norm_eps, bias=norm_bias)
        return F.layer_norm(x, (self.c.hidden_size,), self.sd[n + ".weight"], self.sd.get(n + ".bias"),
                            self.c.norm_eps)

    def lin(self, x, n):  # nn.Linear(..., bias=attention_bias / mlp_bias)
        return F.linear(x, self.sd[n + ".weight"], self.sd.get(n + ".bias"))

    def is_global(self, i):
        types = getattr(self.c, "layer_types", None)  # the newer config's list wins over the period
        if types is not None:
            return types[i] == "full_attention"
        return i % self.c.global_attn_every_n_layers == 0

    def theta(self, full):
        """rope_parameters[full_attention / sliding_attention].rope_theta when given, else global_rope_theta /
        local_rope_theta (ModernBertConfig's defaults 160000 / 10000)."""
        kind = "full_attention" if full else "sliding_attention"
        rp = getattr(self.c, "rope_parameters", None) or {}
        if kind in rp:
            return rp[kind]["rope_theta"]
        return getattr(self.c, "global_rope_theta", 160000.0) if full else getattr(self.c, "local_rope_theta", 10000.0)

    def masks(self, attention_mask, L):
        fmin = torch.finfo(torch.float32).min
        glob = (1.0 - attention_mask[:, None, None, :].float()).expand(-1, 1, L, L) * fmin
        rows = torch.arange(L).unsqueeze(0)
        distance = torch.abs(rows - rows.T)
        window_mask = (distance <= self.c.local_attention // 2).unsqueeze(0).unsqueeze(0)
        sliding = glob.masked_fill(window_mask.logical_not(), fmin)
        return glob, sliding

    def forward(self, input_ids, attention_mask=None, windows_by_loop=False):
        c, sd = self.c, self.sd
        B, L = input_ids.shape
        H, nh = c.hidden_size, c.num_attention_heads
        hd = H // nh
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        x = self.ln(F.embedding(input_ids, sd["embeddings.tok_embeddings.weight"]), "embeddings.norm")
        glob, sliding = self.masks(attention_mask, L)
        rope = {True: rope_cos_sin(L, hd, self.theta(True)), False: rope_cos_sin(L, hd, self.theta(False))}
        for i in range(c.num_hidden_layers):
            p = f"layers.{i}."
            h = x if i == 0 else self.ln(x, p + "attn_norm")
            qkv = self.lin(h, p + "attn.Wqkv").view(B, L, 3, nh, hd)
            q, k, v = qkv.unbind(dim=2)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, nh, L, hd]
            cos, sin = rope[self.is_global(i)]
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if windows_by_loop and not self.is_global(i):
                ctx = self.window_loop(q, k, v, attention_mask)
            else:
                mask = glob if self.is_global(i) else sliding
                w = torch.matmul(q, k.transpose(2, 3)) * hd ** -0.5 + mask
                w = F.softmax(w, dim=-1, dtype=torch.float32)
                ctx = torch.matmul(w, v)
            ctx = ctx.transpose(1, 2).reshape(B, L, H)
            x = x + self.lin(ctx, p + "attn.Wo")
            inp, gate = self.lin(self.ln(x, p + "mlp_norm"), p + "mlp.Wi").chunk(2, dim=-1)
            x = x + self.lin(self.act(inp, c.hidden_activation) * gate, p + "mlp.Wo")
        return self.ln(x, "final_norm")

    def window_loop(self, q, k, v, attention_mask):
        """Sliding-window attention written per query: softmax over the visible keys of its window only."""
        B, nh, L, hd = q.shape
        w = self.c.local_attention // 2
        out = torch.zeros_like(q)
        for b in range(B):
            for i in range(L):
                js = [j for j in range(max(0, i - w), min(L, i + w + 1)) if attention_mask[b, j]]
                s = (q[b, :, i:i + 1] @ k[b, :, js].transpose(1, 2)) * hd ** -0.5  # [nh, 1, n]
                out[b, :, i] = (s.softmax(-1) @ v[b, :, js])[:, 0]
        return out


def head(c, hsd, x):
    """ModernBertPredictionHead: norm(act(dense(x))), no dense bias (classifier_bias false), no norm bias."""
    y = F.gelu(F.linear(x, hsd["head.dense.weight"]))
    return F.layer_norm(y, (c.hidden_size,), hsd["head.norm.weight"], None, c.norm_eps)


def npy(t):
    return np.ascontiguousarray(t.detach().numpy())


def main():
    c = Cfg(CONFIG)
    cases = json.load(open(os.path.join(FIX, "tokenizer", "engine_cases.json"), encoding="utf-8"))["tokenizers"]
    bpe = next(t for t in cases if t["name"] == "bpe_bytelevel")
    texts = {x["text"]: x["input_ids"] for x in bpe["cases"] if x["add_special_tokens"] and "pair" not in x}
    single = texts["A man in a blue shirt is standing on a ladder."]
    other = texts["Two young, White males are outside near many bushes."]
    L = len(other)
    assert L - len(single) < c.local_attention // 2 and len(single) > c.local_attention
    input_ids = torch.tensor([single + [c.pad_token_id] * (L - len(single)), other])
    attention_mask = torch.tensor([[1] * len(single) + [0] * (L - len(single)), [1] * L])
    ids_single = torch.tensor([single])

    sd = random_weights(c)
    ref = ModernBertRef(c, sd)
    H = c.hidden_size
    hsd = {"head.dense.weight": torch.randn(H, H) / math.sqrt(H), "head.norm.weight": 1 + 0.1 * torch.randn(H)}
    decoder_bias = torch.randn(c.vocab_size) * 0.3
    cls_w, cls_b = torch.randn(NUM_LABELS, H) / math.sqrt(H), torch.randn(NUM_LABELS) * 0.3
    with torch.no_grad():
        h_single = ref.forward(ids_single)
        h_batch = ref.forward(input_ids, attention_mask)
        # Cross-check 1: the mask form of the sliding layers equals the per-window loop.
        e1 = max((ref.forward(ids_single, windows_by_loop=True) - h_single).abs().max().item(),
                 (ref.forward(input_ids, attention_mask, True) - h_batch)[attention_mask.bool()].abs().max().item())
        assert e1 < 1e-5, f"sliding-window mask differs from the window loop by {e1}"
        # Cross-check 2: a window covering the input makes every layer global (same thetas on every layer).
        wide = dict(CONFIG, local_attention=4 * L, local_rope_theta=CONFIG["global_rope_theta"])
        all_global = dict(CONFIG, global_attn_every_n_layers=1)
        e2 = (ModernBertRef(Cfg(wide), sd).forward(input_ids, attention_mask) -
              ModernBertRef(Cfg(all_global), sd).forward(input_ids, attention_mask)).abs().max().item()
        assert e2 < 1e-5, f"wide window differs from full attention by {e2}"
        # The window matters on these inputs (else the tests could not tell local from global attention).
        assert (ModernBertRef(Cfg(wide), sd).forward(ids_single) - h_single).abs().max().item() > 1e-2
        # The padded row's real tokens equal the same tokens alone.
        assert (h_batch[0, :len(single)] - h_single[0]).abs().max().item() < 1e-5
        mlm = F.linear(head(c, hsd, h_single), sd["embeddings.tok_embeddings.weight"], decoder_bias)
        seq_cls = F.linear(head(c, hsd, h_batch[:, 0]), cls_w, cls_b)
        m = attention_mask.unsqueeze(-1).float()
        mean = (h_batch * m).sum(dim=1) / attention_mask.sum(dim=1, keepdim=True)
        seq_mean = F.linear(head(c, hsd, mean), cls_w, cls_b)

    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "config.json"), "w", encoding="utf-8") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    shutil.copyfile(os.path.join(FIX, "tokenizer", "bpe_bytelevel", "tokenizer.json"),
                    os.path.join(OUT, "tokenizer.json"))
    st.save({k: npy(v) for k, v in sd.items()}, os.path.join(OUT, "model_base.safetensors"))
    body = {"model." + k: npy(v) for k, v in sd.items()}
    mlm_sd = dict(body, **{k: npy(v) for k, v in hsd.items()})
    mlm_sd["decoder.bias"] = npy(decoder_bias)
    st.save(mlm_sd, os.path.join(OUT, "model.safetensors"))
    cls_sd = dict(body, **{k: npy(v) for k, v in hsd.items()})
    cls_sd["classifier.weight"], cls_sd["classifier.bias"] = npy(cls_w), npy(cls_b)
    seq_dir = os.path.join(FIX, "modernbert_seqcls")
    os.makedirs(seq_dir, exist_ok=True)
    with open(os.path.join(seq_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(dict(CONFIG, architectures=["ModernBertForSequenceClassification"],
                       id2label={"0": "negative", "1": "neutral", "2": "positive"},
                       label2id={"negative": 0, "neutral": 1, "positive": 2}), f, indent=2)
        f.write("\n")
    shutil.copyfile(os.path.join(FIX, "tokenizer", "bpe_bytelevel", "tokenizer.json"),
                    os.path.join(seq_dir, "tokenizer.json"))
    st.save(cls_sd, os.path.join(seq_dir, "model.safetensors"))
    st.save({"input_ids_single": npy(ids_single), "last_hidden_state_single": npy(h_single),
             "input_ids": npy(input_ids), "attention_mask": npy(attention_mask),
             "last_hidden_state": npy(h_batch), "mlm_logits_single": npy(mlm),
             "seqcls_logits_cls": npy(seq_cls), "seqcls_logits_mean": npy(seq_mean)},
            os.path.join(OUT, "expected.safetensors"))
    print(f"wrote {os.path.relpath(OUT, ROOT)}; window loop vs mask {e1:.2e}, wide window vs global {e2:.2e}")


# ------------------------------------------------------------------ config keys at values other than their defaults
# (issue 48: tests/test_config_keys.cpp checks that every key that changes the numbers has such a fixture;
# tests/test_config_key_fixtures.cpp compares these with the reference.)
CONFIG_KEYS = os.path.join(FIX, "config_keys")


# Small sizes (the fixtures stay small): hidden 32 (head_dim 8) and a vocabulary of 128, vocab.txt's [PAD] [UNK]
# [CLS] [SEP] [MASK] and t5 .. t127.
SMALL_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"t{i}" for i in range(5, 128)]
SMALL = {"vocab_size": len(SMALL_VOCAB), "hidden_size": 32, "intermediate_size": 48, "pad_token_id": 0,
         "cls_token_id": 2, "bos_token_id": 2, "sep_token_id": 3, "eos_token_id": 3}


def batch_inputs(c):
    """A padded batch like main()'s: [CLS] + random tokens + [SEP], 14 and 17 tokens, the shorter padded with 3
    pads (fewer than local_attention // 2, so that every pad query sees a real key)."""
    g = torch.Generator().manual_seed(4800)
    single, other = ([2] + torch.randint(5, c.vocab_size, (n - 2,), generator=g).tolist() + [3] for n in (14, 17))
    L = len(other)
    input_ids = torch.tensor([single + [c.pad_token_id] * (L - len(single)), other])
    attention_mask = torch.tensor([[1] * len(single) + [0] * (L - len(single)), [1] * L])
    return input_ids, attention_mask


def with_biases(c, sd):
    """The bias tensors norm_bias / attention_bias / mlp_bias add (nn.LayerNorm / nn.Linear bias=True)."""
    out = dict(sd)
    for name, w in sd.items():
        kind = name.split(".")[-2]
        if (c.norm_bias and "norm" in kind) or (c.attention_bias and kind in ("Wqkv", "Wo") and ".attn." in name) or \
                (c.mlp_bias and ".mlp." in name and kind in ("Wi", "Wo")):
            out[name[:-len("weight")] + "bias"] = 0.1 * torch.randn(w.shape[0])
    return out


# ModernBertConfig's defaults of the keys the fixtures change.
MODERNBERT_DEFAULTS = {"norm_eps": 1e-5, "hidden_activation": "gelu", "local_attention": 128,
                       "global_attn_every_n_layers": 3, "global_rope_theta": 160000.0, "local_rope_theta": 10000.0}


def write_config_key_folder(name, over, seqcls, seed):
    """tests/fixtures/config_keys/<name>: CONFIG with `over` (None removes a key), random weights, the padded batch
    and the reference's output: seqcls: a ModernBertForSequenceClassification folder (vocab.txt, 3 labels) and
    expected logits [2, 3]; else a ModernBertModel folder and expected last_hidden_state [2, 17, H]."""
    config = {k: v for k, v in dict(CONFIG, **SMALL, **over).items() if v is not None}
    c = Cfg(config)
    torch.manual_seed(seed)
    sd = with_biases(c, random_weights(c))
    ref = ModernBertRef(c, sd)
    input_ids, attention_mask = batch_inputs(c)
    H = c.hidden_size
    out = os.path.join(CONFIG_KEYS, name)
    os.makedirs(out, exist_ok=True)
    with torch.no_grad():
        h = ref.forward(input_ids, attention_mask)
        # Each key of the body matters on these inputs: back at ModernBertConfig's default, the output moves (the
        # biases are tensors: leaving them out fails the load instead).
        for key in over:
            if over[key] is None or key in ("norm_bias", "attention_bias", "mlp_bias") or key.startswith("classifier_"):
                continue
            back = {k: v for k, v in config.items() if k != key}
            back.update({k: v for k, v in MODERNBERT_DEFAULTS.items() if k not in back})
            other = ModernBertRef(Cfg(back), sd).forward(input_ids, attention_mask)
            moved = (h - other)[attention_mask.bool()].abs().max().item()
            assert moved > 1e-2, f"{key} moves the output by {moved} only"
    expected = {"input_ids": npy(input_ids), "attention_mask": npy(attention_mask)}
    if seqcls:
        config.update(architectures=["ModernBertForSequenceClassification"],
                      id2label={"0": "negative", "1": "neutral", "2": "positive"},
                      label2id={"negative": 0, "neutral": 1, "positive": 2})
        hsd = {"head.dense.weight": torch.randn(H, H) / math.sqrt(H), "head.norm.weight": 1 + 0.1 * torch.randn(H)}
        if c.classifier_bias:
            hsd["head.dense.bias"] = 0.1 * torch.randn(H)
        if c.norm_bias:
            hsd["head.norm.bias"] = 0.1 * torch.randn(H)
        cls_w, cls_b = torch.randn(NUM_LABELS, H) / math.sqrt(H), torch.randn(NUM_LABELS) * 0.3
        with torch.no_grad():
            if c.classifier_pooling == "mean":
                m = attention_mask.unsqueeze(-1).float()
                pooled = (h * m).sum(dim=1) / attention_mask.sum(dim=1, keepdim=True)
            else:
                pooled = h[:, 0]
            y = act(F.linear(pooled, hsd["head.dense.weight"], hsd.get("head.dense.bias")), c.classifier_activation)
            y = F.layer_norm(y, (H,), hsd["head.norm.weight"], hsd.get("head.norm.bias"), c.norm_eps)
            expected["logits"] = npy(F.linear(y, cls_w, cls_b))
        tensors = {"model." + k: npy(v) for k, v in sd.items()}
        tensors.update({k: npy(v) for k, v in hsd.items()})
        tensors["classifier.weight"], tensors["classifier.bias"] = npy(cls_w), npy(cls_b)
        with open(os.path.join(out, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(SMALL_VOCAB) + "\n")
    else:
        config["architectures"] = ["ModernBertModel"]
        expected["last_hidden_state"] = npy(h)
        tensors = {k: npy(v) for k, v in sd.items()}
    with open(os.path.join(out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    st.save(tensors, os.path.join(out, "model.safetensors"))
    st.save(expected, os.path.join(out, "expected.safetensors"))
    print(f"wrote {os.path.relpath(out, ROOT)}")


def config_key_fixtures():
    # The older keys: norms, biases, activations, window, period and thetas; the head's pooling, activation, bias.
    write_config_key_folder("modernbert_seqcls", {
        "norm_eps": 0.05, "norm_bias": True, "attention_bias": True, "mlp_bias": True, "hidden_activation": "silu",
        "local_attention": 10, "global_attn_every_n_layers": 2, "global_rope_theta": 40000.0,
        "local_rope_theta": 2500.0, "classifier_pooling": "mean", "classifier_activation": "gelu_new",
        "classifier_bias": True}, seqcls=True, seed=4801)
    # The newer keys: layer_types (not periodic) and rope_parameters instead of the period and the two thetas.
    write_config_key_folder("modernbert_layer_types", {
        "global_attn_every_n_layers": None, "global_rope_theta": None, "local_rope_theta": None,
        "layer_types": ["full_attention", "sliding_attention", "full_attention", "full_attention"],
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 80000.0},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 5000.0}}},
        seqcls=False, seed=4802)


if __name__ == "__main__":
    if "--config-keys" not in sys.argv[1:]:  # --config-keys: only tests/fixtures/config_keys/
        main()
    config_key_fixtures()
