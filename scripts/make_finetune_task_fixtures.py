#!/usr/bin/env python3
"""Expected values for `tfm finetune --task token-classify` and `--task mlm` (issue 25): optimizer steps of
BertForTokenClassification and BertForMaskedLM fine-tuning as the Hugging Face Trainer runs them, with gradient
accumulation, computed by PyTorch autograd.

The heads are written from transformers' modeling_bert.py:
  - BertForTokenClassification: BertModel(add_pooling_layer=False); logits = classifier(dropout(sequence_output));
    loss = CrossEntropyLoss()(logits.view(-1, num_labels), labels.view(-1)) (ignore_index -100, mean over the
    labelled tokens).
  - BertForMaskedLM: BertModel(add_pooling_layer=False); BertOnlyMLMHead = BertLMPredictionHead:
    transform (dense, ACT2FN[hidden_act], LayerNorm) then decoder = Linear(H, vocab, bias=False) whose weight is
    tied to bert.embeddings.word_embeddings.weight, plus the bias cls.predictions.bias; loss as above.
The body is BertModelRef from ../shared/reference/torch (equal to transformers' BertModel); its pooler is not
used (not in the optimizer, not written). Dropout is 0 (torch's RNG cannot be matched; the C++ test runs with 0).

The Trainer's step (trainer.py training_step / inner loop): each micro-batch's loss divided by
gradient_accumulation_steps and backpropagated, gradients summed over the micro-batches of a step, then
clip_grad_norm_, torch.optim.AdamW with the two parameter groups (no decay on biases and LayerNorm weights, by
get_decay_parameter_names' forbidden name patterns) and
get_linear_schedule_with_warmup's LambdaLR. The steps here: [1 micro-batch], [2 micro-batches], [1 micro-batch].

Writes tests/fixtures/finetune/{token,mlm}_steps.safetensors: step{k}.micro{j}.{input_ids,token_type_ids,
attention_mask,labels}, micro_loss[M] (every micro-batch's unscaled loss, in order), grad_norm[K], lr[K],
step0.grad.<name> (every parameter's gradient in the first step, before clipping), final.<name> (every parameter
after the K steps); and {token,mlm}_hyper.json.
Also finetune/group_texts.{csv,safetensors} for --group-texts (group_texts_fixture below).
Run: /usr/bin/python3 scripts/make_finetune_task_fixtures.py [--group-texts-only]
"""
import itertools
import json
import os
import re
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REF = os.path.normpath(os.path.join(ROOT, "..", "shared", "reference", "torch"))
sys.path.insert(0, REF)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import reference_modules as rm  # noqa: E402
import st  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

HYPER = dict(learning_rate=3e-3, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
             max_grad_norm=0.7, warmup_steps=1, total_steps=4)
IGN = -100


def linear_schedule(step, warmup, total):
    # transformers.optimization._get_linear_schedule_with_warmup_lr_lambda
    if step < warmup:
        return float(step) / float(max(1, warmup))
    return max(0.0, float(total - step) / float(max(1, total - warmup)))


class BertForTokenClassificationRef(nn.Module):
    def __init__(self, cfg, num_labels):
        super().__init__()
        self.bert = rm.BertModelRef(types.SimpleNamespace(**cfg))
        self.classifier = nn.Linear(cfg["hidden_size"], num_labels)
        self.num_labels = num_labels

    def forward(self, input_ids, token_type_ids, attention_mask, labels):
        seq, _ = self.bert(input_ids, token_type_ids, attention_mask)
        logits = self.classifier(seq)  # dropout p = 0
        return F.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1), ignore_index=IGN)


class Ns(nn.Module):
    pass


