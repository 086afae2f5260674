/// @file tfm/tfm.h
/// transformer.cpp's public C++ API (C++17): tokenize, encode / embed, translate, classify, train, convert, BLEU.
/// Link with tfm::tfm (find_package(tfm)) or `pkg-config --libs tfm`.
#pragma once
#include "tfm/array.h"
#include "tfm/bleu.h"
#include "tfm/classifier.h"
#include "tfm/convert.h"
#include "tfm/encoder.h"
#include "tfm/error.h"
#include "tfm/hub.h"
#include "tfm/process_group.h"
#include "tfm/finetune.h"
#include "tfm/tokenizer.h"
#include "tfm/train.h"
#include "tfm/translator.h"

#define TFM_VERSION_MAJOR 0
#define TFM_VERSION_MINOR 1
#define TFM_VERSION_PATCH 0

namespace tfm {
/// "0.1.0": the library's version (of the libtfm actually loaded, which may differ from the macros above).
const char* version();
}  // namespace tfm
