"""PyTorch side of `bench/multi30k.sh --short`: an equivalent torch.nn.Transformer (same dimensions, pre-LN, shared
embeddings, same token-count batches from the same SentencePiece model) trained for N steps with Adam and label
smoothing. Prints the target tokens per second (one number). Run with Debian's /usr/bin/python3."""
import argparse, gzip, json, math, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_blas  # noqa: E402

torch_blas.prepare()  # before torch loads OpenBLAS
import torch  # noqa: E402
from torch import nn

try:
    import sentencepiece as spm_mod  # Debian python3-sentencepiece, if installed
except ImportError:
    spm_mod = None

p = argparse.ArgumentParser()
p.add_argument("--config", required=True)
p.add_argument("--spm", required=True)
p.add_argument("--data", required=True)
p.add_argument("--steps", type=int, default=30)
p.add_argument("--threads", type=int, default=2)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch_blas.check()
torch.manual_seed(0)
c = json.load(open(a.config))
H, L, heads, F = c["num_hiddens"], c["num_layers"], c["num_heads"], c["ffn_num_hiddens"]
V, max_tokens, max_len = c["vocab_size"], c["max_tokens"], c["max_len"]


def lines(name):
    with gzip.open(f"{a.data}/{name}", "rt", encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


src, tgt = lines(c["train_src"]), lines(c["train_tgt"])
if spm_mod is not None:
    sp = spm_mod.SentencePieceProcessor(model_file=a.spm)
    enc = lambda s: sp.encode(s)[: max_len - 1] + [3]
else:  # same lengths are what matter for throughput: approximate subwords by words * 1.3
    enc = lambda s: [4 + (hash(w) % (V - 4)) for w in s.split()][: max_len - 1] * 1 + [3]
pairs = sorted(((enc(s), enc(t)) for s, t in zip(src, tgt)), key=lambda x: (len(x[1]), len(x[0])))
batches, cur, ls, lt = [], [], 0, 0
for s, t in pairs:
    nls, nlt = max(ls, len(s)), max(lt, len(t))
    if cur and (len(cur) + 1) * (nls + nlt) > max_tokens:
        batches.append(cur); cur, nls, nlt = [], len(s), len(t)
    cur.append((s, t)); ls, lt = nls, nlt
batches.append(cur)
g = torch.Generator().manual_seed(1)
order = torch.randperm(len(batches), generator=g).tolist()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, H)
        self.tf = nn.Transformer(H, heads, L, L, F, c["dropout"], batch_first=True, norm_first=True)
        self.out_bias = nn.Parameter(torch.zeros(V))

    def forward(self, s, d, s_pad, t_pad):
        pe = self.pe(max(s.shape[1], d.shape[1]))
        x = self.emb(s) * math.sqrt(H) + pe[: s.shape[1]]
        y = self.emb(d) * math.sqrt(H) + pe[: d.shape[1]]
        causal = self.tf.generate_square_subsequent_mask(d.shape[1])
        h = self.tf(x, y, tgt_mask=causal, src_key_padding_mask=s_pad, tgt_key_padding_mask=t_pad,
                    memory_key_padding_mask=s_pad)
        return h @ self.emb.weight.T + self.out_bias

    @staticmethod
    def pe(n):
        pos = torch.arange(n, dtype=torch.float32)[:, None] / torch.pow(10000, torch.arange(0, H, 2) / H)
        P = torch.zeros(n, H); P[:, 0::2] = torch.sin(pos); P[:, 1::2] = torch.cos(pos)
        return P


m = Model()
opt = torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
loss_fn = nn.CrossEntropyLoss(ignore_index=1, label_smoothing=c["label_smoothing"])
m.train()
ntok, t0 = 0, None
for step in range(a.steps + 2):
    b = batches[order[step % len(batches)]]
    Ls, Lt = max(len(s) for s, _ in b), max(len(t) for _, t in b)
    S = torch.tensor([s + [1] * (Ls - len(s)) for s, _ in b])
    T = torch.tensor([t + [1] * (Lt - len(t)) for _, t in b])
    D = torch.cat([torch.full((len(b), 1), 2), T[:, :-1]], 1)
    logits = m(S, D, S == 1, D == 1)
    loss = loss_fn(logits.reshape(-1, V), T.reshape(-1))
    opt.zero_grad(); loss.backward()
    nn.utils.clip_grad_norm_(m.parameters(), 1.0); opt.step()
    if step == 1:
        t0 = time.perf_counter()  # two warm-up steps
    elif step > 1:
        ntok += int((T != 1).sum())
print(round(ntok / (time.perf_counter() - t0)))
