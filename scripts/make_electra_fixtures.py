#!/usr/bin/env python3
"""Golden fixtures for the ELECTRA family (issue 44): tests/fixtures/electra and
tests/fixtures/family_heads/electra_{seqcls,tokcls}.

    /usr/bin/python3 scripts/make_electra_fixtures.py

No transformers package exists here, so electra_body below implements Hugging Face's modeling_electra.py
(ElectraModel) from its published source:
  * ElectraEmbeddings: word + token_type + position embeddings (position ids 0..L-1), each embedding_size (E) wide,
    LayerNorm(E, layer_norm_eps), dropout.
  * ElectraModel.forward: when embedding_size != hidden_size, embeddings_project = nn.Linear(E, H) on the embedding
    output, then ElectraEncoder = BertEncoder (post-LN BertLayer: self-attention with the extended mask
    (1 - mask) * finfo(float32).min, attention.output.dense + residual -> LayerNorm, intermediate.dense -> gelu,
    output.dense + residual -> LayerNorm). No pooler. hidden_states[0] is the projected embedding output.
  * ElectraClassificationHead: x = features[:, 0, :]; dropout; dense; get_activation("gelu") (exact erf GELU, not
    BERT's tanh); dropout; out_proj. ElectraForTokenClassification: classifier(dropout(h)).
  * Checkpoint names: ElectraFor* save "electra."-prefixed bodies; ElectraForPreTraining (the google/electra-*-
    discriminator files) adds discriminator_predictions.{dense, dense_prediction}, which encoders ignore.
Cross-check (asserted): electra_body equals BertModelRef (../shared/reference/torch, modeling_bert.py) whose
embedding tables are E wide and whose embeddings.LayerNorm is followed by the projection (nn.Sequential), on the same
weights. Sensitivity (asserted): replacing embeddings_project by zero-padding the E features to H moves
last_hidden_state by more than 0.5; ElectraClassificationHead with tanh (RoBERTa's) instead of gelu moves the logits
by more than 0.05.

Inputs: the WordPiece tokenizer of tests/fixtures/tokenizer/wordpiece and its ids from Hugging Face tokenizers
(tests/fixtures/family_heads/encodings.json, scripts/make_family_head_encodings.js).

Writes tests/fixtures/electra/:
  config.json            model_type electra, architectures [ElectraForPreTraining], embedding_size 24, hidden 32
  tokenizer.json         copy of the wordpiece fixture
  model.safetensors      ElectraForPreTraining layout: electra.* + discriminator_predictions.*
  model_same.safetensors ElectraModel layout (unprefixed names) with embedding_size == hidden_size (32): no
                         embeddings_project
  expected.safetensors   input_ids_single [1, L1], last_hidden_state_single [1, L1, 32];
                         input_ids [2, L] (row 1 padded with 0), token_type_ids [2, L] (row 0 a pair),
                         attention_mask [2, L], last_hidden_state [2, L, 32], hidden_states [3, 2, L, 32];
                         last_hidden_state_same [2, L, 32] (model_same, embedding_size 32)
and tests/fixtures/family_heads/ (the layout of make_family_head_fixtures.py, so that ELECTRA runs through
tests/test_family_matrix.cpp and test_family_heads.cpp):
  electra_seqcls  ElectraForSequenceClassification, 2 labels (also rerank): classify / pairs logits, classify_hidden,
                  batch_{input_ids,attention_mask,logits} (the classify texts right-padded)
  electra_tokcls  ElectraForTokenClassification, 5 labels: tag logits and the pipeline's entities
"""
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
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import make_family_head_fixtures as fh  # noqa: E402  (folders, pipelines; puts shared/reference on the path)
import reference_modules as rm  # noqa: E402
import st  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "electra")
torch.set_num_threads(1)

