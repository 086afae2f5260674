#!/usr/bin/env python3
"""Golden fixtures for the RoBERTa family (issue 21): tests/fixtures/roberta.

    /usr/bin/python3 scripts/make_roberta_fixtures.py

No transformers package exists here, so RobertaRef below implements Hugging Face's modeling_roberta.py
(RobertaModel, shared by XLMRobertaModel and CamembertModel) from its published source:
  * RobertaEmbeddings: word + position + token_type embeddings, LayerNorm (layer_norm_eps). position_ids come from
    create_position_ids_from_input_ids(input_ids, padding_idx=config.pad_token_id):
    mask = input_ids.ne(padding_idx); cumsum(mask, dim=1) * mask + padding_idx, so pad tokens get padding_idx and
    the first real token padding_idx + 1. token_type_ids default to zeros (type_vocab_size 1).
  * RobertaLayer = BertLayer (post-LN): self-attention with the extended mask (1 - mask) * finfo(float32).min,
    attention.output.dense + residual -> LayerNorm, intermediate.dense -> hidden_act, output.dense + residual ->
    LayerNorm. RobertaPooler: tanh(dense(x[:, 0])).
  * Checkpoint names: RobertaForMaskedLM saves "roberta."-prefixed body tensors (no pooler: add_pooling_layer=False)
    and lm_head.{dense,layer_norm,bias} (the decoder is tied to the word embeddings); transformers < 4.31 also
    saved the int64 buffer embeddings.position_ids [1, max_position_embeddings].
Cross-check: RobertaRef must equal BertModelRef (../shared/reference/torch) on the same weights once the position
offset is removed (BERT's position_embeddings = RoBERTa's rows padding_idx + 1 onwards); asserted below.

Inputs: token ids that the Hugging Face tokenizers library (npm, tests/fixtures/tokenizer/engine_cases.json)
produced for the byte-level BPE tokenizer tests/fixtures/tokenizer/bpe_bytelevel/tokenizer.json, copied into the
fixture folder for `tfm encode`. The tokenizer's own <pad> is 3257; the config keeps RoBERTa's pad_token_id 1 (HF
uses config.pad_token_id for the positions, whatever the tokenizer pads with), and the padded batch pads with 1.

Writes tests/fixtures/roberta/:
  config.json            model_type roberta, architectures [RobertaForMaskedLM]
  tokenizer.json         copy of the bpe_bytelevel fixture
  model.safetensors      RobertaForMaskedLM layout: roberta.* + lm_head.* + roberta.embeddings.position_ids
  model_base.safetensors RobertaModel layout: unprefixed names, pooler, embeddings.position_ids
  expected.safetensors   input_ids_single [1, 14], last_hidden_state_single [1, 14, 32];
                         input_ids [2, 17] (row 0 padded with 1), attention_mask [2, 17],
                         last_hidden_state [2, 17, 32], pooler_output [2, 32] (model_base's pooler)
Also tests/fixtures/config_keys/roberta (`--config-keys` writes only it): see config_key_fixture().
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

import reference_modules as rm  # noqa: E402
import st  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "roberta")
torch.set_num_threads(1)
torch.manual_seed(21)

CONFIG = {
    "architectures": ["RobertaForMaskedLM"],
    "model_type": "roberta",
    "vocab_size": 3262,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "hidden_act": "gelu",
    "max_position_embeddings": 40,
    "type_vocab_size": 1,
    "layer_norm_eps": 1e-05,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "position_embedding_type": "absolute",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "initializer_range": 0.02,
}


class Cfg:
    def __init__(self, d):
        self.__dict__.update(d)


def create_position_ids_from_input_ids(input_ids, padding_idx):
    mask = input_ids.ne(padding_idx).int()
    incremental_indices = torch.cumsum(mask, dim=1).type_as(mask) * mask
    return incremental_indices.long() + padding_idx


def random_weights(c):
    """RobertaModel's state dict (unprefixed names), random normal values (std 0.3; LayerNorm around 1)."""
    H, I = c.hidden_size, c.intermediate_size
    g = lambda *s: torch.randn(*s) * 0.3  # noqa: E731
    sd = {
        "embeddings.word_embeddings.weight": g(c.vocab_size, H),
        "embeddings.position_embeddings.weight": g(c.max_position_embeddings, H),
        "embeddings.token_type_embeddings.weight": g(c.type_vocab_size, H),
        "embeddings.LayerNorm.weight": 1 + 0.1 * torch.randn(H),
        "embeddings.LayerNorm.bias": 0.1 * torch.randn(H),
        "pooler.dense.weight": g(H, H),
        "pooler.dense.bias": g(H),
    }
    for l in range(c.num_hidden_layers):
        p = f"encoder.layer.{l}."
        for n, (o, i) in {"attention.self.query": (H, H), "attention.self.key": (H, H),
                          "attention.self.value": (H, H), "attention.output.dense": (H, H),
                          "intermediate.dense": (I, H), "output.dense": (H, I)}.items():
            sd[p + n + ".weight"] = g(o, i) / math.sqrt(i) * 3
            sd[p + n + ".bias"] = g(o)
        for n in ("attention.output.LayerNorm", "output.LayerNorm"):
            sd[p + n + ".weight"] = 1 + 0.1 * torch.randn(H)
            sd[p + n + ".bias"] = 0.1 * torch.randn(H)
    return sd


