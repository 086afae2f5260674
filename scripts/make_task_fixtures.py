#!/usr/bin/env python3
"""Golden fixtures of the task pipelines over encoder heads (issue 45): tests/fixtures/tasks/.

    cd scripts && npm install && node make_task_encodings.js     # tests/fixtures/tasks/encodings.json
    /usr/bin/python3 scripts/make_task_fixtures.py                # expected.json and the NLI folders

No transformers package exists here, so the pipelines' post-processing is written below from transformers
4.5x's source (src/transformers/pipelines/):
  * text_classification.py TextClassificationPipeline.postprocess: function_to_apply (default: none for
    problem_type regression, sigmoid for multi_label_classification or num_labels == 1, else softmax); top_k 1
    without top_k given ("legacy": {label, score}), else every label sorted best first and cut to top_k (None: all);
    a (text, text_pair) input is tokenized as a pair.
  * zero_shot_classification.py: hypothesis_template.format(label) as the pair of each sequence, candidate labels
    from a string split on "," and stripped; entailment_id = the first label2id entry whose lower-cased name starts
    with "entail" (else -1); postprocess: multi_label (or one label) softmax over [contradiction_id, entailment_id]
    per label (contradiction_id = -1 if entailment_id == 0 else 0), else softmax of the entailment logits over the
    labels; labels sorted by score, best first.
  * token_classification.py: gather_pre_entities (special tokens skipped; word = the vocabulary piece; with a
    continuing_subword_prefix (WordPiece "##") is_subword = len(word) != len(text[start:end]); an [UNK] piece takes
    the text it stands for and is never a subword), aggregate (none / simple: argmax per token; first / average /
    max over the pieces of a word), group_entities (B-/I- tags, a B starts a group; entity_group without the
    prefix, score the mean, word = convert_tokens_to_string of the pieces: the WordPiece decoder with cleanup,
    start / end of the first / last piece), ignore_labels (default ["O"]) on entity / entity_group.
The models are the committed heads_seqcls and heads_tokcls checkpoints (BertModelRef of ../shared/reference/torch),
and two new NLI-shaped 3-label BertForSequenceClassification folders: tasks/nli_contradiction_first (id2label
CONTRADICTION, NEUTRAL, ENTAILMENT, as roberta-large-mnli) and tasks/nli_entailment_first (entailment, neutral,
contradiction, as MoritzLaurer's DeBERTa NLI models) with the same body and the classifier's rows permuted to
match, so both answer the same and an entailment id taken by position instead of by name fails one of them.
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
from torch import nn  # noqa: E402

import make_embed_fixtures as mef  # noqa: E402  (BertModelRef construction, save helpers)
import st  # noqa: E402  (../shared/reference/torch/st.py, on the path through make_embed_fixtures)

FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "tasks")
ENC = json.load(open(os.path.join(OUT, "encodings.json"), encoding="utf-8"))


# ------------------------------------------------------------------------------------------------ models

def load_head(folder):
    """(BertModelRef, classifier nn.Linear, config) of a committed Bert*Classification folder."""
    cfg = json.load(open(os.path.join(folder, "config.json")))
    sd = {k: torch.from_numpy(np.array(v)) for k, v in st.load(os.path.join(folder, "model.safetensors")).items()}
    net = mef.rm.BertModelRef(types.SimpleNamespace(**cfg))
    body = {k[len("bert."):]: v for k, v in sd.items() if k.startswith("bert.")}
    missing = net.load_state_dict(body, strict=False)
    assert not missing.unexpected_keys, missing
    assert all(k.startswith("pooler.") for k in missing.missing_keys), missing
    w = sd["classifier.weight"]
    clf = nn.Linear(w.shape[1], w.shape[0])
    with torch.no_grad():
        clf.weight.copy_(w)
        clf.bias.copy_(sd["classifier.bias"])
    return net.eval(), clf, cfg


def batch(encs):
    L = max(len(e["input_ids"]) for e in encs)
    ids = torch.zeros(len(encs), L, dtype=torch.long)
    tt = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for i, e in enumerate(encs):
        n = len(e["input_ids"])
        ids[i, :n] = torch.tensor(e["input_ids"])
        tt[i, :n] = torch.tensor(e["token_type_ids"])
        mask[i, :n] = 1
    return ids, tt, mask


def sequence_logits(net, clf, encs):
    ids, tt, mask = batch(encs)
    with torch.no_grad():
        _, pooled = net(ids, tt, mask)
        return clf(pooled).numpy().astype(np.float32)


def token_logits(net, clf, encs):
    ids, tt, mask = batch(encs)
    with torch.no_grad():
        h, _ = net(ids, tt, mask)
        return clf(h).numpy().astype(np.float32)


# ------------------------------------------------------------------------------------------------ text classification

def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def text_classification_postprocess(logits, id2label, function, top_k, legacy):
    scores = {"softmax": softmax, "sigmoid": sigmoid, "none": lambda v: v}[function](logits)
    if top_k == 1 and legacy:
        return {"label": id2label[int(scores.argmax())], "score": float(scores.max())}
    d = [{"label": id2label[i], "score": float(s)} for i, s in enumerate(scores)]
    d.sort(key=lambda x: x["score"], reverse=True)
    return d[:top_k] if top_k is not None else d


def make_classify():
    net, clf, cfg = load_head(os.path.join(FIX, "heads_seqcls"))
    id2label = [cfg["id2label"][str(i)] for i in range(len(cfg["id2label"]))]
    out = {"texts": [], "pairs": []}
    for key, encs in (("texts", ENC["classify"]), ("pairs", ENC["pairs"])):
        logits = sequence_logits(net, clf, encs)
        for e, lg in zip(encs, logits):
            row = {"text": e["text"], "logits": lg.tolist()}
            if e["pair"] is not None:
                row["text_pair"] = e["pair"]
            row["default"] = text_classification_postprocess(lg, id2label, "softmax", 1, True)
            for fn in ("softmax", "sigmoid", "none"):
                row[fn + "_all"] = text_classification_postprocess(lg, id2label, fn, None, False)
            row["top_k_2"] = text_classification_postprocess(lg, id2label, "softmax", 2, False)
            row["top_k_1"] = text_classification_postprocess(lg, id2label, "softmax", 1, False)
            # problem_type multi_label_classification: sigmoid by default
            row["multi_label_default"] = text_classification_postprocess(lg, id2label, "sigmoid", 1, True)
            out[key].append(row)
    return out


# ------------------------------------------------------------------------------------------------ zero-shot

NLI_LABELS = {"nli_contradiction_first": ["CONTRADICTION", "NEUTRAL", "ENTAILMENT"],
              "nli_entailment_first": ["entailment", "neutral", "contradiction"]}


def make_nli_folders(vocab):
    V = len(vocab)
    H = 32
    base = None
    for name, labels in NLI_LABELS.items():
        d = os.path.join(OUT, name)
        cfg = mef.bert_config(V, architectures=["BertForSequenceClassification"],
                              id2label={str(i): l for i, l in enumerate(labels)},
                              label2id={l: i for i, l in enumerate(labels)})
        net = mef.make_bert(cfg, 4500)
        if base is None:
            torch.manual_seed(4550)
            base = nn.Linear(H, 3)  # rows in the order contradiction, neutral, entailment
            with torch.no_grad():
                base.weight.mul_(16.0)
        perm = [["contradiction", "neutral", "entailment"].index(l.lower()) for l in labels]
        sd = mef.body_sd(net, "bert.")
        sd["classifier.weight"], sd["classifier.bias"] = base.weight[perm], base.bias[perm]
        mef.save_json(cfg, os.path.join(d, "config.json"))
        mef.save(sd, os.path.join(d, "model.safetensors"))
        mef.write_tokenizer(d, vocab)


def entailment_id(label2id):
    for label, ind in label2id.items():
        if label.lower().startswith("entail"):
            return ind
    return -1


def zero_shot_postprocess(sequence, candidate_labels, logits, entail, multi_label):
    """logits: [n_labels, C] of (sequence, hypothesis of each label)."""
    if multi_label or len(candidate_labels) == 1:
        contradiction = -1 if entail == 0 else 0
        ec = logits[:, [contradiction, entail]]
        scores = (np.exp(ec) / np.exp(ec).sum(-1, keepdims=True))[:, 1]
    else:
        el = logits[:, entail]
        scores = np.exp(el) / np.exp(el).sum(-1, keepdims=True)
    top = list(reversed(scores.argsort(kind="stable")))
    return {"sequence": sequence, "labels": [candidate_labels[i] for i in top],
            "scores": [float(scores[i]) for i in top]}


def make_zero_shot():
    z = ENC["zero_shot"]
    labels, single = z["labels"], z["single_label"]
    assert labels == ["dog", "football", "london"], labels
    out = {"sequences": z["sequences"], "candidate_labels": z["candidate_labels"], "labels": labels,
           "single_label": single, "results": {}}
    for name in NLI_LABELS:
        net, clf, cfg = load_head(os.path.join(OUT, name))
        ent = entailment_id(cfg["label2id"])
        assert cfg["id2label"][str(ent)].lower() == "entailment"
        res = []
        for tpl in z["templates"]:
            encs = z["encodings"][tpl]
            n = len(labels) + 1  # each sequence: the candidate labels, then the single label
            for s, seq in enumerate(z["sequences"]):
                rows = encs[s * n:(s + 1) * n]
                assert all(r["text"] == seq for r in rows)
                lg = sequence_logits(net, clf, rows)
                for multi in (False, True):
                    r = zero_shot_postprocess(seq, labels, lg[:len(labels)], ent, multi)
                    res.append({"template": tpl, "multi_label": multi, "result": r})
                r = zero_shot_postprocess(seq, [single], lg[len(labels):], ent, False)
                res.append({"template": tpl, "multi_label": False, "single": True, "result": r})
        out["results"][name] = res
    a, b = (out["results"][n] for n in NLI_LABELS)
    for x, y in zip(a, b):  # the permuted folders answer the same
        np.testing.assert_allclose(x["result"]["scores"], y["result"]["scores"], atol=1e-5)
    return out


# ------------------------------------------------------------------------------------------------ token classification

CLEANUP = [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
           (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")]


def tokens_to_string(tokens):
    """tokenizers' WordPiece decoder (prefix "##", cleanup true) over token strings: convert_tokens_to_string."""
    out = []
    for i, t in enumerate(tokens):
        if i != 0:
            t = t[2:] if t.startswith("##") else " " + t
        for a, b in CLEANUP:
            t = t.replace(a, b)
        out.append(t)
    return "".join(out)


