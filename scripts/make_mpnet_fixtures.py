#!/usr/bin/env python3
"""Golden fixtures for the MPNet family (issue 21): tests/fixtures/mpnet.

    cd scripts && node make_mpnet_tokenizer.js && /usr/bin/python3 make_mpnet_fixtures.py

No transformers package exists here, so MPNetRef below implements Hugging Face's modeling_mpnet.py (MPNetModel)
from its published source:
  * MPNetEmbeddings: word + position embeddings (no token types), LayerNorm (layer_norm_eps). padding_idx is
    hard-coded to 1; position_ids = create_position_ids_from_input_ids(input_ids, 1) (as RoBERTa's).
  * MPNetEncoder.compute_position_bias(x) (called with its default num_buckets=32, whatever
    relative_attention_num_buckets says): relative_position = key index - query index,
    relative_position_bucket(relative_position, num_buckets=32, max_distance=128), then
    relative_attention_bias(bucket) [L, L, heads] -> [1, heads, L, L], shared by every layer.
  * MPNetSelfAttention: scores = q k^T / sqrt(head_dim) + position_bias + extended mask
    ((1 - mask) * finfo(float32).min), softmax, c @ v, o; MPNetAttention: LayerNorm(o + x); MPNetIntermediate /
    MPNetOutput as BERT's (dense, hidden_act, dense + residual -> LayerNorm). MPNetPooler: tanh(dense(x[:, 0])).
  * Checkpoint names: MPNetModel's (embeddings.*, encoder.layer.N.attention.attn.{q,k,v,o},
    encoder.layer.N.attention.LayerNorm, intermediate.dense, output.{dense,LayerNorm},
    encoder.relative_attention_bias.weight, pooler.dense); MPNetForMaskedLM prefixes them with "mpnet." (no pooler)
    and adds lm_head.{dense,layer_norm,bias} (the decoder is tied to the word embeddings; save_pretrained keeps one
    copy).
Cross-check: with the relative attention bias zeroed, MPNetRef must equal RobertaRef (make_roberta_fixtures.py)
on the same weights renamed to RoBERTa's (a zero token-type table of one row); asserted below. The bucket function
is also checked against a direct reading of the T5 / MPNet formula in double precision away from its boundaries.

Sentence-transformers around it (all-mpnet-base-v2's layout: the model at the folder root, config naming
MPNetForMaskedLM, modules.json, 1_Pooling mean, 2_Normalize): models.Pooling mean = sum(h * mask) / clamp(sum(mask),
1e-9), models.Normalize = F.normalize(p=2, dim=1).

Inputs: token ids that the Hugging Face tokenizers library (npm) produced for tests/fixtures/mpnet/tokenizer.json
(scripts/make_mpnet_tokenizer.js: tokenizer_cases.json).

Heads (make_heads below): tests/fixtures/mpnet_seqcls, mpnet_tokcls, mpnet_mlm (MPNetFor* layouts).

Writes tests/fixtures/mpnet/:
  config.json, sentence_bert_config.json, modules.json, 1_Pooling/config.json, 2_Normalize/, sentences.txt
  model.safetensors       MPNetModel layout (unprefixed, pooler) + the int64 embeddings.position_ids buffer
  model_mlm.safetensors   MPNetForMaskedLM layout: mpnet.* (no pooler) + lm_head.*
  expected.safetensors    input_ids_single [1, 15], last_hidden_state_single [1, 15, 32];
                          input_ids [4, L] (padded with 1), attention_mask [4, L], last_hidden_state [4, L, 32],
                          pooler_output [4, 32]; input_ids_long [1, 60] (random ids, > 32 keys),
                          last_hidden_state_long; relative_position [2201], bucket [2201] (torch's buckets for
                          relative positions -1100 .. 1100); embeddings [4, 32] (the sentence-transformers output
                          of sentences.txt)
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
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import make_roberta_fixtures as rob  # noqa: E402
import reference_modules as rm  # noqa: E402
import st  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "mpnet")
torch.set_num_threads(1)

CONFIG = {
    "architectures": ["MPNetForMaskedLM"],
    "attention_probs_dropout_prob": 0.1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 64,
    "layer_norm_eps": 1e-05,
    "max_position_embeddings": 64,
    "model_type": "mpnet",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "pad_token_id": 1,
    "relative_attention_num_buckets": 32,
    "vocab_size": 2510,
}
PADDING_IDX = 1


class Cfg:
    def __init__(self, d):
        self.__dict__.update(d)


def relative_position_bucket(relative_position, num_buckets=32, max_distance=128):
    """modeling_mpnet.py MPNetEncoder.relative_position_bucket, line for line."""
    ret = 0
    n = -relative_position
    num_buckets //= 2
    ret += (n < 0).to(torch.long) * num_buckets
    n = torch.abs(n)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    val_if_large = max_exact + (
        torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).to(torch.long)
    val_if_large = torch.min(val_if_large, torch.full_like(val_if_large, num_buckets - 1))
    ret += torch.where(is_small, n, val_if_large)
    return ret


def bucket_double(rel, num_buckets=32, max_distance=128):
    """The same formula in Python floats, for the cross-check (exact where no boundary is near)."""
    half = num_buckets // 2
    ret = half if rel > 0 else 0  # n = -rel < 0: keys after the query take the upper half
    n = abs(rel)
    max_exact = half // 2
    if n < max_exact:
        return ret + n
    v = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact) * (half - max_exact))
    return ret + min(v, half - 1)


def random_weights(c):
    """MPNetModel's state dict (unprefixed names), random normal values (std 0.3; LayerNorm around 1)."""
    H, I = c.hidden_size, c.intermediate_size
    g = lambda *s: torch.randn(*s) * 0.3  # noqa: E731
    sd = {
        "embeddings.word_embeddings.weight": g(c.vocab_size, H),
        "embeddings.position_embeddings.weight": g(c.max_position_embeddings, H),
        "embeddings.LayerNorm.weight": 1 + 0.1 * torch.randn(H),
        "embeddings.LayerNorm.bias": 0.1 * torch.randn(H),
        # Large enough that the bias visibly moves the attention (a wrong bucket or head order fails the tests).
        "encoder.relative_attention_bias.weight": torch.randn(c.relative_attention_num_buckets,
                                                              c.num_attention_heads) * 1.5,
        "pooler.dense.weight": g(H, H),
        "pooler.dense.bias": g(H),
    }
    for l in range(c.num_hidden_layers):
        p = f"encoder.layer.{l}."
        for n, (o, i) in {"attention.attn.q": (H, H), "attention.attn.k": (H, H), "attention.attn.v": (H, H),
                          "attention.attn.o": (H, H), "intermediate.dense": (I, H), "output.dense": (H, I)}.items():
            sd[p + n + ".weight"] = g(o, i) / math.sqrt(i) * 3
            sd[p + n + ".bias"] = g(o)
        for n in ("attention.LayerNorm", "output.LayerNorm"):
            sd[p + n + ".weight"] = 1 + 0.1 * torch.randn(H)
            sd[p + n + ".bias"] = 0.1 * torch.randn(H)
    return sd


