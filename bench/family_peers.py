"""Model side of `bench/encoder_peers.sh --family` (Debian's /usr/bin/python3 with torch).

  family_peers.py make-weights FAMILY DIR [--size base|tiny]
      a random checkpoint of FAMILY (bert, roberta, distilbert, mpnet, modernbert) with the
      real Hugging Face tensor names and config keys: config.json + model.safetensors. base = the family's base
      size (12 layers, hidden 768, its own vocabulary and position table); tiny = 2 layers, hidden 32 (for checking
      that the benchmark runs, not for numbers).
  family_peers.py export FAMILY DIR OUT.onnx
      the PyTorch reference of FAMILY (the fixture scripts' references: BertModelRef, RobertaRef, distil_forward,
      MPNetRef, ModernBertRef (eager attention)) on
      those weights, exported with torch.onnx.export (opset 14, dynamic batch and sequence axes), input input_ids,
      output last_hidden_state.
  family_peers.py table TMPDIR FAMILY[,FAMILY...]
      a Markdown table of ours_<family>_<dtype>.jsonl and ort_<family>.jsonl: median ms per shape and the ratio
      to ONNX Runtime fp32; then, where long_<family>_<dtype>.jsonl exist (modernbert's 1x8192 forward), peak
      RSS against the weight bytes (model.safetensors).
"""
import argparse
import json
import math
import os
import sys
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.normpath(os.path.join(ROOT, "..", "shared", "reference", "torch")))

SIZES = {
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64),
}
# Each family's own vocabulary and position table (bert-base-uncased, roberta-base, all-mpnet-base-v2).
FAMILY = {
    "bert": dict(model_type="bert", architectures=["BertModel"], vocab_size=30522, max_position_embeddings=512,
                 type_vocab_size=2, layer_norm_eps=1e-12, pad_token_id=0),
    "roberta": dict(model_type="roberta", architectures=["RobertaModel"], vocab_size=50265,
                    max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1),
    "mpnet": dict(model_type="mpnet", architectures=["MPNetForMaskedLM"], vocab_size=30527,
                  max_position_embeddings=514, layer_norm_eps=1e-5, pad_token_id=1,
                  relative_attention_num_buckets=32),
}
# ModernBERT-base (answerdotai/ModernBERT-base config.json): 22 layers, hidden 768, GeGLU of 1152, vocabulary 50368,
# 8,192 positions, a global layer every 3rd, local windows of 128; no biases, LayerNorm without bias.
MODERNBERT = {
    "base": dict(hidden_size=768, num_hidden_layers=22, num_attention_heads=12, intermediate_size=1152,
                 vocab_size=50368),
    "tiny": dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=48, vocab_size=1000),
}
COMMON = dict(hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, initializer_range=0.02,
              position_embedding_type="absolute")


