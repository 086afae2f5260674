// The subword training recipe: schedule, and bit-exact resume from a checkpoint.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/safetensors.h"
#include "test_util.h"
#include "train/recipe.h"

using namespace tfm;

TEST(Recipe, InverseSqrtScheduleWarmsUpLinearlyThenDecays) {
  EXPECT_DOUBLE_EQ(inverse_sqrt_lr(1e-3, 100, 1), 1e-5);
  EXPECT_DOUBLE_EQ(inverse_sqrt_lr(1e-3, 100, 50), 5e-4);
  EXPECT_DOUBLE_EQ(inverse_sqrt_lr(1e-3, 100, 100), 1e-3);
  EXPECT_DOUBLE_EQ(inverse_sqrt_lr(1e-3, 100, 400), 5e-4);  // sqrt(100 / 400) = 1/2
}

TEST(Recipe, ConfigRejectsUnknownKeysAndBadValues) {
  EXPECT_THROW(RecipeConfig::from_json(nlohmann::json{{"epoch", 3}}, "c.json"), std::runtime_error);
  EXPECT_THROW(RecipeConfig::from_json(nlohmann::json{{"lr", -1}}, "c.json"), std::runtime_error);
  try {
    RecipeConfig::from_json(nlohmann::json{{"max_tokens", 10}}, "c.json");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("max_tokens"), std::string::npos);
  }
}

