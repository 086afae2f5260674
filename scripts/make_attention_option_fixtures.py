#!/usr/bin/env python3
"""PyTorch references for nn::MultiHeadAttention's options (tests/test_alibi.cpp, test_rotary_scaling.cpp,
test_grouped_query_attention.cpp, test_qk_norm.cpp, test_causal_attention.cpp):

  alibi.safetensors          JinaBERT-v2 self-attention with ALiBi (6 heads: a non-power-of-two count), right padding
  qwen3_attention.safetensors Qwen3Attention: grouped-query attention (4 query heads, 2 key/value heads), head_dim
                             wider than hidden_size / heads, RMSNorm q_norm / k_norm, rotary, causal, left padding
  rotary_scaling.safetensors GTE "new" NTK rotary tables (with and without mixed_b), transformers' dynamic NTK tables

Written from the modeling code its authors publish (read with the search tool): jinaai/jina-bert-implementation
modeling_bert.py (_get_alibi_head_slopes, rebuild_alibi_tensor), MPT's gen_slopes, transformers' modeling_qwen3.py
(Qwen3Attention, repeat_kv, apply_rotary_pos_emb) and modeling_rope_utils.py (_compute_dynamic_ntk_parameters),
Alibaba-NLP new-impl modeling.py (NTKScalingRotaryEmbedding). Each reference is checked a second way here: the ALiBi
bias against an explicit double loop, the rotations against complex-number multiplication, the attention against a
float64 step-by-step recomputation. Run: /usr/bin/python3 scripts/make_attention_option_fixtures.py
"""
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.normpath(os.path.join(ROOT, "..", "shared", "reference", "torch")))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import st  # noqa: E402

OUT = os.path.join(ROOT, "tests", "fixtures", "attention_options")
torch.manual_seed(0)
torch.set_num_threads(1)


def save(tensors, name):
    os.makedirs(OUT, exist_ok=True)
    arrs = {}
    for k, v in tensors.items():
        a = v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
        arrs[k] = np.ascontiguousarray(a.astype(np.float32 if a.dtype.kind == "f" else np.int64))
    st.save(arrs, os.path.join(OUT, name))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def complex_rotate(x, freqs):
    """x [..., L, d] rotated at positions 0.. by multiplying (x1 + i x2) with exp(i p f), in float64."""
    d = x.shape[-1]
    z = torch.complex(x[..., : d // 2].double(), x[..., d // 2:].double())
    p = torch.arange(x.shape[-2], dtype=torch.float64)[:, None]
    z = z * torch.exp(1j * p * freqs.double()[None, :])
    return torch.cat((z.real, z.imag), dim=-1)


# ---------------------------------------------------------------------------------------------- ALiBi (JinaBERT-v2)
def get_alibi_head_slopes(n_heads):  # jina-bert-implementation modeling_bert.py
    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio ** i for i in range(n)]
    if math.log2(n_heads).is_integer():
        return get_slopes_power_of_2(n_heads)
    closest_power_of_2 = 2 ** math.floor(math.log2(n_heads))
    return (get_slopes_power_of_2(closest_power_of_2)
            + get_alibi_head_slopes(2 * closest_power_of_2)[0::2][: n_heads - closest_power_of_2])


def mpt_gen_slopes(n_heads, alibi_bias_max=8):  # MPT's gen_slopes
    _n_heads = 2 ** math.ceil(math.log2(n_heads))
    m = torch.arange(1, _n_heads + 1, dtype=torch.float32)
    m = m.mul(alibi_bias_max / _n_heads)
    slopes = 1.0 / torch.pow(2, m)
    if _n_heads != n_heads:
        slopes = torch.concat([slopes[1::2], slopes[0::2]])[:n_heads]
    return slopes


def rebuild_alibi_tensor(n_heads, size):  # JinaBertEncoder.rebuild_alibi_tensor
    context_position = torch.arange(size)[:, None]
    memory_position = torch.arange(size)[None, :]
    relative_position = torch.abs(memory_position - context_position)[None, :, :].expand(n_heads, -1, -1)
    slopes = torch.Tensor(get_alibi_head_slopes(n_heads)) * -1
    return (slopes.unsqueeze(1).unsqueeze(1) * relative_position).unsqueeze(0)  # [1, heads, size, size]


def make_alibi():
    B, L, H, nh = 2, 7, 24, 6
    hd = H // nh
    x = torch.randn(B, L, H)
    mask = torch.ones(B, L)
    mask[1, 5:] = 0  # right padding
    lin = {n: torch.nn.Linear(H, H) for n in ("query", "key", "value", "output")}
    alibi = rebuild_alibi_tensor(nh, L)
    # second way: the bias as an explicit double loop
    explicit = torch.zeros(nh, L, L, dtype=torch.float64)
    slopes = get_alibi_head_slopes(nh)
    for h in range(nh):
        for i in range(L):
            for j in range(L):
                explicit[h, i, j] = -slopes[h] * abs(i - j)
    assert torch.allclose(alibi[0].double(), explicit, atol=1e-6)

    x.requires_grad_()

    def attend(x):  # JinaBertSelfAttention (eager): scores / sqrt(d) + (extended mask + alibi), softmax, @ v
        def heads(t):
            return t.view(B, L, nh, hd).transpose(1, 2)
        q, k, v = heads(lin["query"](x)), heads(lin["key"](x)), heads(lin["value"](x))
        ext = (1.0 - mask[:, None, None, :]) * torch.finfo(torch.float32).min
        s = q @ k.transpose(-1, -2) / math.sqrt(hd) + (ext + alibi)
        ctx = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, L, H)
        return lin["output"](ctx)
    out = attend(x)
    # second way: float64 step by step with the explicit bias
    with torch.no_grad():
        xd = x.double()
        def proj(n, t):
            return t @ lin[n].weight.double().T + lin[n].bias.double()
        q, k, v = (proj(n, xd).view(B, L, nh, hd).transpose(1, 2) for n in ("query", "key", "value"))
        s = q @ k.transpose(-1, -2) / math.sqrt(hd) + explicit[None]
        s = s.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
        ref = proj("output", (s.softmax(-1) @ v).transpose(1, 2).reshape(B, L, H))
        assert torch.allclose(out.double(), ref, atol=1e-5), (out.double() - ref).abs().max()
    w = torch.randn(B, L, H)
    (out * w).sum().backward()
    t = dict(x=x, mask=mask, out=out, weight=w, dx=x.grad, alibi=alibi[0],
             slopes_6=torch.tensor(get_alibi_head_slopes(6)), slopes_8=torch.tensor(get_alibi_head_slopes(8)),
             slopes_12=torch.tensor(get_alibi_head_slopes(12)), mpt_slopes_6=mpt_gen_slopes(6),
             mpt_slopes_12=mpt_gen_slopes(12), mpt_slopes_16=mpt_gen_slopes(16))
    for n, m in lin.items():
        t[n + ".weight"], t[n + ".bias"] = m.weight, m.bias
        t["d" + n + ".weight"], t["d" + n + ".bias"] = m.weight.grad, m.bias.grad
    save(t, "alibi.safetensors")


