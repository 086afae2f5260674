#!/usr/bin/python3
"""Reference logits processors, processed decoding and teacher-forced scores, for tests/test_generation.cpp.

    /usr/bin/python3 scripts/make_generation_fixtures.py   # writes tests/fixtures/generation/*.json

1. processors.json: the Hugging Face logits processors and warpers re-written here in PyTorch from
   transformers/generation/logits_process.py (RepetitionPenaltyLogitsProcessor, NoRepeatNGramLogitsProcessor,
   NoBadWordsLogitsProcessor as the SequenceBias version with bias -inf, MinLengthLogitsProcessor,
   TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper; min_tokens_to_keep 1, filter value -inf), applied
   in _get_logits_processor's order to seeded random logits [B, V] for given input_ids [B, L]. -inf is written as
   null.
2. decoding.json: on tests/fixtures/d2l_trained (the PyTorch reference modules, decoded as d2l's predict_seq2seq
   does: one token a step, P[0] added each step), for English sentences of fra.txt:
   - greedy (HF generate with num_beams 1): processors on the float32 logits of each step, input_ids = <bos> +
     generated tokens, argmax (first on ties); sentences are picked where the result differs from plain greedy;
   - beam search (the rules of scripts/make_beam_fixtures.py, GNMT alpha 0) with the processors applied to each
     beam's log-softmax scores, as HF's beam search applies them;
   - a target prefix (CTranslate2's target_prefix): the prefix tokens forced first, greedy and beam;
   - teacher-forced scores: log_softmax(logits)[label] of each token of given targets and of <eos>.
Selection only picks inputs; every expected value is the PyTorch code's output. torch.set_num_threads(1).
"""
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import torch  # noqa: E402

import make_beam_fixtures as mbf  # noqa: E402  (load_model, read_vocab, Search; also sets up the reference path)
import d2lnmt  # noqa: E402

torch.set_num_threads(1)
OUT = os.path.join(ROOT, "tests", "fixtures", "generation")
NEG_INF = float("-inf")


# ----------------------------------------------------------------------------- processors (from logits_process.py)
def repetition_penalty(input_ids, scores, penalty):
    score = torch.gather(scores, 1, input_ids)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return scores.scatter(1, input_ids, score)


def no_repeat_ngram(input_ids, scores, n):
    scores = scores.clone()
    B, cur_len = input_ids.shape
    if cur_len + 1 < n:
        return scores
    for b in range(B):
        toks = input_ids[b].tolist()
        ngrams = {}
        for ng in zip(*[toks[i:] for i in range(n)]):
            ngrams[tuple(ng[:-1])] = ngrams.get(tuple(ng[:-1]), []) + [ng[-1]]
        banned = ngrams.get(tuple(toks[cur_len + 1 - n:cur_len]), [])
        scores[b, banned] = NEG_INF
    return scores


def bad_words(input_ids, scores, words, eos):
    words = [w for w in words if w != [eos]]
    bias = torch.zeros_like(scores)
    for w in words:
        if len(w) == 1:
            bias[:, w[0]] += NEG_INF
            continue
        if len(w) > input_ids.shape[1]:
            continue
        match = torch.eq(input_ids[:, -(len(w) - 1):], torch.tensor(w[:-1])).prod(dim=1)
        bias[:, w[-1]] += torch.where(match.bool(), torch.tensor(NEG_INF), torch.tensor(0.0))
    return scores + bias


def min_length(input_ids, scores, n, eos):
    scores = scores.clone()
    if input_ids.shape[-1] < n:
        scores[:, eos] = NEG_INF
    return scores


def temperature(scores, t):
    return scores / t


def top_k(scores, k):
    k = min(max(k, 1), scores.size(-1))
    remove = scores < torch.topk(scores, k)[0][..., -1, None]
    return scores.masked_fill(remove, NEG_INF)