class RobertaRef:
    """modeling_roberta.py RobertaModel.forward (eval mode) on a state dict with RobertaModel's names."""

    def __init__(self, c, sd):
        self.c, self.sd = c, sd

    def act(self, x):  # ACT2FN[hidden_act], as BertModelRef's
        return rm.BertModelRef.act(self, x)

    def forward(self, input_ids, attention_mask=None):
        c, sd = self.c, self.sd
        B, L = input_ids.shape
        H, nh = c.hidden_size, c.num_attention_heads
        hd = H // nh
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        lin = lambda x, n: F.linear(x, sd[n + ".weight"], sd[n + ".bias"])  # noqa: E731
        ln = lambda x, n: F.layer_norm(x, (H,), sd[n + ".weight"], sd[n + ".bias"], c.layer_norm_eps)  # noqa: E731
        position_ids = create_position_ids_from_input_ids(input_ids, c.pad_token_id)
        token_type_ids = torch.zeros_like(input_ids)
        x = (F.embedding(input_ids, sd["embeddings.word_embeddings.weight"]) +
             F.embedding(token_type_ids, sd["embeddings.token_type_embeddings.weight"]) +
             F.embedding(position_ids, sd["embeddings.position_embeddings.weight"]))
        x = ln(x, "embeddings.LayerNorm")
        ext = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for l in range(c.num_hidden_layers):
            p = f"encoder.layer.{l}."
            split = lambda t: t.view(B, L, nh, hd).permute(0, 2, 1, 3)  # noqa: E731
            q = split(lin(x, p + "attention.self.query"))
            k = split(lin(x, p + "attention.self.key"))
            v = split(lin(x, p + "attention.self.value"))
            probs = (q @ k.transpose(-1, -2) / math.sqrt(hd) + ext).softmax(-1)
            ctx = (probs @ v).permute(0, 2, 1, 3).reshape(B, L, H)
            a = ln(lin(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            x = ln(lin(self.act(lin(a, p + "intermediate.dense")), p + "output.dense") + a, p + "output.LayerNorm")
        pooled = torch.tanh(lin(x[:, 0], "pooler.dense"))
        return x, pooled


def bert_cross_check(c, sd, input_ids, attention_mask, got):
    """BertModelRef on the same weights, its position table = RoBERTa's rows pad_token_id + 1 onwards."""
    bc = dict(c.__dict__)
    bc["max_position_embeddings"] = c.max_position_embeddings - c.pad_token_id - 1
    bert = rm.BertModelRef(Cfg(bc))
    bsd = dict(sd)
    bsd["embeddings.position_embeddings.weight"] = sd["embeddings.position_embeddings.weight"][c.pad_token_id + 1:]
    bert.load_state_dict(bsd, strict=True)
    bert.eval()
    with torch.no_grad():
        want, _ = bert(input_ids, torch.zeros_like(input_ids), attention_mask)
    # Valid positions only: RoBERTa gives pad tokens position padding_idx, BERT its running index; pad keys are
    # masked out of attention, so every non-pad row must agree.
    valid = attention_mask.bool()
    err = (got[valid] - want[valid]).abs().max().item()
    assert err < 1e-5, f"RobertaRef differs from BertModelRef by {err}"
    return err


def npy(t):
    return np.ascontiguousarray(t.detach().numpy())


def main():
    c = Cfg(CONFIG)
    cases = json.load(open(os.path.join(FIX, "tokenizer", "engine_cases.json"), encoding="utf-8"))["tokenizers"]
    bpe = next(t for t in cases if t["name"] == "bpe_bytelevel")
    texts = {x["text"]: x["input_ids"] for x in bpe["cases"] if x["add_special_tokens"] and "pair" not in x}
    single = texts["A man in a blue shirt is standing on a ladder."]
    other = texts["Two young, White males are outside near many bushes."]
    assert c.pad_token_id not in single + other
    L = len(other)
    input_ids = torch.tensor([single + [c.pad_token_id] * (L - len(single)), other])
    attention_mask = torch.tensor([[1] * len(single) + [0] * (L - len(single)), [1] * L])
    ids_single = torch.tensor([single])

    sd = random_weights(c)
    ref = RobertaRef(c, sd)
    with torch.no_grad():
        h_single, _ = ref.forward(ids_single)
        h_batch, pooled = ref.forward(input_ids, attention_mask)
    e1 = bert_cross_check(c, sd, ids_single, torch.ones_like(ids_single), h_single)
    e2 = bert_cross_check(c, sd, input_ids, attention_mask, h_batch)
    # The padded row's real tokens equal the same tokens alone (positions do not depend on padding).
    assert (h_batch[0, :len(single)] - h_single[0]).abs().max().item() < 1e-5

    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "config.json"), "w", encoding="utf-8") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    shutil.copyfile(os.path.join(FIX, "tokenizer", "bpe_bytelevel", "tokenizer.json"),
                    os.path.join(OUT, "tokenizer.json"))
    position_ids = torch.arange(c.max_position_embeddings).unsqueeze(0)  # the int64 buffer old versions saved
    base = {k: npy(v) for k, v in sd.items()}
    base["embeddings.position_ids"] = npy(position_ids)
    st.save(base, os.path.join(OUT, "model_base.safetensors"))
    H = c.hidden_size
    mlm = {"roberta." + k: npy(v) for k, v in sd.items() if not k.startswith("pooler.")}
    mlm["roberta.embeddings.position_ids"] = npy(position_ids)
    mlm["lm_head.dense.weight"] = npy(torch.randn(H, H) * 0.3)
    mlm["lm_head.dense.bias"] = npy(torch.randn(H) * 0.3)
    mlm["lm_head.layer_norm.weight"] = npy(1 + 0.1 * torch.randn(H))
    mlm["lm_head.layer_norm.bias"] = npy(0.1 * torch.randn(H))
    mlm["lm_head.bias"] = npy(torch.randn(c.vocab_size) * 0.3)
    st.save(mlm, os.path.join(OUT, "model.safetensors"))
    st.save({"input_ids_single": npy(ids_single), "last_hidden_state_single": npy(h_single),
             "input_ids": npy(input_ids), "attention_mask": npy(attention_mask),
             "last_hidden_state": npy(h_batch), "pooler_output": npy(pooled)},
            os.path.join(OUT, "expected.safetensors"))
    print(f"wrote {os.path.relpath(OUT, ROOT)}; RobertaRef vs BertModelRef max |diff| {max(e1, e2):.2e}")


