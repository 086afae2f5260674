#!/usr/bin/env python3
"""Golden fixtures for NomicBERT (issue 44): tests/fixtures/nomic_bert, a sentence-transformers folder in
nomic-embed-text-v1.5's layout.

    (cd scripts && node make_nomic_bert_encodings.js)   # encodings.json (npm tokenizers), once
    /usr/bin/python3 scripts/make_nomic_bert_fixtures.py

No transformers package (and no remote code) runs here, so nomic_body below implements nomic-embed-text-v1.5's
modeling_hf_nomic_bert.py (NomicBertModel) from its published source:
  * NomicBertEmbeddings: word_embeddings + token_type_embeddings (type_vocab_size > 0); position embeddings only when
    rotary_emb_fraction <= 0. Then emb_ln (LayerNorm, layer_norm_epsilon), emb_drop.
  * NomicBertBlock with prenorm false: h = norm1(dropout1(attn(h)) + h); h = norm2(dropout2(mlp(h)) + h).
  * NomicBertAttention: qkv = Wqkv(h) (bias qkv_proj_bias), "... (three h d) -> ... three h d"; rotary on q and k
    over rotary_emb_dim = head_dim * rotary_emb_fraction columns: NomicBertRotaryEmbedding(dim=rotary_emb_dim,
    base=rotary_emb_base, interleaved=False): inv_freq = 1 / base^(arange(0, dim, 2) / dim) (float32),
    freqs = outer(arange(L), inv_freq), apply_rotary_emb: x[..., :ro] * cos + rotate_half(x[..., :ro]) * sin with
    cos / sin repeated "... d -> ... 1 (2 d)", rotate_half = cat(-x2, x1); the rest of the head passes through.
    Scores q k^T / sqrt(head_dim) + the extended mask (get_extended_attention_mask: (1 - mask) * finfo.min);
    softmax; out_proj (bias qkv_proj_bias).
  * NomciBertGatedMLP (activation_function swiglu): hidden_features = n_inner rounded up to a multiple of 256;
    y = fc11(x) * silu(fc12(x)); fc2 (biases mlp_fc1_bias / mlp_fc2_bias).
Cross-checks (asserted): the rotary of nomic_body equals a float64 re-derivation with complex numbers (each pair
(x_i, x_{i + ro/2}) as x_i + i x_{i + ro/2}, multiplied by e^{i p f_i}); the whole forward equals a float64 forward
using it (max |diff| < 1e-4). Sensitivity (asserted): without the rotary, with an interleaved (GPT-J) rotary, or with
fc11 and fc12 swapped, last_hidden_state moves by more than 0.1.

Writes tests/fixtures/nomic_bert/:
  config.json, model.safetensors  NomicBertModel: n_embd 32, n_head 4 (head_dim 8), n_layer 2, n_inner 200 (run as
                                   256), rotary_emb_fraction 0.5 (4 rotated columns of 8), base 1000, no biases
  tokenizer.json, tokenizer_config.json   the WordPiece fixture
  modules.json, sentence_bert_config.json, 1_Pooling/config.json (mean), 2_Normalize, config_sentence_transformers.json
                                   (prompts query "search_query: ", document "search_document: "); 2_Normalize/.keep
  expected.safetensors  per text i of encodings.json: "<p>_input_ids_<i>" [1, L], "<p>_last_hidden_state_<i>"
                        [1, L, 32], "<p>_embedding_<i>" [32] (mean over tokens, L2-normalised) for p in none, query,
                        document; "batch_input_ids" / "batch_attention_mask" [3, L] (the "none" texts right-padded
                        with 0), "batch_last_hidden_state" [3, L, 32]; "full_last_hidden_state_0" [1, L, 32]: text 0
                        with rotary_emb_fraction 1.0 (the published models' value) on the same weights.
"""
import json
import math
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.normpath(os.path.join(ROOT, "..", "shared", "reference", "torch")))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import st  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "nomic_bert")
torch.set_num_threads(1)

