// Clients from npm that nobody here wrote (openai, @huggingface/inference, libretranslate), pointed at `tfm serve`.
// They are installed by the tests on first use into a cache folder under the system temp folder (one folder per
// set of packages, under a lock so that tests running at once install once), and run with node as CommonJS.
#pragma once
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tfm::test {

// The folder whose node_modules holds `packages` (npm specs such as "openai@6"), installing them if needed;
// "" when node or npm is missing or the install fails (`why` says which).
inline std::string npm_clients(const std::vector<std::string>& packages, std::string* why) {
  if (std::system("command -v node > /dev/null 2>&1 && command -v npm > /dev/null 2>&1") != 0) {
    *why = "node and npm are not installed";
    return "";
  }
  std::string name;
  for (const std::string& p : packages)
    for (char c : p) name += std::isalnum((unsigned char)c) || c == '.' || c == '-' ? c : '_';
  const std::filesystem::path root = std::filesystem::temp_directory_path() / "tfm_npm_clients";
  std::filesystem::create_directories(root);
  const std::string dir = (root / name).string();
  const int lock = ::open((dir + ".lock").c_str(), O_CREAT | O_RDWR, 0644);
  if (lock >= 0) ::flock(lock, LOCK_EX);
  const std::string marker = dir + "/installed";
  if (!std::filesystem::exists(marker)) {
    std::filesystem::create_directories(dir);
    std::string cmd = "cd '" + dir + "' && timeout 300 npm install --prefix '" + dir + "' --no-audit --no-fund --no-save --silent";
    for (const std::string& p : packages) cmd += " '" + p + "'";
    cmd += " > npm.log 2>&1";
    if (std::system(cmd.c_str()) == 0) {
      std::ofstream(marker) << "ok\n";
    } else {
      std::stringstream log;
      log << std::ifstream(dir + "/npm.log").rdbuf();
      *why = "npm install failed: " + log.str().substr(0, 400);
    }
  }
  if (lock >= 0) ::close(lock);
  return std::filesystem::exists(marker) ? dir : "";
}

// Runs `script` (CommonJS; `MODULES` is the node_modules folder's path as a JS string) with node; its stdout.
inline std::string run_node(const std::string& modules_dir, const std::string& script, const std::string& scratch,
                            int* status = nullptr) {
  const std::string js = scratch + "/client.js", out = scratch + "/client.out";
  std::ofstream(js) << "const MODULES = '" << modules_dir << "/node_modules';\n" << script;
  const std::string cmd = "timeout 60 node '" + js + "' > '" + out + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  if (status) *status = rc;
  std::stringstream ss;
  ss << std::ifstream(out).rdbuf();
  return ss.str();
}

}  // namespace tfm::test
