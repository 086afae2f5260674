// Helpers of the fine-tuning step tests (tests/test_finetune*.cpp): comparisons against PyTorch's tensors.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "train/finetune.h"
#include "test_util.h"

namespace tfm::test {

// Relative to the tensor's scale: gradients and parameters of a few steps agree with PyTorch to float rounding.
inline ::testing::AssertionResult close_to(const float* got, const Tensor& want, double rel) {
  double scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, (double)std::fabs(want.f32()[i]));
  return all_close(got, want.f32(), want.numel(), (float)(rel * std::max(scale, 1e-3)));
}

// The key projection's bias adds q . b_k to every score of a query row, which softmax cancels: its gradient is 0
// in exact arithmetic, rounding noise on both sides (and Adam turns that noise into steps of +-lr).
inline bool is_key_bias(const std::string& name) { return name.find("attention.self.key.bias") != std::string::npos; }

// The hyperparameters a fixture script wrote (hyper.json's keys are FinetuneHyperparameters' names); dropout 0, as
// the references run without it (torch's RNG is not ours).
inline FinetuneHyperparameters hyperparameters_from_json(const nlohmann::json& j) {
  FinetuneHyperparameters hp;
  hp.learning_rate = j["learning_rate"];
  hp.weight_decay = j["weight_decay"];
  hp.adam_beta1 = j["adam_beta1"];
  hp.adam_beta2 = j["adam_beta2"];
  hp.adam_epsilon = j["adam_epsilon"];
  hp.max_grad_norm = j["max_grad_norm"];
  hp.warmup_steps = j["warmup_steps"];
  hp.total_steps = j["total_steps"];
  hp.dropout = 0.0f;
  return hp;
}

}  // namespace tfm::test
