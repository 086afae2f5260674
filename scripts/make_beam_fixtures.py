#!/usr/bin/python3
"""Reference beam-search translations of the d2l_trained model, for tests/test_cli_reference.cpp.

    /usr/bin/python3 scripts/make_beam_fixtures.py      # writes tests/fixtures/d2l_trained/beam_predictions.json

Loads tests/fixtures/d2l_trained (weights, vocabularies) into the PyTorch reference modules
(../shared/reference/torch) and decodes as d2l's predict_seq2seq does (eval mode, one token a step, so each step
adds the positional encoding P[0]; source ids + <eos>, padded to num_steps) with a plain beam search written here
from the rules of src/decode/search.h, one sentence at a time and always run to num_steps (no early stopping):

  - K = beam_size live beams start from <bos>; each step every live beam is extended by every token, candidates
    ranked by summed log-probability (ties: lower beam, lower token id);
  - an <eos> candidate among the top K ranks becomes a finished hypothesis; the first K candidates not ending in
    <eos> are the next live beams; after num_steps tokens the live beams are cut off (hypotheses without <eos>);
  - score = logp / ((5 + length) / 6) ** length_penalty (GNMT), length = generated tokens including <eos>;
    the result is the best score over all finished and cut-off hypotheses (first one on exact ties);
  - beam_size 1 is greedy decoding (stops at the first <eos>).

Sentences: the given predictions.json sentences, plus English sentences of fra.txt (first pairs, already in d2l's
preprocessed form) chosen because the beam result differs from greedy, or from a search that stops as soon as K
hypotheses have finished, or between length penalties, and whose best score leads the runner-up by >= 1e-3 (so
float rounding between PyTorch and C++ cannot flip the answer). Selection only picks inputs; every expected value
is the PyTorch search's output. Seeded by nothing (deterministic); torch.set_num_threads(1).
"""
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REF = os.path.normpath(os.path.join(ROOT, "..", "shared", "reference", "torch"))
DATA = os.environ.get("TFM_DATA_DIR", os.path.normpath(os.path.join(ROOT, "..", "shared", "data")))
sys.path.insert(0, REF)

import torch  # noqa: E402

import reference_modules as rm  # noqa: E402
import d2lnmt  # noqa: E402
import st  # noqa: E402

torch.set_num_threads(1)
FIX = os.path.join(ROOT, "tests", "fixtures", "d2l_trained")
CONFIGS = [(2, 0.0), (4, 0.0), (4, 0.6), (8, 1.0)]  # (beam_size, length_penalty)
PER_REASON = 4  # sentences picked per selection reason and config


def load_model():
    with open(os.path.join(FIX, "config.json")) as f:
        cfg = json.load(f)
    h = cfg["num_hiddens"]
    enc = rm.D2LTransformerEncoder(cfg["src_vocab_size"], h, h, h, h, [h], h, cfg["ffn_num_hiddens"], cfg["num_heads"],
                                   cfg["num_layers"], cfg["dropout"])
    dec = rm.D2LTransformerDecoder(cfg["tgt_vocab_size"], h, h, h, h, [h], h, cfg["ffn_num_hiddens"], cfg["num_heads"],
                                   cfg["num_layers"], cfg["dropout"])
    net = rm.EncoderDecoder(enc, dec)
    state = {k: torch.from_numpy(v) for k, v in st.load(os.path.join(FIX, "model.safetensors")).items()}
    net.load_state_dict(state, strict=True)
    net.eval()
    return net, cfg