class MPNetRef:
    """modeling_mpnet.py MPNetModel.forward (eval mode) on a state dict with MPNetModel's names."""

    def __init__(self, c, sd):
        self.c, self.sd = c, sd

    def act(self, x):  # ACT2FN[hidden_act], as BertModelRef's
        return rm.BertModelRef.act(self, x)

    def position_bias(self, L):
        context_position = torch.arange(L, dtype=torch.long)[:, None]
        memory_position = torch.arange(L, dtype=torch.long)[None, :]
        rp_bucket = relative_position_bucket(memory_position - context_position, num_buckets=32)
        values = F.embedding(rp_bucket, self.sd["encoder.relative_attention_bias.weight"])  # [L, L, heads]
        return values.permute([2, 0, 1]).unsqueeze(0)  # [1, heads, L, L]

    def forward(self, input_ids, attention_mask=None):
        c, sd = self.c, self.sd
        B, L = input_ids.shape
        H, nh = c.hidden_size, c.num_attention_heads
        hd = H // nh
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        lin = lambda x, n: F.linear(x, sd[n + ".weight"], sd[n + ".bias"])  # noqa: E731
        ln = lambda x, n: F.layer_norm(x, (H,), sd[n + ".weight"], sd[n + ".bias"], c.layer_norm_eps)  # noqa: E731
        position_ids = rob.create_position_ids_from_input_ids(input_ids, PADDING_IDX)
        x = (F.embedding(input_ids, sd["embeddings.word_embeddings.weight"]) +
             F.embedding(position_ids, sd["embeddings.position_embeddings.weight"]))
        x = ln(x, "embeddings.LayerNorm")
        ext = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        bias = self.position_bias(L).expand(B, -1, L, L)
        for l in range(c.num_hidden_layers):
            p = f"encoder.layer.{l}."
            split = lambda t: t.view(B, L, nh, hd).transpose(1, 2)  # noqa: E731
            q = split(lin(x, p + "attention.attn.q"))
            k = split(lin(x, p + "attention.attn.k"))
            v = split(lin(x, p + "attention.attn.v"))
            scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
            scores = scores + bias
            probs = (scores + ext).softmax(-1)
            ctx = (probs @ v).permute(0, 2, 1, 3).reshape(B, L, H)
            a = ln(lin(ctx, p + "attention.attn.o") + x, p + "attention.LayerNorm")
            x = ln(lin(self.act(lin(a, p + "intermediate.dense")), p + "output.dense") + a, p + "output.LayerNorm")
        pooled = torch.tanh(lin(x[:, 0], "pooler.dense"))
        return x, pooled