def top_p(scores, p):
    sorted_logits, sorted_indices = torch.sort(scores, descending=False)
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove_sorted = cum <= (1 - p)
    remove_sorted[..., -1:] = 0
    remove = remove_sorted.scatter(1, sorted_indices, remove_sorted)
    return scores.masked_fill(remove, NEG_INF)


def process(opts, input_ids, scores, eos, warp):
    """_get_logits_processor's order; the warpers only with `warp` (do_sample)."""
    if opts.get("repetition_penalty", 1.0) != 1.0:
        scores = repetition_penalty(input_ids, scores, opts["repetition_penalty"])
    if opts.get("no_repeat_ngram_size", 0) > 0:
        scores = no_repeat_ngram(input_ids, scores, opts["no_repeat_ngram_size"])
    if opts.get("bad_words_ids"):
        scores = bad_words(input_ids, scores, opts["bad_words_ids"], eos)
    if opts.get("min_length", 0) > 0:
        scores = min_length(input_ids, scores, opts["min_length"], eos)
    if warp:
        if opts.get("temperature", 1.0) != 1.0:
            scores = temperature(scores, opts["temperature"])
        if opts.get("top_k", 0) > 0:
            scores = top_k(scores, opts["top_k"])
        if opts.get("top_p", 1.0) < 1.0:
            scores = top_p(scores, opts["top_p"])
    return scores


def as_json(t):
    return [[None if math.isinf(x) and x < 0 else x for x in row] for row in t.tolist()]


def processor_cases():
    g = torch.Generator().manual_seed(23)
    V, eos = 16, 3
    input_ids = torch.tensor([[2, 5, 7, 5, 7, 9, 5],
                              [2, 4, 4, 4, 6, 3, 6],
                              [2, 11, 12, 13, 11, 12, 10]])
    cases = [
        ("repetition_penalty", dict(repetition_penalty=1.7), False),
        ("repetition_penalty_below_one", dict(repetition_penalty=0.6), False),
        ("no_repeat_ngram_2", dict(no_repeat_ngram_size=2), False),
        ("no_repeat_ngram_3", dict(no_repeat_ngram_size=3), False),
        ("no_repeat_ngram_longer_than_input", dict(no_repeat_ngram_size=9), False),
        ("bad_words", dict(bad_words_ids=[[8], [7, 9, 1], [5, 14], [eos], [12, 10, 15]]), False),
        ("min_length_active", dict(min_length=8), False),
        ("min_length_reached", dict(min_length=7), False),
        ("temperature", dict(temperature=0.7), True),
        ("top_k", dict(top_k=4), True),
        ("top_p", dict(top_p=0.8), True),
        ("top_p_small", dict(top_p=0.05), True),
        ("all", dict(repetition_penalty=1.3, no_repeat_ngram_size=2, bad_words_ids=[[1], [9, 2]], min_length=9,
                     temperature=0.8, top_k=7, top_p=0.9), True),
    ]
    out = []
    for name, opts, warp in cases:
        scores = torch.randn(input_ids.shape[0], V, generator=g) * 3
        expected = process(opts, input_ids, scores, eos, warp)
        out.append(dict(name=name, options=opts, do_sample=warp, eos_id=eos, vocab_size=V,
                        input_ids=input_ids.tolist(), scores=scores.tolist(), expected=as_json(expected)))
    return out