CONFIG = {
    "architectures": ["ElectraForPreTraining"],
    "model_type": "electra",
    "vocab_size": 2505,
    "embedding_size": 24,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 40,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
    "summary_type": "first",
    "summary_use_proj": True,
    "summary_activation": "gelu",
    "summary_last_dropout": 0.1,
    "classifier_dropout": None,
}
TOKENIZER_CONFIG = {"tokenizer_class": "ElectraTokenizer", "do_lower_case": False, "mask_token": "[MASK]",
                    "clean_up_tokenization_spaces": True, "model_max_length": 40}


def npy(t):
    return np.ascontiguousarray(t.detach().numpy())


def electra_weights(c, seed):
    """ElectraModel's state dict (unprefixed names), random normal values (std 0.3; LayerNorm around 1);
    embeddings_project only when embedding_size != hidden_size."""
    torch.manual_seed(seed)
    E, H, I = c["embedding_size"], c["hidden_size"], c["intermediate_size"]
    g = lambda *s: torch.randn(*s) * 0.3  # noqa: E731
    sd = {
        "embeddings.word_embeddings.weight": g(c["vocab_size"], E),
        "embeddings.position_embeddings.weight": g(c["max_position_embeddings"], E),
        "embeddings.token_type_embeddings.weight": g(c["type_vocab_size"], E),
        "embeddings.LayerNorm.weight": 1 + 0.1 * torch.randn(E),
        "embeddings.LayerNorm.bias": 0.1 * torch.randn(E),
    }
    if E != H:
        sd["embeddings_project.weight"] = g(H, E) / math.sqrt(E) * 3
        sd["embeddings_project.bias"] = g(H)
    for l in range(c["num_hidden_layers"]):
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