class BertForMaskedLMRef(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H, V = cfg["hidden_size"], cfg["vocab_size"]
        self.bert = rm.BertModelRef(types.SimpleNamespace(**cfg))
        self.cls = Ns()
        self.cls.predictions = Ns()
        p = self.cls.predictions
        p.transform = Ns()
        p.transform.dense = nn.Linear(H, H)
        p.transform.LayerNorm = nn.LayerNorm(H, eps=cfg["layer_norm_eps"])
        p.bias = nn.Parameter(torch.zeros(V))
        self.V = V

    def forward(self, input_ids, token_type_ids, attention_mask, labels):
        seq, _ = self.bert(input_ids, token_type_ids, attention_mask)
        t = self.cls.predictions.transform
        h = t.LayerNorm(self.bert.act(t.dense(seq)))
        # decoder tied to the input embeddings (tie_word_embeddings), bias = cls.predictions.bias
        scores = F.linear(h, self.bert.embeddings.word_embeddings.weight, self.cls.predictions.bias)
        return F.cross_entropy(scores.view(-1, self.V), labels.view(-1), ignore_index=IGN)


def batch(ids, labels, tt=None):
    ids = torch.tensor(ids, dtype=torch.long)
    tt = torch.zeros_like(ids) if tt is None else torch.tensor(tt, dtype=torch.long)
    return dict(input_ids=ids, token_type_ids=tt, attention_mask=(ids != 0).long(),
                labels=torch.tensor(labels, dtype=torch.long))


def token_steps():
    # Words of heads_tokcls/vocab.txt: [CLS] 2, [SEP] 3, "paris" 61, "london" 38, "##ie" 47, "people" 32, ...
    # Labels O 0, B-LOC 1, I-LOC 2, B-PER 3, I-PER 4 on first sub-tokens; -100 on [CLS], [SEP], "##..." and padding.
    return [
        [batch([[2, 32, 40, 18, 61, 3, 0], [2, 35, 47, 19, 16, 38, 3], [2, 50, 45, 3, 0, 0, 0]],
               [[IGN, 0, 0, 0, 1, IGN, IGN], [IGN, 3, IGN, 0, 0, 1, IGN], [IGN, 0, 1, IGN, IGN, IGN, IGN]])],
        [batch([[2, 44, 45, 61, 3], [2, 52, 19, 3, 0]], [[IGN, 1, 2, 2, IGN], [IGN, 3, 0, IGN, IGN]]),
         batch([[2, 38, 55, 19, 24, 37, 3]], [[IGN, 1, IGN, 0, 0, 0, IGN]])],
        [batch([[2, 48, 21, 61, 3], [2, 59, 17, 44, 3]], [[IGN, 3, 0, 1, IGN], [IGN, 0, 0, 1, IGN]])],
    ]


def mlm_steps():
    # [MASK] 4. Labels: the original id at masked positions (mostly [MASK] in the input, one a random id, one kept).
    return [
        [batch([[2, 15, 4, 19, 37, 3, 0], [2, 32, 40, 18, 4, 3, 0], [2, 4, 45, 20, 17, 58, 3]],
               [[IGN, IGN, 64, IGN, IGN, IGN, IGN], [IGN, IGN, IGN, IGN, 61, IGN, IGN],
                [IGN, 44, IGN, IGN, 17, IGN, IGN]])],
        [batch([[2, 15, 59, 4, 3], [2, 4, 19, 70, 3]], [[IGN, IGN, IGN, 19, IGN], [IGN, 38, IGN, 37, IGN]]),
         batch([[2, 15, 4, 19, 4, 3]], [[IGN, IGN, 64, IGN, 44, IGN]])],
        [batch([[2, 4, 21, 61, 3], [2, 59, 17, 4, 3]], [[IGN, 48, IGN, IGN, IGN], [IGN, IGN, IGN, 44, IGN]])],
    ]


# Trainer.get_decay_parameter_names: get_parameter_names(model, [nn.LayerNorm], forbidden_name_patterns), the
# patterns matched against the lowercased name; every LayerNorm of our families is named by one of them.
NO_DECAY_PATTERNS = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]


def no_decay_parameter(name):
    return any(re.search(p, name.lower()) for p in NO_DECAY_PATTERNS)


def trainer_steps(params, loss_of, steps):
    """The Trainer's optimizer steps over `params` [(name, tensor)], loss_of(batch) a micro-batch's loss. Returns
    the fixture's tensors (the batches, step0.grad.<name>), the micro-batch losses, gradient norms and rates."""
    no_decay = [n for n, _ in params if no_decay_parameter(n)]
    groups = [dict(params=[p for n, p in params if n not in no_decay], weight_decay=HYPER["weight_decay"]),
              dict(params=[p for n, p in params if n in no_decay], weight_decay=0.0)]
    opt = torch.optim.AdamW(groups, lr=HYPER["learning_rate"], betas=(HYPER["adam_beta1"], HYPER["adam_beta2"]),
                            eps=HYPER["adam_epsilon"])
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: linear_schedule(s, HYPER["warmup_steps"], HYPER["total_steps"]))
    out, losses, norms, lrs = {}, [], [], []
    for k, micro in enumerate(steps):
        opt.zero_grad()
        for j, b in enumerate(micro):
            for key, v in b.items():
                out[f"step{k}.micro{j}.{key}"] = v
            loss = loss_of(b)
            (loss / len(micro)).backward()  # Trainer.training_step: loss / gradient_accumulation_steps
            losses.append(loss.item())
        if k == 0:
            for n, p in params:
                out["step0.grad." + n] = p.grad.detach().clone()
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in params], HYPER["max_grad_norm"])
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        norms.append(norm.item())
    assert any(n > HYPER["max_grad_norm"] for n in norms), norms  # clipping is exercised
    return out, losses, norms, lrs


def save_steps(out, losses, norms, lrs, out_dir, name, hyper):
    """Writes <out_dir>/<name>_steps.safetensors (`out` with micro_loss, grad_norm, lr) and <name>_hyper.json
    (HYPER and `hyper`)."""
    out["micro_loss"] = torch.tensor(losses)
    out["grad_norm"] = torch.tensor(norms)
    out["lr"] = torch.tensor(lrs)
    arrays = {}
    for k, v in out.items():
        a = v.detach().numpy()
        arrays[k] = np.ascontiguousarray(a.astype(np.float32 if a.dtype.kind == "f" else np.int64))
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}_steps.safetensors")
    st.save(arrays, path)
    assert os.path.getsize(path) < 2 << 20, path
    with open(os.path.join(out_dir, f"{name}_hyper.json"), "w") as f:
        json.dump(dict(HYPER, **hyper), f, indent=2)
        f.write("\n")
    print(name, "losses", losses, "norms", norms, "lrs", lrs)