def read_vocab(name):
    with open(os.path.join(FIX, name), encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


class Search:
    def __init__(self, net, src_itos, tgt_itos, num_steps):
        self.net, self.num_steps = net, num_steps
        self.src_stoi = {t: i for i, t in enumerate(src_itos)}
        self.tgt_itos = tgt_itos
        self.bos, self.eos, self.pad = tgt_itos.index("<bos>"), tgt_itos.index("<eos>"), src_itos.index("<pad>")

    def source(self, sentence):
        ids = [self.src_stoi.get(t, 0) for t in sentence.lower().split(" ")] + [self.src_stoi["<eos>"]]
        assert len(ids) <= self.num_steps
        return ids

    @torch.no_grad()
    def run(self, sentence, K, alpha):
        """Returns (best, stop_at_k_best, kept): best = (score, logp, tokens, finished)."""
        ids = self.source(sentence)
        vl = torch.tensor([len(ids)])
        enc_X = torch.tensor(ids + [self.pad] * (self.num_steps - len(ids))).unsqueeze(0)
        enc = self.net.encoder(enc_X, vl)
        layers = self.net.decoder.num_layers
        alive = [([], 0.0)]
        cache = [None] * layers  # per layer [rows, t, H]: the block inputs so far (d2l's state[2])
        done = []
        stop_at_k = None  # the answer of a search that stops once K hypotheses have finished
        score = lambda logp, length: logp / ((5.0 + length) / 6.0) ** alpha
        stopped = False
        for t in range(self.num_steps):
            R = len(alive)
            state = [enc.expand(R, -1, -1), vl.expand(R), cache]
            X = torch.tensor([[toks[-1] if toks else self.bos] for toks, _ in alive])
            Y, state = self.net.decoder(X, state)  # eval mode, one token: adds P[0] (d2l predict_seq2seq)
            logp = torch.log_softmax(Y[:, 0, :].double(), dim=-1)
            cands = [(alive[b][1] + float(logp[b, v]), b, v) for b in range(R) for v in range(logp.shape[1])]
            cands.sort(key=lambda c: (-c[0], c[1], c[2]))
            nxt, rows = [], []
            for rank, (lp, b, v) in enumerate(cands):
                if len(nxt) == K:
                    break
                if v == self.eos:
                    if rank < K:
                        done.append((score(lp, len(alive[b][0]) + 1), lp, alive[b][0], True))
                        if K == 1:
                            stopped = True
                    continue
                nxt.append((alive[b][0] + [v], lp))
                rows.append(b)
            if stop_at_k is None and len(done) >= K:
                stop_at_k = max(done, key=lambda d: d[0])
            alive = nxt
            cache = [c[torch.tensor(rows)] for c in state[2]]
            if stopped or not alive:
                break
        if not stopped:
            done += [(score(lp, len(toks)), lp, toks, False) for toks, lp in alive]
        kept = sorted(done, key=lambda d: -d[0])  # stable: first on ties
        best = kept[0]
        return best, (stop_at_k or best), kept


def main():
    net, cfg = load_model()
    T = cfg["num_steps"]
    src_itos, tgt_itos = read_vocab("src_vocab.txt"), read_vocab("tgt_vocab.txt")
    search = Search(net, src_itos, tgt_itos, T)
    with open(os.path.join(FIX, "predictions.json"), encoding="utf-8") as f:
        base = [p["src"] for p in json.load(f)["predictions"]]
    with open(os.path.join(DATA, "fra-eng", "fra.txt"), encoding="utf-8") as f:
        text = d2lnmt.preprocess_nmt(f.read())
    source, _ = d2lnmt.tokenize_nmt(text, 1500)
    pool, seen = [], set()
    for toks in source:
        s = " ".join(toks)
        if s not in seen and s not in base and len(toks) + 1 <= T:
            seen.add(s)
            pool.append(s)
    print(f"{len(pool)} candidate sentences")
    words = lambda toks: " ".join(tgt_itos[i] for i in toks)
    cases = []
    for K, alpha in CONFIGS:
        picked, reasons = [], {"differs_from_greedy": 0, "differs_from_stop_at_k": 0, "differs_by_penalty": 0}
        for s in base + pool:
            best, early, kept = search.run(s, K, alpha)
            if len(kept) > 1 and kept[0][0] - kept[1][0] < 1e-3:
                continue  # near tie
            greedy = search.run(s, 1, 0.0)[0]
            other = search.run(s, K, 0.0 if alpha else 1.0)[0]
            why = [r for r, hit in (("differs_from_greedy", best[2] != greedy[2]),
                                     ("differs_from_stop_at_k", best[2] != early[2]),
                                     ("differs_by_penalty", best[2] != other[2])) if hit and reasons[r] < PER_REASON]
            if s not in base and not why:
                continue
            for r in why:
                reasons[r] += 1
            glen = len(greedy[2]) + (1 if greedy[3] else 0)
            picked.append(dict(src=s, src_ids=search.source(s), pred=words(best[2]), pred_ids=best[2],
                               finished=best[3], length=len(best[2]) + (1 if best[3] else 0), logp=best[1],
                               score=best[0], greedy_pred=words(greedy[2]),
                               greedy_score=greedy[1] / ((5.0 + glen) / 6.0) ** alpha, selected_because=why))
            if all(n >= PER_REASON for n in reasons.values()):
                break
        print(f"beam {K} alpha {alpha}: {len(picked)} sentences, {reasons}")
        cases.append(dict(beam_size=K, length_penalty=alpha, sentences=picked))
    out = dict(generator="scripts/make_beam_fixtures.py", torch_version=torch.__version__,
               model="tests/fixtures/d2l_trained", num_steps=T, positions="d2l_step (P[0] every step)",
               rules="\n\n".join(__doc__.split("\n\n")[2:4]).strip(), cases=cases)
    path = os.path.join(FIX, "beam_predictions.json")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