# nomic-embed-text-v1.5's config.json keys, at a tiny size.
CONFIG = {
    "architectures": ["NomicBertModel"],
    "model_type": "nomic_bert",
    "activation_function": "swiglu",
    "attn_pdrop": 0.0,
    "causal": False,
    "dense_seq_output": True,
    "embd_pdrop": 0.0,
    "fused_bias_fc": True,
    "fused_dropout_add_ln": True,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-12,
    "max_trained_positions": 64,
    "mlp_fc1_bias": False,
    "mlp_fc2_bias": False,
    "n_embd": 32,
    "n_head": 4,
    "n_inner": 200,
    "n_layer": 2,
    "n_positions": 64,
    "pad_vocab_size_multiple": 1,
    "parallel_block": False,
    "parallel_block_tied_norm": False,
    "prenorm": False,
    "qkv_proj_bias": False,
    "resid_pdrop": 0.0,
    "rotary_emb_base": 1000,
    "rotary_emb_fraction": 0.5,
    "rotary_emb_interleaved": False,
    "rotary_emb_scale_base": None,
    "rotary_scaling_factor": None,
    "type_vocab_size": 2,
    "use_flash_attn": True,
    "use_rms_norm": False,
    "vocab_size": 2505,
}
PROMPTS = {"query": "search_query: ", "document": "search_document: "}


def npy(t):
    return np.ascontiguousarray(t.detach().numpy())


def inner(c):
    return (c["n_inner"] + 255) // 256 * 256  # NomciBertGatedMLP: multiple_of 256


def random_weights(c, seed):
    """NomicBertModel's state dict (no biases, as the config says), random (std 0.3; LayerNorm around 1)."""
    torch.manual_seed(seed)
    H, I = c["n_embd"], inner(c)
    g = lambda *s: torch.randn(*s) * 0.3  # noqa: E731
    sd = {"embeddings.word_embeddings.weight": g(c["vocab_size"], H),
          "embeddings.token_type_embeddings.weight": g(c["type_vocab_size"], H),
          "emb_ln.weight": 1 + 0.1 * torch.randn(H), "emb_ln.bias": 0.1 * torch.randn(H)}
    for l in range(c["n_layer"]):
        p = f"encoder.layers.{l}."
        for n, (o, i) in {"attn.Wqkv": (3 * H, H), "attn.out_proj": (H, H), "mlp.fc11": (I, H), "mlp.fc12": (I, H),
                          "mlp.fc2": (H, I)}.items():
            sd[p + n + ".weight"] = g(o, i) / math.sqrt(i) * 3
        for n in ("norm1", "norm2"):
            sd[p + n + ".weight"] = 1 + 0.1 * torch.randn(H)
            sd[p + n + ".bias"] = 0.1 * torch.randn(H)
    return sd


def rotate_half(x, interleaved=False):
    if not interleaved:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary(x, ro, base, interleaved=False):
    """NomicBertRotaryEmbedding + apply_rotary_emb on x [B, L, heads, head_dim]."""
    L = x.shape[1]
    inv_freq = 1.0 / (float(base) ** (torch.arange(0, ro, 2, dtype=torch.float32) / ro))
    freqs = torch.outer(torch.arange(L, dtype=torch.float32), inv_freq)
    cos, sin = torch.cos(freqs), torch.sin(freqs)
    if interleaved:
        cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    else:
        cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x[..., :ro] * cos + rotate_half(x[..., :ro], interleaved) * sin, x[..., ro:]], dim=-1)