def run(model, sd, steps, name):
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in sd.items()}, strict=False)
    model.train()
    params = [(n, p) for n, p in model.named_parameters() if not n.startswith("bert.pooler.")]
    missing = {n for n, _ in params} - set(sd) - ({"bert." + k for k in sd})
    assert not missing, missing
    out, losses, norms, lrs = trainer_steps(
        params, lambda b: model(b["input_ids"], b["token_type_ids"], b["attention_mask"], b["labels"]), steps)
    for n, p in params:
        out["final." + n] = p.detach()
    save_steps(out, losses, norms, lrs, os.path.join(FIX, "finetune"), name, dict(parameters=len(params)))


def group_texts(examples, max_seq_length):
    """run_mlm.py's group_texts (transformers/examples/pytorch/language-modeling, without --line_by_line)."""
    concatenated = {k: list(itertools.chain(*examples[k])) for k in examples.keys()}
    total_length = len(concatenated[list(examples.keys())[0]])
    # run_mlm.py drops the small remainder (a batch shorter than max_seq_length in all stays one short block)
    if total_length >= max_seq_length:
        total_length = (total_length // max_seq_length) * max_seq_length
    return {k: [t[i:i + max_seq_length] for i in range(0, total_length, max_seq_length)]
            for k, t in concatenated.items()}


def group_texts_fixture():
    """--group-texts: 1,002 texts of heads_mlm's vocabulary tokenized as BertTokenizer does (make_embed_fixtures.Tok:
    [CLS] text [SEP], special_tokens_mask 1 on both), then run_mlm.py's group_texts under datasets.map(batched=True)
    with its default batch_size 1000: the first 1,000 texts grouped into blocks of 8 with their remainder dropped,
    then the last 2 (6 tokens in all: one short block). Writes finetune/group_texts.csv (column text) and
    finetune/group_texts.safetensors: input_ids, token_type_ids, special_tokens_mask (the blocks concatenated) and
    lengths [blocks]."""
    sys.path.insert(0, HERE)
    from make_embed_fixtures import Tok, load_vocab
    tok = Tok(load_vocab(os.path.join(FIX, "heads_mlm", "vocab.txt")))
    words = ("the cat sat on the mat the dog is in the park people live in london the capital of france is paris "
             "the man has a red car friends watch football").split()
    texts = [" ".join(words[(7 * i) % len(words):(7 * i) % len(words) + 1 + (i % 5)]) for i in range(1000)]
    texts += ["hello", "paris"]
    blocks = {"input_ids": [], "token_type_ids": [], "special_tokens_mask": []}
    for first in range(0, len(texts), 1000):  # datasets.map(batched=True, batch_size=1000)
        enc = {"input_ids": [], "token_type_ids": [], "special_tokens_mask": []}
        for t in texts[first:first + 1000]:
            ids, tt, _ = tok.encode(t)
            enc["input_ids"].append(ids)
            enc["token_type_ids"].append(tt)
            enc["special_tokens_mask"].append([1] + [0] * (len(ids) - 2) + [1])
        for k, v in group_texts(enc, 8).items():
            blocks[k] += v
    assert len(blocks["input_ids"][-1]) == 6 and all(len(b) == 8 for b in blocks["input_ids"][:-1])
    arrays = {k: np.array(list(itertools.chain(*v)), dtype=np.int64) for k, v in blocks.items()}
    arrays["lengths"] = np.array([len(b) for b in blocks["input_ids"]], dtype=np.int64)
    st.save(arrays, os.path.join(FIX, "finetune", "group_texts.safetensors"))
    with open(os.path.join(FIX, "finetune", "group_texts.csv"), "w") as f:
        f.write("text\n" + "\n".join(texts) + "\n")
    print("group_texts:", len(texts), "texts,", len(blocks["input_ids"]), "blocks")


def main():
    os.makedirs(os.path.join(FIX, "finetune"), exist_ok=True)
    group_texts_fixture()
    if "--group-texts-only" in sys.argv:
        return
    d = os.path.join(FIX, "heads_tokcls")
    cfg = json.load(open(os.path.join(d, "config.json")))
    run(BertForTokenClassificationRef(cfg, len(cfg["id2label"])), st.load(os.path.join(d, "model.safetensors")),
        token_steps(), "token")
    d = os.path.join(FIX, "heads_mlm")
    cfg = json.load(open(os.path.join(d, "config.json")))
    run(BertForMaskedLMRef(cfg), st.load(os.path.join(d, "model.safetensors")), mlm_steps(), "mlm")


if __name__ == "__main__":
    main()