def gather_pre_entities(e, scores, unk_id):
    sentence = e["text"]
    pre = []
    for idx, sc in enumerate(scores):
        if e["special_tokens_mask"][idx]:
            continue
        word = e["tokens"][idx]
        s, t = e["offsets"][idx]
        word_ref = sentence[s:t]
        is_subword = len(word) != len(word_ref)  # WordPiece has continuing_subword_prefix "##"
        if e["input_ids"][idx] == unk_id:
            word, is_subword = word_ref, False
        pre.append({"word": word, "scores": sc, "start": s, "end": t, "index": idx, "is_subword": is_subword})
    return pre


def aggregate_word(ents, strategy, id2label):
    word = tokens_to_string([x["word"] for x in ents])
    if strategy == "first":
        sc = ents[0]["scores"]
        k = int(sc.argmax())
        score = sc[k]
    elif strategy == "max":
        m = max(ents, key=lambda x: x["scores"].max())
        k = int(m["scores"].argmax())
        score = m["scores"][k]
    else:  # average
        avg = np.nanmean(np.stack([x["scores"] for x in ents]), axis=0)
        k = int(avg.argmax())
        score = avg[k]
    return {"entity": id2label[k], "score": score, "word": word, "start": ents[0]["start"], "end": ents[-1]["end"]}


