// tfm::finetune's pieces shared by its tasks, and the embed task (src/api/finetune_embed.cpp).
#pragma once
#include <cstdint>
#include <string>

#include "tfm/finetune.h"
#include "train/finetune.h"

namespace tfm::api {

// TrainingArguments' optimizer and schedule fields of `o` for a run of total_steps optimizer steps: warmup_steps,
// else ceil(warmup_ratio * total_steps); `dropout` (config.json hidden_dropout_prob) and o.seed.
FinetuneHyperparameters finetune_hyperparameters(const FinetuneOptions& o, int64_t total_steps, double dropout);

// finetune() for task "embed" (see tfm/finetune.h), after the options, the data files and the output folder have
// been checked and the threads set.
FinetuneSummary finetune_embed(const std::string& model_dir, const FinetuneOptions& o);

}  // namespace tfm::api
