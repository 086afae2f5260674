"""tfm.Translator against the d2l reference's own translations (tests/fixtures/d2l_trained), `tfm translate`, and
the PyTorch reference model's log-probabilities."""
import json
import math
import os
import sys

import pytest

import tfm
from conftest import FIXTURES, ROOT, load_safetensors, run_cli

D2L = os.path.join(FIXTURES, "d2l_trained")
PRED = json.load(open(os.path.join(D2L, "predictions.json")))["predictions"]
SENTENCES = [p["src"] for p in PRED]


@pytest.fixture(scope="module")
def tr():
    return tfm.Translator(D2L, threads=1)


def test_greedy_equals_the_d2l_reference(tr):
    assert tr.translate_batch(SENTENCES) == [p["pred"] for p in PRED]
    assert not tr.subword and tr.num_steps == 10


@pytest.mark.parametrize("beam,alpha", [(1, 0.0), (4, 0.0), (4, 0.6), (8, 1.0)])
def test_equals_cli(tr, beam, alpha):
    extra = ["i am cold .", "", "we are here .", "she is tall ."]
    sentences = SENTENCES + extra
    # tfm refuses --length-penalty without beam search (an option it would ignore)
    penalty = ["--length-penalty", str(alpha)] if beam > 1 else []
    r = run_cli("translate", "--model", D2L, "--threads", "1", "--beam", str(beam), *penalty, *sentences)
    cli = r.stdout.split("\n")[:-1]
    assert tr.translate_batch(sentences, beam_size=beam, length_penalty=alpha) == cli
    assert cli[len(SENTENCES) + 1] == ""  # empty sentence, empty line