def roberta_cross_check(c, sd, input_ids, attention_mask):
    """Zero relative bias: MPNetRef == RobertaRef on the renamed weights (type table of one zero row)."""
    zsd = dict(sd)
    zsd["encoder.relative_attention_bias.weight"] = torch.zeros_like(sd["encoder.relative_attention_bias.weight"])
    got, _ = MPNetRef(c, zsd).forward(input_ids, attention_mask)
    rename = {"attention.attn.q": "attention.self.query", "attention.attn.k": "attention.self.key",
              "attention.attn.v": "attention.self.value", "attention.attn.o": "attention.output.dense",
              "attention.LayerNorm": "attention.output.LayerNorm"}
    rsd = {}
    for k, v in sd.items():
        if k.startswith("encoder.relative_attention_bias"):
            continue
        for a, b in rename.items():
            k = k.replace("." + a + ".", "." + b + ".")
        rsd[k] = v
    rsd["embeddings.token_type_embeddings.weight"] = torch.zeros(1, c.hidden_size)
    rc = dict(rob.CONFIG)
    rc.update({k: CONFIG[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                                      "layer_norm_eps", "max_position_embeddings", "vocab_size")})
    rc["pad_token_id"] = PADDING_IDX
    want, _ = rob.RobertaRef(Cfg(rc), rsd).forward(input_ids, attention_mask)
    err = (got - want).abs().max().item()
    assert err < 1e-5, f"MPNetRef (zero bias) differs from RobertaRef by {err}"
    return err


def npy(t):
    return np.ascontiguousarray(t.detach().numpy())


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def head_folder(name, config, sd, head):
    """An MPNetFor* folder: "mpnet."-prefixed body without pooler (add_pooling_layer=False) + the head tensors."""
    d = os.path.join(FIX, name)
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "config.json"), config)
    shutil.copyfile(os.path.join(OUT, "tokenizer.json"), os.path.join(d, "tokenizer.json"))
    write_json(os.path.join(d, "tokenizer_config.json"), {
        "tokenizer_class": "MPNetTokenizer", "do_lower_case": True, "model_max_length": 62,
        "mask_token": {"content": "<mask>", "lstrip": True, "normalized": False, "rstrip": False,
                       "single_word": False, "special": True}})
    tensors = {"mpnet." + k: npy(v) for k, v in sd.items() if not k.startswith("pooler.")}
    tensors.update({k: npy(v) for k, v in head.items()})
    st.save(tensors, os.path.join(d, "model.safetensors"))
    return d


