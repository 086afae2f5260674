/// @file tfm/tfm.h
/// transformer.cpp's public C++ API (C++17): tokenize, encode / embed, translate, classify, train, convert, BLEU.
/// Link with tfm::tfm (find_package(tfm)) or `pkg-config --libs tfm`.
#pragma once
#include <string>

#include "tfm/array.h"
#include "tfm/bleu.h"
#include "tfm/classifier.h"
#include "tfm/convert.h"
#include "tfm/encoder.h"
#include "tfm/error.h"
#include "tfm/hub.h"
#include "tfm/language_id.h"
#include "tfm/model_info.h"
#include "tfm/process_group.h"
#include "tfm/finetune.h"
#include "tfm/pipeline.h"
#include "tfm/tokenizer.h"
#include "tfm/train.h"
#include "tfm/translator.h"

#define TFM_VERSION_MAJOR 0
#define TFM_VERSION_MINOR 1
#define TFM_VERSION_PATCH 0

namespace tfm {
/// "0.1.0": the library's version (of the libtfm actually loaded, which may differ from the macros above).
const char* version();
/// Whether this CPU multiplies `dtype` ("fp32", "bf16", "int8" or an alias) natively: fp32 always, bf16 with
/// AVX512_BF16 or AMX, int8 with VNNI or AMX. Elsewhere a bf16 or int8 model still loads and reports that dtype, but
/// its Linear weights (rounded to bf16, or quantised to int8, as the native path would use them) are multiplied in
/// fp32, at fp32's speed. Throws std::invalid_argument for an unknown dtype.
bool native_dtype(const std::string& dtype);
}  // namespace tfm