def reference_greedy_logp(sentences):
    """Greedy decoding as d2l's predict_seq2seq, with the PyTorch reference modules, summing log_softmax of every
    chosen token (the final <eos> included)."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, os.path.normpath(os.path.join(ROOT, "..", "shared", "reference", "torch")))
    import d2lnmt
    import reference_modules as rm

    cfg = json.load(open(os.path.join(D2L, "config.json")))
    H, ffn, heads, layers = cfg["num_hiddens"], cfg["ffn_num_hiddens"], cfg["num_heads"], cfg["num_layers"]
    enc = rm.D2LTransformerEncoder(cfg["src_vocab_size"], H, H, H, H, [H], H, ffn, heads, layers, 0.0)
    dec = rm.D2LTransformerDecoder(cfg["tgt_vocab_size"], H, H, H, H, [H], H, ffn, heads, layers, 0.0)
    net = rm.EncoderDecoder(enc, dec)
    net.load_state_dict({k: torch.from_numpy(v) for k, v in load_safetensors(os.path.join(D2L, "model.safetensors")).items()})
    net.eval()
    src_vocab = open(os.path.join(D2L, "src_vocab.txt")).read().split("\n")[:-1]
    tgt_vocab = open(os.path.join(D2L, "tgt_vocab.txt")).read().split("\n")[:-1]
    s2i = {t: i for i, t in enumerate(src_vocab)}
    t2i = {t: i for i, t in enumerate(tgt_vocab)}
    out = []
    for s in sentences:
        toks = [s2i.get(w, 0) for w in s.lower().split(" ")] + [s2i["<eos>"]]
        vl = torch.tensor([len(toks)])
        X = torch.tensor(d2lnmt.truncate_pad(toks, cfg["num_steps"], s2i["<pad>"])).unsqueeze(0)
        with torch.no_grad():
            state = net.decoder.init_state(net.encoder(X, vl), vl)
            dec_X, logps, words = torch.tensor([[t2i["<bos>"]]]), [], []
            for _ in range(cfg["num_steps"]):
                Y, state = net.decoder(dec_X, state)
                lsm = torch.log_softmax(Y[0, -1].double(), dim=-1)
                dec_X = Y.argmax(dim=2)
                pred = int(dec_X.item())
                logps.append(float(lsm[pred]))
                if pred == t2i["<eos>"]:
                    break
                words.append(tgt_vocab[pred])
        out.append((" ".join(words), sum(logps), logps))
    return out


def test_scores_are_the_reference_log_probabilities(tr):
    # The model is confident: log p(<eos>) is -1e-6 .. -1e-4 here, so the tolerance is well below that (float32
    # results of both agree to ~1e-6).
    sentences = SENTENCES + ["i am cold .", "i love you .", "they won ."]
    ref = reference_greedy_logp(sentences)
    got = tr.translate_batch(sentences, return_scores=True)
    assert [t for t, _ in got] == [t for t, _, _ in ref]
    assert max(-logps[-1] for _, _, logps in ref) > 5e-5  # some <eos> term is far above the tolerance
    for (_, s), (_, r, _) in zip(got, ref):
        assert s == pytest.approx(r, abs=5e-6)
    # The length penalty divides by ((5 + length) / 6) ** alpha, length with <eos>.
    alpha = 0.6
    pen = tr.translate_batch(SENTENCES, return_scores=True, length_penalty=alpha)
    for (text, s), (_, r, _) in zip(pen, ref):
        n = len(text.split(" ")) + 1 if text else 1
        assert s == pytest.approx(r / ((5 + n) / 6) ** alpha, abs=5e-6)


def test_beam_scores_rank_hypotheses(tr):
    greedy = tr.translate_batch(SENTENCES, return_scores=True)
    beam = tr.translate_batch(SENTENCES, beam_size=4, return_scores=True)
    for (_, g), (_, b) in zip(greedy, beam):
        assert b <= 0 and g <= 0 and math.isfinite(b)
        assert b >= g - 1e-6  # beam search keeps the greedy path among its candidates (alpha 0)


def test_cut_off_hypotheses_have_no_eos_term(tr):
    # With max_steps 1 every output is one token, cut off before <eos>: score = log p(first token) alone.
    one = tr.translate_batch(SENTENCES, max_steps=1, return_scores=True)
    for (text, score), (full, _, logps) in zip(one, reference_greedy_logp(SENTENCES)):
        assert full.split(" ")[0] == text
        assert score == pytest.approx(logps[0], abs=5e-6)


def test_errors(tr, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such model folder"):
        tfm.Translator(str(tmp_path / "none"))
    (tmp_path / "config.json").write_text(open(os.path.join(D2L, "config.json")).read())
    (tmp_path / "model.safetensors").write_bytes(open(os.path.join(D2L, "model.safetensors"), "rb").read())
    with pytest.raises(FileNotFoundError, match="src_vocab.txt: no such file"):
        tfm.Translator(str(tmp_path))
    (tmp_path / "src_vocab.txt").write_text("<unk>\n<pad>\n")
    (tmp_path / "tgt_vocab.txt").write_text("<unk>\n<pad>\n")
    with pytest.raises(RuntimeError, match="vocabulary files have 2 / 2 tokens but config.json says"):
        tfm.Translator(str(tmp_path))
    with pytest.raises(ValueError, match="beam_size must be from 1 to 64, got -1"):
        tr.translate_batch(["go ."], beam_size=-1)
    with pytest.raises(ValueError, match="length_penalty must be a finite number >= 0"):
        tr.translate_batch(["go ."], length_penalty=float("inf"))
    # beam_size 0 and length_penalty NaN are the model's defaults (greedy, 0 for these models)
    assert tr.translate_batch(["go ."], beam_size=0) == tr.translate_batch(["go ."], beam_size=1)
    with pytest.raises(ValueError, match="sentence 2: invalid UTF-8 at byte offset 2"):
        tr.translate_batch(["go .", b"hi\xff"])
    with pytest.raises(ValueError, match="single str"):
        tr.translate_batch("go .")
    assert tr.translate_batch([]) == []
