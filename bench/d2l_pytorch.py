"""PyTorch side of bench/train_vs_pytorch.sh: the d2l reference loop (../shared/reference/torch/d2lnmt.py) timed.

Prints one JSON line: {"train_tokens_per_s": ..., "epochs": ..., "seconds": ..., "final_loss": ...,
"predict_sentences_per_s": ...}. Tokens are valid target tokens, counted as the C++ trainer counts them.
"""
import argparse, json, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_blas  # noqa: E402

torch_blas.prepare()  # before torch loads OpenBLAS
import torch  # noqa: E402

ref = os.environ.get("TFM_REFERENCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "reference"))
sys.path.insert(0, os.path.join(ref, "torch"))
import d2lnmt  # noqa: E402
from reference_modules import D2LTransformerDecoder, D2LTransformerEncoder, EncoderDecoder  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--data", required=True)
p.add_argument("--num-examples", type=int, default=600)
p.add_argument("--num-steps", type=int, default=10)
p.add_argument("--num-hiddens", type=int, default=32)
p.add_argument("--num-layers", type=int, default=2)
p.add_argument("--num-heads", type=int, default=4)
p.add_argument("--ffn-num-hiddens", type=int, default=64)
p.add_argument("--dropout", type=float, default=0.1)
p.add_argument("--batch-size", type=int, default=64)
p.add_argument("--lr", type=float, default=0.005)
p.add_argument("--epochs", type=int, default=10)
p.add_argument("--predict", type=int, default=0, help="time predict_seq2seq on this many sentences")
p.add_argument("--threads", type=int, default=2)
a = p.parse_args()
torch.set_num_threads(a.threads)
blas = torch_blas.check()
torch.manual_seed(0)
arrays, src_vocab, tgt_vocab = d2lnmt.load_data_nmt(a.data, a.num_steps, a.num_examples)
H = a.num_hiddens
enc = D2LTransformerEncoder(len(src_vocab), H, H, H, H, [H], H, a.ffn_num_hiddens, a.num_heads, a.num_layers, a.dropout)
dec = D2LTransformerDecoder(len(tgt_vocab), H, H, H, H, [H], H, a.ffn_num_hiddens, a.num_heads, a.num_layers, a.dropout)
net = EncoderDecoder(enc, dec)
d2lnmt.xavier_init(net)
tokens_per_epoch = int(arrays[3].sum())
t0 = time.perf_counter()
loss = d2lnmt.train_seq2seq(net, arrays, a.batch_size, a.lr, a.epochs, tgt_vocab, seed=0)
secs = time.perf_counter() - t0
out = {"train_tokens_per_s": tokens_per_epoch * a.epochs / secs, "epochs": a.epochs, "seconds": secs,
       "final_loss": loss, "tokens_per_epoch": tokens_per_epoch, "blas": blas}
if a.predict:
    with open(a.data, encoding="utf-8") as f:
        lines = [l.split("\t")[0] for l in d2lnmt.preprocess_nmt(f.read()).split("\n")[: a.predict] if "\t" in l]
    t0 = time.perf_counter()
    for s in lines:
        d2lnmt.predict_seq2seq(net, s, src_vocab, tgt_vocab, a.num_steps)
    out["predict_sentences_per_s"] = len(lines) / (time.perf_counter() - t0)
    out["predict_sentences"] = len(lines)
print(json.dumps(out))
