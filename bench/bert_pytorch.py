"""PyTorch side of bench/encoder_vs_pytorch.sh (run with Debian's /usr/bin/python3, which has torch).

  bert_pytorch.py make-weights DIR          random BERT-base (HF names) -> DIR/config.json + DIR/model.safetensors
  bert_pytorch.py bench DIR [--threads 2] [--warmup 2] [--reps 10] [--shapes 1x128,8x128,1x512]
                                            BertModelRef forward latency, one JSON line per shape (as bench_encoder)
  bert_pytorch.py table OURS.jsonl TORCH.jsonl [--ceiling-gflops X]
                                            the comparison table (markdown)

The model is BertModelRef of reference/torch/reference_modules.py (post-LN BERT, state_dict names equal to
Hugging Face BertModel's), so the file loads into both it and our load_encoder. Weights are PyTorch's default
initialisation (Linear U(+-1/sqrt(fan_in)), Embedding N(0, 1), LayerNorm 1/0) from a fixed seed.
"""
import argparse
import json
import os
import statistics
import sys
import time
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_blas  # noqa: E402

torch_blas.prepare()  # before any torch import: OpenBLAS reads its environment when it loads
REF = os.environ.get("TFM_TORCH_REFERENCE", os.path.join(HERE, "..", "..", "shared", "reference", "torch"))
if not os.path.isdir(REF):
    REF = "/work/shared/reference/torch"
sys.path.insert(0, REF)

BERT_BASE = dict(model_type="bert", vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2,
                 layer_norm_eps=1e-12, hidden_act="gelu", pad_token_id=0)


def parse_shapes(s):
    out = []
    for item in s.split(","):
        b, l = item.lower().split("x")
        out.append((int(b), int(l)))
    return out


def gemm_gflop(c, B, L):
    H, I = c["hidden_size"], c["intermediate_size"]
    return (2 * (4 * H * H + 2 * H * I) + 2 * 2 * L * H) * B * L * c["num_hidden_layers"] * 1e-9


def status_mb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return -1.0


