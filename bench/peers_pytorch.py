"""PyTorch and ONNX-export side of bench/encoder_peers.sh (Debian's /usr/bin/python3, torch 1.13).

  peers_pytorch.py bench DIR --mode fp32|bf16|int8 [--threads 2] [--warmup 2] [--reps 10] [--shapes ...]
      BertModelRef (reference/torch/reference_modules.py) forward latency on DIR/model.safetensors, one JSON line
      per shape. fp32: plain; bf16: torch.autocast("cpu", dtype=torch.bfloat16); int8:
      torch.ao.quantization.quantize_dynamic on every nn.Linear with the "onednn" quantized engine (qint8
      weights, activations quantized per tensor at run time).
  peers_pytorch.py export DIR OUT.onnx
      the same fp32 model exported with torch.onnx.export (opset 14, dynamic batch and sequence axes) for
      ONNX Runtime.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_blas  # noqa: E402  (bert_pytorch has already called torch_blas.prepare())
from bert_pytorch import gemm_gflop, load_model, parse_shapes, status_mb  # noqa: E402



def bench(args):
    import torch

    torch.set_num_threads(args.threads)
    blas = torch_blas.check()
    t0 = time.perf_counter()
    model, cfg = load_model(args.dir)
    engine = ""
    if args.mode == "int8":
        engines = torch.backends.quantized.supported_engines
        engine = "onednn" if "onednn" in engines else ("fbgemm" if "fbgemm" in engines else engines[0])
        torch.backends.quantized.engine = engine
        model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    load_ms = (time.perf_counter() - t0) * 1e3
    print(json.dumps(dict(kind="model", impl="pytorch", mode=args.mode, threads=torch.get_num_threads(),
                          load_ms=round(load_ms, 1), torch=torch.__version__, quantized_engine=engine, blas=blas)), flush=True)
    for B, L in parse_shapes(args.shapes):
        ids = torch.randint(0, cfg["vocab_size"], (B, L), generator=torch.Generator().manual_seed(B * 1000 + L))

        def run():
            if args.mode == "bf16":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    return model(ids)
            return model(ids)

        with torch.inference_mode():
            for _ in range(args.warmup):
                run()
            ts = []
            for _ in range(args.reps):
                t = time.perf_counter()
                run()
                ts.append(time.perf_counter() - t)
        med = statistics.median(ts)
        gflop = gemm_gflop(cfg, B, L)
        print(json.dumps(dict(kind="encoder", impl="pytorch", mode=args.mode, B=B, L=L, reps=args.reps,
                              median_ms=round(med * 1e3, 3), min_ms=round(min(ts) * 1e3, 3),
                              gflops=round(gflop / med, 1), peak_rss_mb=round(status_mb("VmHWM"), 1))), flush=True)


def export(args):
    import torch

    model, cfg = load_model(args.dir)

    class Last(torch.nn.Module):  # last_hidden_state only, as the other peers return
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask=None):
            out = self.m(input_ids, attention_mask=attention_mask)
            return out[0] if isinstance(out, (tuple, list)) else out

    ids = torch.randint(0, cfg["vocab_size"], (2, 16))
    axes = {"input_ids": {0: "batch", 1: "seq_len"}}
    inputs, names = (ids,), ["input_ids"]
    if args.with_mask:  # padded batches (bench/length_mix.sh): the attention_mask input as well
        mask = torch.ones_like(ids)
        mask[1, 10:] = 0
        inputs, names = (ids, mask), ["input_ids", "attention_mask"]
        axes["attention_mask"] = {0: "batch", 1: "seq_len"}
    with torch.no_grad():
        torch.onnx.export(Last(model), inputs, args.out, input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes=axes, opset_version=14)
    print(json.dumps(dict(kind="export", out=args.out, bytes=os.path.getsize(args.out))), flush=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench")
    b.add_argument("dir")
    b.add_argument("--mode", choices=["fp32", "bf16", "int8"], default="fp32")
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--warmup", type=int, default=2)
    b.add_argument("--reps", type=int, default=10)
    b.add_argument("--shapes", default="1x128,8x128,1x512,32x32")
    e = sub.add_parser("export")
    e.add_argument("dir")
    e.add_argument("out")
    e.add_argument("--with-mask", action="store_true", help="export with an attention_mask input too")
    args = ap.parse_args()
    bench(args) if args.cmd == "bench" else export(args)


if __name__ == "__main__":
    main()
