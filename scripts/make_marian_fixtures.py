#!/usr/bin/env python3
"""Golden fixtures for Hugging Face translation folders (issue 23): tests/fixtures/{marian,m2m100,nllb}.

    /usr/bin/python3 scripts/make_marian_fixtures.py

No transformers package exists here, so the references below implement, from their published source:
  * modeling_marian.py (MarianMTModel): embed_tokens(ids) * sqrt(d_model) (scale_embedding) + sinusoidal positions
    (MarianSinusoidalPositionalEmbedding: position_enc[pos, j] = pos / 10000^(2 (j // 2) / dim), sin of the even
    columns in the first half, cos of the odd ones in the second, computed in float64), post-LN layers (residual +
    sublayer, then LayerNorm), q_proj(x) * head_dim^-0.5, additive masks, activation_function (swish = SiLU),
    lm_head tied to model.shared plus final_logits_bias [1, V].
  * modeling_m2m_100.py (M2M100ForConditionalGeneration, NLLB's model too): pre-LN layers (LayerNorm, sublayer,
    residual) with model.encoder.layer_norm / model.decoder.layer_norm after the stacks, ReLU,
    M2M100SinusoidalPositionalEmbedding (half_dim = d / 2, freq_i = exp(-i log(10000) / (half_dim - 1)),
    [sin | cos], float32, row padding_idx zeroed) indexed by create_position_ids_from_input_ids: padding_idx + 1 +
    position for real tokens; lm_head tied to model.shared, no bias.
  * generation (transformers 4.38 generation/utils.py and beam_search.py): greedy = argmax of the processed logits;
    beam search on log_softmax(logits) then the processors, top 2 * num_beams of beam score + token score over
    (beam, token), an <eos> candidate ranked below num_beams is dropped, BeamHypotheses.add scores
    sum_logprobs / generated_len ** length_penalty with generated_len counting the <eos> (cur_len + 1 - prompt);
    is_done: early_stopping True (num_beams finished), False (worst kept >= best candidate / cur_len ** lp) or
    "never"; at max_length the running beams are added (generated_len = their tokens). max_length counts the
    decoder start token. Processors: MinLength (eos -inf while cur_len < min_length), ForcedBOS (step 1),
    ForcedEOS (cur_len == max_length - 1), NoBadWords for single-token bad_words_ids (Marian's [[pad]]).
  * tokenization_marian.py: source.spm pieces (spm_encode) mapped through vocab.json, <unk> for unknown pieces, a
    leading ">>xx<<" kept as one token, </s> appended; tokenization_m2m_100.py: vocab.json ids of the
    sentencepiece.bpe.model pieces, [__src__] + ids + [</s>], languages at len(vocab) + index;
    tokenization_nllb.py: spm id + 1 (fairseq offset; spm <unk> -> 3), languages at spm size + 1 + index.
SentencePiece models are trained here with Debian's spm_train on ../shared/data/fra-eng (English / French).

Also tests/fixtures/config_keys/{marian,m2m100}_keys (`--config-keys` writes only these): config keys at values
other than their defaults, teacher-forced logits only (config_key_fixtures()).

Writes per folder: config.json, generation_config.json, model.safetensors, the tokenizer files, and
expected.safetensors (teacher-forced logits) + expected.json (tokenized sources, greedy and beam outputs).
No trained model: the weights are random (scaled so that <eos> comes within the length limit).
"""
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REF = os.path.normpath(os.path.join(ROOT, "..", "shared", "reference", "torch"))
DATA = os.path.normpath(os.path.join(ROOT, "..", "shared", "data", "fra-eng", "fra.txt"))
sys.path.insert(0, REF)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import st  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
torch.set_num_threads(1)

M2M100_LANGS = ["af", "am", "ar", "ast", "az", "ba", "be", "bg", "bn", "br", "bs", "ca", "ceb", "cs", "cy", "da", "de",
                "el", "en", "es", "et", "fa", "ff", "fi", "fr", "fy", "ga", "gd", "gl", "gu", "ha", "he", "hi", "hr",
                "ht", "hu", "hy", "id", "ig", "ilo", "is", "it", "ja", "jv", "ka", "kk", "km", "kn", "ko", "lb", "lg",
                "ln", "lo", "lt", "lv", "mg", "mk", "ml", "mn", "mr", "ms", "my", "ne", "nl", "no", "ns", "oc", "or",
                "pa", "pl", "ps", "pt", "ro", "ru", "sd", "si", "sk", "sl", "so", "sq", "sr", "ss", "su", "sv", "sw",
                "ta", "th", "tl", "tn", "tr", "uk", "ur", "uz", "vi", "wo", "xh", "yi", "yo", "zh", "zu"]
