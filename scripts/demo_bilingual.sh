#!/usr/bin/env bash
# The README's fine-tuning demo (issue 25), on the repository's data (../shared/data/fra-eng/fra.txt):
#  1. a bilingual sentence-embedding model: a small BERT, randomly initialised (`tfm encode --init random --save`:
#     no pretrained weights exist here) with bert-base-uncased's WordPiece vocabulary, made a sentence-transformers
#     folder (mean pooling, Normalize), fine-tuned with `tfm finetune --task embed` on English (anchor) / French
#     (positive) pairs, MultipleNegativesRankingLoss with in-batch negatives;
#  2. `tfm embed` of 1,000 held-out English sentences and their French translations, before and after: the top-1
#     accuracy of retrieving each English sentence's translation among the 1,000 (scripts/retrieval_accuracy.py);
#  3. a language-identification classifier (`tfm finetune --task classify`, en / fr) on the same data.
#
#   scripts/demo_bilingual.sh [WORK_DIR]      # default: a new temporary folder
# Environment: TFM (the tfm binary, default build/tfm), TFM_DATA_DIR (default ../shared/data), THREADS (2),
# TRAIN_PAIRS (training pairs; default 0: all 45,037 that are not held out), EPOCHS (2), BATCH (64), SEED (1).
# About 5 minutes on 2 busy cores (TRAIN_PAIRS=24000 EPOCHS=1: about 2).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${TFM_DATA_DIR:-$ROOT/../shared/data}
TFM=${TFM:-$ROOT/build/tfm}
THREADS=${THREADS:-2}
TRAIN_PAIRS=${TRAIN_PAIRS:-0}
EPOCHS=${EPOCHS:-2}
BATCH=${BATCH:-64}
SEED=${SEED:-1}
if [ -z "${PYTHON:-}" ]; then  # numpy makes the evaluation instant; plain Python takes seconds
  PYTHON=python3
  for p in python3 /usr/bin/python3; do
    if command -v "$p" > /dev/null && "$p" -c 'import numpy' 2> /dev/null; then PYTHON=$p; break; fi
  done
fi
WORK=${1:-$(mktemp -d /tmp/tfm_demo_bilingual.XXXXXX)}
FRA=$DATA/fra-eng/fra.txt
BASE=$DATA/bert-base-uncased

for f in "$FRA" "$BASE/vocab.txt" "$TFM"; do
  [ -e "$f" ] || { echo "demo_bilingual: error: $f: no such file (set TFM_DATA_DIR / TFM)" >&2; exit 1; }
done
mkdir -p "$WORK"
cd "$WORK"
echo "== working in $WORK"

# ---- data: unique pairs (an English or French sentence seen before is skipped), 1,000 held out evenly across the
# file (it is sorted shortest first), a seeded sample of the rest for training.
awk -F'\t' 'NF >= 2 && $1 != "" && $2 != "" && !(en[$1]++) && !(fr[$2]++) { print $1 "\t" $2 }' "$FRA" > pairs.tsv
total=$(wc -l < pairs.tsv)
step=$((total / 1000))
awk -v s="$step" '{ held = (NR % s == 0 && ++k <= 1000) } held { print > "heldout.tsv"; next } { print }' \
  pairs.tsv > rest.tsv
shuf --random-source=<(yes "$SEED") rest.tsv > rest_shuffled.tsv
if [ "$TRAIN_PAIRS" -gt 0 ]; then head -n "$TRAIN_PAIRS" rest_shuffled.tsv > train_pairs.tsv; else cp rest_shuffled.tsv train_pairs.tsv; fi
{ printf 'anchor\tpositive\n'; cat train_pairs.tsv; } > train.tsv
{ printf 'anchor\tpositive\n'; cat heldout.tsv; } > eval.tsv
cut -f1 heldout.tsv > heldout.en
cut -f2 heldout.tsv > heldout.fr
echo "== $total unique pairs: $(($(wc -l < train.tsv) - 1)) for training, $(wc -l < heldout.tsv) held out"

# ---- the starting point: a random 2-layer BERT (hidden 128), bert-base-uncased's vocabulary, as a
# sentence-transformers folder (Transformer -> Pooling(mean) -> Normalize).
cat > bert_small.json <<'EOF'
{"architectures": ["BertModel"], "model_type": "bert", "vocab_size": 30522, "hidden_size": 128,
 "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 512, "hidden_act": "gelu",
 "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 64,
 "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0}
EOF
rm -rf base
"$TFM" encode --model "$BASE" --config bert_small.json --init random --seed "$SEED" --save base "hello" \
  --threads "$THREADS" > /dev/null
mkdir -p base/1_Pooling base/2_Normalize
cat > base/modules.json <<'EOF'
[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
 {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
 {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
EOF
cat > base/1_Pooling/config.json <<'EOF'
{"word_embedding_dimension": 128, "pooling_mode_cls_token": false, "pooling_mode_mean_tokens": true,
 "pooling_mode_max_tokens": false, "pooling_mode_mean_sqrt_len_tokens": false}
EOF
echo '{"max_seq_length": 64, "do_lower_case": false}' > base/sentence_bert_config.json

retrieve() {  # $1: model folder -> "top-1 accuracy ..." of English -> French over the held-out 1,000
  "$TFM" embed --model "$1" --input heldout.en --output "$1.en.npy" --threads "$THREADS" --quiet
  "$TFM" embed --model "$1" --input heldout.fr --output "$1.fr.npy" --threads "$THREADS" --quiet
  "$PYTHON" "$ROOT/scripts/retrieval_accuracy.py" "$1.en.npy" "$1.fr.npy"
}
echo "== before fine-tuning (random weights): English -> French retrieval among 1,000"
before=$(retrieve base)
echo "   $before"

echo "== tfm finetune --task embed ($EPOCHS epoch(s), batch $BATCH: $((BATCH - 1)) in-batch negatives per anchor)"
start=$(date +%s)
rm -rf bilingual
"$TFM" finetune --task embed --model base --train train.tsv --eval eval.tsv --out bilingual --epochs "$EPOCHS" \
  --batch-size "$BATCH" --lr 1e-3 --warmup-ratio 0.1 --max-length 64 --seed "$SEED" --threads "$THREADS"
echo "   ($(($(date +%s) - start)) s)"
echo "== after fine-tuning: English -> French retrieval among 1,000"
after=$(retrieve bilingual)
echo "   $after"

echo "== tfm finetune --task classify: language identification (en / fr)"
{ printf 'text\tlabel\n'; head -n 3000 rest_shuffled.tsv | awk -F'\t' '{ print $1 "\ten"; print $2 "\tfr" }'; } > lid_train.tsv
{ printf 'text\tlabel\n'; head -n 500 heldout.tsv | awk -F'\t' '{ print $1 "\ten"; print $2 "\tfr" }'; } > lid_eval.tsv
rm -rf langid
"$TFM" finetune --task classify --model base --train lid_train.tsv --eval lid_eval.tsv --out langid --epochs 1 \
  --batch-size 32 --lr 1e-3 --warmup-ratio 0.1 --seed "$SEED" --threads "$THREADS"
printf '%s\n' "Where is the train station?" "Où est la gare ?" "I like cheese." "J'aime le fromage." > lid_demo.txt
"$TFM" classify --model langid --input lid_demo.txt --threads "$THREADS"

echo "== summary"
echo "   retrieval before: $before"
echo "   retrieval after:  $after"