def make_heads(c, seqs, input_ids, attention_mask):
    """modeling_mpnet.py heads on the padded batch of the fixture sentences (dropouts off):
    MPNetClassificationHead: x = features[:, 0] -> dense -> tanh -> out_proj;
    MPNetForTokenClassification: classifier(sequence_output);
    MPNetLMHead: dense -> gelu -> layer_norm (layer_norm_eps) -> decoder (tied to mpnet.embeddings.word_embeddings,
    not stored) + bias ("lm_head.bias"). Writes tests/fixtures/mpnet_{seqcls,tokcls,mlm}/expected.safetensors:
    input_ids [4, L], attention_mask [4, L], logits ([4, 3] / [4, L, 5]); the masked LM: input_ids with token 3
    of each row replaced by <mask>, logits [4, V] at those positions."""
    H, V = c.hidden_size, c.vocab_size
    mask_id = V - 1  # <mask>, last in scripts/make_mpnet_tokenizer.js's vocabulary
    lin = lambda x, w, b: F.linear(x, w, b)  # noqa: E731

    labels = ["negative", "neutral", "positive"]
    cfg = dict(CONFIG, architectures=["MPNetForSequenceClassification"],
               id2label={str(i): l for i, l in enumerate(labels)}, label2id={l: i for i, l in enumerate(labels)})
    torch.manual_seed(2141)
    sd = random_weights(c)
    g = torch.Generator().manual_seed(2142)
    head = {"classifier.dense.weight": torch.randn(H, H, generator=g) * 0.4,
            "classifier.dense.bias": torch.randn(H, generator=g) * 0.1,
            "classifier.out_proj.weight": torch.randn(3, H, generator=g) * 0.8,
            "classifier.out_proj.bias": torch.randn(3, generator=g) * 0.1}
    with torch.no_grad():
        h, _ = MPNetRef(c, sd).forward(input_ids, attention_mask)
        x = torch.tanh(lin(h[:, 0], head["classifier.dense.weight"], head["classifier.dense.bias"]))
        logits = lin(x, head["classifier.out_proj.weight"], head["classifier.out_proj.bias"])
    d = head_folder("mpnet_seqcls", cfg, sd, head)
    st.save({"input_ids": npy(input_ids), "attention_mask": npy(attention_mask), "logits": npy(logits)},
            os.path.join(d, "expected.safetensors"))

    tl = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    cfg = dict(CONFIG, architectures=["MPNetForTokenClassification"],
               id2label={str(i): l for i, l in enumerate(tl)}, label2id={l: i for i, l in enumerate(tl)})
    torch.manual_seed(2151)
    sd = random_weights(c)
    g = torch.Generator().manual_seed(2152)
    head = {"classifier.weight": torch.randn(5, H, generator=g) * 1.2, "classifier.bias": torch.randn(5, generator=g)}
    with torch.no_grad():
        h, _ = MPNetRef(c, sd).forward(input_ids, attention_mask)
        logits = lin(h, head["classifier.weight"], head["classifier.bias"])
    d = head_folder("mpnet_tokcls", cfg, sd, head)
    st.save({"input_ids": npy(input_ids), "attention_mask": npy(attention_mask), "logits": npy(logits)},
            os.path.join(d, "expected.safetensors"))

    cfg = dict(CONFIG, architectures=["MPNetForMaskedLM"])
    torch.manual_seed(2161)
    sd = random_weights(c)
    g = torch.Generator().manual_seed(2162)
    head = {"lm_head.dense.weight": torch.randn(H, H, generator=g) * 0.3,
            "lm_head.dense.bias": torch.randn(H, generator=g) * 0.3,
            "lm_head.layer_norm.weight": 1 + 0.1 * torch.randn(H, generator=g),
            "lm_head.layer_norm.bias": 0.1 * torch.randn(H, generator=g),
            "lm_head.bias": torch.randn(V, generator=g) * 0.5}
    masked = input_ids.clone()
    masked[:, 3] = mask_id
    with torch.no_grad():
        h, _ = MPNetRef(c, sd).forward(masked, attention_mask)
        x = F.gelu(lin(h[:, 3], head["lm_head.dense.weight"], head["lm_head.dense.bias"]))
        x = F.layer_norm(x, (H,), head["lm_head.layer_norm.weight"], head["lm_head.layer_norm.bias"],
                         c.layer_norm_eps)
        logits = x @ sd["embeddings.word_embeddings.weight"].T + head["lm_head.bias"]
    d = head_folder("mpnet_mlm", cfg, sd, head)
    st.save({"input_ids": npy(masked), "attention_mask": npy(attention_mask), "logits": npy(logits)},
            os.path.join(d, "expected.safetensors"))


