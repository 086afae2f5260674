#!/usr/bin/env python3
"""Golden fixtures for the task heads of the encoder families and for DistilBERT (issue 21):
tests/fixtures/family_heads/.

    (cd scripts && node make_family_head_encodings.js)   # encodings.json (npm tokenizers), once
    /usr/bin/python3 scripts/make_family_head_fixtures.py

No transformers package exists here, so the references below implement Hugging Face's modeling code from its
published source:
  * modeling_roberta.py (shared by XLM-RoBERTa and CamemBERT): RobertaModel is RobertaRef of
    make_roberta_fixtures.py (itself cross-checked there against BertModelRef).
    RobertaClassificationHead: x = features[:, 0, :] -> dense -> tanh -> out_proj (dropouts off);
    RobertaForTokenClassification: classifier(sequence_output);
    RobertaLMHead: dense -> gelu -> layer_norm (config.layer_norm_eps) -> decoder (tied to
    roberta.embeddings.word_embeddings.weight, not stored) + bias ("lm_head.bias").
    The For* checkpoints hold "roberta."-prefixed bodies without a pooler (add_pooling_layer=False).
  * modeling_distilbert.py: Embeddings (word + position ids 0..L-1, LayerNorm eps 1e-12, no token types);
    TransformerBlock: MultiHeadSelfAttention (q_lin / k_lin / v_lin / out_lin, q / sqrt(dim_per_head), masked
    scores filled with finfo.min), sa_layer_norm(sa_output + x), FFN lin1 -> activation -> lin2,
    output_layer_norm(ffn_output + sa_output), eps 1e-12 everywhere.
    DistilBertForSequenceClassification: hidden_state[:, 0] -> pre_classifier -> ReLU -> classifier;
    DistilBertForTokenClassification: classifier; DistilBertForMaskedLM: vocab_transform -> activation ->
    vocab_layer_norm (eps 1e-12) -> vocab_projector (weight tied to distilbert.embeddings.word_embeddings.weight).
Cross-checks (asserted): DistilBertRef equals BertModelRef (../shared/reference/torch) on the mapped weights with a
zero token type embedding; the Python decoders below equal Hugging Face's decode on every encodings.json input.

Pipelines, as transformers computes them:
  * text-classification: softmax over the labels (sigmoid for one label), the best {"label", "score"};
  * token-classification (aggregation "none"): per token with special_tokens_mask 0, softmax, argmax label, "O"
    left out, {"entity", "score", "index", "word" (convert_ids_to_tokens), "start", "end" (offset_mapping)};
  * fill-mask: softmax at each mask, top 5 {"score", "token", "token_str" = decode([id]), "sequence" =
    decode(ids with the candidate, pad ids removed, skip_special_tokens = (one mask in the input))};
  * rerank (cross-encoder): one label -> sigmoid; two labels -> softmax probability of label 1.

Writes tests/fixtures/family_heads/<name>/ (config.json, tokenizer.json, tokenizer_config.json,
model.safetensors, expected.safetensors, expected.json where a pipeline applies):
  roberta_seqcls   RobertaForSequenceClassification, 3 labels
  roberta_tokcls   RobertaForTokenClassification, 5 labels
  roberta_mlm      RobertaForMaskedLM (decoder tied)
  xlmr_cross       XLMRobertaForSequenceClassification, 1 label, sigmoid (a cross-encoder for rerank)
  distilbert       DistilBertModel (unprefixed names), last_hidden_state single + padded batch
  distilbert_seqcls DistilBertForSequenceClassification, 2 labels (also rerank)
  distilbert_tokcls DistilBertForTokenClassification, 5 labels
  distilbert_mlm   DistilBertForMaskedLM (vocab_projector tied)
  bert_seqcls      BertForSequenceClassification (classifier(pooler_output)), 2 labels (also rerank)
  bert_mlm         BertForMaskedLM (cls.predictions, decoder tied)
  mpnet_seqcls     MPNetForSequenceClassification, 2 labels (also rerank); MPNet's tokenizer (encodings "mpnet")
  mpnet_mlm        MPNetForMaskedLM (lm_head, decoder tied)
  modernbert_seqcls ModernBertForSequenceClassification (classifier_pooling cls), 2 labels (also rerank)
  modernbert_mlm   ModernBertForMaskedLM (decoder tied, decoder.bias)
  mpnet_tokcls     MPNetForTokenClassification, 5 labels
  modernbert_tokcls ModernBertForTokenClassification (classifier(head(h)) per token), 5 labels
  camembert_seqcls roberta_seqcls's weights as CamembertForSequenceClassification (model_type camembert)
The references of the last six: BertModelRef (../shared/reference/torch, modeling_bert.py), MPNetRef of
make_mpnet_fixtures.py and ModernBertRef of make_modernbert_fixtures.py (each cross-checked in its own script); the
head code below follows modeling_bert.py (BertForSequenceClassification, BertOnlyMLMHead), modeling_mpnet.py and
modeling_modernbert.py. Their sequence classifiers (and roberta_seqcls / distilbert_seqcls) also store the body's
last_hidden_state of every `classify` text ("classify_hidden_<i>" [1, L, H]) for encode / embed / serve / Python.
expected.safetensors: "<set>_input_ids_<i>" [1, L] and "<set>_logits_<i>" per input (classification [1, C], token
[1, L, C], masked LM [P, V] at the mask positions in order), plus "batch_input_ids" / "batch_attention_mask" /
"batch_logits" for the `classify` texts right-padded with the config's pad_token_id.
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
import torch.nn.functional as F  # noqa: E402

import make_roberta_fixtures as rob  # noqa: E402  (RobertaRef, random_weights; also puts shared/ on the path)
import make_modernbert_fixtures as mb  # noqa: E402  (ModernBertRef, random_weights, head)
import make_mpnet_fixtures as mp  # noqa: E402  (MPNetRef, random_weights)
import reference_modules as rm  # noqa: E402
import st  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "family_heads")
torch.set_num_threads(1)

ENC = json.load(open(os.path.join(OUT, "encodings.json"), encoding="utf-8"))["tokenizers"]


def npy(t):
    return np.ascontiguousarray(t.detach().numpy())


def save_json(obj, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")


class Cfg:
    def __init__(self, d):
        self.__dict__.update(d)


# ------------------------------------------------------------------------------------------------ decoders

def bytes_to_unicode():
    """GPT-2's byte <-> printable character table (tokenizers' ByteLevel)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


CHAR_BYTES = {c: b for b, c in bytes_to_unicode().items()}


