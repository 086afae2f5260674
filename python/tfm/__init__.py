"""transformer.cpp from Python: BERT-style encoders, d2l / subword translation models, training and BLEU.

    import tfm
    tok = tfm.Tokenizer("path/to/bert")                  # tokenizer.json or vocab.txt
    batch = tok(["a sentence", "another"])              # dict of int64 numpy arrays [batch, length]
    enc = tfm.Encoder("path/to/bert", dtype="fp32", threads=2)   # or "bf16", "int8"
    hidden = enc.forward(**batch)                        # float32 [batch, length, hidden_size]
    vectors = enc.embed(["a sentence"], normalize=True)  # float32 [1, hidden_size]
    tfm.Classifier("path/to/bert-classifier").classify(["great!"])  # [{"label": ..., "score": ...}]
    tr = tfm.Translator("path/to/seq2seq")
    tr.translate_batch(["go ."], beam_size=4, length_penalty=0.6, return_scores=True)  # [(text, score)]
    tfm.bleu.corpus(hyps, refs).score                    # sacreBLEU's corpus_bleu(hypotheses, [references])
    tfm.train("configs/multi30k-en-fr.json", "runs/en-fr", progress=print)

Errors are ValueError (bad arguments, arrays or text), FileNotFoundError (missing folder or file) and RuntimeError
(malformed files, failed runs), each with the library's one-line message.
"""
import sys as _sys

from ._tfm import (  # noqa: F401
    Classifier,
    ConvertSummary,
    D2lTrainSummary,
    Encoder,
    FinetuneProgress,
    FinetuneSummary,
    MaskFiller,
    ModelInfo,
    QuestionAnswerer,
    TokenClassifier,
    Tokenizer,
    TrainProgress,
    TrainSummary,
    Translator,
    __version__,
    bleu,
    convert,
    download,
    finetune,
    inspect_model,
    native_dtype,
    quantize_embeddings,
    train,
    train_d2l,
)

# `import tfm.bleu` / `from tfm.bleu import corpus` find the extension's submodule.
_sys.modules[__name__ + ".bleu"] = bleu

__all__ = ["Classifier", "ConvertSummary", "D2lTrainSummary", "Encoder", "MaskFiller", "ModelInfo", "QuestionAnswerer", "TokenClassifier", "Tokenizer",
           "Translator", "TrainProgress", "TrainSummary", "FinetuneProgress", "FinetuneSummary", "bleu", "convert",
           "download", "finetune", "inspect_model", "native_dtype", "quantize_embeddings", "train", "train_d2l", "__version__"]
