"""Loads a model folder written by `tfm train` into the PyTorch reference (reference_modules.EncoderDecoder) with
load_state_dict(strict=True) and translates with d2l's predict_seq2seq. Run: /usr/bin/python3 scripts/check_torch_load.py DIR"""
import json, os, sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "shared", "reference", "torch"))
import d2lnmt, st  # noqa: E402
from reference_modules import D2LTransformerDecoder, D2LTransformerEncoder, EncoderDecoder  # noqa: E402

d = sys.argv[1]
c = json.load(open(os.path.join(d, "config.json")))
H = c["num_hiddens"]
args = (H, H, H, H, [H], H, c["ffn_num_hiddens"], c["num_heads"], c["num_layers"], c["dropout"])
net = EncoderDecoder(D2LTransformerEncoder(c["src_vocab_size"], *args), D2LTransformerDecoder(c["tgt_vocab_size"], *args))
sd = {k: torch.from_numpy(v.copy()) for k, v in st.load(os.path.join(d, "model.safetensors")).items()}
net.load_state_dict(sd, strict=True)


def vocab(path):
    v = d2lnmt.Vocab([])
    v.idx_to_token = open(path, encoding="utf-8").read().split("\n")[:-1]
    v.token_to_idx = {t: i for i, t in enumerate(v.idx_to_token)}
    return v


src, tgt = vocab(os.path.join(d, "src_vocab.txt")), vocab(os.path.join(d, "tgt_vocab.txt"))
for s in sys.argv[2:] or ["go .", "i lost .", "he's calm .", "i'm home ."]:
    print(s, "=>", d2lnmt.predict_seq2seq(net, s, src, tgt, c["num_steps"]))
