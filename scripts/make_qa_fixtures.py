#!/usr/bin/env python3
"""Golden fixtures of extractive question answering (issue 45 item 1): tests/fixtures/qa/.

    cd scripts && npm install && node make_qa_encodings.js     # tests/fixtures/qa/encodings.json
    /usr/bin/python3 scripts/make_qa_fixtures.py                # the three model folders and expected.json

No transformers package exists here, so the pipeline is written below from transformers 4.5x's
src/transformers/pipelines/question_answering.py (QuestionAnsweringPipeline, fast tokenizer, padding side right):
  * preprocess: max_seq_len = min(model_max_length, 384), doc_stride = min(max_seq_len // 2, 128) unless given;
    tokenizer(question, context, truncation="only_second", max_length, stride, return_overflowing_tokens) -- the
    windows as tokenizers <= 0.22 cuts them (Encoding::truncate: parts of the context of max_len = max_seq_len -
    len(question) - special tokens, starting every max_len - stride tokens, the last reaching the end; each joined
    to the whole question by the post-processor), cut below from the npm tokenizers' untruncated pair encoding
    (its 0.23 overflow differs; its first window is checked equal to ours); p_mask = sequence id != 1, the [CLS]
    token unmasked.
  * the model: *ForQuestionAnswering: logits = qa_outputs(last_hidden_state); start = logits[..., 0], end = [..., 1].
  * postprocess: select_starts_ends (undesired = 1 - p_mask, logits there -10000, softmax in float32, the null
    score min(start[0] * end[0]) over the windows, then start[0] = end[0] = 0), decode_spans (outer product, triu,
    tril(max_answer_len - 1), the best top_k * 2 + 10 by argpartition, both ends in undesired.nonzero()),
    get_indices with align_to_words (Encoding.word_to_chars(token_to_word(s / e), sequence_index=1): the first /
    last token of that word within the window's context, as tokenizers' word_to_tokens), answers with equal
    lower-cased text merged (scores added), the null answer appended when handle_impossible_answer, sorted by score,
    the first top_k; one answer -> the dict itself.
Models: the committed heads_tokcls (BERT), family_heads/roberta_tokcls and family_heads/distilbert_tokcls bodies with
a random qa_outputs [2, H] instead of the classifier (BertForQuestionAnswering, RobertaForQuestionAnswering,
DistilBertForQuestionAnswering); the bodies run through BertModelRef (../shared/reference/torch), RobertaRef of
make_roberta_fixtures.py and distil_forward of make_family_head_fixtures.py.
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import make_family_head_fixtures as mfh  # noqa: E402  (RobertaRef / DistilBERT forwards)
import make_task_fixtures as mtf  # noqa: E402  (BertModelRef of a committed folder)
import st  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "qa")
ENC = json.load(open(os.path.join(OUT, "encodings.json"), encoding="utf-8"))


# ------------------------------------------------------------------------------------------------ models

def qa_linear(H, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, H, generator=g) * 1.5, torch.randn(2, generator=g) * 0.1


def tilt(w, forward, fam, scale=6.0):
    """qa_outputs rows turned towards the [CLS] state of the "impossible" case, so the null answer ranks."""
    full = ENC["encodings"][fam]["impossible"]["full"]
    h = forward(torch.tensor([full["input_ids"]]), torch.tensor([full["type_ids"]]))[0, 0]
    return w + scale * h / h.norm()


def save_folder(name, src, config, tensors, files):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    for f in files:
        shutil.copyfile(os.path.join(src, f), os.path.join(d, f))
    mfh.save_json(config, os.path.join(d, "config.json"))
    st.save({k: np.ascontiguousarray(np.asarray(v, dtype=v.dtype)) for k, v in tensors.items()},
            os.path.join(d, "model.safetensors"))


def head_config(src, arch):
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg["architectures"] = [arch]
    cfg.pop("id2label", None)
    cfg.pop("label2id", None)
    return cfg


def make_models():
    """{family: (forward(ids, type_ids) -> hidden [1, L, H], qa weight, qa bias, model_max_length)}."""
    models = {}
    # BERT: heads_tokcls's body
    src = os.path.join(FIX, "heads_tokcls")
    net, _, _ = mtf.load_head(src)

    def bert_forward(ids, tt):
        with torch.no_grad():
            h, _ = net(ids, tt, torch.ones_like(ids))
        return h
    w, b = qa_linear(32, 4700)
    w = tilt(w, bert_forward, "bert")
    sd = {k: v for k, v in st.load(os.path.join(src, "model.safetensors")).items() if not k.startswith("classifier.")}
    sd["qa_outputs.weight"], sd["qa_outputs.bias"] = w.numpy(), b.numpy()
    save_folder("bert", src, head_config(src, "BertForQuestionAnswering"), sd, ["vocab.txt", "tokenizer_config.json"])
    models["bert"] = (bert_forward, w, b, 64)
    # RoBERTa: roberta_tokcls's body
    src = os.path.join(FIX, "family_heads", "roberta_tokcls")
    cfg = head_config(src, "RobertaForQuestionAnswering")
    full = st.load(os.path.join(src, "model.safetensors"))
    body = {k[len("roberta."):]: torch.from_numpy(np.array(v)) for k, v in full.items()
            if k.startswith("roberta.") and not k.endswith("position_ids")}
    body["pooler.dense.weight"], body["pooler.dense.bias"] = torch.zeros(32, 32), torch.zeros(32)  # RobertaRef's
    w, b = qa_linear(32, 4710)
    w = tilt(w, lambda ids, tt: mfh.roberta_forward(cfg, body, ids), "roberta")
    sd = {k: v for k, v in full.items() if not k.startswith("classifier.")}
    sd["qa_outputs.weight"], sd["qa_outputs.bias"] = w.numpy(), b.numpy()
    save_folder("roberta", src, cfg, sd, ["tokenizer.json", "tokenizer_config.json"])
    models["roberta"] = (lambda ids, tt, c=cfg, sd=body: mfh.roberta_forward(c, sd, ids), w, b, 38)
    # DistilBERT: distilbert_tokcls's body
    src = os.path.join(FIX, "family_heads", "distilbert_tokcls")
    cfg = head_config(src, "DistilBertForQuestionAnswering")
    full = st.load(os.path.join(src, "model.safetensors"))
    body = {k[len("distilbert."):]: torch.from_numpy(np.array(v)) for k, v in full.items() if k.startswith("distilbert.")}
    w, b = qa_linear(32, 4720)
    w = tilt(w, lambda ids, tt: mfh.distil_forward(cfg, body, ids), "distilbert")
    sd = {k: v for k, v in full.items() if not k.startswith("classifier.")}
    sd["qa_outputs.weight"], sd["qa_outputs.bias"] = w.numpy(), b.numpy()
    save_folder("distilbert", src, cfg, sd, ["tokenizer.json", "tokenizer_config.json"])
    models["distilbert"] = (lambda ids, tt, c=cfg, sd=body: mfh.distil_forward(c, sd, ids), w, b, 40)
    return models


# ------------------------------------------------------------------------------------------------ the pipeline

def windows(full, max_len, stride):
    """tokenizers <= 0.22: truncate only_second with stride, overflowing windows, each [CLS] q [SEP] part [SEP]-like."""
    seq = full["sequence_ids"]
    ctx = [i for i, s in enumerate(seq) if s == 1]
    c0, c1 = ctx[0], ctx[-1] + 1
    n_other = len(seq) - (c1 - c0)  # question and special tokens
    room = max_len - n_other
    n2 = c1 - c0
    if n2 <= room:
        return [full]
    assert stride < room, (stride, room)
    out = []
    start = 0
    while True:
        stop = min(start + room, n2)
        keep = list(range(0, c0)) + list(range(c0 + start, c0 + stop)) + list(range(c1, len(seq)))
        out.append({k: [v[i] for i in keep] for k, v in full.items()})
        if stop == n2:
            break
        start += room - stride
    return out


def word_to_chars(win, word):
    toks = [i for i, (s, w) in enumerate(zip(win["sequence_ids"], win["words"])) if s == 1 and w == word]
    if not toks:
        return None
    return win["offsets"][toks[0]][0], win["offsets"][toks[-1]][1]


def decode_spans(start, end, topk, max_answer_len, undesired_tokens):
    outer = np.matmul(np.expand_dims(start, -1), np.expand_dims(end, 1))
    candidates = np.tril(np.triu(outer), max_answer_len - 1)
    scores_flat = candidates.flatten()
    if topk == 1:
        idx_sort = [np.argmax(scores_flat)]
    elif len(scores_flat) < topk:
        idx_sort = np.argsort(-scores_flat)
    else:
        idx = np.argpartition(-scores_flat, topk)[0:topk]
        idx_sort = idx[np.argsort(-scores_flat[idx])]
    # the fixture keeps away from ties and zero-probability spans among the candidates looked at
    assert (scores_flat[idx_sort] > 0).all(), "a window has fewer positive spans than top_k * 2 + 10"
    starts, ends = np.unravel_index(idx_sort, candidates.shape)[1:]
    desired = np.isin(starts, undesired_tokens.nonzero()) & np.isin(ends, undesired_tokens.nonzero())
    starts, ends = starts[desired], ends[desired]
    return starts, ends, candidates[0, starts, ends]


def select_starts_ends(start, end, p_mask, attention_mask, min_null_score, top_k, handle_impossible_answer,
                       max_answer_len):
    undesired_tokens = np.abs(np.array(p_mask) - 1)
    undesired_tokens = undesired_tokens & attention_mask
    undesired_tokens_mask = undesired_tokens == 0.0
    start = np.where(undesired_tokens_mask, -10000.0, start)
    end = np.where(undesired_tokens_mask, -10000.0, end)
    start = np.exp(start - start.max(axis=-1, keepdims=True))
    start = start / start.sum()
    end = np.exp(end - end.max(axis=-1, keepdims=True))
    end = end / end.sum()
    if handle_impossible_answer:
        min_null_score = min(min_null_score, (start[0, 0] * end[0, 0]).item())
    start[0, 0] = end[0, 0] = 0.0
    starts, ends, scores = decode_spans(start, end, top_k, max_answer_len, undesired_tokens)
    return starts, ends, scores, min_null_score


MERGED = [0]  # answers merged by lower-cased text, over every case


def pipeline(forward, w, b, cls_id, case, full, model_max_length):
    o = case["options"]
    max_seq = o.get("max_seq_length") or min(model_max_length, 384)
    stride = o.get("doc_stride") or min(max_seq // 2, 128)
    top_k, max_answer_len = o.get("top_k", 1), o.get("max_answer_length", 15)
    handle = o.get("handle_impossible_answer", False)
    wins = windows(full, max_seq, stride)
    context = case["context"]
    min_null_score = 1000000
    answers = []
    for win in wins:
        ids = torch.tensor([win["input_ids"]])
        h = forward(ids, torch.tensor([win["type_ids"]]))
        logits = (h @ w.T + b).numpy().astype(np.float32)  # [1, L, 2]
        start_, end_ = logits[..., 0], logits[..., 1]
        p_mask = [[s != 1 for s in win["sequence_ids"]]]
        for i, t in enumerate(win["input_ids"]):
            if t == cls_id:
                p_mask[0][i] = 0
        p_mask = np.array(p_mask, dtype=np.int64)
        attention_mask = np.ones((1, len(win["input_ids"])), dtype=np.int64)
        starts, ends, scores, min_null_score = select_starts_ends(
            start_, end_, p_mask, attention_mask, min_null_score, top_k * 2 + 10, handle, max_answer_len)
        for s, e, score in zip(starts, ends, scores):
            ws, we = win["words"][s], win["words"][e]
            a = word_to_chars(win, ws) if ws >= 0 else None
            z = word_to_chars(win, we) if we >= 0 else None
            if a is None or z is None:
                si, ei = win["offsets"][s][0], win["offsets"][e][1]
            else:
                si, ei = a[0], z[1]
            target = context[si:ei]
            same = next((x for x in answers if x["answer"].lower() == target.lower()), None)
            if same:
                same["score"] += score.item()
                MERGED[0] += 1
            else:
                answers.append({"score": score.item(), "start": si, "end": ei, "answer": target})
    if handle:
        answers.append({"score": min_null_score, "start": 0, "end": 0, "answer": ""})
    answers = sorted(answers, key=lambda x: x["score"], reverse=True)[:top_k]
    return (answers[0] if len(answers) == 1 else answers), wins


def main():
    models = make_models()
    cls_ids = {"bert": 2, "roberta": 3256, "distilbert": None}
    expected = {"generator": "scripts/make_qa_fixtures.py over " + ENC["generator"], "results": {}}
    for fam, (forward, w, b, mml) in models.items():
        rows = []
        for case in ENC["cases"]:
            e = ENC["encodings"][fam][case["name"]]
            full = e["full"]
            cls = cls_ids[fam] if cls_ids[fam] is not None else full["input_ids"][0]
            result, wins = pipeline(forward, w, b, cls, case, full, mml)
            if "first_window" in e:  # our first window is tokenizers' main encoding
                assert wins[0] == e["first_window"], (fam, case["name"])
            rows.append({"name": case["name"], "windows": len(wins),
                         "window_input_ids": [x["input_ids"] for x in wins], "result": result})
            print(fam, case["name"], len(wins), json.dumps(result, ensure_ascii=False)[:200])
        expected["results"][fam] = rows
    # the cases test what they name
    for fam in models:
        r = {x["name"]: x for x in expected["results"][fam]}
        assert r["long"]["windows"] > 1 and r["long_default"]["windows"] > 1, fam
        assert any(x["answer"] == "" for x in r["impossible"]["result"]), (fam, "the null answer is not ranked")
    assert MERGED[0] > 0, "no answers merged"
    assert [x["windows"] for x in expected["results"]["roberta"] if x["name"] == "accents"] != [1]
    mfh.save_json(expected, os.path.join(OUT, "expected.json"))


if __name__ == "__main__":
    main()
