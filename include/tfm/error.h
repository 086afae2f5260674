/// @file tfm/error.h
/// Errors thrown by the public API. Every message is one line and names the file, argument or value at fault.
///
/// | what went wrong                                              | exception                | Python        |
/// |--------------------------------------------------------------|--------------------------|---------------|
/// | a bad argument, array shape, id, option or input text        | std::invalid_argument    | ValueError    |
/// | a model folder or file that does not exist                   | tfm::FileNotFoundError   | FileNotFoundError |
/// | a malformed file, an unsupported model, a failed training run | std::runtime_error       | RuntimeError  |
#pragma once
#include <stdexcept>
#include <string>

namespace tfm {

/// A file or folder the call needs does not exist. The message starts with the path.
class FileNotFoundError : public std::runtime_error {
 public:
  explicit FileNotFoundError(const std::string& message);
  ~FileNotFoundError() override;
};

}  // namespace tfm