# --------------------------------------------------------------------------------------------------- Qwen3Attention
class Qwen3RMSNorm(torch.nn.Module):
    def __init__(self, n, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.variance_epsilon = eps

    def forward(self, h):
        variance = h.pow(2).mean(-1, keepdim=True)
        return self.weight * (h * torch.rsqrt(variance + self.variance_epsilon))


def repeat_kv(h, n_rep):
    b, kvh, L, d = h.shape
    if n_rep == 1:
        return h
    return h[:, :, None, :, :].expand(b, kvh, n_rep, L, d).reshape(b, kvh * n_rep, L, d)


def make_qwen3():
    B, L, H, nh, nkv, hd, theta = 2, 6, 16, 4, 2, 8, 10000.0
    x = torch.randn(B, L, H)
    mask = torch.ones(B, L)
    mask[1, :2] = 0  # left padding (Qwen3-Embedding's padding side)
    q_proj = torch.nn.Linear(H, nh * hd, bias=False)
    k_proj = torch.nn.Linear(H, nkv * hd, bias=False)
    v_proj = torch.nn.Linear(H, nkv * hd, bias=False)
    o_proj = torch.nn.Linear(nh * hd, H, bias=False)
    q_norm, k_norm = Qwen3RMSNorm(hd), Qwen3RMSNorm(hd)
    with torch.no_grad():
        q_norm.weight.uniform_(0.5, 1.5)
        k_norm.weight.uniform_(0.5, 1.5)
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    pos = torch.arange(L).float()  # position_ids = cache_position: 0 .. L - 1 in every row
    freqs = pos[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x.requires_grad_()

    def attend(x):
        q = q_norm(q_proj(x).view(B, L, nh, hd)).transpose(1, 2)
        k = k_norm(k_proj(x).view(B, L, nkv, hd)).transpose(1, 2)
        v = v_proj(x).view(B, L, nkv, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, nh // nkv), repeat_kv(v, nh // nkv)
        causal = torch.tril(torch.ones(L, L, dtype=torch.bool))
        allowed = causal[None, None] & (mask[:, None, None, :] != 0)
        s = (q @ k.transpose(2, 3)) * hd ** -0.5
        s = s + torch.where(allowed, 0.0, torch.finfo(torch.float32).min)
        ctx = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, L, nh * hd)
        return o_proj(ctx)
    out = attend(x)
    # second way: float64 step by step, rotary as complex multiplication, kv heads indexed h // group
    with torch.no_grad():
        xd = x.double()
        def rms(t, w):
            return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
        q = rms((xd @ q_proj.weight.double().T).view(B, L, nh, hd), q_norm.weight).transpose(1, 2)
        k = rms((xd @ k_proj.weight.double().T).view(B, L, nkv, hd), k_norm.weight).transpose(1, 2)
        v = (xd @ v_proj.weight.double().T).view(B, L, nkv, hd).transpose(1, 2)
        q, k = complex_rotate(q, inv_freq), complex_rotate(k, inv_freq)
        ref = torch.zeros(B, L, nh, hd, dtype=torch.float64)
        for b in range(B):
            for h in range(nh):
                g = h // (nh // nkv)
                for i in range(L):
                    vis = [j for j in range(i + 1) if mask[b, j] != 0]
                    if not vis:
                        continue
                    sc = torch.stack([q[b, h, i] @ k[b, g, j] / math.sqrt(hd) for j in vis]).softmax(0)
                    ref[b, i, h] = sum(sc[n] * v[b, g, j] for n, j in enumerate(vis))
        ref = ref.reshape(B, L, nh * hd) @ o_proj.weight.double().T
        real = torch.tensor([[mask[b, i] != 0 for i in range(L)] for b in range(B)])
        assert torch.allclose(out.double()[real], ref[real], atol=1e-5), (out.double()[real] - ref[real]).abs().max()
    w = torch.randn(B, L, H) * mask[:, :, None]  # the loss reads real rows only (a padded query sees no key)
    (out * w).sum().backward()
    t = dict(x=x, mask=mask, out=out, weight=w, dx=x.grad)
    for n, m in (("q_proj", q_proj), ("k_proj", k_proj), ("v_proj", v_proj), ("o_proj", o_proj), ("q_norm", q_norm),
                 ("k_norm", k_norm)):
        t[n + ".weight"] = m.weight
        t["d" + n + ".weight"] = m.weight.grad
    save(t, "qwen3_attention.safetensors")


# -------------------------------------------------------------------------------------------------- rotary scaling
def gte_ntk_inv_freq(dim, base, scaling_factor, mixed_b):  # NTKScalingRotaryEmbedding._set_cos_sin_cache
    base = base * (scaling_factor if mixed_b is None else 1)
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    if mixed_b is None:
        inv_freq = inv_freq / scaling_factor ** (2 / dim)
    else:
        a = torch.tensor(scaling_factor).log() / (dim / 2) ** mixed_b
        lambda_1_m = (a * torch.arange(1, dim // 2 + 1).float() ** mixed_b).exp()
        inv_freq = inv_freq / lambda_1_m
    return inv_freq


def dynamic_ntk_inv_freq(dim, base, factor, max_position_embeddings, seq_len):  # _compute_dynamic_ntk_parameters
    seq_len = max(seq_len, max_position_embeddings)
    base = base * ((factor * seq_len / max_position_embeddings) - (factor - 1)) ** (dim / (dim - 2))
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def tables(inv_freq, n):
    t = torch.arange(n, dtype=torch.float32)
    freqs = torch.einsum("i,j->ij", t, inv_freq)
    return freqs.cos(), freqs.sin()


def make_rotary_scaling():
    dim, theta, n = 16, 160000.0, 40
    out = {}
    x = torch.randn(n, dim)
    out["x"] = x
    for name, inv in (("ntk", gte_ntk_inv_freq(dim, theta, 2.0, None)),
                      ("ntk_mixed", gte_ntk_inv_freq(dim, theta, 2.0, 0.75)),
                      ("dynamic_40", dynamic_ntk_inv_freq(dim, theta, 2.0, 16, 40)),
                      ("dynamic_12", dynamic_ntk_inv_freq(dim, theta, 2.0, 16, 12))):
        len_ = 12 if name == "dynamic_12" else n
        cos, sin = tables(inv, len_)
        emb_cos, emb_sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        rotated = x[:len_] * emb_cos + rotate_half(x[:len_]) * emb_sin
        assert torch.allclose(rotated.double(), complex_rotate(x[:len_], inv), atol=1e-5)
        out[name + ".inv_freq"], out[name + ".cos"], out[name + ".sin"], out[name + ".rotated"] = inv, cos, sin, rotated
    save(out, "rotary_scaling.safetensors")


if __name__ == "__main__":
    make_alibi()
    make_qwen3()
    make_rotary_scaling()
    print("wrote", OUT)
