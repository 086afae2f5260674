#include "models/roberta.h"

#include <string>
#include <vector>

#include "models/bert.h"

namespace tfm {
namespace {

// Base-model names, then the "roberta."-prefixed names of the *For* heads' checkpoints.
std::vector<std::string> roberta_aliases(const std::string& name) { return {"roberta." + name}; }

}  // namespace

// modeling_roberta.py: RobertaEmbeddings (positions from padding_idx) in front of BERT's encoder and pooler.
std::unique_ptr<EncoderModel> make_roberta(const EncoderConfig& config, WeightSource& weights, ops::ComputeType dtype) {
  detail::BertVariant variant;
  variant.aliases = roberta_aliases;
  variant.positions_from_padding = true;
  return detail::make_bert_variant(config, weights, dtype, variant);
}

}  // namespace tfm
