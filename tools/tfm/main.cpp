// tfm: the transformer.cpp command-line tool. One subcommand per file in this folder.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  CLI::App app{"tfm: Transformer encoders and encoder-decoders in C++ (transformer.cpp)"};
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tfm: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