def main():
    torch.manual_seed(2111)
    c = Cfg(CONFIG)
    tc = json.load(open(os.path.join(OUT, "tokenizer_cases.json"), encoding="utf-8"))
    cases = tc["cases"]
    seqs = [x["input_ids"] for x in cases]
    assert all(PADDING_IDX not in s for s in seqs)
    L = max(len(s) for s in seqs)
    input_ids = torch.tensor([s + [PADDING_IDX] * (L - len(s)) for s in seqs])
    attention_mask = torch.tensor([[1] * len(s) + [0] * (L - len(s)) for s in seqs])
    ids_single = torch.tensor([seqs[0]])
    g = torch.Generator().manual_seed(5)
    ids_long = torch.randint(4, c.vocab_size, (1, 60), generator=g)
    ids_long[0, 0], ids_long[0, -1] = 0, 2

    # The bucket function: torch's values over a wide range, and the double-precision formula where it agrees.
    rel = torch.arange(-1100, 1101)
    buckets = relative_position_bucket(rel)
    assert int(buckets.min()) >= 0 and int(buckets.max()) < 32
    for r, b in zip(rel.tolist(), buckets.tolist()):
        if abs(r) not in (16, 32, 64, 128):  # exact ratios, where float rounding picks the side
            assert bucket_double(r) == b, (r, b, bucket_double(r))

    sd = random_weights(c)
    ref = MPNetRef(c, sd)
    with torch.no_grad():
        h_single, _ = ref.forward(ids_single)
        h_batch, pooled = ref.forward(input_ids, attention_mask)
        h_long, _ = ref.forward(ids_long)
        e1 = roberta_cross_check(c, sd, ids_single, torch.ones_like(ids_single))
        e2 = roberta_cross_check(c, sd, input_ids, attention_mask)
        # The bias matters: without it the outputs move well beyond the test tolerance.
        zsd = dict(sd)
        zsd["encoder.relative_attention_bias.weight"] = torch.zeros_like(sd["encoder.relative_attention_bias.weight"])
        moved = (MPNetRef(c, zsd).forward(ids_single)[0] - h_single).abs().max().item()
        assert moved > 1e-2, moved
    # The padded rows' real tokens equal the same tokens alone.
    assert (h_batch[0, :len(seqs[0])] - h_single[0]).abs().max().item() < 1e-5
    # sentence-transformers: mean pooling over the mask, then L2 normalisation.
    m = attention_mask.unsqueeze(-1).float()
    emb = F.normalize((h_batch * m).sum(1) / m.sum(1).clamp(min=1e-9), p=2, dim=1)

    os.makedirs(os.path.join(OUT, "1_Pooling"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "2_Normalize"), exist_ok=True)
    write_json(os.path.join(OUT, "config.json"), CONFIG)
    write_json(os.path.join(OUT, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])
    write_json(os.path.join(OUT, "sentence_bert_config.json"), {"max_seq_length": 60, "do_lower_case": False})
    write_json(os.path.join(OUT, "1_Pooling", "config.json"), {
        "word_embedding_dimension": c.hidden_size, "pooling_mode_cls_token": False, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": False, "include_prompt": True})
    open(os.path.join(OUT, "2_Normalize", ".keep"), "w").close()
    with open(os.path.join(OUT, "sentences.txt"), "w", encoding="utf-8") as f:
        f.write("".join(x["text"] + "\n" for x in cases))
    position_ids = torch.arange(c.max_position_embeddings).unsqueeze(0)
    base = {k: npy(v) for k, v in sd.items()}
    base["embeddings.position_ids"] = npy(position_ids)
    st.save(base, os.path.join(OUT, "model.safetensors"))
    H = c.hidden_size
    mlm = {"mpnet." + k: npy(v) for k, v in sd.items() if not k.startswith("pooler.")}
    mlm["lm_head.dense.weight"] = npy(torch.randn(H, H) * 0.3)
    mlm["lm_head.dense.bias"] = npy(torch.randn(H) * 0.3)
    mlm["lm_head.layer_norm.weight"] = npy(1 + 0.1 * torch.randn(H))
    mlm["lm_head.layer_norm.bias"] = npy(0.1 * torch.randn(H))
    mlm["lm_head.bias"] = npy(torch.randn(c.vocab_size) * 0.3)
    st.save(mlm, os.path.join(OUT, "model_mlm.safetensors"))
    st.save({"input_ids_single": npy(ids_single), "last_hidden_state_single": npy(h_single),
             "input_ids": npy(input_ids), "attention_mask": npy(attention_mask),
             "last_hidden_state": npy(h_batch), "pooler_output": npy(pooled),
             "input_ids_long": npy(ids_long), "last_hidden_state_long": npy(h_long),
             "relative_position": npy(rel), "bucket": npy(buckets), "embeddings": npy(emb)},
            os.path.join(OUT, "expected.safetensors"))
    make_heads(c, seqs, input_ids, attention_mask)
    print(f"wrote {os.path.relpath(OUT, ROOT)}; zero-bias MPNetRef vs RobertaRef max |diff| {max(e1, e2):.2e}; "
          f"the bias moves the output by {moved:.2f}")


# ------------------------------------------------------------------ config keys at values other than their defaults
# (issue 48; tests/test_config_key_fixtures.cpp compares it with the reference)
def config_key_fixture():
    """tests/fixtures/config_keys/mpnet: hidden_act relu, layer_norm_eps 0.05 (large, so that it shows beyond the
    tests' tolerance); MPNetModel layout (unprefixed,
    pooler); expected.safetensors: the tokenizer cases padded with 1 (input_ids, attention_mask),
    last_hidden_state, pooler_output."""
    config = dict(CONFIG, architectures=["MPNetModel"], hidden_act="relu", layer_norm_eps=0.05)
    c = Cfg(config)
    torch.manual_seed(4821)
    cases = json.load(open(os.path.join(OUT, "tokenizer_cases.json"), encoding="utf-8"))["cases"]
    seqs = [x["input_ids"] for x in cases]
    L = max(len(s) for s in seqs)
    input_ids = torch.tensor([s + [PADDING_IDX] * (L - len(s)) for s in seqs])
    attention_mask = torch.tensor([[1] * len(s) + [0] * (L - len(s)) for s in seqs])
    sd = random_weights(c)
    with torch.no_grad():
        h, pooled = MPNetRef(c, sd).forward(input_ids, attention_mask)
        # Each key matters on these inputs: back at the default (gelu, 1e-12), the output moves.
        for key, default in {"hidden_act": "gelu", "layer_norm_eps": 1e-12}.items():
            other, _ = MPNetRef(Cfg(dict(config, **{key: default})), sd).forward(input_ids, attention_mask)
            moved = (h - other)[attention_mask.bool()].abs().max().item()
            assert moved > 1e-2, f"{key} moves the output by {moved} only"
    out = os.path.join(FIX, "config_keys", "mpnet")
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, "config.json"), config)
    st.save({k: npy(v) for k, v in sd.items()}, os.path.join(out, "model.safetensors"))
    st.save({"input_ids": npy(input_ids), "attention_mask": npy(attention_mask), "last_hidden_state": npy(h),
             "pooler_output": npy(pooled)}, os.path.join(out, "expected.safetensors"))
    print(f"wrote {os.path.relpath(out, ROOT)}")


if __name__ == "__main__":
    if "--config-keys" not in sys.argv[1:]:  # --config-keys: only tests/fixtures/config_keys/mpnet
        main()
    config_key_fixture()