def get_tag(name):
    if name.startswith("B-"):
        return "B", name[2:]
    if name.startswith("I-"):
        return "I", name[2:]
    return "I", name


def group_sub_entities(ents):
    return {"entity_group": ents[0]["entity"].split("-", 1)[-1],
            "score": float(np.mean(np.nanmean([x["score"] for x in ents]))),
            "word": tokens_to_string([x["word"] for x in ents]), "start": ents[0]["start"], "end": ents[-1]["end"]}


def group_entities(ents):
    groups, cur = [], []
    for x in ents:
        if not cur:
            cur.append(x)
            continue
        bi, tag = get_tag(x["entity"])
        _, last_tag = get_tag(cur[-1]["entity"])
        if tag == last_tag and bi != "B":
            cur.append(x)
        else:
            groups.append(group_sub_entities(cur))
            cur = [x]
    if cur:
        groups.append(group_sub_entities(cur))
    return groups


def token_classification_postprocess(e, logits, id2label, unk_id, strategy, ignore_labels=("O",)):
    scores = softmax(logits.astype(np.float32))
    pre = gather_pre_entities(e, scores, unk_id)
    if strategy in ("none", "simple"):
        ents = []
        for p in pre:
            k = int(p["scores"].argmax())
            ents.append({"entity": id2label[k], "score": p["scores"][k], "index": p["index"], "word": p["word"],
                         "start": p["start"], "end": p["end"]})
    else:
        ents, group = [], None
        for p in pre:
            if group is None:
                group = [p]
            elif p["is_subword"]:
                group.append(p)
            else:
                ents.append(aggregate_word(group, strategy, id2label))
                group = [p]
        if group is not None:
            ents.append(aggregate_word(group, strategy, id2label))
    if strategy != "none":
        ents = group_entities(ents)
    out = [x for x in ents if x.get("entity") not in ignore_labels and x.get("entity_group") not in ignore_labels]
    for x in out:
        x["score"] = float(x["score"])
    return out