# ------------------------------------------------------------------ config keys at values other than their defaults
# (issue 48; tests/test_config_key_fixtures.cpp compares them with the reference)
def config_key_fixture():
    """tests/fixtures/config_keys/roberta: pad_token_id 5 (positions count from 6), hidden_act relu,
    layer_norm_eps 0.05 (large, so that it shows beyond the tests' tolerance); RobertaModel layout (unprefixed,
    pooler); expected.safetensors: input_ids [2, 17] (row 0 padded with 5), attention_mask, last_hidden_state
    [2, 17, 32], pooler_output [2, 32]."""
    keys = {"pad_token_id": 5, "hidden_act": "relu", "layer_norm_eps": 0.05}
    config = dict(CONFIG, architectures=["RobertaModel"], **keys)
    c = Cfg(config)
    torch.manual_seed(4811)
    cases = json.load(open(os.path.join(FIX, "tokenizer", "engine_cases.json"), encoding="utf-8"))["tokenizers"]
    bpe = next(t for t in cases if t["name"] == "bpe_bytelevel")
    texts = {x["text"]: x["input_ids"] for x in bpe["cases"] if x["add_special_tokens"] and "pair" not in x}
    single = texts["A man in a blue shirt is standing on a ladder."]
    other = texts["Two young, White males are outside near many bushes."]
    assert c.pad_token_id not in single + other
    L = len(other)
    input_ids = torch.tensor([single + [c.pad_token_id] * (L - len(single)), other])
    attention_mask = torch.tensor([[1] * len(single) + [0] * (L - len(single)), [1] * L])
    sd = random_weights(c)
    with torch.no_grad():
        h, pooled = RobertaRef(c, sd).forward(input_ids, attention_mask)
        # Each key matters on these inputs: back at RobertaConfig's default (pad 1, gelu, 1e-12), the output moves.
        for key, default in {"pad_token_id": 1, "hidden_act": "gelu", "layer_norm_eps": 1e-12}.items():
            other, _ = RobertaRef(Cfg(dict(config, **{key: default})), sd).forward(input_ids, attention_mask)
            moved = (h - other)[attention_mask.bool()].abs().max().item()
            assert moved > 1e-2, f"{key} moves the output by {moved} only"
    bert_cross_check(c, sd, input_ids, attention_mask, h)
    out = os.path.join(FIX, "config_keys", "roberta")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    st.save({k: npy(v) for k, v in sd.items()}, os.path.join(out, "model.safetensors"))
    st.save({"input_ids": npy(input_ids), "attention_mask": npy(attention_mask), "last_hidden_state": npy(h),
             "pooler_output": npy(pooled)}, os.path.join(out, "expected.safetensors"))
    print(f"wrote {os.path.relpath(out, ROOT)}")


if __name__ == "__main__":
    if "--config-keys" not in sys.argv[1:]:  # --config-keys: only tests/fixtures/config_keys/roberta
        main()
    config_key_fixture()