def electra_body(c, sd, input_ids, token_type_ids=None, attention_mask=None, all_layers=False, project=None):
    """modeling_electra.py ElectraModel.forward (dropout p 0), differentiable (make_finetune_family_fixtures.py
    trains through it): last_hidden_state [B, L, H], or every hidden state when all_layers. project: replaces
    embeddings_project (the sensitivity check)."""
    B, L = input_ids.shape
    E, H, nh = c["embedding_size"], c["hidden_size"], c["num_attention_heads"]
    hd = H // nh
    eps = c["layer_norm_eps"]
    if token_type_ids is None:
        token_type_ids = torch.zeros_like(input_ids)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    lin = lambda x, n: F.linear(x, sd[n + ".weight"], sd[n + ".bias"])  # noqa: E731
    ln = lambda x, n, w: F.layer_norm(x, (w,), sd[n + ".weight"], sd[n + ".bias"], eps)  # noqa: E731
    position_ids = torch.arange(L).unsqueeze(0)
    x = F.embedding(input_ids, sd["embeddings.word_embeddings.weight"])
    x = x + F.embedding(token_type_ids, sd["embeddings.token_type_embeddings.weight"])
    x = x + F.embedding(position_ids, sd["embeddings.position_embeddings.weight"])
    x = ln(x, "embeddings.LayerNorm", E)
    if project is not None:
        x = project(x)
    elif E != H:
        x = lin(x, "embeddings_project")
    ext = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    hs = [x]
    for l in range(c["num_hidden_layers"]):
        p = f"encoder.layer.{l}."
        split = lambda t: t.view(B, L, nh, hd).permute(0, 2, 1, 3)  # noqa: E731
        q = split(lin(x, p + "attention.self.query"))
        k = split(lin(x, p + "attention.self.key"))
        v = split(lin(x, p + "attention.self.value"))
        probs = (q @ k.transpose(-1, -2) / math.sqrt(hd) + ext).softmax(-1)
        ctx = (probs @ v).permute(0, 2, 1, 3).reshape(B, L, H)
        a = ln(lin(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm", H)
        act = {"gelu": F.gelu, "relu": F.relu}[c["hidden_act"]]
        x = ln(lin(act(lin(a, p + "intermediate.dense")), p + "output.dense") + a, p + "output.LayerNorm", H)
        hs.append(x)
    return torch.stack(hs) if all_layers else x


def bert_cross_check(c, sd, input_ids, token_type_ids, attention_mask, got):
    """BertModelRef with E-wide tables and its embeddings.LayerNorm followed by embeddings_project."""
    E, H = c["embedding_size"], c["hidden_size"]
    bert = rm.BertModelRef(fh.Cfg(c))
    e = bert.embeddings
    e.word_embeddings = nn.Embedding(c["vocab_size"], E)
    e.position_embeddings = nn.Embedding(c["max_position_embeddings"], E)
    e.token_type_embeddings = nn.Embedding(c["type_vocab_size"], E)
    e.LayerNorm = nn.Sequential(nn.LayerNorm(E, eps=c["layer_norm_eps"]), nn.Linear(E, H))
    bsd = {"pooler.dense.weight": torch.zeros(H, H), "pooler.dense.bias": torch.zeros(H)}
    for k, v in sd.items():
        k = k.replace("embeddings.LayerNorm.", "embeddings.LayerNorm.0.").replace("embeddings_project.",
                                                                                  "embeddings.LayerNorm.1.")
        bsd[k] = v
    bert.load_state_dict(bsd, strict=True)
    bert.eval()
    with torch.no_grad():
        want, _ = bert(input_ids, token_type_ids, attention_mask)
    valid = attention_mask.bool()
    err = (got[valid] - want[valid]).abs().max().item()
    assert err < 1e-5, f"electra_body differs from BertModelRef + projection by {err}"
    return err


def electra_head(seed, H, C):
    """ElectraClassificationHead: random classifier.dense / classifier.out_proj, and its forward (dropouts off);
    act: gelu (ELECTRA's), or another for the sensitivity check."""
    g = torch.Generator().manual_seed(seed)
    head = {"classifier.dense.weight": torch.randn(H, H, generator=g) * 0.15,
            "classifier.dense.bias": torch.randn(H, generator=g) * 0.1,
            "classifier.out_proj.weight": torch.randn(C, H, generator=g) * 0.3,
            "classifier.out_proj.bias": torch.randn(C, generator=g) * 0.1}

    def forward(h, act=F.gelu):
        x = act(F.linear(h[:, 0], head["classifier.dense.weight"], head["classifier.dense.bias"]))
        return F.linear(x, head["classifier.out_proj.weight"], head["classifier.out_proj.bias"])
    return head, forward


def make_base():
    enc = fh.ENC["wordpiece"]
    c = CONFIG
    single = enc["classify"][0]
    pair = enc["pairs"][0]
    L = max(len(single["input_ids"]), len(pair["input_ids"]))
    pad = lambda v: v + [0] * (L - len(v))  # noqa: E731
    ids_single = torch.tensor([single["input_ids"]])
    input_ids = torch.tensor([pad(pair["input_ids"]), pad(single["input_ids"])])
    token_type_ids = torch.tensor([pad(pair["token_type_ids"]), pad(single["token_type_ids"])])
    attention_mask = torch.tensor([pad([1] * len(pair["input_ids"])), pad([1] * len(single["input_ids"]))])

    sd = electra_weights(c, 4401)
    with torch.no_grad():
        h_single = electra_body(c, sd, ids_single)
        hs = electra_body(c, sd, input_ids, token_type_ids, attention_mask, all_layers=True)
        h_batch = hs[-1]
        # Sensitivity: the projection replaced by zero-padding E features to H.
        unprojected = electra_body(c, sd, input_ids, token_type_ids, attention_mask,
                                   project=lambda x: F.pad(x, (0, c["hidden_size"] - c["embedding_size"])))
    e1 = bert_cross_check(c, sd, ids_single, torch.zeros_like(ids_single), torch.ones_like(ids_single), h_single)
    e2 = bert_cross_check(c, sd, input_ids, token_type_ids, attention_mask, h_batch)
    n = len(single["input_ids"])
    assert (h_batch[1, :n] - h_single[0]).abs().max() < 1e-5
    moved = (unprojected - h_batch)[attention_mask.bool()].abs().max().item()
    assert moved > 0.5, f"embeddings_project barely matters ({moved})"

    same_cfg = dict(c, embedding_size=c["hidden_size"])
    sd_same = electra_weights(same_cfg, 4402)
    assert "embeddings_project.weight" not in sd_same
    with torch.no_grad():
        h_same = electra_body(same_cfg, sd_same, input_ids, token_type_ids, attention_mask)
    e3 = bert_cross_check(same_cfg, dict(sd_same, **{"embeddings_project.weight": torch.eye(32),
                                                     "embeddings_project.bias": torch.zeros(32)}),
                          input_ids, token_type_ids, attention_mask, h_same)

    os.makedirs(OUT, exist_ok=True)
    fh.save_json(c, os.path.join(OUT, "config.json"))
    shutil.copyfile(os.path.join(FIX, "tokenizer", "wordpiece", "tokenizer.json"), os.path.join(OUT, "tokenizer.json"))
    H = c["hidden_size"]
    g = torch.Generator().manual_seed(4403)
    full = {"electra." + k: npy(v) for k, v in sd.items()}
    full["discriminator_predictions.dense.weight"] = npy(torch.randn(H, H, generator=g))
    full["discriminator_predictions.dense.bias"] = npy(torch.randn(H, generator=g))
    full["discriminator_predictions.dense_prediction.weight"] = npy(torch.randn(1, H, generator=g))
    full["discriminator_predictions.dense_prediction.bias"] = npy(torch.randn(1, generator=g))
    st.save(full, os.path.join(OUT, "model.safetensors"))
    st.save({k: npy(v) for k, v in sd_same.items()}, os.path.join(OUT, "model_same.safetensors"))
    st.save({"input_ids_single": npy(ids_single), "last_hidden_state_single": npy(h_single),
             "input_ids": npy(input_ids), "token_type_ids": npy(token_type_ids),
             "attention_mask": npy(attention_mask), "last_hidden_state": npy(h_batch), "hidden_states": npy(hs),
             "last_hidden_state_same": npy(h_same)}, os.path.join(OUT, "expected.safetensors"))
    return max(e1, e2, e3), moved


def make_heads():
    enc = fh.ENC["wordpiece"]
    tjson = os.path.join(FIX, "tokenizer", "wordpiece", "tokenizer.json")
    H = CONFIG["hidden_size"]
    labels = ["NEGATIVE", "POSITIVE"]
    cfg = dict(CONFIG, architectures=["ElectraForSequenceClassification"],
               id2label={str(i): l for i, l in enumerate(labels)}, label2id={l: i for i, l in enumerate(labels)})
    sd = electra_weights(cfg, 4411)
    head, seq_head = electra_head(4412, H, 2)

    def body_of(cfg, sd):
        def body(e):
            with torch.no_grad():
                return electra_body(cfg, sd, torch.tensor([e["input_ids"]]), torch.tensor([e["token_type_ids"]]))
        return body

    # Sensitivity: RoBERTa's tanh in ELECTRA's head moves the logits.
    with torch.no_grad():
        h = body_of(cfg, sd)(enc["classify"][0])
        head_moved = (seq_head(h) - seq_head(h, torch.tanh)).abs().max().item()
    assert head_moved > 0.05, f"gelu vs tanh barely matters in the head ({head_moved})"
    d = fh.family_folder("electra_seqcls", cfg, dict({"electra." + k: v for k, v in sd.items()}, **head), tjson,
                         TOKENIZER_CONFIG)
    fh.write_classifier(d, enc, body_of(cfg, sd), seq_head, labels)
    # The classify texts as one right-padded batch (pad_token_id 0), as make_family_head_fixtures.py's seqcls folders.
    ids, mask = fh.padded(enc["classify"], cfg["pad_token_id"])
    with torch.no_grad():
        blg = seq_head(electra_body(cfg, sd, ids, None, mask))
    exp = st.load(os.path.join(d, "expected.safetensors"))
    for i in range(len(enc["classify"])):
        assert (blg[i] - torch.tensor(exp[f"classify_logits_{i}"][0])).abs().max() < 1e-5
    exp.update(batch_input_ids=npy(ids), batch_attention_mask=npy(mask), batch_logits=npy(blg))
    st.save(exp, os.path.join(d, "expected.safetensors"))

    cfg = dict(CONFIG, architectures=["ElectraForTokenClassification"],
               id2label={str(i): l for i, l in enumerate(fh.TAGS)}, label2id={l: i for i, l in enumerate(fh.TAGS)})
    sd = electra_weights(cfg, 4421)
    g = torch.Generator().manual_seed(4422)
    thead = {"classifier.weight": torch.randn(5, H, generator=g) * 1.2, "classifier.bias": torch.randn(5, generator=g)}
    d = fh.family_folder("electra_tokcls", cfg, dict({"electra." + k: v for k, v in sd.items()}, **thead), tjson,
                         TOKENIZER_CONFIG)
    fh.write_tagger(d, enc, body_of(cfg, sd),
                    lambda h: F.linear(h, thead["classifier.weight"], thead["classifier.bias"]), fh.TAGS)
    return head_moved


def main():
    err, moved = make_base()
    head_moved = make_heads()
    print(f"wrote {os.path.relpath(OUT, ROOT)} and family_heads/electra_*; electra_body vs BertModelRef + projection "
          f"max |diff| {err:.2e}; without the projection outputs move {moved:.2f}, with tanh in the head {head_moved:.2f}")


# ------------------------------------------------------------------ config keys at values other than their defaults
# (issue 48; tests/test_config_key_fixtures.cpp compares it with the reference)
def config_key_fixture():
    """tests/fixtures/config_keys/electra: hidden_act relu, layer_norm_eps 0.05 (large, so that it shows beyond the
    tests' tolerance), num_attention_heads 8 (ElectraConfig's 4); ElectraModel layout (unprefixed);
    expected.safetensors: make_base()'s padded pair batch (input_ids, token_type_ids, attention_mask) and
    last_hidden_state."""
    enc = fh.ENC["wordpiece"]
    keys = {"hidden_act": "relu", "layer_norm_eps": 0.05, "num_attention_heads": 8}
    c = dict(CONFIG, architectures=["ElectraModel"], **keys)
    single, pair = enc["classify"][0], enc["pairs"][0]
    L = max(len(single["input_ids"]), len(pair["input_ids"]))
    pad = lambda v: v + [0] * (L - len(v))  # noqa: E731
    input_ids = torch.tensor([pad(pair["input_ids"]), pad(single["input_ids"])])
    token_type_ids = torch.tensor([pad(pair["token_type_ids"]), pad(single["token_type_ids"])])
    attention_mask = torch.tensor([pad([1] * len(pair["input_ids"])), pad([1] * len(single["input_ids"]))])
    sd = electra_weights(c, 4891)
    with torch.no_grad():
        h = electra_body(c, sd, input_ids, token_type_ids, attention_mask)
        # Each key matters on these inputs: back at ElectraConfig's default, the output moves.
        for key, default in {"hidden_act": "gelu", "layer_norm_eps": 1e-12, "num_attention_heads": 4}.items():
            other = electra_body(dict(c, **{key: default}), sd, input_ids, token_type_ids, attention_mask)
            moved = (h - other)[attention_mask.bool()].abs().max().item()
            assert moved > 1e-2, f"{key} moves the output by {moved} only"
    bert_cross_check(c, sd, input_ids, token_type_ids, attention_mask, h)
    out = os.path.join(FIX, "config_keys", "electra")
    os.makedirs(out, exist_ok=True)
    fh.save_json(c, os.path.join(out, "config.json"))
    st.save({k: npy(v) for k, v in sd.items()}, os.path.join(out, "model.safetensors"))
    st.save({"input_ids": npy(input_ids), "token_type_ids": npy(token_type_ids), "attention_mask": npy(attention_mask),
             "last_hidden_state": npy(h)}, os.path.join(out, "expected.safetensors"))
    print(f"wrote {os.path.relpath(out, ROOT)}")


if __name__ == "__main__":
    if "--config-keys" not in sys.argv[1:]:  # --config-keys: only tests/fixtures/config_keys/electra
        main()
    config_key_fixture()
