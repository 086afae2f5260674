#!/usr/bin/env python3
"""Expected values for `tfm finetune` on the BERT-like families (issue 25): optimizer steps of RoBERTa and
DistilBERT sequence classification, token classification and masked-LM fine-tuning as the Hugging Face Trainer
runs them, with gradient accumulation, computed by PyTorch autograd.

The starting checkpoints are the tiny random folders of tests/fixtures/family_heads (make_family_head_fixtures.py):
roberta_{seqcls,tokcls,mlm} and distilbert_{seqcls,tokcls,mlm}, their heads continued. The bodies are that script's
references (RobertaRef of make_roberta_fixtures.py, modeling_roberta.py, cross-checked there against BertModelRef;
distil_body, modeling_distilbert.py, cross-checked against BertModelRef), run here with autograd. The heads are
written from transformers' modeling files (dropout p = 0: torch's RNG cannot be matched; the C++ tests run
without dropout):
  - RobertaForSequenceClassification: RobertaClassificationHead(features): x = features[:, 0, :];
    dropout; dense; tanh; dropout; out_proj. loss = CrossEntropyLoss (num_labels > 1, integer labels).
  - RobertaForTokenClassification: classifier(dropout(sequence_output)); CrossEntropyLoss (ignore_index -100).
  - RobertaForMaskedLM: RobertaLMHead: dense, gelu, layer_norm (config.layer_norm_eps), decoder whose weight is
    roberta.embeddings.word_embeddings.weight (tied) and whose bias is lm_head.bias.
  - DistilBertForSequenceClassification: pooled = hidden_state[:, 0]; pre_classifier; ReLU; dropout
    (seq_classif_dropout); classifier.
  - DistilBertForTokenClassification: classifier(dropout(sequence_output)).
  - DistilBertForMaskedLM: vocab_transform; activation (config.activation); vocab_layer_norm (eps 1e-12);
    vocab_projector, weight tied to distilbert.embeddings.word_embeddings.weight, bias vocab_projector.bias.
  - regression (num_labels 1, problem_type "regression"): the *ForSequenceClassification logits above with a
    one-output last Linear, loss = MSELoss()(logits.squeeze(), labels.squeeze()) on float labels:
    "roberta_regression" and "distilbert_regression" (their heads' first rows of roberta_seqcls / distilbert_seqcls,
    written as init.<name>, since from_pretrained(num_labels=1) would draw them at random).
  - ElectraForSequenceClassification: ElectraClassificationHead(features): x = features[:, 0, :]; dropout; dense;
    get_activation("gelu"); dropout; out_proj; CrossEntropyLoss. ElectraForTokenClassification: classifier(dropout(
    discriminator_sequence_output)). The body is electra_body of make_electra_fixtures.py (modeling_electra.py,
    embedding_size 24 projected to hidden_size 32 by embeddings_project; cross-checked there against BertModelRef),
    on the family_heads folders electra_seqcls / electra_tokcls; token_type_ids as the batch gives them.
  - DistilBERT with sinusoidal_pos_embds: create_sinusoidal_embeddings sets the position table's requires_grad
    False, so the Trainer's optimizer never sees it: "distilbert_frozen" is distilbert_tokcls trained so.
The optimizer and schedule are make_finetune_task_fixtures.py's (the Trainer's AdamW with two parameter groups,
clip_grad_norm_, get_linear_schedule_with_warmup, loss / gradient_accumulation_steps); the steps are
[1 micro-batch], [2 micro-batches], [1 micro-batch].

Writes tests/fixtures/finetune_family/<name>_steps.safetensors with the keys of make_finetune_task_fixtures.py
(step{k}.micro{j}.{input_ids,token_type_ids,attention_mask,labels}, micro_loss, grad_norm, lr, step0.grad.<name>,
final.<name>; regression: labels float, init.<name>) and <name>_hyper.json (the hyperparameters, "parameters": the
number of trained tensors, "model": the family_heads folder, "frozen": the tensors not trained, "init": the tensors
replaced by init.<name>). <name>: roberta_seqcls, roberta_tokcls, roberta_mlm, roberta_regression,
distilbert_seqcls, distilbert_tokcls, distilbert_mlm, distilbert_regression, distilbert_frozen, electra_seqcls,
electra_tokcls.
Run: /usr/bin/python3 scripts/make_finetune_family_fixtures.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import make_family_head_fixtures as fh  # noqa: E402  (distil_body; puts shared/reference on the path)
import make_electra_fixtures as el  # noqa: E402  (electra_body)
import make_finetune_task_fixtures as ft  # noqa: E402  (HYPER, linear_schedule)
import make_roberta_fixtures as rob  # noqa: E402  (RobertaRef)
import st  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "finetune_family")
IGN = -100
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)


def load(name):
    d = os.path.join(FIX, "family_heads", name)
    cfg = json.load(open(os.path.join(d, "config.json")))
    sd = {k: torch.from_numpy(np.array(v)) for k, v in st.load(os.path.join(d, "model.safetensors")).items()}
    # The trainable tensors (the int64 position_ids buffer of older RoBERTa files is not a parameter).
    params = {k: v.float().clone().requires_grad_(True) for k, v in sd.items() if v.dtype.is_floating_point}
    return cfg, params


def base(params, prefix):
    return {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}


# ------------------------------------------------------------------------------------------------ bodies

def roberta_body(cfg, params, ids, mask):
    sd = base(params, "roberta.")
    H = cfg["hidden_size"]
    # RobertaRef returns the pooler too; the For* models have none (add_pooling_layer=False): zeros, not trained.
    sd["pooler.dense.weight"], sd["pooler.dense.bias"] = torch.zeros(H, H), torch.zeros(H)
    h, _ = rob.RobertaRef(fh.Cfg(cfg), sd).forward(ids, mask)
    return h


def distil_body(cfg, params, ids, mask):
    return fh.distil_body(cfg, base(params, "distilbert."), ids, mask)


def electra_body(cfg, params, ids, mask, token_type_ids=None):
    return el.electra_body(cfg, base(params, "electra."), ids, token_type_ids, mask)


# ------------------------------------------------------------------------------------------------ heads

def lin(params, x, name):
    return F.linear(x, params[name + ".weight"], params[name + ".bias"])


def roberta_seqcls_logits(cfg, P, ids, mask, body=roberta_body):
    x = body(cfg, P, ids, mask)[:, 0, :]  # RobertaClassificationHead, dropouts p = 0
    x = torch.tanh(lin(P, x, "classifier.dense"))
    return lin(P, x, "classifier.out_proj")


def roberta_seqcls(cfg, P, ids, mask, labels, body=roberta_body):
    return F.cross_entropy(roberta_seqcls_logits(cfg, P, ids, mask, body), labels)


def regression(logits_fn):
    """*ForSequenceClassification with num_labels 1: problem_type "regression", loss_fct = MSELoss();
    loss = loss_fct(logits.squeeze(), labels.squeeze())."""
    def loss(cfg, P, ids, mask, labels):
        return F.mse_loss(logits_fn(cfg, P, ids, mask).squeeze(), labels.squeeze())
    return loss


def tokcls(body):
    def loss(cfg, P, ids, mask, labels):
        logits = lin(P, body(cfg, P, ids, mask), "classifier")
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=IGN)
    return loss


def roberta_mlm(cfg, P, ids, mask, labels, body=roberta_body, prefix="roberta."):
    H = cfg["hidden_size"]
    x = F.gelu(lin(P, body(cfg, P, ids, mask), "lm_head.dense"))
    x = F.layer_norm(x, (H,), P["lm_head.layer_norm.weight"], P["lm_head.layer_norm.bias"], cfg["layer_norm_eps"])
    scores = F.linear(x, P[prefix + "embeddings.word_embeddings.weight"], P["lm_head.bias"])
    return F.cross_entropy(scores.view(-1, scores.shape[-1]), labels.view(-1), ignore_index=IGN)


def distil_seqcls_logits(cfg, P, ids, mask):
    pooled = distil_body(cfg, P, ids, mask)[:, 0]
    pooled = F.relu(lin(P, pooled, "pre_classifier"))  # then dropout(seq_classif_dropout), p = 0 here
    return lin(P, pooled, "classifier")


def electra_seqcls(cfg, P, ids, mask, labels):
    x = electra_body(cfg, P, ids, mask)[:, 0, :]  # ElectraClassificationHead, dropouts p = 0
    x = F.gelu(lin(P, x, "classifier.dense"))
    return F.cross_entropy(lin(P, x, "classifier.out_proj"), labels)


def distil_seqcls(cfg, P, ids, mask, labels):
    return F.cross_entropy(distil_seqcls_logits(cfg, P, ids, mask), labels)


def distil_mlm(cfg, P, ids, mask, labels):
    H = cfg["dim"]
    act = {"gelu": F.gelu, "relu": F.relu}[cfg["activation"]]
    x = act(lin(P, distil_body(cfg, P, ids, mask), "vocab_transform"))
    x = F.layer_norm(x, (H,), P["vocab_layer_norm.weight"], P["vocab_layer_norm.bias"], 1e-12)
    scores = F.linear(x, P["distilbert.embeddings.word_embeddings.weight"], P["vocab_projector.bias"])
    return F.cross_entropy(scores.view(-1, scores.shape[-1]), labels.view(-1), ignore_index=IGN)


# ------------------------------------------------------------------------------------------------ batches

def batch(ids, labels, pad):
    ids = torch.tensor(ids, dtype=torch.long)
    return dict(input_ids=ids, token_type_ids=torch.zeros_like(ids), attention_mask=(ids != pad).long(),
                labels=torch.tensor(labels, dtype=torch.long))


def seq_steps(first, last, pad, C):
    """Sequences first .. last (the <s> / [CLS] and </s> / [SEP] ids), right-padded with `pad`."""
    a, z = first, last
    return [
        [batch([[a, 40, 71, 52, z, pad, pad], [a, 90, 13, 87, 64, 22, z], [a, 33, z, pad, pad, pad, pad]],
               [0, 2 % C, 1], pad)],
        [batch([[a, 18, 44, 91, z], [a, 25, 70, z, pad]], [1, 0], pad),
         batch([[a, 61, 39, 15, 48, 77, z]], [2 % C], pad)],
        [batch([[a, 58, 21, 66, z], [a, 99, 17, 44, z]], [1, 0], pad)],
    ]


def regression_steps(first, last, pad):
    """seq_steps' sequences with float targets (a column of numbers, as run_glue.py's stsb)."""
    out = []
    targets = [[[0.8, -1.25, 2.5]], [[3.0, 0.5], [-0.75]], [[1.5, 4.25]]]
    for step, ts in zip(seq_steps(first, last, pad, 2), targets):
        out.append([dict(b, labels=torch.tensor(t, dtype=torch.float32)) for b, t in zip(step, ts)])
    return out


def token_steps(first, last, pad):
    a, z = first, last
    return [
        [batch([[a, 32, 40, 18, 61, z, pad], [a, 35, 47, 19, 16, 38, z], [a, 50, 45, z, pad, pad, pad]],
               [[IGN, 0, 0, 0, 1, IGN, IGN], [IGN, 3, IGN, 0, 0, 1, IGN], [IGN, 0, 1, IGN, IGN, IGN, IGN]], pad)],
        [batch([[a, 44, 45, 61, z], [a, 52, 19, z, pad]], [[IGN, 1, 2, 2, IGN], [IGN, 3, 0, IGN, IGN]], pad),
         batch([[a, 38, 55, 19, 24, 37, z]], [[IGN, 1, IGN, 0, 0, 0, IGN]], pad)],
        [batch([[a, 48, 21, 61, z], [a, 59, 17, 44, z]], [[IGN, 3, 0, 1, IGN], [IGN, 0, 0, 1, IGN]], pad)],
    ]


def mlm_steps(first, last, pad, m):
    """`m`: the mask id. Labels: the original id at masked positions (one a random id, one kept)."""
    a, z = first, last
    return [
        [batch([[a, 15, m, 19, 37, z, pad], [a, 32, 40, 18, m, z, pad], [a, m, 45, 20, 17, 58, z]],
               [[IGN, IGN, 64, IGN, IGN, IGN, IGN], [IGN, IGN, IGN, IGN, 61, IGN, IGN],
                [IGN, 44, IGN, IGN, 17, IGN, IGN]], pad)],
        [batch([[a, 15, 59, m, z], [a, m, 19, 70, z]], [[IGN, IGN, IGN, 19, IGN], [IGN, 38, IGN, 37, IGN]], pad),
         batch([[a, 15, m, 19, m, z]], [[IGN, IGN, 64, IGN, 44, IGN]], pad)],
        [batch([[a, m, 21, 61, z], [a, 59, 17, m, z]], [[IGN, 48, IGN, IGN, IGN], [IGN, IGN, IGN, 44, IGN]], pad)],
    ]


# ------------------------------------------------------------------------------------------------ the Trainer

def run(name, model, loss_fn, steps, frozen=(), one_output=()):
    """one_output: the head's last Linear (a checkpoint with more labels), cut to its first row as a one-output
    head (num_labels 1) and written as init.<name>.{weight,bias}: the test loads them in place of the head that
    from_pretrained(num_labels=1, ignore_mismatched_sizes=True) would draw at random."""
    cfg, P = load(model)
    init = {}
    for prefix in one_output:
        for k in (prefix + ".weight", prefix + ".bias"):
            P[k] = P[k].detach()[:1].clone().requires_grad_(True)
            init["init." + k] = P[k].detach().clone()
    for n in frozen:
        P[n].requires_grad_(False)
    params = [(n, p) for n, p in P.items() if n not in frozen]
    out, losses, norms, lrs = ft.trainer_steps(
        params, lambda b: loss_fn(cfg, P, b["input_ids"], b["attention_mask"], b["labels"]), steps)
    out.update(init)
    for n, p in P.items():
        out["final." + n] = p.detach()
    hyper = dict(parameters=len(params), model=model, frozen=list(frozen))
    if init:
        hyper["init"] = sorted(k[len("init."):] for k in init)
    ft.save_steps(out, losses, norms, lrs, OUT, name, hyper)


def main():
    # RoBERTa (bpe_bytelevel tokenizer): <s> 3256, </s> 3258, <mask> 3260; config pad_token_id 1 (the padding
    # position ids come from it).
    rs, re_, rpad, rmask = 3256, 3258, 1, 3260
    run("roberta_seqcls", "roberta_seqcls", roberta_seqcls, seq_steps(rs, re_, rpad, 3))
    run("roberta_tokcls", "roberta_tokcls", tokcls(roberta_body), token_steps(rs, re_, rpad))
    run("roberta_mlm", "roberta_mlm", roberta_mlm, mlm_steps(rs, re_, rpad, rmask))
    run("roberta_regression", "roberta_seqcls", regression(roberta_seqcls_logits), regression_steps(rs, re_, rpad),
        one_output=("classifier.out_proj",))
    # DistilBERT (wordpiece tokenizer): [PAD] 0, [CLS] 2, [SEP] 3, [MASK] 4.
    run("distilbert_seqcls", "distilbert_seqcls", distil_seqcls, seq_steps(2, 3, 0, 2))
    run("distilbert_tokcls", "distilbert_tokcls", tokcls(distil_body), token_steps(2, 3, 0))
    run("distilbert_mlm", "distilbert_mlm", distil_mlm, mlm_steps(2, 3, 0, 4))
    run("distilbert_regression", "distilbert_seqcls", regression(distil_seqcls_logits), regression_steps(2, 3, 0),
        one_output=("classifier",))
    run("distilbert_frozen", "distilbert_tokcls", tokcls(distil_body), token_steps(2, 3, 0),
        frozen=("distilbert.embeddings.position_embeddings.weight",))
    # ELECTRA (wordpiece tokenizer, as DistilBERT): [PAD] 0, [CLS] 2, [SEP] 3.
    run("electra_seqcls", "electra_seqcls", electra_seqcls, seq_steps(2, 3, 0, 2))
    run("electra_tokcls", "electra_tokcls", tokcls(electra_body), token_steps(2, 3, 0))


if __name__ == "__main__":
    main()