# The first NLLB codes (the fixture's tokenizer_config lists them with their ids, as real NLLB folders do).
NLLB_LANGS = ["ace_Arab", "ace_Latn", "acm_Arab", "eng_Latn", "fra_Latn", "deu_Latn"]

STD = 0.2
SOURCES = ["I want to know why.", "Run!", "We are going to the beach tomorrow.", "Tom is happy.",
           "She speaks French and English."]


def read_pairs(n):
    en, fr = [], []
    with open(DATA, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= n:
                break
            a, b = line.rstrip("\n").split("\t")[:2]
            en.append(a)
            fr.append(b)
    return en, fr


def spm_train(lines, prefix, vocab_size, model_type):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
        path = f.name
    subprocess.run(["spm_train", f"--input={path}", f"--model_prefix={prefix}", f"--vocab_size={vocab_size}",
                    f"--model_type={model_type}", "--character_coverage=1.0", "--num_threads=1",
                    "--minloglevel=2"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.unlink(path)
    with open(prefix + ".vocab", encoding="utf-8") as f:
        pieces = [line.split("\t")[0] for line in f]
    os.unlink(prefix + ".vocab")
    return pieces


def spm_pieces(model, text):
    out = subprocess.run(["spm_encode", f"--model={model}", "--output_format=piece"], input=text + "\n",
                         capture_output=True, text=True, check=True).stdout
    return out.rstrip("\n").split(" ") if out.strip() else []


def spm_decode(model, pieces):
    out = subprocess.run(["spm_decode", f"--model={model}", "--input_format=piece"], input=" ".join(pieces) + "\n",
                         capture_output=True, text=True, check=True).stdout
    return out.rstrip("\n")


# ------------------------------------------------------------------------------------------------ the model
class Attention(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h, self.hd = heads, d // heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (torch.nn.Linear(d, d) for _ in range(4))

    def forward(self, x, kv, mask):  # mask: additive [B, 1, Lq, Lk]
        B, Lq, d = x.shape
        Lk = kv.shape[1]
        q = (self.q_proj(x) * self.hd ** -0.5).view(B, Lq, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(kv).view(B, Lk, self.h, self.hd).transpose(1, 2)
        v = self.v_proj(kv).view(B, Lk, self.h, self.hd).transpose(1, 2)
        w = torch.softmax(q @ k.transpose(-1, -2) + mask, dim=-1)
        return self.out_proj((w @ v).transpose(1, 2).reshape(B, Lq, d))


class Layer(torch.nn.Module):
    def __init__(self, c, decoder):
        super().__init__()
        d = c["d_model"]
        self.self_attn = Attention(d, c["encoder_attention_heads"])
        self.self_attn_layer_norm = torch.nn.LayerNorm(d)
        if decoder:
            self.encoder_attn = Attention(d, c["decoder_attention_heads"])
            self.encoder_attn_layer_norm = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, c["encoder_ffn_dim"])
        self.fc2 = torch.nn.Linear(c["encoder_ffn_dim"], d)
        self.final_layer_norm = torch.nn.LayerNorm(d)
        self.act = {"swish": F.silu, "silu": F.silu, "relu": F.relu, "gelu": F.gelu}[c["activation_function"]]
        self.pre_ln = c["model_type"] == "m2m_100"

    def sub(self, x, norm, f):
        if self.pre_ln:
            return x + f(norm(x))
        return norm(x + f(x))

    def forward(self, x, self_mask, enc=None, enc_mask=None):
        x = self.sub(x, self.self_attn_layer_norm, lambda h: self.self_attn(h, h, self_mask))
        if enc is not None:
            x = self.sub(x, self.encoder_attn_layer_norm, lambda h: self.encoder_attn(h, enc, enc_mask))
        return self.sub(x, self.final_layer_norm, lambda h: self.fc2(self.act(self.fc1(h))))


def marian_positions(n_pos, dim):
    enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)])
    out = np.zeros((n_pos, dim), dtype=np.float32)
    sentinel = dim // 2 if dim % 2 == 0 else dim // 2 + 1
    out[:, :sentinel] = np.sin(enc[:, 0::2])
    out[:, sentinel:] = np.cos(enc[:, 1::2])
    return torch.from_numpy(out)


def m2m_positions(num, dim, padding_idx):
    half = dim // 2
    emb = math.log(10000) / (half - 1)
    emb = torch.exp(torch.arange(half, dtype=torch.int64).float() * -emb)
    emb = torch.arange(num, dtype=torch.int64).float().unsqueeze(1) * emb.unsqueeze(0)
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(num, -1)
    emb[padding_idx, :] = 0
    return emb


class Seq2Seq(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d, V = c["d_model"], c["vocab_size"]
        self.shared = torch.nn.Embedding(V, d)
        self.enc_layers = torch.nn.ModuleList(Layer(c, False) for _ in range(c["encoder_layers"]))
        self.dec_layers = torch.nn.ModuleList(Layer(c, True) for _ in range(c["decoder_layers"]))
        self.m2m = c["model_type"] == "m2m_100"
        if self.m2m:
            self.enc_norm, self.dec_norm = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.pos = m2m_positions(c["max_position_embeddings"] + 2, d, c["pad_token_id"])
        else:
            self.final_logits_bias = torch.zeros(1, V)
            self.pos = marian_positions(c["max_position_embeddings"], d)
        self.scale = math.sqrt(d) if c["scale_embedding"] else 1.0

    def positions(self, ids, past=0):
        if self.m2m:  # create_position_ids_from_input_ids
            pad = self.c["pad_token_id"]
            mask = ids.ne(pad).int()
            pos = (torch.cumsum(mask, dim=1).type_as(mask) + past) * mask + pad
            return self.pos[pos.long()]
        return self.pos[past:past + ids.shape[1]].unsqueeze(0)

    def state_dict_hf(self):
        sd = {"model.shared.weight": self.shared.weight}
        for side, layers in (("encoder", self.enc_layers), ("decoder", self.dec_layers)):
            for i, l in enumerate(layers):
                for k, v in l.state_dict().items():
                    sd[f"model.{side}.layers.{i}.{k}"] = v
        if self.m2m:
            for side, n in (("encoder", self.enc_norm), ("decoder", self.dec_norm)):
                for k, v in n.state_dict().items():
                    sd[f"model.{side}.layer_norm.{k}"] = v
        else:
            sd["final_logits_bias"] = self.final_logits_bias
        return {k: v.detach().numpy().astype(np.float32) for k, v in sd.items()}

    def load_state_dict_hf(self, sd):
        """The inverse of state_dict_hf: copies the arrays of `sd` (name -> numpy array, any float dtype) into the
        parameters; the sinusoidal table (model.encoder.embed_positions.weight) is computed, not read."""
        own = {k: v for k, v in self.state_dict_hf().items()}
        missing = sorted(set(own) - set(sd))
        assert not missing, f"missing tensors {missing}"
        with torch.no_grad():
            self.shared.weight.copy_(torch.from_numpy(np.asarray(sd["model.shared.weight"], np.float32)))
            for side, layers in (("encoder", self.enc_layers), ("decoder", self.dec_layers)):
                for i, l in enumerate(layers):
                    pre = f"model.{side}.layers.{i}."
                    l.load_state_dict({k: torch.from_numpy(np.asarray(sd[pre + k], np.float32))
                                       for k in l.state_dict()})
            if self.m2m:
                for side, n in (("encoder", self.enc_norm), ("decoder", self.dec_norm)):
                    n.load_state_dict({k: torch.from_numpy(np.asarray(sd[f"model.{side}.layer_norm.{k}"], np.float32))
                                       for k in n.state_dict()})
            else:
                self.final_logits_bias.copy_(torch.from_numpy(np.asarray(sd["final_logits_bias"], np.float32)))

    def encode(self, src, src_mask):  # src_mask: [B, Ls] 1 = token
        x = self.shared(src) * self.scale + self.positions(src)
        m = (1.0 - src_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for l in self.enc_layers:
            x = l(x, m)
        return self.enc_norm(x) if self.m2m else x

    def decode(self, dec_ids, enc, src_mask):
        Lt = dec_ids.shape[1]
        x = self.shared(dec_ids) * self.scale + self.positions(dec_ids)
        causal = torch.triu(torch.full((Lt, Lt), torch.finfo(torch.float32).min), diagonal=1)[None, None]
        m = (1.0 - src_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for l in self.dec_layers:
            x = l(x, causal, enc, m)
        if self.m2m:
            x = self.dec_norm(x)
        logits = x @ self.shared.weight.T
        return logits if self.m2m else logits + self.final_logits_bias


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(STD * torch.randn(p.shape, generator=g))
        # <eos> along the direction of position 8's encoding, so that random models end hypotheses at
        # various lengths instead of running to max_length.
        eos = model.c["eos_token_id"]
        off = model.c["pad_token_id"] + 1 if model.m2m else 0
        model.shared.weight[eos] = (0.5 if model.m2m else 1.0) * (model.pos[8 + off] - model.pos[off])
        pad = model.c["pad_token_id"]
        model.shared.weight[pad].zero_()  # nn.Embedding(padding_idx=pad) initialises its row to zeros
        if not model.m2m:
            model.final_logits_bias.copy_(0.5 * torch.randn(model.final_logits_bias.shape, generator=g))


# ------------------------------------------------------------------------------------------------ generation
def processors(scores, prefix, gen):
    """scores [R, V] (logits in greedy, log-probabilities in beam search); prefix: [R] lists with the start token."""
    cur_len = len(prefix[0])
    eos = gen["eos_token_id"]
    if cur_len < gen.get("min_length", 0):
        scores[:, eos] = -math.inf
    if gen.get("forced_bos_token_id") is not None and cur_len == 1:
        scores[:, :] = -math.inf
        scores[:, gen["forced_bos_token_id"]] = 0
    if gen.get("forced_eos_token_id") is not None and cur_len == gen["max_length"] - 1:
        scores[:, :] = -math.inf
        scores[:, gen["forced_eos_token_id"]] = 0
    for bad in gen.get("bad_words_ids") or []:
        assert len(bad) == 1
        scores[:, bad[0]] = -math.inf
    return scores


@torch.no_grad()
def greedy(model, src, gen):
    enc = model.encode(src, torch.ones_like(src))
    ids = [gen["decoder_start_token_id"]]
    while len(ids) < gen["max_length"]:
        logits = model.decode(torch.tensor([ids]), enc, torch.ones_like(src))[:, -1]
        tok = int(torch.argmax(processors(logits.clone(), [ids], gen), dim=-1))
        ids.append(tok)
        if tok == gen["eos_token_id"]:
            return ids[1:-1]  # without the <eos>, as the beam hypotheses
    return ids[1:]


@torch.no_grad()
def beam_search(model, src, gen):
    K, lp, es, eos = gen["num_beams"], gen.get("length_penalty", 1.0), gen.get("early_stopping", False), gen["eos_token_id"]
    max_length = gen["max_length"]
    enc = model.encode(src, torch.ones_like(src)).expand(K, -1, -1)
    mask = torch.ones(K, src.shape[1], dtype=torch.long)
    beams = [[gen["decoder_start_token_id"]] for _ in range(K)]
    beam_scores = torch.zeros(K)
    beam_scores[1:] = -1e9
    hyps, worst = [], 1e9  # BeamHypotheses: (score, tokens)

    def add(tokens, sum_logprobs, generated_len):
        nonlocal worst
        score = sum_logprobs / (generated_len ** lp)
        if len(hyps) < K or score > worst:
            hyps.append((score, tokens, sum_logprobs))
            if len(hyps) > K:
                order = sorted((s, i) for i, (s, _, _) in enumerate(hyps))
                del hyps[order[0][1]]
                worst = order[1][0]
            else:
                worst = min(score, worst)

    def is_done(best, cur_len):
        if len(hyps) < K:
            return False
        if es is True:
            return True
        if es is False:
            return worst >= best / (cur_len - 1) ** lp
        highest = best / ((max_length - 1) if lp > 0 else (cur_len - 1)) ** lp
        return worst >= highest

    done = False
    while True:
        logits = model.decode(torch.tensor(beams), enc, mask)[:, -1]
        scores = processors(F.log_softmax(logits, dim=-1), beams, gen)
        V = scores.shape[1]
        total = (scores + beam_scores[:, None]).view(-1)
        top_scores, top_idx = torch.topk(total, 2 * K, largest=True, sorted=True)
        cur_len = len(beams[0]) + 1
        next_beams, next_scores = [], []
        for rank, (s, i) in enumerate(zip(top_scores.tolist(), top_idx.tolist())):
            b, tok = i // V, i % V
            if tok == eos:
                if rank >= K:
                    continue
                add(beams[b][1:], s, cur_len - 1)
            else:
                next_beams.append(beams[b] + [tok])
                next_scores.append(s)
            if len(next_beams) == K:
                break
        done = is_done(max(top_scores.tolist()), cur_len)
        beams, beam_scores = next_beams, torch.tensor(next_scores)
        if done or len(beams[0]) >= max_length:
            break
    if not done:
        for b, s in zip(beams, beam_scores.tolist()):
            add(b[1:], s, len(b) - 1)
    return sorted(hyps, key=lambda h: -h[0])


# ------------------------------------------------------------------------------------------------ folders
def build_marian(out, spm_size=200, dims=None, n_pairs=30000, codes=True):
    """The Marian folder's tokenizer files and config; `dims` overrides config keys (the trained fixture's sizes).
    codes: multi-target ">>fra<<" / ">>spa<<" tokens and a source piece missing from vocab.json (read as <unk>)."""
    en, fr = read_pairs(n_pairs)
    src_pieces = spm_train(en, os.path.join(out, "source"), spm_size, "unigram")
    tgt_pieces = spm_train(fr, os.path.join(out, "target"), spm_size, "unigram")
    os.replace(os.path.join(out, "source.model"), os.path.join(out, "source.spm"))
    os.replace(os.path.join(out, "target.model"), os.path.join(out, "target.spm"))
    vocab = {"</s>": 0, "<unk>": 1}
    for p in src_pieces + tgt_pieces + ([">>fra<<", ">>spa<<"] if codes else []):
        if p not in vocab and p not in ("<s>", "</s>", "<unk>"):
            vocab[p] = len(vocab)
    if codes:
        del vocab[src_pieces[5]]  # a piece the spm knows but vocab.json lacks: read as <unk>
    vocab = {k: i for i, k in enumerate(vocab)}
    vocab["<pad>"] = len(vocab)
    V, pad = len(vocab), vocab["<pad>"]
    config = {"architectures": ["MarianMTModel"], "model_type": "marian", "activation_function": "swish",
              "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
              "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "vocab_size": V,
              "decoder_vocab_size": V, "max_position_embeddings": 64, "scale_embedding": True, "pad_token_id": pad,
              "eos_token_id": 0, "bos_token_id": 0, "decoder_start_token_id": pad, "forced_eos_token_id": 0,
              "share_encoder_decoder_embeddings": True, "normalize_before": False, "static_position_embeddings": True,
              "tie_word_embeddings": True, "add_bias_logits": False, "normalize_embedding": False,
              "num_beams": 4, "max_length": 24, "dropout": 0.1, "attention_dropout": 0.0}
    config.update(dims or {})
    gen = {"bad_words_ids": [[pad]], "bos_token_id": 0, "decoder_start_token_id": pad, "eos_token_id": 0,
           "forced_eos_token_id": 0, "max_length": config["max_length"], "num_beams": 4, "pad_token_id": pad}
    json.dump(vocab, open(os.path.join(out, "vocab.json"), "w", encoding="utf-8"), ensure_ascii=False, indent=1)
    json.dump({"source_lang": "en", "target_lang": "fr", "model_max_length": 512, "separate_vocabs": False,
               "tokenizer_class": "MarianTokenizer", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"},
              open(os.path.join(out, "tokenizer_config.json"), "w"), indent=1)
    encode, decode = marian_codec(out, vocab)
    sources = SOURCES + ([">>fra<< I want to know why."] if codes else [])
    return config, gen, encode, decode, sources, fr


def marian_codec(out, vocab):
    """encode(text) -> source ids (MarianTokenizer: an optional ">>xx<<" code, source.spm pieces, </s>) and
    decode(ids) -> text (target.spm) of the Marian folder `out` with vocabulary `vocab` (piece -> id)."""
    pad = vocab["<pad>"]

    def encode(text):
        code = []
        if text.startswith(">>") and "<<" in text:
            end = text.index("<<") + 2
            code, text = [text[:end]], text[end:]
        pieces = spm_pieces(os.path.join(out, "source.spm"), text)
        return [vocab.get(p, vocab["<unk>"]) for p in code + pieces] + [0]

    inv = {i: k for k, i in vocab.items()}

    def decode(ids):
        pieces = [inv[i] for i in ids if i not in (0, 1, pad)]
        # convert_tokens_to_string: decode_pieces, then "▁" (of pieces target.spm lacks) -> " ", stripped
        return spm_decode(os.path.join(out, "target.spm"), pieces).replace("\u2581", " ").strip()

    return encode, decode


def build_m2m(out, nllb):
    en, fr = read_pairs(30000)
    pieces = spm_train(en + fr, os.path.join(out, "sentencepiece.bpe"), 300, "bpe")
    spm = os.path.join(out, "sentencepiece.bpe.model")
    if nllb:
        langs = NLLB_LANGS
        lang_ids = {c: len(pieces) + 1 + i for i, c in enumerate(langs)}
        V = len(pieces) + 1 + len(langs) + 1  # + <mask>
        src_code, tgt_code = "eng_Latn", "fra_Latn"
        piece_id = {p: i + 1 for i, p in enumerate(pieces)}
        piece_id["<unk>"] = 3
        added = {"0": "<s>", "1": "<pad>", "2": "</s>", "3": "<unk>"}
        added.update({str(i): c for c, i in lang_ids.items()})
        added[str(V - 1)] = "<mask>"
        json.dump({"tokenizer_class": "NllbTokenizer", "src_lang": src_code, "tgt_lang": tgt_code,
                   "added_tokens_decoder": {k: {"content": v, "special": True} for k, v in added.items()},
                   "additional_special_tokens": langs, "model_max_length": 1024},
                  open(os.path.join(out, "tokenizer_config.json"), "w"), indent=1)
        encode_piece = lambda p: piece_id.get(p, 3)  # noqa: E731
        inv = {i: p for p, i in piece_id.items()}
    else:
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        for p in pieces:
            if p not in vocab and p not in ("<s>", "</s>", "<unk>"):
                vocab[p] = len(vocab)
        langs = M2M100_LANGS
        lang_ids = {f"__{c}__": len(vocab) + i for i, c in enumerate(langs)}
        V = len(vocab) + len(langs) + 8  # + madeup words
        src_code, tgt_code = "__en__", "__fr__"
        json.dump(vocab, open(os.path.join(out, "vocab.json"), "w", encoding="utf-8"), ensure_ascii=False, indent=1)
        json.dump({"tokenizer_class": "M2M100Tokenizer", "src_lang": "en", "tgt_lang": "fr", "model_max_length": 1024,
                   "num_madeup_words": 8}, open(os.path.join(out, "tokenizer_config.json"), "w"), indent=1)
        json.dump({"additional_special_tokens": list(lang_ids)},
                  open(os.path.join(out, "special_tokens_map.json"), "w"), indent=1)
        encode_piece = lambda p: vocab.get(p, 3)  # noqa: E731
        inv = {i: p for p, i in vocab.items()}
    config = {"architectures": ["M2M100ForConditionalGeneration"], "model_type": "m2m_100",
              "activation_function": "relu", "d_model": 32, "encoder_layers": 2, "decoder_layers": 2,
              "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 64,
              "decoder_ffn_dim": 64, "vocab_size": V, "max_position_embeddings": 64, "scale_embedding": True,
              "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2,
              "tie_word_embeddings": True, "dropout": 0.1, "early_stopping": True, "num_beams": 5, "max_length": 20}
    gen = {"bos_token_id": 0, "decoder_start_token_id": 2, "eos_token_id": 2, "pad_token_id": 1, "max_length": 20,
           "num_beams": 5, "early_stopping": True}

    def encode(text):
        return [lang_ids[src_code]] + [encode_piece(p) for p in spm_pieces(spm, text)] + [2]

    specials = {0, 1, 2, 3} | set(lang_ids.values())

    def decode(ids):
        return spm_decode(spm, [inv[i] for i in ids if i not in specials and i in inv]).replace("\u2581", " ").strip()

    return config, gen, encode, decode, SOURCES, fr, lang_ids[tgt_code]


def write_folder(name, seed):
    out = os.path.join(FIX, name)
    os.makedirs(out, exist_ok=True)
    if name == "marian":
        config, gen, encode, decode, sources, fr = build_marian(out)
        forced_bos = None
    else:
        config, gen, encode, decode, sources, fr, forced_bos = build_m2m(out, name == "nllb")
    torch.manual_seed(seed)
    model = Seq2Seq(config)
    randomize(model, 23)
    model.eval()
    save_expected(out, name, write_expected(out, name, model, config, gen, encode, decode, sources, fr, forced_bos))


def write_expected(out, name, model, config, gen, encode, decode, sources, fr, forced_bos, weight_dtype=np.float32):
    """Writes model.safetensors, config.json, generation_config.json and expected.safetensors of `model`; returns
    expected.json's object (save_expected writes it). weight_dtype np.float16 stores the weights as F16: the model's
    parameters must then already hold F16-representable values (the expected values are the model's)."""
    sd = model.state_dict_hf()
    if name.startswith("marian"):  # HF saves the sinusoidal table of the encoder (computed again at load)
        sd["model.encoder.embed_positions.weight"] = model.pos.numpy()
    if weight_dtype != np.float32:
        for k, v in sd.items():
            assert k == "model.encoder.embed_positions.weight" or np.array_equal(v.astype(weight_dtype).astype(v.dtype), v), \
                f"{k} is not representable in {np.dtype(weight_dtype).name}"
        # the sinusoidal table stays F32: a loader that reads it (instead of computing it) gets the reference's
        sd = {k: v if k == "model.encoder.embed_positions.weight" else v.astype(weight_dtype) for k, v in sd.items()}
    st.save(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=1)
    json.dump(gen, open(os.path.join(out, "generation_config.json"), "w"), indent=1)

    # Teacher-forced logits: a padded batch of (source, target) pairs; the target is the tokenized French reference
    # (target side: the same encoder as the source, good enough for ids), decoder_input = [start] + labels[:-1].
    srcs = [encode(s) for s in sources[:3]]
    tgts = [encode(t)[1:] if name != "marian" else encode(t) for t in fr[20000:20003]]
    if forced_bos is not None:
        tgts = [[forced_bos] + t for t in tgts]
    pad = config["pad_token_id"]
    Ls, Lt = max(map(len, srcs)), max(map(len, tgts))
    src = torch.full((3, Ls), pad, dtype=torch.long)
    src_mask = torch.zeros(3, Ls, dtype=torch.long)
    dec = torch.full((3, Lt), pad, dtype=torch.long)
    for i, (s, t) in enumerate(zip(srcs, tgts)):
        src[i, :len(s)] = torch.tensor(s)
        src_mask[i, :len(s)] = 1
        shifted = [config["decoder_start_token_id"]] + t[:-1]
        dec[i, :len(shifted)] = torch.tensor(shifted)
    with torch.no_grad():
        logits = model.decode(dec, model.encode(src, src_mask), src_mask)
    st.save({"src": src.numpy(), "src_len": src_mask.sum(1).numpy(), "dec_input": dec.numpy(),
             "tgt_len": torch.tensor([len(t) for t in tgts]).numpy(), "logits": logits.numpy()},
            os.path.join(out, "expected.safetensors"))

    cases = []
    for text in sources:
        ids = encode(text)
        src_t = torch.tensor([ids])
        case = {"source": text, "source_ids": ids, "runs": []}
        settings = [{"num_beams": 1}, {}, {"num_beams": 3, "length_penalty": 0.6, "early_stopping": False},
                    {"num_beams": 4, "length_penalty": 1.3, "early_stopping": "never", "min_length": 6},
                    {"num_beams": 2, "max_length": 6}]
        for over in settings:
            g = dict(gen)
            if forced_bos is not None:
                g["forced_bos_token_id"] = forced_bos
            g.update(over)
            run = {"options": over}
            if g["num_beams"] == 1:
                run["tokens"] = [greedy(model, src_t, g)]
                run["scores"] = []
            else:
                hyps = beam_search(model, src_t, g)
                run["tokens"] = [h[1] for h in hyps]
                run["scores"] = [h[0] for h in hyps]
            run["text"] = decode([t for t in run["tokens"][0]])
            case["runs"].append(run)
        cases.append(case)
    meta = {"generation_config": gen, "forced_bos_token_id": forced_bos, "cases": cases}
    return meta


def save_expected(out, name, meta):
    json.dump(meta, open(os.path.join(out, "expected.json"), "w", encoding="utf-8"), ensure_ascii=False, indent=1)
    print(name, "greedy", [c["runs"][0]["text"] for c in meta["cases"]][:2])


# ------------------------------------------------------------------ config keys at values other than their defaults
# (issue 48; tests/test_config_key_fixtures.cpp compares them with the reference)
def write_config_key_folder(name, config, seed):
    """tests/fixtures/config_keys/<name>: config.json, model.safetensors (random weights, no tokenizer files) and
    expected.safetensors: the teacher-forced logits of a padded batch of random ids (src [3, Ls] padded with
    pad_token_id, src_len, dec_input [3, Lt] starting with decoder_start_token_id, tgt_len, logits [3, Lt, V])."""
    out = os.path.join(FIX, "config_keys", name)
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(seed)
    model = Seq2Seq(config)
    randomize(model, seed + 1)
    model.eval()
    g = torch.Generator().manual_seed(seed + 2)
    pad, V = config["pad_token_id"], config["vocab_size"]
    src_len, tgt_len = [9, 6, 4], [7, 5, 3]
    src = torch.full((3, max(src_len)), pad, dtype=torch.long)
    dec = torch.full((3, max(tgt_len)), pad, dtype=torch.long)
    src_mask = torch.zeros_like(src)
    for i, (ls, lt) in enumerate(zip(src_len, tgt_len)):
        ids = torch.randint(4, V, (ls + lt,), generator=g)
        ids[ids == pad] = 4
        src[i, :ls] = ids[:ls]
        src_mask[i, :ls] = 1
        dec[i, 0] = config["decoder_start_token_id"]
        dec[i, 1:lt] = ids[ls:ls + lt - 1]
    with torch.no_grad():
        logits = model.decode(dec, model.encode(src, src_mask), src_mask)
    sd = model.state_dict_hf()
    if config["model_type"] == "marian":
        sd["model.encoder.embed_positions.weight"] = model.pos.numpy()
    st.save(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=1)
    st.save({"src": src.numpy(), "src_len": np.array(src_len, dtype=np.int64), "dec_input": dec.numpy(),
             "tgt_len": np.array(tgt_len, dtype=np.int64), "logits": logits.numpy()},
            os.path.join(out, "expected.safetensors"))
    print("wrote", os.path.relpath(out, ROOT))


def config_key_fixtures():
    # Marian without the embedding scale (MarianConfig's default; OPUS-MT folders say true), ReLU.
    write_config_key_folder("marian_keys", {
        "architectures": ["MarianMTModel"], "model_type": "marian", "activation_function": "relu", "d_model": 32,
        "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
        "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "vocab_size": 60, "decoder_vocab_size": 60,
        "max_position_embeddings": 32, "scale_embedding": False, "pad_token_id": 59, "eos_token_id": 0,
        "decoder_start_token_id": 59, "share_encoder_decoder_embeddings": True, "normalize_before": False,
        "normalize_embedding": False}, 4851)
    # M2M100 without the embedding scale (M2M100Config's default is true), GELU, pad_token_id 3 (positions count
    # from 4), one decoder layer, 40 positions (M2M100Config's default 1024).
    write_config_key_folder("m2m100_keys", {
        "architectures": ["M2M100ForConditionalGeneration"], "model_type": "m2m_100", "activation_function": "gelu",
        "d_model": 32, "encoder_layers": 2, "decoder_layers": 1, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "vocab_size": 60,
        "max_position_embeddings": 40, "scale_embedding": False, "pad_token_id": 3, "bos_token_id": 0,
        "eos_token_id": 2, "decoder_start_token_id": 2}, 4861)


if __name__ == "__main__":
    if "--config-keys" not in sys.argv[1:]:  # --config-keys: only tests/fixtures/config_keys/{marian,m2m100}_keys
        write_folder("marian", 23)
        write_folder("m2m100", 24)
        write_folder("nllb", 25)
    config_key_fixtures()
