#!/usr/bin/env python3
"""PyTorch reference for the pre-LN (norm_first) seq2seq forward, eps-sensitive (issue 15, item 3).

    /usr/bin/python3 scripts/make_preln_fixtures.py

Writes tests/fixtures/reference/eps/seq2seq_preln/{config.json, model.safetensors, io.safetensors}. The model is
built from the d2l modules in /work/shared/reference/torch with the LayerNorms moved as the published pre-LN
Transformer does (Xiong et al. 2020; torch.nn.Transformer norm_first=True): each sublayer is
X + dropout(f(LN(X))), and a final LayerNorm (encoder.ln / decoder.ln) closes each stack. Options as the subword
recipe (configs/multi30k-en-fr.json): shared_embeddings (one embedding for source, target and the tied output
projection, whose bias is decoder.dense.bias), attention_bias, relu. Seeded, torch.set_num_threads(1).
"""
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import torch  # noqa: E402
from torch import nn  # noqa: E402

import make_reference_fixtures as mrf  # noqa: E402  (helpers: save, save_json, shrink, unit_norm, eps_sensitivity)
import reference_modules as rm  # noqa: E402

torch.set_num_threads(1)

PAD, BOS, EOS = mrf.PAD, mrf.BOS, mrf.EOS
CFG = dict(model_type="transformer_seq2seq", num_hiddens=32, num_layers=2, num_heads=4, ffn_num_hiddens=64,
           dropout=0.0, num_steps=8, src_vocab_size=24, tgt_vocab_size=24, norm_first=True, shared_embeddings=True,
           attention_bias=True, activation="relu")
FIRST_TOK = 4  # token FIRST_TOK + t is the one placed at position t (see make())
RESID = 3e-3   # std of the residual stream: LayerNorm input variance ~1e-5 against eps 1e-5


class PreLNEncoderBlock(nn.Module):
    def __init__(self, H, F, heads, dropout, bias):
        super().__init__()
        self.attention = rm.Multihead_attention(heads, dropout, H, H, H, H, bias=bias)
        self.addnorm1 = rm.AddNorm([H], dropout)  # only .ln and .dropout are used: pre-LN, no post-norm
        self.ffn = rm.PositionWiseFFN(H, F, H)
        self.addnorm2 = rm.AddNorm([H], dropout)

    def forward(self, X, valid_lens):
        h = self.addnorm1.ln(X)
        Y = X + self.addnorm1.dropout(self.attention(h, h, h, valid_lens))
        return Y + self.addnorm2.dropout(self.ffn(self.addnorm2.ln(Y)))


class PreLNDecoderBlock(nn.Module):
    def __init__(self, H, F, heads, dropout, bias, i):
        super().__init__()
        self.i = i
        self.attention1 = rm.Multihead_attention(heads, dropout, H, H, H, H, bias=bias)
        self.addnorm1 = rm.AddNorm([H], dropout)
        self.attention2 = rm.Multihead_attention(heads, dropout, H, H, H, H, bias=bias)
        self.addnorm2 = rm.AddNorm([H], dropout)
        self.ffn = rm.PositionWiseFFN(H, F, H)
        self.addnorm3 = rm.AddNorm([H], dropout)

    def forward(self, X, state):
        enc_outputs, enc_valid_lens = state[0], state[1]
        h = self.addnorm1.ln(X)  # the cache holds normalised inputs: keys/values of self-attention are LN(X)
        key_values = h if state[2][self.i] is None else torch.cat((state[2][self.i], h), axis=1)
        state[2][self.i] = key_values
        if self.training:
            B, T, _ = X.shape
            dec_valid_lens = torch.arange(1, T + 1).repeat(B, 1)
        else:
            dec_valid_lens = None
        Y = X + self.addnorm1.dropout(self.attention1(h, key_values, key_values, dec_valid_lens))
        Z = Y + self.addnorm2.dropout(self.attention2(self.addnorm2.ln(Y), enc_outputs, enc_outputs, enc_valid_lens))
        return Z + self.addnorm3.dropout(self.ffn(self.addnorm3.ln(Z))), state


class PreLNEncoder(nn.Module):
    def __init__(self, c, embedding):
        super().__init__()
        H = c["num_hiddens"]
        self.num_hiddens = H
        self.embedding = embedding
        self.pos_encoding = rm.PositionalEncoding(H, c["dropout"])
        self.blks = nn.Sequential()
        for i in range(c["num_layers"]):
            self.blks.add_module("block" + str(i), PreLNEncoderBlock(H, c["ffn_num_hiddens"], c["num_heads"],
                                                                     c["dropout"], c["attention_bias"]))
        self.ln = nn.LayerNorm(H)

    def forward(self, X, valid_lens):
        X = self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens))
        for blk in self.blks:
            X = blk(X, valid_lens)
        return self.ln(X)