def make_ner():
    for c in ENC["decode_checks"]:
        assert tokens_to_string(c["tokens"]) == c["text"], (c, tokens_to_string(c["tokens"]))
    net, clf, cfg = load_head(os.path.join(FIX, "heads_tokcls"))
    id2label = [cfg["id2label"][str(i)] for i in range(len(cfg["id2label"]))]
    vocab = mef.load_vocab(os.path.join(FIX, "heads_tokcls", "vocab.txt"))
    unk = vocab.index("[UNK]")
    empty = None
    for e in ENC["ner_empty"]:
        lg = token_logits(net, clf, [e])[0][:len(e["input_ids"])]
        if not token_classification_postprocess(e, lg, id2label, unk, "simple"):
            empty = e
            break
    assert empty is not None, "no candidate text without entities"
    encs = ENC["ner"] + [empty]
    out = {"texts": [e["text"] for e in encs], "empty_text": empty["text"], "results": {}}
    for strategy in ("none", "simple", "first", "average", "max"):
        rows = []
        for e in encs:
            lg = token_logits(net, clf, [e])[0]
            rows.append(token_classification_postprocess(e, lg, id2label, unk, strategy))
        out["results"][strategy] = rows
    # ignore_labels: nothing ignored (label O kept), and O with PER (an entity_group name)
    out["ignore_labels"] = {}
    for key, ign in (("none_ignored", ()), ("o_per", ("O", "PER"))):
        out["ignore_labels"][key] = {
            "ignore_labels": list(ign),
            "simple": [token_classification_postprocess(e, token_logits(net, clf, [e])[0], id2label, unk, "simple",
                                                        ign) for e in encs]}
    # the strategies differ on these texts (else the tests could not tell them apart)
    r = out["results"]
    assert r["first"] != r["max"] or r["first"] != r["average"], "strategies agree; pick other texts"
    assert r["simple"] != r["first"]
    return out


def main():
    vocab = mef.load_vocab(os.path.join(FIX, "heads_seqcls", "vocab.txt"))
    make_nli_folders(vocab)
    expected = {"generator": "scripts/make_task_fixtures.py over " + ENC["generator"],
                "classify": make_classify(), "zero_shot": make_zero_shot(), "ner": make_ner()}
    mef.save_json(expected, os.path.join(OUT, "expected.json"))
    for p, n in mef.SUMMARY:
        print(p, n)


if __name__ == "__main__":
    main()