def family_ref(family):
    """(random_weights(cfg) -> state dict, forward(cfg, sd) -> module-like callable on input_ids)."""
    import torch

    if family == "bert":
        from reference_modules import BertModelRef

        def weights(c):
            torch.manual_seed(0)
            return BertModelRef(c).state_dict()

        def model(c, sd):
            m = BertModelRef(c)
            m.load_state_dict(sd, strict=True)
            m.eval().requires_grad_(False)  # weights enter the traced graph as constants, as the others'
            return lambda ids: m(ids)[0]
        return weights, model
    if family == "roberta":
        import make_roberta_fixtures as rob
        return rob.random_weights, lambda c, sd: (lambda ids: rob.RobertaRef(c, sd).forward(ids)[0])
    if family == "mpnet":
        import make_mpnet_fixtures as mp
        return mp.random_weights, lambda c, sd: (lambda ids: mp.MPNetRef(c, sd).forward(ids)[0])
    if family == "modernbert":
        import make_modernbert_fixtures as mb

        class Exportable(mb.ModernBertRef):
            def masks(self, attention_mask, L):
                """The reference's masks, the window applied with torch.where (opset 14 has no logical_not)."""
                fmin = torch.finfo(torch.float32).min
                glob = (1.0 - attention_mask[:, None, None, :].float()).expand(-1, 1, L, L) * fmin
                rows = torch.arange(L).unsqueeze(0)
                window = (torch.abs(rows - rows.T) <= self.c.local_attention // 2).unsqueeze(0).unsqueeze(0)
                return glob, torch.where(window, glob, torch.full_like(glob, fmin))
        return mb.random_weights, lambda c, sd: (lambda ids: Exportable(c, sd).forward(ids))
    if family == "distilbert":
        try:
            import make_family_head_fixtures as fh  # DistilBERT's reference (distil_weights, distil_forward)
        except ImportError:
            return None
        if not (hasattr(fh, "distil_weights") and hasattr(fh, "distil_forward")):
            return None
        return (lambda c: fh.distil_weights(vars(c), 0),
                lambda c, sd: (lambda ids: fh.distil_forward(vars(c), sd, ids)))
    raise SystemExit(f"family_peers.py: unknown family '{family}' (bert, roberta, distilbert, mpnet, modernbert)")


def config_of(family, size):
    if family == "modernbert":
        import make_modernbert_fixtures as mb
        special = (dict(pad_token_id=50283, bos_token_id=50281, eos_token_id=50282, cls_token_id=50281,
                        sep_token_id=50282) if size == "base" else
                   dict(pad_token_id=3, bos_token_id=0, eos_token_id=2, cls_token_id=0, sep_token_id=2))
        return dict(mb.CONFIG, architectures=["ModernBertModel"], local_attention=128, global_attn_every_n_layers=3,
                    **special, **MODERNBERT[size])
    if family == "distilbert":  # DistilBertConfig's own keys; distilbert-base-uncased: 6 layers of BERT-base's size
        z = SIZES[size]
        return dict(model_type="distilbert", architectures=["DistilBertModel"],
                    vocab_size=30522 if size == "base" else 1000, dim=z["hidden_size"],
                    n_layers=6 if size == "base" else z["num_hidden_layers"], n_heads=z["num_attention_heads"],
                    hidden_dim=z["intermediate_size"], activation="gelu", max_position_embeddings=512,
                    sinusoidal_pos_embds=False, pad_token_id=0, dropout=0.1, attention_dropout=0.1)
    if family not in FAMILY:
        raise SystemExit(f"family_peers.py: no base config for '{family}'")
    cfg = dict(COMMON, **FAMILY[family], **SIZES[size])
    if size == "tiny":
        cfg["vocab_size"] = 1000
    return cfg


def make_weights(args):
    import torch
    import st

    ref = family_ref(args.family)
    if ref is None:
        print(f"{args.family}: no PyTorch reference in scripts/ yet; skipped", file=sys.stderr)
        sys.exit(3)
    cfg = config_of(args.family, args.size)
    torch.manual_seed(0)
    sd = ref[0](SimpleNamespace(**cfg))
    os.makedirs(args.dir, exist_ok=True)
    st.save({k: v.detach().numpy() for k, v in sd.items()}, os.path.join(args.dir, "model.safetensors"))
    with open(os.path.join(args.dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def load(family, d):
    import numpy as np
    import torch
    import st

    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    sd = {k: torch.from_numpy(np.array(v)) for k, v in st.load(os.path.join(d, "model.safetensors")).items()}
    return family_ref(family)[1](SimpleNamespace(**cfg), sd), cfg


def export(args):
    import torch

    fwd, cfg = load(args.family, args.dir)

    class Last(torch.nn.Module):
        def forward(self, input_ids):
            return fwd(input_ids)

    ids = torch.randint(2, cfg["vocab_size"], (2, 16))
    with torch.no_grad():
        torch.onnx.export(Last(), (ids,), args.out, input_names=["input_ids"], output_names=["last_hidden_state"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq_len"}}, opset_version=14)
    print(json.dumps(dict(kind="export", family=args.family, out=args.out, bytes=os.path.getsize(args.out))),
          flush=True)


def table(args):
    def read(path):
        rows = {}
        if os.path.exists(path):
            for line in open(path):
                j = json.loads(line)
                if j.get("kind") == "encoder":
                    rows[(j["B"], j["L"])] = j["median_ms"]
        return rows

    print("| family | shape | ours fp32 ms | ours bf16 ms | ours int8 ms | ORT fp32 ms | fp32 / ORT | bf16 / ORT | "
          "int8 / ORT |")
    print("|---|---|---|---|---|---|---|---|---|")
    for fam in args.families.split(","):
        ort = read(os.path.join(args.tmp, f"ort_{fam}.jsonl"))
        ours = {dt: read(os.path.join(args.tmp, f"ours_{fam}_{dt}.jsonl")) for dt in ("fp32", "bf16", "int8")}
        if not ort and not any(ours.values()):
            print(f"| {fam} | skipped | | | | | | | |")
            continue
        for shape in sorted(set(ort) | set(ours["fp32"])):
            o = ort.get(shape)
            cells = [ours[dt].get(shape) for dt in ("fp32", "bf16", "int8")]
            fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
            ratio = lambda x: "-" if x is None or not o else f"{x / o:.2f}x"  # noqa: E731
            print(f"| {fam} | {shape[0]}x{shape[1]} | " + " | ".join(fmt(c) for c in cells) + f" | {fmt(o)} | " +
                  " | ".join(ratio(c) for c in cells) + " |")
    long_rows = []
    for fam in args.families.split(","):
        for dt in ("fp32", "bf16", "int8"):
            path = os.path.join(args.tmp, f"long_{fam}_{dt}.jsonl")
            if not os.path.exists(path):
                continue
            for line in open(path):
                j = json.loads(line)
                if j.get("kind") == "encoder":
                    long_rows.append((fam, dt, j))
    if long_rows:
        print()
        print("| family | shape | dtype | ms | peak RSS MB | weights MB | peak / weights | goal < 2x |")
        print("|---|---|---|---|---|---|---|---|")
        for fam, dt, j in long_rows:
            r = j["peak_rss_mb"] / j["weights_mb"]
            print(f"| {fam} | {j['B']}x{j['L']} | {dt} | {j['median_ms']:.0f} | {j['peak_rss_mb']:.0f} | "
                  f"{j['weights_mb']:.0f} | {r:.2f}x | {'met' if r < 2 else 'NOT met'} |")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-weights")
    m.add_argument("family")
    m.add_argument("dir")
    m.add_argument("--size", choices=sorted(SIZES), default="base")
    e = sub.add_parser("export")
    e.add_argument("family")
    e.add_argument("dir")
    e.add_argument("out")
    t = sub.add_parser("table")
    t.add_argument("tmp")
    t.add_argument("families")
    args = ap.parse_args()
    {"make-weights": make_weights, "export": export, "table": table}[args.cmd](args)


if __name__ == "__main__":
    main()