def make_weights(d):
    import torch
    from reference_modules import BertModelRef
    import st

    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    model = BertModelRef(SimpleNamespace(**BERT_BASE))
    st.save(st.state_dict_to_numpy(model.state_dict()), os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(dict(BERT_BASE, architectures=["BertModel"]), f, indent=2)


def load_model(d):
    import numpy as np
    import torch
    from reference_modules import BertModelRef
    import st

    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    model = BertModelRef(SimpleNamespace(**{k: cfg[k] for k in BERT_BASE}))
    sd = {k: torch.from_numpy(np.array(v)) for k, v in st.load(os.path.join(d, "model.safetensors")).items()}
    missing, unexpected = model.load_state_dict(sd, strict=True)
    del sd
    model.eval()
    return model, cfg


def bench(args):
    import torch

    torch.set_num_threads(args.threads)
    blas = torch_blas.check()
    t0 = time.perf_counter()
    model, cfg = load_model(args.dir)
    load_ms = (time.perf_counter() - t0) * 1e3
    print(json.dumps(dict(kind="model", threads=torch.get_num_threads(), load_ms=round(load_ms, 1), blas=blas,
                          rss_after_load_mb=round(status_mb("VmRSS"), 1), torch=torch.__version__)), flush=True)
    # The same GEMM as bench_encoder --sgemm, through torch (x @ W^T).
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(1024, 768, generator=g), torch.randn(3072, 768, generator=g)
    with torch.inference_mode():
        for _ in range(3):
            torch.nn.functional.linear(x, w)
        ts = []
        for _ in range(20):
            t = time.perf_counter()
            torch.nn.functional.linear(x, w)
            ts.append(time.perf_counter() - t)
    med = statistics.median(ts)
    print(json.dumps(dict(kind="sgemm", M=1024, N=3072, K=768, median_ms=round(med * 1e3, 3),
                          gflops=round(2 * 1024 * 3072 * 768 * 1e-9 / med, 1))), flush=True)
    for B, L in parse_shapes(args.shapes):
        ids = torch.randint(0, cfg["vocab_size"], (B, L), generator=torch.Generator().manual_seed(B * 1000 + L))
        with torch.inference_mode():
            for _ in range(args.warmup):
                model(ids)
            ts = []
            for _ in range(args.reps):
                t = time.perf_counter()
                out, _ = model(ids)
                ts.append(time.perf_counter() - t)
        med = statistics.median(ts)
        gflop = gemm_gflop(cfg, B, L)
        print(json.dumps(dict(kind="encoder", B=B, L=L, reps=args.reps, median_ms=round(med * 1e3, 3),
                              min_ms=round(min(ts) * 1e3, 3), gflop=round(gflop, 3), gflops=round(gflop / med, 1),
                              peak_rss_mb=round(status_mb("VmHWM"), 1), rss_mb=round(status_mb("VmRSS"), 1),
                              checksum=float(out.sum()))), flush=True)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def table(args):
    ours, torch_ = read_jsonl(args.ours), read_jsonl(args.torch)
    model = next(r for r in ours if r["kind"] == "model")
    sg = next((r for r in ours if r["kind"] == "sgemm"), None)
    tsg = next((r for r in torch_ if r["kind"] == "sgemm"), None)
    ceiling = args.ceiling_gflops or (sg["gflops"] if sg else None)
    tmodel = next(r for r in torch_ if r["kind"] == "model")
    t_by = {(r["B"], r["L"]): r for r in torch_ if r["kind"] == "encoder"}
    wmb = model["weights_mb"]
    print(f"threads: {model['threads']}; weight file: {wmb:.1f} MiB; "
          f"load: ours {model['load_ms']:.0f} ms, torch {tmodel['load_ms']:.0f} ms")
    if sg:
        print(f"OpenBLAS sgemm ceiling (cblas_sgemm 1024x3072x768, x @ W^T, {sg['threads']} threads): "
              f"{sg['gflops']:.1f} GFLOP/s median ({sg['best_gflops']:.1f} best)"
              + (f"; torch F.linear same shape: {tsg['gflops']:.1f} GFLOP/s" if tsg else ""))
    print("(ms: median of the timed repetitions; GFLOP/s: GEMM flops / median; peak RSS: VmHWM, MiB)")
    print()
    print(f"| shape [B, L] | ours ms | torch ms | ours/torch | ours/torch (best rep) | ours GFLOP/s | % of sgemm ({ceiling:.0f}) "
          f"| % of 142 | torch GFLOP/s | our peak RSS MiB | peak RSS / weights | torch peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in (r for r in ours if r["kind"] == "encoder"):
        t = t_by.get((r["B"], r["L"]))
        tms = t["median_ms"] if t else float("nan")
        print(f"| [{r['B']}, {r['L']}] | {r['median_ms']:.1f} | {tms:.1f} | {r['median_ms'] / tms:.2f} "
              f"| {r['min_ms'] / (t['min_ms'] if t else float('nan')):.2f} "
              f"| {r['gflops']:.1f} | {100 * r['gflops'] / ceiling:.0f}% | {100 * r['gflops'] / 142:.0f}% "
              f"| {t['gflops'] if t else float('nan'):.1f} | {r['peak_rss_mb']:.0f} | {r['peak_rss_mb'] / wmb:.2f} "
              f"| {t['peak_rss_mb'] if t else float('nan'):.0f} |")
    bd = [r for r in ours if r["kind"] == "breakdown"]
    if bd:
        print()
        print("Per-op breakdown (sections of the real forward, all layers; bench_encoder --breakdown):")
        print()
        print("| shape | section | ms (all layers) | share | GFLOP/s |")
        print("|---|---|---:|---:|---:|")
        for (B, L) in sorted({(r["B"], r["L"]) for r in bd}, key=lambda s: (s[0] * s[1], s)):
            rows = [r for r in bd if (r["B"], r["L"]) == (B, L)]
            tot = sum(r["ms_all_layers"] for r in rows)
            for r in rows:
                gf = f"{r['gflops']:.1f}" if r["gflops"] else ""
                print(f"| [{B}, {L}] | {r['section']} | {r['ms_all_layers']:.1f} | "
                      f"{100 * r['ms_all_layers'] / tot:.0f}% | {gf} |")
            print(f"| [{B}, {L}] | **sum** | {tot:.1f} | 100% | |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-weights")
    m.add_argument("dir")
    b = sub.add_parser("bench")
    b.add_argument("dir")
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--warmup", type=int, default=2)
    b.add_argument("--reps", type=int, default=10)
    b.add_argument("--shapes", default="1x128,8x128,1x512")
    t = sub.add_parser("table")
    t.add_argument("ours")
    t.add_argument("torch")
    t.add_argument("--ceiling-gflops", type=float, default=None)
    args = ap.parse_args()
    {"make-weights": lambda: make_weights(args.dir), "bench": lambda: bench(args), "table": lambda: table(args)}[
        args.cmd]()


if __name__ == "__main__":
    main()