# ----------------------------------------------------------------------------- decoding on d2l_trained
class Decoder(mbf.Search):
    def steps(self, ids):
        """Yields a step function: feed tokens [R] with row selection, get float32 logits [R, V]."""
        vl = torch.tensor([len(ids)])
        enc_X = torch.tensor(ids + [self.pad] * (self.num_steps - len(ids))).unsqueeze(0)
        return self.net.encoder(enc_X, vl), vl

    def step(self, enc, vl, cache, toks):
        R = len(toks)
        state = [enc.expand(R, -1, -1), vl.expand(R), cache]
        Y, state = self.net.decoder(torch.tensor([[t] for t in toks]), state)
        return Y[:, 0, :], state[2]

    @torch.no_grad()
    def greedy(self, sentence, opts, prefix=()):
        enc, vl = self.steps(self.source(sentence))
        cache = [None] * self.net.decoder.num_layers
        gen, last = [], self.bos
        for t in range(self.num_steps):
            logits, cache = self.step(enc, vl, cache, [last])
            if t < len(prefix):
                tok = prefix[t]
            else:
                x = process(opts, torch.tensor([[self.bos] + gen]), logits.float(), self.eos, False)
                tok = int(torch.argmax(x[0]))
            if tok == self.eos:
                return gen, True
            gen.append(tok)
            last = tok
        return gen, False

    @torch.no_grad()
    def beam(self, sentence, K, opts, prefix=()):
        """make_beam_fixtures' search (alpha 0, run to num_steps) with processors on the log-softmax scores."""
        enc, vl = self.steps(self.source(sentence))
        cache = [None] * self.net.decoder.num_layers
        alive, done = [([], 0.0)], []
        for t in range(self.num_steps):
            logits, cache = self.step(enc, vl, cache, [toks[-1] if toks else self.bos for toks, _ in alive])
            logp = torch.log_softmax(logits.double(), dim=-1)
            if t < len(prefix):
                cands = [(alive[b][1] + float(logp[b, prefix[t]]), b, prefix[t]) for b in range(len(alive))]
            else:
                if opts:
                    ids = torch.tensor([[self.bos] + toks for toks, _ in alive])
                    logp = process(opts, ids, logp, self.eos, False)
                cands = [(alive[b][1] + float(logp[b, v]), b, v) for b in range(len(alive))
                         for v in range(logp.shape[1])]
            cands.sort(key=lambda c: (-c[0], c[1], c[2]))
            nxt, rows = [], []
            for rank, (lp, b, v) in enumerate(cands):
                if len(nxt) == K:
                    break
                if v == self.eos:
                    if rank < K:
                        done.append((lp, alive[b][0], True))
                    continue
                nxt.append((alive[b][0] + [v], lp))
                rows.append(b)
            alive = nxt
            cache = [c[torch.tensor(rows)] for c in cache]
            if not alive:
                break
        done += [(lp, toks, False) for toks, lp in alive]
        done.sort(key=lambda d: -d[0])  # stable
        return done

    @torch.no_grad()
    def score(self, sentence, target):
        enc, vl = self.steps(self.source(sentence))
        cache = [None] * self.net.decoder.num_layers
        out, last = [], self.bos
        for label in list(target) + [self.eos]:
            logits, cache = self.step(enc, vl, cache, [last])
            out.append(float(torch.log_softmax(logits.float(), dim=-1)[0, label]))
            last = label
        return out