def complex_rotary(x, ro, base):
    """The same rotation in float64 through complex numbers: (x_i + i x_{i+ro/2}) e^{i p f_i}."""
    x = x.double()
    L = x.shape[1]
    f = 1.0 / (float(base) ** (torch.arange(0, ro, 2, dtype=torch.float64) / ro))
    angle = torch.arange(L, dtype=torch.float64)[:, None] * f[None, :]
    z = torch.complex(x[..., :ro // 2], x[..., ro // 2:ro]) * torch.polar(torch.ones_like(angle), angle)[None, :, None]
    return torch.cat([z.real, z.imag, x[..., ro:]], dim=-1)


def nomic_body(c, sd, ids, token_type_ids=None, attention_mask=None, rotary=apply_rotary, swap_mlp=False,
               interleaved=False, dtype=torch.float32):
    """NomicBertModel.forward (eval): last_hidden_state [B, L, n_embd]. rotary: the rotation (None: none)."""
    B, L = ids.shape
    H, nh = c["n_embd"], c["n_head"]
    hd = H // nh
    ro = int(hd * c["rotary_emb_fraction"])
    eps = c["layer_norm_epsilon"]
    sd = {k: v.to(dtype) for k, v in sd.items()}
    if token_type_ids is None:
        token_type_ids = torch.zeros_like(ids)
    if attention_mask is None:
        attention_mask = torch.ones_like(ids)
    ln = lambda x, n: F.layer_norm(x, (H,), sd[n + ".weight"], sd[n + ".bias"], eps)  # noqa: E731
    x = F.embedding(ids, sd["embeddings.word_embeddings.weight"])
    x = x + F.embedding(token_type_ids, sd["embeddings.token_type_embeddings.weight"])
    x = ln(x, "emb_ln")
    ext = (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
    for l in range(c["n_layer"]):
        p = f"encoder.layers.{l}."
        qkv = F.linear(x, sd[p + "attn.Wqkv.weight"], sd.get(p + "attn.Wqkv.bias")).view(B, L, 3, nh, hd)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        if rotary is apply_rotary:
            q, k = (apply_rotary(t, ro, c["rotary_emb_base"], interleaved) for t in (q, k))
        elif rotary is not None:
            q, k = (rotary(t, ro, c["rotary_emb_base"]).to(dtype) for t in (q, k))
        q, k, v = (t.permute(0, 2, 1, 3) for t in (q, k, v))
        probs = (q @ k.transpose(-1, -2) / math.sqrt(hd) + ext).softmax(-1)
        a = F.linear((probs @ v).permute(0, 2, 1, 3).reshape(B, L, H), sd[p + "attn.out_proj.weight"],
                     sd.get(p + "attn.out_proj.bias"))
        x = ln(a + x, p + "norm1")
        fc11, fc12 = p + "mlp.fc11", p + "mlp.fc12"
        if swap_mlp:
            fc11, fc12 = fc12, fc11
        lin = lambda t, n: F.linear(t, sd[n + ".weight"], sd.get(n + ".bias"))  # noqa: E731
        act = {"swiglu": F.silu, "geglu": F.gelu}[c["activation_function"]]  # NomciBertGatedMLP: y * act(gate)
        y = lin(x, fc11) * act(lin(x, fc12))
        x = ln(lin(y, p + "mlp.fc2") + x, p + "norm2")
    return x


def save_json(obj, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def main():
    enc = json.load(open(os.path.join(OUT, "encodings.json"), encoding="utf-8"))
    assert enc["prompts"] == PROMPTS
    c = CONFIG
    sd = random_weights(c, 4501)
    # The rotation, a second way.
    x = torch.randn(2, 7, 4, 8)
    err_rot = (apply_rotary(x, 4, 1000).double() - complex_rotary(x, 4, 1000)).abs().max().item()
    assert err_rot < 1e-5, err_rot

    exp = {}
    worst = 0.0
    for p in ("none", "query", "document"):
        for i, e in enumerate(enc["encodings"][p]):
            ids = torch.tensor([e["input_ids"]])
            with torch.no_grad():
                h = nomic_body(c, sd, ids)
                h64 = nomic_body(c, sd, ids, rotary=complex_rotary, dtype=torch.float64)
            worst = max(worst, (h.double() - h64).abs().max().item())
            m = h[0].mean(0)
            exp[f"{p}_input_ids_{i}"], exp[f"{p}_last_hidden_state_{i}"] = npy(ids), npy(h)
            exp[f"{p}_embedding_{i}"] = npy(m / m.norm())
    assert worst < 1e-4, f"nomic_body differs from the float64 complex-rotary forward by {worst}"

    encs = enc["encodings"]["none"]
    Lmax = max(len(e["input_ids"]) for e in encs)
    ids = torch.tensor([e["input_ids"] + [0] * (Lmax - len(e["input_ids"])) for e in encs])
    mask = torch.tensor([[1] * len(e["input_ids"]) + [0] * (Lmax - len(e["input_ids"])) for e in encs])
    with torch.no_grad():
        hb = nomic_body(c, sd, ids, attention_mask=mask)
        ids0 = torch.tensor([encs[0]["input_ids"]])
        full = nomic_body(dict(c, rotary_emb_fraction=1.0), sd, ids0)
        h0 = nomic_body(c, sd, ids0)
        moved = {"no rotary": nomic_body(c, sd, ids0, rotary=None),
                 "interleaved rotary": nomic_body(c, sd, ids0, interleaved=True),
                 "fc11 / fc12 swapped": nomic_body(c, sd, ids0, swap_mlp=True),
                 "rotary_emb_fraction 1.0": full}
    for i, e in enumerate(encs):
        n = len(e["input_ids"])
        assert (hb[i, :n] - torch.from_numpy(exp[f"none_last_hidden_state_{i}"][0])).abs().max() < 1e-5
    for what, h in moved.items():
        d = (h - h0).abs().max().item()
        assert d > 0.1, f"{what} barely moves the output ({d})"
    exp.update(batch_input_ids=npy(ids), batch_attention_mask=npy(mask), batch_last_hidden_state=npy(hb),
               full_last_hidden_state_0=npy(full))

    save_json(c, os.path.join(OUT, "config.json"))
    st.save({k: npy(v) for k, v in sd.items()}, os.path.join(OUT, "model.safetensors"))
    st.save(exp, os.path.join(OUT, "expected.safetensors"))
    shutil.copyfile(os.path.join(FIX, "tokenizer", "wordpiece", "tokenizer.json"), os.path.join(OUT, "tokenizer.json"))
    save_json({"tokenizer_class": "BertTokenizer", "do_lower_case": False, "model_max_length": 64,
               "clean_up_tokenization_spaces": True}, os.path.join(OUT, "tokenizer_config.json"))
    save_json([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
              os.path.join(OUT, "modules.json"))
    save_json({"max_seq_length": 64, "do_lower_case": False}, os.path.join(OUT, "sentence_bert_config.json"))
    os.makedirs(os.path.join(OUT, "1_Pooling"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "2_Normalize"), exist_ok=True)
    open(os.path.join(OUT, "2_Normalize", ".keep"), "w").close()  # git keeps no empty folder
    save_json({"word_embedding_dimension": c["n_embd"], "pooling_mode_cls_token": False,
               "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
               "pooling_mode_mean_sqrt_len_tokens": False}, os.path.join(OUT, "1_Pooling", "config.json"))
    save_json({"prompts": PROMPTS, "default_prompt_name": None}, os.path.join(OUT, "config_sentence_transformers.json"))
    print(f"wrote {os.path.relpath(OUT, ROOT)}; rotary vs complex float64 {err_rot:.2e}, forward vs float64 "
          f"{worst:.2e}; moved: " + ", ".join(f"{k} {(v - h0).abs().max().item():.2f}" for k, v in moved.items()))


# ------------------------------------------------------------------ config keys at values other than their defaults
# (issue 48; tests/test_config_key_fixtures.cpp compares it with the reference)
def config_key_fixture():
    """tests/fixtures/config_keys/nomic_bert: activation_function geglu (the default is swiglu), the biases
    qkv_proj_bias / mlp_fc1_bias / mlp_fc2_bias true, layer_norm_epsilon 0.05; NomicBertModel layout;
    expected.safetensors: the "none" encodings padded with 0 (input_ids, attention_mask), last_hidden_state."""
    enc = json.load(open(os.path.join(OUT, "encodings.json"), encoding="utf-8"))["encodings"]["none"]
    keys = {"activation_function": "geglu", "qkv_proj_bias": True, "mlp_fc1_bias": True, "mlp_fc2_bias": True,
            "layer_norm_epsilon": 0.05}
    c = dict(CONFIG, **keys)
    sd = random_weights(c, 4895)
    H, I = c["n_embd"], inner(c)
    for l in range(c["n_layer"]):
        p = f"encoder.layers.{l}."
        for n, o in {"attn.Wqkv": 3 * H, "attn.out_proj": H, "mlp.fc11": I, "mlp.fc12": I, "mlp.fc2": H}.items():
            sd[p + n + ".bias"] = 0.3 * torch.randn(o)
    Lmax = max(len(e["input_ids"]) for e in enc)
    ids = torch.tensor([e["input_ids"] + [0] * (Lmax - len(e["input_ids"])) for e in enc])
    mask = torch.tensor([[1] * len(e["input_ids"]) + [0] * (Lmax - len(e["input_ids"])) for e in enc])
    with torch.no_grad():
        h = nomic_body(c, sd, ids, attention_mask=mask)
        # Each key matters on these inputs: back at the default (swiglu, 1e-5), the output moves.
        for key, default in {"activation_function": "swiglu", "layer_norm_epsilon": 1e-5}.items():
            other = nomic_body(dict(c, **{key: default}), sd, ids, attention_mask=mask)
            moved = (h - other)[mask.bool()].abs().max().item()
            assert moved > 1e-2, f"{key} moves the output by {moved} only"
    out = os.path.join(FIX, "config_keys", "nomic_bert")
    os.makedirs(out, exist_ok=True)
    save_json(c, os.path.join(out, "config.json"))
    st.save({k: npy(v) for k, v in sd.items()}, os.path.join(out, "model.safetensors"))
    st.save({"input_ids": npy(ids), "attention_mask": npy(mask), "last_hidden_state": npy(h)},
            os.path.join(out, "expected.safetensors"))
    print(f"wrote {os.path.relpath(out, ROOT)}")


if __name__ == "__main__":
    if "--config-keys" not in sys.argv[1:]:  # --config-keys: only tests/fixtures/config_keys/nomic_bert
        main()
    config_key_fixture()
