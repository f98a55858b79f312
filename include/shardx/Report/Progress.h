//===- Progress.h - A progress line for the tools ---------------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// One line on stderr that says what a tool is doing ("[shardx-run] running
// the sharded program 3/10..."), rewritten in place and erased when done.
// Shown only when stderr is a terminal, so logs, pipes and CI stay quiet;
// SHARDX_PROGRESS=1 forces it on and SHARDX_PROGRESS=0 off.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_REPORT_PROGRESS_H
#define SHARDX_REPORT_PROGRESS_H

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

namespace shardx {

class Progress {
public:
  explicit Progress(std::string tool) : tool(std::move(tool)) {
    const char *env = std::getenv("SHARDX_PROGRESS");
    enabled = env && *env ? std::strcmp(env, "0") != 0 : isatty(2) != 0;
  }
  ~Progress() { clear(); }
  Progress(const Progress &) = delete;
  Progress &operator=(const Progress &) = delete;

  /// Shows `what` as the current step.
  void step(const std::string &what) {
    if (!enabled)
      return;
    std::fprintf(stderr, "\r\033[K[%s] %s...", tool.c_str(), what.c_str());
    std::fflush(stderr);
    shown = true;
  }
  /// Erases the line (before the tool prints results or errors).
  void clear() {
    if (!shown)
      return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    shown = false;
  }
  bool isEnabled() const { return enabled; }

private:
  std::string tool;
  bool enabled = false;
  bool shown = false;
};

} // namespace shardx

#endif // SHARDX_REPORT_PROGRESS_H