def main():
    os.makedirs(OUT, exist_ok=True)
    write(os.path.join(OUT, "processors.json"),
          dict(generator="scripts/make_generation_fixtures.py", torch_version=torch.__version__,
               cases=processor_cases()))

    net, cfg = mbf.load_model()
    T = cfg["num_steps"]
    src_itos, tgt_itos = mbf.read_vocab("src_vocab.txt"), mbf.read_vocab("tgt_vocab.txt")
    dec = Decoder(net, src_itos, tgt_itos, T)
    tgt_stoi = {t: i for i, t in enumerate(tgt_itos)}
    with open(os.path.join(mbf.DATA, "fra-eng", "fra.txt"), encoding="utf-8") as f:
        text = d2lnmt.preprocess_nmt(f.read())
    source, _ = d2lnmt.tokenize_nmt(text, 600)
    pool, seen = [], set()
    for toks in source:
        s = " ".join(toks)
        if s not in seen and len(toks) + 1 <= T and all(t in dec.src_stoi for t in toks):
            seen.add(s)
            pool.append(s)
    words = lambda ids: " ".join(tgt_itos[i] for i in ids)
    PER = 4
    greedy_cases = []
    configs = [dict(no_repeat_ngram_size=1), dict(no_repeat_ngram_size=2), dict(repetition_penalty=1.8),
               dict(repetition_penalty=0.5), dict(min_length=7),
               dict(bad_words_ids=[[tgt_stoi["."]], [tgt_stoi["je"], tgt_stoi["suis"]]]),
               dict(repetition_penalty=1.4, no_repeat_ngram_size=2, min_length=5)]
    for opts in configs:
        picked = []
        for s in pool:
            plain = dec.greedy(s, {})
            got = dec.greedy(s, opts)
            if got != plain:
                picked.append(dict(src=s, pred_ids=got[0], finished=got[1], pred=words(got[0]),
                                   plain_ids=plain[0]))
            if len(picked) == PER:
                break
        print(f"greedy {opts}: {len(picked)} sentences")
        assert picked
        greedy_cases.append(dict(options=opts, sentences=picked))

    beam_cases = []
    for K, opts in [(4, dict(no_repeat_ngram_size=1)), (3, dict(repetition_penalty=1.6, min_length=6))]:
        picked = []
        for s in pool:
            kept = dec.beam(s, K, opts)
            if len(kept) > 1 and kept[0][0] - kept[1][0] < 1e-3:
                continue
            plain = dec.beam(s, K, {})
            if kept[0][1] != plain[0][1]:
                picked.append(dict(src=s, pred_ids=kept[0][1], finished=kept[0][2], logp=kept[0][0],
                                   pred=words(kept[0][1])))
            if len(picked) == PER:
                break
        print(f"beam {K} {opts}: {len(picked)} sentences")
        assert picked
        beam_cases.append(dict(beam_size=K, options=opts, sentences=picked))

    prefix_cases = []
    for s in pool[:40]:
        plain = dec.greedy(s, {})[0]
        for prefix_words in (["je"], ["nous", "sommes"], ["il", "est"]):
            prefix = [tgt_stoi[w] for w in prefix_words]
            if plain[:len(prefix)] == prefix:
                continue
            g = dec.greedy(s, {}, prefix)
            b = dec.beam(s, 3, {}, prefix)
            if len(b) > 1 and b[0][0] - b[1][0] < 1e-3:
                continue
            prefix_cases.append(dict(src=s, prefix=prefix_words, greedy_ids=g[0], greedy_finished=g[1],
                                     beam_size=3, beam_ids=b[0][1], beam_logp=b[0][0]))
            break
        if len(prefix_cases) == 6:
            break
    print(f"prefix: {len(prefix_cases)} sentences")

    with open(os.path.join(mbf.FIX, "predictions.json"), encoding="utf-8") as f:
        preds = json.load(f)["predictions"]
    score_cases = []
    for p in preds[:4]:
        tgt = [tgt_stoi.get(w, tgt_stoi["<unk>"]) for w in p["pred"].split(" ") if w]
        score_cases.append(dict(src=p["src"], tgt=words(tgt), tgt_ids=tgt, log_probs=dec.score(p["src"], tgt)))
    for s in pool[:4]:  # another sentence's translation: a poor pair, low scores
        tgt = dec.greedy(pool[10], {})[0]
        score_cases.append(dict(src=s, tgt=words(tgt), tgt_ids=tgt, log_probs=dec.score(s, tgt)))
    score_cases.append(dict(src=pool[0], tgt="", tgt_ids=[], log_probs=dec.score(pool[0], [])))

    write(os.path.join(OUT, "decoding.json"),
          dict(generator="scripts/make_generation_fixtures.py", torch_version=torch.__version__,
               model="tests/fixtures/d2l_trained", num_steps=T, greedy=greedy_cases, beam=beam_cases,
               prefix=prefix_cases, score=score_cases))


def write(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