class Tok:
    """The id <-> token table of a tokenizer.json and Hugging Face's decode for its decoder."""

    def __init__(self, path):
        j = json.load(open(path, encoding="utf-8"))
        self.id_to_token = {i: t for t, i in j["model"]["vocab"].items()}
        self.special = set()
        for a in j["added_tokens"]:
            self.id_to_token[a["id"]] = a["content"]
            if a["special"]:
                self.special.add(a["id"])
        self.added = {a["id"] for a in j["added_tokens"]}
        self.decoder = j["decoder"]["type"]
        self.token_to_id = {t: i for i, t in self.id_to_token.items()}

    def decode(self, ids, skip_special, cleanup):
        ids = [i for i in ids if not (skip_special and i in self.special)]
        if self.decoder == "ByteLevel":
            # Added tokens are kept as their content; the other tokens' characters map back to bytes.
            out, buf = "", bytearray()
            for i in ids:
                t = self.id_to_token[i]
                if i in self.added:
                    out += buf.decode("utf-8", errors="replace") + t
                    buf = bytearray()
                else:
                    for ch in t:
                        buf.append(CHAR_BYTES[ch])
            s = out + buf.decode("utf-8", errors="replace")
        else:  # WordPiece decoder (prefix "##", cleanup true)
            s = ""
            for k, i in enumerate(ids):
                t = self.id_to_token[i]
                if k and t.startswith("##"):
                    s += t[2:]
                else:
                    s += (" " if k else "") + t
            s = clean_up_tokenization(s)
        return clean_up_tokenization(s) if cleanup else s