namespace {
RecipeConfig tiny_config() {
  RecipeConfig c;
  c.data_dir = tfm::test::data_dir();
  c.train_limit = 300;
  c.valid_limit = 16;
  c.vocab_size = 500;
  c.num_hiddens = 16;
  c.num_layers = 1;
  c.num_heads = 2;
  c.ffn_num_hiddens = 32;
  c.max_len = 40;
  c.num_steps = 12;
  c.max_tokens = 800;
  c.epochs = 2;
  c.warmup_steps = 5;
  c.checkpoint_every = 4;
  return c;
}
std::string read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
// Values that would only fail late (or never) are refused when the config is read.
TEST(Recipe, ConfigRejectsValuesThatWouldFailLate) {
  const std::pair<nlohmann::json, const char*> cases[] = {
      {{{"seed", -1}}, "key 'seed' must be >= 0"},
      {{{"beta2", 2}}, "'beta1' and 'beta2' must be in [0, 1)"},
      {{{"adam_eps", 0}}, "key 'adam_eps' must be positive"},
      {{{"clip_norm", -1}}, "key 'clip_norm' must be positive"},
      {{{"patience", 0}}, "key 'patience' must be >= 1"},
      {{{"warmup_steps", -3}}, "key 'warmup_steps' must be >= 0"},
      {{{"max_len", 5}, {"num_steps", 8}}, "max_len (5) must be at least num_steps (8)"},
  };
  for (const auto& [j, message] : cases) {
    try {
      (void)RecipeConfig::from_json(j, "train_config.json");
      ADD_FAILURE() << j.dump() << " accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

}  // namespace

TEST(Recipe, ResumeReachesTheSameWeightsBitForBit) {
  namespace fs = std::filesystem;
  const std::string root = ::testing::TempDir() + "/recipe_resume_" + std::to_string(::getpid());
  fs::remove_all(root);
  RecipeConfig c = tiny_config();
  RecipeResult full = train_recipe(c, root + "/full", false, false);
  ASSERT_GT(full.steps, 8);
  // Interrupted run: stop mid-epoch 1, resume; then stop again in epoch 2 and resume to the end.
  RecipeConfig stop = c;
  stop.stop_after_steps = 7;
  train_recipe(stop, root + "/split", false, false);
  RecipeConfig again;  // resume takes the recipe from the folder
  again.stop_after_steps = full.steps - 3;
  train_recipe(again, root + "/split", true, false);
  RecipeResult rest = train_recipe(RecipeConfig{}, root + "/split", true, false);
  EXPECT_EQ(rest.steps, full.steps);
  SafeTensors a = SafeTensors::open(root + "/full/checkpoint.safetensors");
  SafeTensors b = SafeTensors::open(root + "/split/checkpoint.safetensors");
  ASSERT_EQ(a.names(), b.names());
  for (const auto& n : a.names()) {
    Tensor x = a.get(n), y = b.get(n);
    ASSERT_EQ(x.numel(), y.numel()) << n;
    EXPECT_EQ(0, std::memcmp(x.f32(), y.f32(), x.nbytes())) << n << " differs after resume";
  }
  EXPECT_EQ(read_all(root + "/full/model.safetensors"), read_all(root + "/split/model.safetensors"));
  EXPECT_EQ(read_all(root + "/full/train_log.csv").substr(0, 60), read_all(root + "/split/train_log.csv").substr(0, 60));
  fs::remove_all(root);
}

TEST(Recipe, ResumeWithoutCheckpointAndCorruptCheckpointAreClearErrors) {
  namespace fs = std::filesystem;
  const std::string root = ::testing::TempDir() + "/recipe_bad_" + std::to_string(::getpid());
  fs::remove_all(root);
  fs::create_directories(root);
  try {
    train_recipe(RecipeConfig{}, root, true, false);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no checkpoint"), std::string::npos) << e.what();
  }
  // A new run refuses a folder that holds other files (here: someone's model), leaving them alone.
  fs::create_directories(root + "/other");
  std::ofstream(root + "/other/config.json") << "{}";
  try {
    train_recipe(tiny_config(), root + "/other", false, false);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("already exists and is not an empty folder"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_all(root + "/other/config.json"), "{}");
  RecipeConfig c = tiny_config();
  c.stop_after_steps = 2;
  train_recipe(c, root + "/run", false, false);
  // Truncate the checkpoint: resume must refuse it with the file named.
  const std::string ck = root + "/run/checkpoint.safetensors";
  std::string bytes = read_all(ck);
  std::ofstream(ck, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  try {
    train_recipe(RecipeConfig{}, root + "/run", true, false);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint.safetensors"), std::string::npos) << e.what();
  }
  fs::remove_all(root);
}

namespace {
std::vector<double> checkpoint_f64(const std::string& path, const std::string& name) {
  Tensor t = SafeTensors::open(path).get(name);
  return std::vector<double>(t.f32(), t.f32() + t.numel());
}
double l2(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}
}  // namespace

// Gradient clipping scales every gradient by one factor, clip_norm / (global norm over all parameters), as
// torch.nn.utils.clip_grad_norm_ does. Adam's first step ignores a gradient's scale, so the weights cannot show
// it; Adam's first moment can: after step t it is m_t = beta1 m_{t-1} + (1 - beta1) g_t, so the clipped gradient
// of each step is (m_t - beta1 m_{t-1}) / (1 - beta1). With a clip that binds at every step: that gradient has
// global norm clip_norm at steps 1 and 2, and at step 1 it is the unclipped run's gradient times one factor
// (clipping each tensor by its own norm gives norm clip_norm * sqrt(number of tensors) and a different factor
// per tensor).
TEST(Recipe, ClipsByTheGlobalNormOfAllGradients) {
  namespace fs = std::filesystem;
  if (!fs::exists(tfm::test::data_dir() + "/multi30k/train.en.gz")) GTEST_SKIP() << "Multi30k not found";
  const std::string root = ::testing::TempDir() + "/recipe_clip_" + std::to_string(::getpid());
  fs::remove_all(root);
  RecipeConfig c = tiny_config();
  ASSERT_EQ(c.weight_decay, 0.0);  // m_t holds the gradient alone
  const double clip = 1e-3, b1 = c.beta1;
  auto run = [&](double clip_norm, int64_t steps, const std::string& name) {
    RecipeConfig r = c;
    r.clip_norm = clip_norm;
    r.stop_after_steps = steps;
    train_recipe(r, root + "/" + name, false, false);
    return checkpoint_f64(root + "/" + name + "/checkpoint.safetensors", "optim.exp_avg");
  };
  const std::vector<double> m1 = run(clip, 1, "one"), m2 = run(clip, 2, "two"), free1 = run(1e30, 1, "free");
  fs::remove_all(root);
  ASSERT_EQ(m1.size(), free1.size());
  ASSERT_EQ(m1.size(), m2.size());
  std::vector<double> g1(m1.size()), g2(m1.size()), raw1(m1.size());
  for (size_t i = 0; i < m1.size(); ++i) {
    g1[i] = m1[i] / (1 - b1);
    g2[i] = (m2[i] - b1 * m1[i]) / (1 - b1);
    raw1[i] = free1[i] / (1 - b1);
  }
  const double raw_norm = l2(raw1);
  ASSERT_GT(raw_norm, 100 * clip) << "the clip must bind";
  EXPECT_NEAR(l2(g1), clip, 1e-4 * clip) << "step 1: the clipped gradients' global norm";
  EXPECT_NEAR(l2(g2), clip, 1e-3 * clip) << "step 2: the clipped gradients' global norm";
  const double s = clip / raw_norm;
  double worst = 0, largest = 0;
  for (size_t i = 0; i < g1.size(); ++i) {
    worst = std::max(worst, std::fabs(g1[i] - s * raw1[i]));
    largest = std::max(largest, std::fabs(s * raw1[i]));
  }
  EXPECT_LE(worst, 1e-4 * largest) << "step 1: every gradient scaled by clip_norm / global norm";
}
