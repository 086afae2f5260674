#!/usr/bin/env bash
# libtfm.so exports the public API of include/tfm and nothing else (cmake/libtfm.map).
# Usage: check_exports.sh path/to/libtfm.so
set -euo pipefail
lib=$1
syms=$(nm -DC --defined-only "$lib" | cut -d' ' -f3-)
fail=0
# Each public class / function of include/tfm is there.
for want in 'tfm::version()' 'tfm::train(' 'tfm::bleu::corpus(' 'tfm::bleu::sentence(' 'tfm::Tokenizer::Tokenizer(' \
            'tfm::Encoder::Encoder(' 'tfm::Encoder::embed(' 'tfm::Classifier::Classifier(' 'tfm::Translator::Translator(' \
            'tfm::Translator::translate_batch(' 'tfm::Translator::handles_model_type(' 'tfm::convert(' 'tfm::train_d2l(' 'tfm::process_group(' 'tfm::group::shard(' 'tfm::recipe_keys' 'tfm::TokenClassifier::tag(' 'tfm::MaskFiller::fill(' 'tfm::detect_task_head(' 'tfm::finetune(' 'tfm::resolve_model(' 'typeinfo for tfm::FileNotFoundError'; do
  if ! grep -qF -- "$want" <<<"$syms"; then echo "missing export: $want"; fail=1; fi
done
# Nothing else: internals (tfm::Tensor, tfm::ops, tfm::serve, ...), oneDNN / nlohmann / httplib / std instances.
others=$(grep -vE '^(tfm::(version\(|train\(|convert\(|train_d2l\(|process_group\(|group::|request_train_stop\(|recipe_keys(\[abi:cxx11\])?\(|task_head_name\(|detect_task_head\(|bleu::|Array<|Tokenizer::|Encoder::|Classifier::|TokenClassifier::|MaskFiller::|Translator::|FileNotFoundError::|resolve_model\(|download_model\(|finetune\(|BatchBudget::|length_batches\(|check_dimensions\(|l2_normalize\(|truncate_dimensions\(|stored_dtype\(|check_tokenizer_vocab\()|(typeinfo|typeinfo name|vtable) for tfm::FileNotFoundError$)' <<<"$syms" || true)
if [ -n "$others" ]; then
  echo "unexpected exports ($(wc -l <<<"$others")):"
  head -20 <<<"$others"
  fail=1
fi
[ $fail = 0 ] && echo "libtfm.so exports $(wc -l <<<"$syms") public symbols"
exit $fail