def clean_up_tokenization(s):
    for a, b in [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
                 (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")]:
        s = s.replace(a, b)
    return s


def check_decoder(tok, name):
    for c in ENC[name]["decode_checks"]:
        assert tok.decode(c["ids"], True, False) == c["skip_special"], (name, c)
        assert tok.decode(c["ids"], False, False) == c["with_special"], (name, c)


# ------------------------------------------------------------------------------------------------ pipelines

def classify_json(logits, labels):
    out = []
    for row in logits:
        p = torch.sigmoid(row) if len(labels) == 1 else row.softmax(-1)
        k = int(p.argmax())
        out.append({"label": labels[k], "score": float(p[k])})
    return out


def tag_json(encs, logits_list, labels):
    out = []
    for e, lg in zip(encs, logits_list):
        probs = lg[0].softmax(-1)
        ents = []
        for i, (tid, sp) in enumerate(zip(e["input_ids"], e["special_tokens_mask"])):
            if sp:
                continue
            k = int(probs[i].argmax())
            if labels[k] == "O":
                continue
            s, t = e["offsets"][i]
            ents.append({"entity": labels[k], "score": float(probs[i, k]), "index": i, "word": e["tokens"][i],
                         "start": s, "end": t})
        out.append(ents)
    return out


def fill_json(tok, encs, logits_list, mask_id, pad_id, cleanup):
    out = []
    for e, lg in zip(encs, logits_list):
        ids = e["input_ids"]
        pos = [i for i, t in enumerate(ids) if t == mask_id]
        single = len(pos) == 1
        per_mask = []
        for m, p in enumerate(pos):
            probs = lg[m].softmax(-1)
            top = torch.topk(probs, 5)
            row = []
            for sc, k in zip(top.values.tolist(), top.indices.tolist()):
                cand = list(ids)
                cand[p] = k
                cand = [t for t in cand if t != pad_id]
                row.append({"score": sc, "token": k, "token_str": tok.decode([k], False, cleanup),
                            "sequence": tok.decode(cand, single, cleanup)})
            per_mask.append(row)
        out.append(per_mask[0] if single else per_mask)
    return out


# ------------------------------------------------------------------------------------------------ RoBERTa

def roberta_body(seed, config):
    torch.manual_seed(seed)
    return rob.random_weights(Cfg(config))


def roberta_forward(config, sd, ids, mask=None):
    with torch.no_grad():
        h, _ = rob.RobertaRef(Cfg(config), sd).forward(ids, mask)
    return h


def roberta_folder(name, config, sd, head, tokenizer_class):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    save_json(config, os.path.join(d, "config.json"))
    shutil.copyfile(os.path.join(FIX, "tokenizer", "bpe_bytelevel", "tokenizer.json"), os.path.join(d, "tokenizer.json"))
    save_json({"tokenizer_class": tokenizer_class, "clean_up_tokenization_spaces": False,
               "mask_token": {"content": "<mask>", "lstrip": True, "normalized": False, "rstrip": False,
                              "single_word": False, "special": True},
               "model_max_length": config["max_position_embeddings"] - config["pad_token_id"] - 1},
              os.path.join(d, "tokenizer_config.json"))
    tensors = {"roberta." + k: npy(v) for k, v in sd.items() if not k.startswith("pooler.")}
    tensors["roberta.embeddings.position_ids"] = npy(torch.arange(config["max_position_embeddings"]).unsqueeze(0))
    tensors.update({k: npy(v) for k, v in head.items()})
    st.save(tensors, os.path.join(d, "model.safetensors"))
    return d


def padded(encs, pad_id):
    L = max(len(e["input_ids"]) for e in encs)
    ids = torch.tensor([e["input_ids"] + [pad_id] * (L - len(e["input_ids"])) for e in encs])
    mask = torch.tensor([[1] * len(e["input_ids"]) + [0] * (L - len(e["input_ids"])) for e in encs])
    return ids, mask


def lin(x, w, b):
    return F.linear(x, w, b)


def classification_head(seed, H, C, out_scale=0.8):
    """RobertaClassificationHead / MPNetClassificationHead: random classifier.dense and classifier.out_proj
    tensors, and its forward x = features[:, 0] -> dense -> tanh -> out_proj (dropouts off)."""
    g = torch.Generator().manual_seed(seed)
    head = {"classifier.dense.weight": torch.randn(H, H, generator=g) * 0.4,
            "classifier.dense.bias": torch.randn(H, generator=g) * 0.1,
            "classifier.out_proj.weight": torch.randn(C, H, generator=g) * out_scale,
            "classifier.out_proj.bias": torch.randn(C, generator=g) * 0.1}

    def forward(h):
        x = torch.tanh(lin(h[:, 0], head["classifier.dense.weight"], head["classifier.dense.bias"]))
        return lin(x, head["classifier.out_proj.weight"], head["classifier.out_proj.bias"])
    return head, forward


def make_roberta(tok):
    enc = ENC["bpe_bytelevel"]
    H = rob.CONFIG["hidden_size"]
    V = rob.CONFIG["vocab_size"]
    mask_id, pad_id = tok.token_to_id["<mask>"], tok.token_to_id["<pad>"]
    base = dict(rob.CONFIG)

    # --- sequence classification: RobertaClassificationHead on <s>
    labels = ["negative", "neutral", "positive"]
    cfg = dict(base, architectures=["RobertaForSequenceClassification"],
               id2label={str(i): l for i, l in enumerate(labels)}, label2id={l: i for i, l in enumerate(labels)})
    sd = roberta_body(2101, cfg)
    head, seq_head = classification_head(2102, H, 3)

    d = roberta_folder("roberta_seqcls", cfg, sd, head, "RobertaTokenizer")
    exp, logits = {}, []
    for i, e in enumerate(enc["classify"]):
        ids = torch.tensor([e["input_ids"]])
        h = roberta_forward(cfg, sd, ids)
        lg = seq_head(h)
        exp[f"classify_input_ids_{i}"], exp[f"classify_logits_{i}"] = npy(ids), npy(lg)
        exp[f"classify_hidden_{i}"] = npy(h)
        logits.append(lg[0])
    ids, mask = padded(enc["classify"], cfg["pad_token_id"])
    blg = seq_head(roberta_forward(cfg, sd, ids, mask))
    assert (blg - torch.stack(logits)).abs().max() < 1e-5
    exp.update(batch_input_ids=npy(ids), batch_attention_mask=npy(mask), batch_logits=npy(blg))
    st.save(exp, os.path.join(d, "expected.safetensors"))
    save_json({"texts": [e["text"] for e in enc["classify"]], "results": classify_json(logits, labels)},
              os.path.join(d, "expected.json"))

    # --- CamemBERT: modeling_camembert.py is modeling_roberta.py under other names (CamembertModel,
    # CamembertForSequenceClassification with RobertaClassificationHead); the same weights under model_type
    # "camembert" and the "roberta." prefix (CamembertPreTrainedModel.base_model_prefix is "roberta").
    cfg = dict(cfg, model_type="camembert", architectures=["CamembertForSequenceClassification"])
    d = roberta_folder("camembert_seqcls", cfg, sd, head, "CamembertTokenizer")
    st.save(exp, os.path.join(d, "expected.safetensors"))
    save_json({"texts": [e["text"] for e in enc["classify"]], "results": classify_json(logits, labels)},
              os.path.join(d, "expected.json"))

    # --- token classification
    tl = TAGS
    cfg = dict(base, architectures=["RobertaForTokenClassification"],
               id2label={str(i): l for i, l in enumerate(tl)}, label2id={l: i for i, l in enumerate(tl)})
    sd = roberta_body(2111, cfg)
    g = torch.Generator().manual_seed(2112)
    head = {"classifier.weight": torch.randn(5, H, generator=g) * 1.2, "classifier.bias": torch.randn(5, generator=g)}
    d = roberta_folder("roberta_tokcls", cfg, sd, head, "RobertaTokenizer")
    exp, lgs = {}, []
    for i, e in enumerate(enc["tag"]):
        ids = torch.tensor([e["input_ids"]])
        lg = lin(roberta_forward(cfg, sd, ids), head["classifier.weight"], head["classifier.bias"])
        exp[f"tag_input_ids_{i}"], exp[f"tag_logits_{i}"] = npy(ids), npy(lg)
        lgs.append(lg)
    st.save(exp, os.path.join(d, "expected.safetensors"))
    save_json({"texts": [e["text"] for e in enc["tag"]], "entities": tag_json(enc["tag"], lgs, tl)},
              os.path.join(d, "expected.json"))

    # --- masked LM: RobertaLMHead, decoder tied
    cfg = dict(base, architectures=["RobertaForMaskedLM"])
    sd = roberta_body(2121, cfg)
    g = torch.Generator().manual_seed(2122)
    head = {"lm_head.dense.weight": torch.randn(H, H, generator=g) * 0.3,
            "lm_head.dense.bias": torch.randn(H, generator=g) * 0.3,
            "lm_head.layer_norm.weight": 1 + 0.1 * torch.randn(H, generator=g),
            "lm_head.layer_norm.bias": 0.1 * torch.randn(H, generator=g),
            "lm_head.bias": torch.randn(V, generator=g) * 0.5}
    d = roberta_folder("roberta_mlm", cfg, sd, head, "RobertaTokenizer")
    exp, lgs = {}, []
    for i, e in enumerate(enc["fill"]):
        ids = torch.tensor([e["input_ids"]])
        h = roberta_forward(cfg, sd, ids)[0]
        pos = [k for k, t in enumerate(e["input_ids"]) if t == mask_id]
        x = F.gelu(lin(h[pos], head["lm_head.dense.weight"], head["lm_head.dense.bias"]))
        x = F.layer_norm(x, (H,), head["lm_head.layer_norm.weight"], head["lm_head.layer_norm.bias"],
                         cfg["layer_norm_eps"])
        lg = x @ sd["embeddings.word_embeddings.weight"].T + head["lm_head.bias"]
        exp[f"fill_input_ids_{i}"], exp[f"fill_logits_{i}"] = npy(ids), npy(lg)
        lgs.append(lg)
    st.save(exp, os.path.join(d, "expected.safetensors"))
    save_json({"texts": [e["text"] for e in enc["fill"]],
               "results": fill_json(tok, enc["fill"], lgs, mask_id, pad_id, False)}, os.path.join(d, "expected.json"))

    # --- cross-encoder: XLMRobertaForSequenceClassification with one label (bge-reranker's layout)
    cfg = dict(base, architectures=["XLMRobertaForSequenceClassification"], model_type="xlm-roberta",
               id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
    sd = roberta_body(2131, cfg)
    g = torch.Generator().manual_seed(2132)
    head = {"classifier.dense.weight": torch.randn(H, H, generator=g) * 0.4,
            "classifier.dense.bias": torch.randn(H, generator=g) * 0.1,
            "classifier.out_proj.weight": torch.randn(1, H, generator=g) * 2.0,
            "classifier.out_proj.bias": torch.randn(1, generator=g) * 0.1}
    d = roberta_folder("xlmr_cross", cfg, sd, head, "XLMRobertaTokenizer")
    exp, scores = {}, []
    for i, e in enumerate(enc["pairs"]):
        ids = torch.tensor([e["input_ids"]])
        h = roberta_forward(cfg, sd, ids)
        x = torch.tanh(lin(h[:, 0], head["classifier.dense.weight"], head["classifier.dense.bias"]))
        lg = lin(x, head["classifier.out_proj.weight"], head["classifier.out_proj.bias"])
        exp[f"pairs_input_ids_{i}"], exp[f"pairs_logits_{i}"] = npy(ids), npy(lg)
        scores.append(float(torch.sigmoid(lg[0, 0])))
    st.save(exp, os.path.join(d, "expected.safetensors"))
    order = sorted(range(len(scores)), key=lambda k: -scores[k])
    save_json({"query": enc["query"], "passages": enc["passages"],
               "ranking": [{"index": k, "score": scores[k]} for k in order]}, os.path.join(d, "expected.json"))


# ------------------------------------------------------------------------------------------------ DistilBERT

DISTIL_CONFIG = {
    "architectures": ["DistilBertModel"],
    "model_type": "distilbert",
    "vocab_size": 2505,
    "dim": 32,
    "n_layers": 2,
    "n_heads": 4,
    "hidden_dim": 64,
    "activation": "gelu",
    "max_position_embeddings": 40,
    "sinusoidal_pos_embds": False,
    "pad_token_id": 0,
    "dropout": 0.1,
    "attention_dropout": 0.1,
    "seq_classif_dropout": 0.2,
    "qa_dropout": 0.1,
    "initializer_range": 0.02,
}
EPS = 1e-12


def distil_weights(c, seed):
    """DistilBertModel's state dict (unprefixed names), random (std 0.3; LayerNorm around 1)."""
    torch.manual_seed(seed)
    H, I = c["dim"], c["hidden_dim"]
    g = lambda *s: torch.randn(*s) * 0.3  # noqa: E731
    sd = {"embeddings.word_embeddings.weight": g(c["vocab_size"], H),
          "embeddings.position_embeddings.weight": g(c["max_position_embeddings"], H),
          "embeddings.LayerNorm.weight": 1 + 0.1 * torch.randn(H), "embeddings.LayerNorm.bias": 0.1 * torch.randn(H)}
    for l in range(c["n_layers"]):
        p = f"transformer.layer.{l}."
        for n, (o, i) in {"attention.q_lin": (H, H), "attention.k_lin": (H, H), "attention.v_lin": (H, H),
                          "attention.out_lin": (H, H), "ffn.lin1": (I, H), "ffn.lin2": (H, I)}.items():
            sd[p + n + ".weight"] = g(o, i) / math.sqrt(i) * 3
            sd[p + n + ".bias"] = g(o)
        for n in ("sa_layer_norm", "output_layer_norm"):
            sd[p + n + ".weight"] = 1 + 0.1 * torch.randn(H)
            sd[p + n + ".bias"] = 0.1 * torch.randn(H)
    return sd


def distil_forward(c, sd, input_ids, attention_mask=None):
    """modeling_distilbert.py DistilBertModel.forward (eval mode): last_hidden_state [B, L, dim]."""
    with torch.no_grad():
        return distil_body(c, sd, input_ids, attention_mask)


def distil_body(c, sd, input_ids, attention_mask=None):
    """distil_forward with autograd (training mode at dropout 0; make_finetune_family_fixtures.py)."""
    B, L = input_ids.shape
    H, nh = c["dim"], c["n_heads"]
    hd = H // nh
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    lin_ = lambda x, n: F.linear(x, sd[n + ".weight"], sd[n + ".bias"])  # noqa: E731
    ln = lambda x, n: F.layer_norm(x, (H,), sd[n + ".weight"], sd[n + ".bias"], EPS)  # noqa: E731
    act = {"gelu": F.gelu, "relu": F.relu}[c["activation"]]
    if True:
        pos = torch.arange(L).unsqueeze(0)
        x = F.embedding(input_ids, sd["embeddings.word_embeddings.weight"]) + \
            F.embedding(pos, sd["embeddings.position_embeddings.weight"])
        x = ln(x, "embeddings.LayerNorm")
        masked = (attention_mask == 0).view(B, 1, 1, L)
        for l in range(c["n_layers"]):
            p = f"transformer.layer.{l}."
            shape = lambda t: t.view(B, L, nh, hd).transpose(1, 2)  # noqa: E731
            q = shape(lin_(x, p + "attention.q_lin")) / math.sqrt(hd)
            k = shape(lin_(x, p + "attention.k_lin"))
            v = shape(lin_(x, p + "attention.v_lin"))
            scores = (q @ k.transpose(2, 3)).masked_fill(masked, torch.finfo(torch.float32).min)
            ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, L, H)
            sa = ln(lin_(ctx, p + "attention.out_lin") + x, p + "sa_layer_norm")
            x = ln(lin_(act(lin_(sa, p + "ffn.lin1")), p + "ffn.lin2") + sa, p + "output_layer_norm")
    return x


def distil_bert_cross_check(c, sd, ids, mask, got):
    """BertModelRef on the same weights under BERT's names, token type embedding zero."""
    H = c["dim"]
    bc = Cfg({"vocab_size": c["vocab_size"], "hidden_size": H, "num_hidden_layers": c["n_layers"],
              "num_attention_heads": c["n_heads"], "intermediate_size": c["hidden_dim"],
              "max_position_embeddings": c["max_position_embeddings"], "type_vocab_size": 2,
              "layer_norm_eps": EPS, "hidden_act": c["activation"]})
    names = {"attention.q_lin": "attention.self.query", "attention.k_lin": "attention.self.key",
             "attention.v_lin": "attention.self.value", "attention.out_lin": "attention.output.dense",
             "sa_layer_norm": "attention.output.LayerNorm", "ffn.lin1": "intermediate.dense",
             "ffn.lin2": "output.dense", "output_layer_norm": "output.LayerNorm"}
    bsd = {"embeddings.token_type_embeddings.weight": torch.zeros(2, H),
           "pooler.dense.weight": torch.zeros(H, H), "pooler.dense.bias": torch.zeros(H)}
    for k, v in sd.items():
        if k.startswith("transformer.layer."):
            l, rest = k[len("transformer.layer."):].split(".", 1)
            leaf = rest.rsplit(".", 1)
            k = f"encoder.layer.{l}.{names[leaf[0]]}.{leaf[1]}"
        bsd[k] = v
    bert = rm.BertModelRef(bc)
    bert.load_state_dict(bsd, strict=True)
    bert.eval()
    with torch.no_grad():
        want, _ = bert(ids, torch.zeros_like(ids), mask)
    valid = mask.bool()
    err = (got[valid] - want[valid]).abs().max().item()
    assert err < 1e-5, f"DistilBertRef differs from BertModelRef by {err}"
    return err


def distil_folder(name, config, sd, head, prefix=True):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    save_json(config, os.path.join(d, "config.json"))
    shutil.copyfile(os.path.join(FIX, "tokenizer", "wordpiece", "tokenizer.json"), os.path.join(d, "tokenizer.json"))
    save_json({"tokenizer_class": "DistilBertTokenizer", "model_input_names": ["input_ids", "attention_mask"],
               "clean_up_tokenization_spaces": True, "mask_token": "[MASK]", "do_lower_case": False,
               "model_max_length": config["max_position_embeddings"]}, os.path.join(d, "tokenizer_config.json"))
    tensors = {("distilbert." if prefix else "") + k: npy(v) for k, v in sd.items()}
    tensors.update({k: npy(v) for k, v in head.items()})
    st.save(tensors, os.path.join(d, "model.safetensors"))
    return d


def make_distilbert(tok):
    enc = ENC["wordpiece"]
    c = DISTIL_CONFIG
    H, V = c["dim"], c["vocab_size"]
    assert len(tok.id_to_token) == V
    mask_id, pad_id = tok.token_to_id["[MASK]"], tok.token_to_id["[PAD]"]

    # --- base model: hidden states, single input and padded batch; cross-checked against BERT
    sd = distil_weights(c, 2201)
    d = distil_folder("distilbert", c, sd, {}, prefix=False)
    single = torch.tensor([enc["classify"][0]["input_ids"]])
    h_single = distil_forward(c, sd, single)
    ids, mask = padded(enc["classify"], c["pad_token_id"])
    h_batch = distil_forward(c, sd, ids, mask)
    e1 = distil_bert_cross_check(c, sd, single, torch.ones_like(single), h_single)
    e2 = distil_bert_cross_check(c, sd, ids, mask, h_batch)
    assert (h_batch[0, :single.shape[1]] - h_single[0]).abs().max() < 1e-5
    st.save({"input_ids_single": npy(single), "last_hidden_state_single": npy(h_single), "input_ids": npy(ids),
             "attention_mask": npy(mask), "last_hidden_state": npy(h_batch)}, os.path.join(d, "expected.safetensors"))

    # --- sequence classification: pre_classifier -> ReLU -> classifier on [CLS]; 2 labels (also a cross-encoder)
    labels = ["NEGATIVE", "POSITIVE"]
    cfg = dict(c, architectures=["DistilBertForSequenceClassification"],
               id2label={str(i): l for i, l in enumerate(labels)}, label2id={l: i for i, l in enumerate(labels)})
    sd = distil_weights(cfg, 2211)
    g = torch.Generator().manual_seed(2212)
    head = {"pre_classifier.weight": torch.randn(H, H, generator=g) * 0.2,
            "pre_classifier.bias": torch.randn(H, generator=g) * 0.1,
            "classifier.weight": torch.randn(2, H, generator=g) * 0.4, "classifier.bias": torch.randn(2, generator=g) * 0.1}

    def seq_head(h):
        x = F.relu(lin(h[:, 0], head["pre_classifier.weight"], head["pre_classifier.bias"]))
        return lin(x, head["classifier.weight"], head["classifier.bias"])

    d = distil_folder("distilbert_seqcls", cfg, sd, head)
    exp, logits = {}, []
    for i, e in enumerate(enc["classify"]):
        ids1 = torch.tensor([e["input_ids"]])
        h = distil_forward(cfg, sd, ids1)
        lg = seq_head(h)
        exp[f"classify_input_ids_{i}"], exp[f"classify_logits_{i}"] = npy(ids1), npy(lg)
        exp[f"classify_hidden_{i}"] = npy(h)
        logits.append(lg[0])
    blg = seq_head(distil_forward(cfg, sd, ids, mask))
    assert (blg - torch.stack(logits)).abs().max() < 1e-5
    exp.update(batch_input_ids=npy(ids), batch_attention_mask=npy(mask), batch_logits=npy(blg))
    scores = []
    for i, e in enumerate(enc["pairs"]):
        ids1 = torch.tensor([e["input_ids"]])  # token_type_ids are not an input of DistilBERT
        lg = seq_head(distil_forward(cfg, sd, ids1))
        exp[f"pairs_input_ids_{i}"], exp[f"pairs_logits_{i}"] = npy(ids1), npy(lg)
        scores.append(float(lg[0].softmax(-1)[1]))
    st.save(exp, os.path.join(d, "expected.safetensors"))
    order = sorted(range(len(scores)), key=lambda k: -scores[k])
    save_json({"texts": [e["text"] for e in enc["classify"]], "results": classify_json(logits, labels),
               "query": enc["query"], "passages": enc["passages"],
               "ranking": [{"index": k, "score": scores[k]} for k in order]}, os.path.join(d, "expected.json"))

    # --- token classification
    tl = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    cfg = dict(c, architectures=["DistilBertForTokenClassification"],
               id2label={str(i): l for i, l in enumerate(tl)}, label2id={l: i for i, l in enumerate(tl)})
    sd = distil_weights(cfg, 2221)
    g = torch.Generator().manual_seed(2222)
    head = {"classifier.weight": torch.randn(5, H, generator=g) * 1.2, "classifier.bias": torch.randn(5, generator=g)}
    d = distil_folder("distilbert_tokcls", cfg, sd, head)
    exp, lgs = {}, []
    for i, e in enumerate(enc["tag"]):
        ids1 = torch.tensor([e["input_ids"]])
        lg = lin(distil_forward(cfg, sd, ids1), head["classifier.weight"], head["classifier.bias"])
        exp[f"tag_input_ids_{i}"], exp[f"tag_logits_{i}"] = npy(ids1), npy(lg)
        lgs.append(lg)
    st.save(exp, os.path.join(d, "expected.safetensors"))
    save_json({"texts": [e["text"] for e in enc["tag"]], "entities": tag_json(enc["tag"], lgs, tl)},
              os.path.join(d, "expected.json"))

    # --- masked LM: vocab_transform -> gelu -> vocab_layer_norm -> vocab_projector (tied)
    cfg = dict(c, architectures=["DistilBertForMaskedLM"])
    sd = distil_weights(cfg, 2231)
    g = torch.Generator().manual_seed(2232)
    head = {"vocab_transform.weight": torch.randn(H, H, generator=g) * 0.3,
            "vocab_transform.bias": torch.randn(H, generator=g) * 0.3,
            "vocab_layer_norm.weight": 1 + 0.1 * torch.randn(H, generator=g),
            "vocab_layer_norm.bias": 0.1 * torch.randn(H, generator=g),
            "vocab_projector.bias": torch.randn(V, generator=g) * 0.5}
    d = distil_folder("distilbert_mlm", cfg, sd, head)
    exp, lgs = {}, []
    for i, e in enumerate(enc["fill"]):
        ids1 = torch.tensor([e["input_ids"]])
        h = distil_forward(cfg, sd, ids1)[0]
        pos = [k for k, t in enumerate(e["input_ids"]) if t == mask_id]
        x = F.gelu(lin(h[pos], head["vocab_transform.weight"], head["vocab_transform.bias"]))
        x = F.layer_norm(x, (H,), head["vocab_layer_norm.weight"], head["vocab_layer_norm.bias"], EPS)
        lg = x @ sd["embeddings.word_embeddings.weight"].T + head["vocab_projector.bias"]
        exp[f"fill_input_ids_{i}"], exp[f"fill_logits_{i}"] = npy(ids1), npy(lg)
        lgs.append(lg)
    st.save(exp, os.path.join(d, "expected.safetensors"))
    save_json({"texts": [e["text"] for e in enc["fill"]],
               "results": fill_json(tok, enc["fill"], lgs, mask_id, pad_id, True)}, os.path.join(d, "expected.json"))
    return max(e1, e2)


# ------------------------------------------------------------------------------------------------ BERT, MPNet, ModernBERT
# One sequence classifier with two labels (classify and rerank) and one masked LM per family, so that every family
# runs through the same commands (tests/test_family_matrix.cpp, python/tests/test_family_matrix.py).

BERT_CONFIG = {
    "architectures": ["BertModel"], "model_type": "bert", "vocab_size": 2505, "hidden_size": 32,
    "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 40,
    "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu", "pad_token_id": 0,
    "position_embedding_type": "absolute", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
    "initializer_range": 0.02,
}


def bert_weights(c, seed):
    """BertModel's state dict (unprefixed names, with the pooler): RobertaModel's names are BERT's."""
    torch.manual_seed(seed)
    return rob.random_weights(Cfg(c))


def bert_forward(c, sd, ids, token_type_ids):
    """BertModelRef (../shared/reference/torch, modeling_bert.py BertModel): (last_hidden_state, pooler_output)."""
    bert = rm.BertModelRef(Cfg(c))
    bert.load_state_dict(sd, strict=True)
    bert.eval()
    with torch.no_grad():
        return bert(ids, token_type_ids, torch.ones_like(ids))


def family_folder(name, config, tensors, tokenizer_json, tokenizer_config):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    save_json(config, os.path.join(d, "config.json"))
    shutil.copyfile(tokenizer_json, os.path.join(d, "tokenizer.json"))
    save_json(tokenizer_config, os.path.join(d, "tokenizer_config.json"))
    st.save({k: npy(v) for k, v in tensors.items()}, os.path.join(d, "model.safetensors"))
    return d


def lm_head(seed, H, V, names, word_embeddings, eps):
    """A BERT-style masked-LM head (BertLMPredictionHead, RobertaLMHead, MPNetLMHead): random tensors under
    names = (dense, layer norm, vocabulary bias), and its forward dense -> gelu -> LayerNorm(eps) -> decoder tied to
    word_embeddings + bias."""
    dense, norm, bias = names
    g = torch.Generator().manual_seed(seed)
    head = {dense + ".weight": torch.randn(H, H, generator=g) * 0.3, dense + ".bias": torch.randn(H, generator=g) * 0.3,
            norm + ".weight": 1 + 0.1 * torch.randn(H, generator=g), norm + ".bias": 0.1 * torch.randn(H, generator=g),
            bias: torch.randn(V, generator=g) * 0.5}

    def forward(h):
        x = F.gelu(lin(h, head[dense + ".weight"], head[dense + ".bias"]))
        x = F.layer_norm(x, (H,), head[norm + ".weight"], head[norm + ".bias"], eps)
        return x @ word_embeddings.T + head[bias]
    return head, forward


def write_classifier(d, enc, body, seq_head, labels):
    """expected.safetensors / expected.json of a two-label sequence classifier: per `classify` text the input ids,
    the body's last_hidden_state ("classify_hidden_<i>") and the logits; per (query, passage) pair the ids and
    logits; the pipeline's best label and the rerank order (softmax probability of label 1).
    body(e) -> last_hidden_state [1, L, H] of an encodings.json entry."""
    exp, logits, scores = {}, [], []
    for i, e in enumerate(enc["classify"]):
        h = body(e)
        lg = seq_head(h)
        exp[f"classify_input_ids_{i}"], exp[f"classify_hidden_{i}"] = npy(torch.tensor([e["input_ids"]])), npy(h)
        exp[f"classify_logits_{i}"] = npy(lg)
        logits.append(lg[0])
    for i, e in enumerate(enc["pairs"]):
        lg = seq_head(body(e))
        exp[f"pairs_input_ids_{i}"], exp[f"pairs_logits_{i}"] = npy(torch.tensor([e["input_ids"]])), npy(lg)
        scores.append(float(lg[0].softmax(-1)[1]))
    st.save(exp, os.path.join(d, "expected.safetensors"))
    order = sorted(range(len(scores)), key=lambda k: -scores[k])
    save_json({"texts": [e["text"] for e in enc["classify"]], "results": classify_json(logits, labels),
               "query": enc["query"], "passages": enc["passages"],
               "ranking": [{"index": k, "score": scores[k]} for k in order]}, os.path.join(d, "expected.json"))


def write_tagger(d, enc, body, tok_head, labels):
    """expected.safetensors / expected.json of a token classifier on the `tag` texts: ids and logits [1, L, C] per
    text, and the token-classification pipeline's entities (aggregation none). body(e) -> [1, L, H]."""
    exp, lgs = {}, []
    for i, e in enumerate(enc["tag"]):
        lg = tok_head(body(e))
        exp[f"tag_input_ids_{i}"], exp[f"tag_logits_{i}"] = npy(torch.tensor([e["input_ids"]])), npy(lg)
        lgs.append(lg)
    st.save(exp, os.path.join(d, "expected.safetensors"))
    save_json({"texts": [e["text"] for e in enc["tag"]], "entities": tag_json(enc["tag"], lgs, labels)},
              os.path.join(d, "expected.json"))


TAGS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]


def write_fill(d, tok, enc, body, mlm_head, mask_id, pad_id, cleanup):
    """expected.safetensors / expected.json of a masked LM on the `fill` texts: ids, logits [P, V] at the masks."""
    exp, lgs = {}, []
    for i, e in enumerate(enc["fill"]):
        h = body(e)[0]
        pos = [k for k, t in enumerate(e["input_ids"]) if t == mask_id]
        lg = mlm_head(h[pos])
        exp[f"fill_input_ids_{i}"], exp[f"fill_logits_{i}"] = npy(torch.tensor([e["input_ids"]])), npy(lg)
        lgs.append(lg)
    st.save(exp, os.path.join(d, "expected.safetensors"))
    save_json({"texts": [e["text"] for e in enc["fill"]],
               "results": fill_json(tok, enc["fill"], lgs, mask_id, pad_id, cleanup)}, os.path.join(d, "expected.json"))


def make_bert(tok):
    """BertForSequenceClassification (classifier(pooler_output), token_type_ids from the pair encodings) and
    BertForMaskedLM (cls.predictions.transform.{dense, gelu, LayerNorm} -> decoder tied to the word embeddings +
    cls.predictions.bias), "bert."-prefixed, on the WordPiece tokenizer."""
    enc, c = ENC["wordpiece"], BERT_CONFIG
    H, V = c["hidden_size"], c["vocab_size"]
    tjson = os.path.join(FIX, "tokenizer", "wordpiece", "tokenizer.json")
    tcfg = {"tokenizer_class": "BertTokenizer", "do_lower_case": False, "mask_token": "[MASK]",
            "clean_up_tokenization_spaces": True, "model_max_length": c["max_position_embeddings"]}
    labels = ["NEGATIVE", "POSITIVE"]
    cfg = dict(c, architectures=["BertForSequenceClassification"],
               id2label={str(i): l for i, l in enumerate(labels)}, label2id={l: i for i, l in enumerate(labels)})
    sd = bert_weights(cfg, 2301)
    g = torch.Generator().manual_seed(2302)
    head = {"classifier.weight": torch.randn(2, H, generator=g) * 0.8, "classifier.bias": torch.randn(2, generator=g) * 0.1}
    pooled = {}

    def body(e):
        h, p = bert_forward(cfg, sd, torch.tensor([e["input_ids"]]), torch.tensor([e["token_type_ids"]]))
        pooled["last"] = p
        return h

    d = family_folder("bert_seqcls", cfg, dict({"bert." + k: v for k, v in sd.items()}, **head), tjson, tcfg)
    write_classifier(d, enc, body, lambda h: lin(pooled["last"], head["classifier.weight"], head["classifier.bias"]),
                     labels)

    cfg = dict(c, architectures=["BertForMaskedLM"])
    sd = bert_weights(cfg, 2311)
    names = ("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm", "cls.predictions.bias")
    head, mlm_head = lm_head(2312, H, V, names, sd["embeddings.word_embeddings.weight"], c["layer_norm_eps"])

    body_sd = {"bert." + k: v for k, v in sd.items() if not k.startswith("pooler.")}  # add_pooling_layer=False
    d = family_folder("bert_mlm", cfg, dict(body_sd, **head), tjson, tcfg)
    write_fill(d, tok, enc, lambda e: bert_forward(cfg, sd, torch.tensor([e["input_ids"]]),
                                                   torch.tensor([e["token_type_ids"]]))[0],
               mlm_head, tok.token_to_id["[MASK]"], tok.token_to_id["[PAD]"], True)


def make_mpnet(tok):
    """MPNetForSequenceClassification (MPNetClassificationHead on <s>, two labels) and MPNetForMaskedLM
    (MPNetLMHead, decoder tied), "mpnet."-prefixed bodies without pooler, MPNetRef of make_mpnet_fixtures.py."""
    enc = ENC["mpnet"]
    c = mp.CONFIG
    H, V = c["hidden_size"], c["vocab_size"]
    tjson = os.path.join(FIX, "mpnet", "tokenizer.json")
    tcfg = {"tokenizer_class": "MPNetTokenizer", "do_lower_case": True, "model_max_length": 62,
            "mask_token": {"content": "<mask>", "lstrip": True, "normalized": False, "rstrip": False,
                           "single_word": False, "special": True}}
    labels = ["NEGATIVE", "POSITIVE"]
    cfg = dict(c, architectures=["MPNetForSequenceClassification"],
               id2label={str(i): l for i, l in enumerate(labels)}, label2id={l: i for i, l in enumerate(labels)})
    torch.manual_seed(2321)
    sd = mp.random_weights(Cfg(cfg))
    head, seq_head = classification_head(2322, H, 2)

    def body_of(sd):
        def body(e):
            with torch.no_grad():
                return mp.MPNetRef(Cfg(cfg), sd).forward(torch.tensor([e["input_ids"]]))[0]
        return body

    body_sd = lambda sd: {"mpnet." + k: v for k, v in sd.items() if not k.startswith("pooler.")}  # noqa: E731
    d = family_folder("mpnet_seqcls", cfg, dict(body_sd(sd), **head), tjson, tcfg)
    write_classifier(d, enc, body_of(sd), seq_head, labels)

    cfg = dict(c, architectures=["MPNetForMaskedLM"])
    torch.manual_seed(2331)
    sd = mp.random_weights(Cfg(cfg))
    mhead, mlm_head = lm_head(2332, H, V, ("lm_head.dense", "lm_head.layer_norm", "lm_head.bias"),
                              sd["embeddings.word_embeddings.weight"], c["layer_norm_eps"])

    d = family_folder("mpnet_mlm", cfg, dict(body_sd(sd), **mhead), tjson, tcfg)
    write_fill(d, tok, enc, body_of(sd), mlm_head, tok.token_to_id["<mask>"], tok.token_to_id["<pad>"], True)

    # MPNetForTokenClassification: classifier(dropout(sequence_output)), five labels.
    cfg = dict(c, architectures=["MPNetForTokenClassification"],
               id2label={str(i): l for i, l in enumerate(TAGS)}, label2id={l: i for i, l in enumerate(TAGS)})
    torch.manual_seed(2341)
    sd = mp.random_weights(Cfg(cfg))
    g = torch.Generator().manual_seed(2342)
    thead = {"classifier.weight": torch.randn(5, H, generator=g) * 1.2, "classifier.bias": torch.randn(5, generator=g)}
    d = family_folder("mpnet_tokcls", cfg, dict(body_sd(sd), **thead), tjson, tcfg)
    write_tagger(d, enc, body_of(sd), lambda h: lin(h, thead["classifier.weight"], thead["classifier.bias"]), TAGS)


def make_modernbert(tok):
    """ModernBertForSequenceClassification (classifier(head(h[:, 0])), classifier_pooling cls, two labels) and
    ModernBertForMaskedLM (decoder(head(h)), decoder tied + decoder.bias), "model."-prefixed, ModernBertRef of
    make_modernbert_fixtures.py (local_attention 8: the window matters on these 13- to 21-token inputs)."""
    enc = ENC["bpe_bytelevel"]
    c = mb.CONFIG
    H, V = c["hidden_size"], c["vocab_size"]
    tjson = os.path.join(FIX, "tokenizer", "bpe_bytelevel", "tokenizer.json")
    tcfg = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
            "mask_token": {"content": "<mask>", "lstrip": True, "normalized": False, "rstrip": False,
                           "single_word": False, "special": True}, "model_max_length": 8192}
    labels = ["NEGATIVE", "POSITIVE"]
    cfg = dict(c, architectures=["ModernBertForSequenceClassification"],
               id2label={str(i): l for i, l in enumerate(labels)}, label2id={l: i for i, l in enumerate(labels)})

    def weights(seed):
        torch.manual_seed(seed)
        sd = mb.random_weights(Cfg(cfg))
        hsd = {"head.dense.weight": torch.randn(H, H) / math.sqrt(H), "head.norm.weight": 1 + 0.1 * torch.randn(H)}
        return sd, hsd

    def body_of(sd):
        def body(e):
            with torch.no_grad():
                return mb.ModernBertRef(Cfg(cfg), sd).forward(torch.tensor([e["input_ids"]]))
        return body

    sd, hsd = weights(2341)
    g = torch.Generator().manual_seed(2342)
    cls = {"classifier.weight": torch.randn(2, H, generator=g) / math.sqrt(H) * 2,
           "classifier.bias": torch.randn(2, generator=g) * 0.3}
    tensors = dict({"model." + k: v for k, v in sd.items()}, **hsd, **cls)
    d = family_folder("modernbert_seqcls", cfg, tensors, tjson, tcfg)
    write_classifier(d, enc, body_of(sd),
                     lambda h: lin(mb.head(Cfg(cfg), hsd, h[:, 0]), cls["classifier.weight"], cls["classifier.bias"]),
                     labels)

    cfg = dict(c, architectures=["ModernBertForMaskedLM"])
    sd, hsd = weights(2351)
    decoder_bias = torch.randn(V, generator=torch.Generator().manual_seed(2352)) * 0.3
    tensors = dict({"model." + k: v for k, v in sd.items()}, **hsd)
    tensors["decoder.bias"] = decoder_bias
    d = family_folder("modernbert_mlm", cfg, tensors, tjson, tcfg)
    write_fill(d, tok, enc, body_of(sd),
               lambda h: F.linear(mb.head(Cfg(cfg), hsd, h), sd["embeddings.tok_embeddings.weight"], decoder_bias),
               tok.token_to_id["<mask>"], tok.token_to_id["<pad>"], False)

    # ModernBertForTokenClassification: classifier(drop(head(last_hidden_state))) on every token, five labels.
    cfg = dict(c, architectures=["ModernBertForTokenClassification"],
               id2label={str(i): l for i, l in enumerate(TAGS)}, label2id={l: i for i, l in enumerate(TAGS)})
    sd, hsd = weights(2361)
    g = torch.Generator().manual_seed(2362)
    tcls = {"classifier.weight": torch.randn(5, H, generator=g) / math.sqrt(H) * 2,
            "classifier.bias": torch.randn(5, generator=g) * 0.3}
    d = family_folder("modernbert_tokcls", cfg, dict({"model." + k: v for k, v in sd.items()}, **hsd, **tcls),
                      tjson, tcfg)
    write_tagger(d, enc, body_of(sd),
                 lambda h: lin(mb.head(Cfg(cfg), hsd, h), tcls["classifier.weight"], tcls["classifier.bias"]), TAGS)