class PreLNDecoder(nn.Module):
    def __init__(self, c, embedding):
        super().__init__()
        H = c["num_hiddens"]
        self.num_hiddens, self.num_layers = H, c["num_layers"]
        self.embedding = embedding
        self.pos_encoding = rm.PositionalEncoding(H, c["dropout"])
        self.blks = nn.Sequential()
        for i in range(c["num_layers"]):
            self.blks.add_module("block" + str(i), PreLNDecoderBlock(H, c["ffn_num_hiddens"], c["num_heads"],
                                                                     c["dropout"], c["attention_bias"], i))
        self.ln = nn.LayerNorm(H)
        self.dense = nn.Linear(H, c["tgt_vocab_size"])
        self.dense.weight = embedding.weight  # tied output projection (shared_embeddings)

    def init_state(self, enc_outputs, enc_valid_lens, *args):
        return [enc_outputs, enc_valid_lens, [None] * self.num_layers]

    def forward(self, X, state):
        X = self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens))
        for blk in self.blks:
            X, state = blk(X, state)
        return self.dense(self.ln(X)), state


def make():
    c = CFG
    H, V, T = c["num_hiddens"], c["src_vocab_size"], c["num_steps"]
    torch.manual_seed(5300)
    emb = nn.Embedding(V, H)
    net = rm.EncoderDecoder(PreLNEncoder(c, emb), PreLNDecoder(c, emb))
    for m in net.modules():
        if type(m) == nn.Linear and m is not net.decoder.dense:
            nn.init.xavier_uniform_(m.weight)
    g = torch.Generator().manual_seed(5301)
    # In pre-LN every LayerNorm input contains the embedding stream emb * sqrt(H) + P (variance ~1 from P alone),
    # so no eps could matter. Token FIRST_TOK + t gets the embedding -P[t] / sqrt(H) + noise: placed at position t,
    # its stream is noise of std RESID. The sublayer output projections (W_o, dense2) are shrunk so the residual
    # stays that small through every block, and each LayerNorm (all blocks, encoder.ln, decoder.ln) sees variance
    # ~1e-5 against eps 1e-5.
    P = net.encoder.pos_encoding.P[0, :T]
    with torch.no_grad():
        for t in range(T):
            emb.weight[FIRST_TOK + t] = (-P[t] + torch.randn(H, generator=g) * RESID) / math.sqrt(H)
        for stack in (net.encoder, net.decoder):
            for blk in stack.blks:
                lin = [m for n, m in blk.named_modules() if n.endswith("W_o") or n.endswith("dense2")]
                mrf.shrink(lin, g, scale=RESID)
                if c["attention_bias"]:
                    for n, m in blk.named_modules():
                        if n.endswith(("W_q", "W_k", "W_v")):
                            m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
        norms = [(n, m) for n, m in net.named_modules() if isinstance(m, nn.LayerNorm)]
        for _, ln in norms:
            mrf.unit_norm(ln, g)
        net.decoder.dense.bias.copy_(torch.randn(V, generator=g) * 0.1)

    B = 3
    enc_vl = torch.tensor([8, 5, 3])
    enc_X = torch.full((B, T), PAD, dtype=torch.long)
    for b in range(B):
        enc_X[b, :enc_vl[b]] = FIRST_TOK + torch.arange(int(enc_vl[b]))
    dec_X = (FIRST_TOK + torch.arange(T)).repeat(B, 1)

    def run():
        net.train()  # dropout 0: train mode only turns on the decoder's causal valid_lens (teacher forcing)
        with torch.no_grad():
            logits, _ = net(enc_X, dec_X, enc_vl)
            enc = net.encoder(enc_X, enc_vl)
        return (logits, enc)

    (logits, enc), ratios = mrf.eps_sensitivity(run, norms, mrf.wrong_eps)
    assert all(r > mrf.MIN_RATIO for r in ratios.values()), ratios
    assert all(ln.eps == 1e-5 for _, ln in norms)
    state = {k: v for k, v in net.state_dict().items() if k not in ("decoder.embedding.weight", "decoder.dense.weight")}
    mrf.OUT = os.path.join(ROOT, "tests", "fixtures", "reference")
    mrf.save_json(c, "eps/seq2seq_preln/config.json")
    mrf.save(state, "eps/seq2seq_preln/model.safetensors")
    mrf.save(dict(enc_X=enc_X, enc_valid_lens=enc_vl, dec_X=dec_X, logits=logits, enc_outputs=enc),
             "eps/seq2seq_preln/io.safetensors")
    for n, r in sorted(ratios.items()):
        print(f"  {n}: wrong eps moves outputs by >= {r:.3g} of scale")
    for rel, n, size in mrf.SUMMARY:
        print(f"  {rel}: {size} bytes")


if __name__ == "__main__":
    make()