def main():
    bpe = Tok(os.path.join(FIX, "tokenizer", "bpe_bytelevel", "tokenizer.json"))
    wp = Tok(os.path.join(FIX, "tokenizer", "wordpiece", "tokenizer.json"))
    mpt = Tok(os.path.join(FIX, "mpnet", "tokenizer.json"))
    check_decoder(bpe, "bpe_bytelevel")
    check_decoder(wp, "wordpiece")
    check_decoder(mpt, "mpnet")
    make_roberta(bpe)
    err = make_distilbert(wp)
    make_bert(wp)
    make_mpnet(mpt)
    make_modernbert(bpe)
    print(f"wrote {os.path.relpath(OUT, ROOT)}; DistilBertRef vs BertModelRef max |diff| {err:.2e}")


# ------------------------------------------------------------------ config keys at values other than their defaults
# (issue 48; tests/test_config_key_fixtures.cpp compares it with the reference)
def distilbert_config_key_fixture():
    """tests/fixtures/config_keys/distilbert: activation relu (the default is gelu); DistilBertModel layout
    (unprefixed); expected.safetensors: the `classify` texts padded with pad_token_id (input_ids, attention_mask)
    and last_hidden_state, cross-checked against BertModelRef with hidden_act relu."""
    c = dict(DISTIL_CONFIG, activation="relu")
    sd = distil_weights(c, 4831)
    ids, mask = padded(ENC["wordpiece"]["classify"], c["pad_token_id"])
    h = distil_forward(c, sd, ids, mask)
    distil_bert_cross_check(c, sd, ids, mask, h)
    assert (h - distil_forward(DISTIL_CONFIG, sd, ids, mask))[mask.bool()].abs().max().item() > 1e-2
    d = os.path.join(FIX, "config_keys", "distilbert")
    os.makedirs(d, exist_ok=True)
    save_json(c, os.path.join(d, "config.json"))
    st.save({k: npy(v) for k, v in sd.items()}, os.path.join(d, "model.safetensors"))
    st.save({"input_ids": npy(ids), "attention_mask": npy(mask), "last_hidden_state": npy(h)},
            os.path.join(d, "expected.safetensors"))
    print(f"wrote {os.path.relpath(d, ROOT)}")


if __name__ == "__main__":
    if "--config-keys" not in sys.argv[1:]:  # --config-keys: only tests/fixtures/config_keys/distilbert
        main()
    distilbert_config_key_fixture()
