//===- FuzzTarget.cpp - Shared pieces of the ShardX fuzz targets ----------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "FuzzTarget.h"

#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/InitAll.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace mlir;

namespace mlir::shardx::fuzz {

std::unique_ptr<MLIRContext> makeContext(bool allDialects) {
  DialectRegistry registry;
  if (allDialects)
    mlir::shardx::registerAllShardXDialects(registry);
  else
    mlir::shardx::registerShardXDialect(registry);
  auto context = std::make_unique<MLIRContext>(
      registry, MLIRContext::Threading::DISABLED);
  context->loadDialect<mlir::shardx::ShardXDialect>();
  context->printOpOnDiagnostic(false);
  context->printStackTraceOnDiagnostic(false);
  context->getDiagEngine().registerHandler(
      [](Diagnostic &) { return success(); });
  return context;
}

void reportBug(llvm::StringRef what, llvm::StringRef detail) {
  llvm::errs() << "shardx-fuzz: BUG: " << what << "\n" << detail << "\n";
  llvm::errs().flush();
  std::abort();
}

//===----------------------------------------------------------------------===//
// The MLIR-aware mutator
//===----------------------------------------------------------------------===//

namespace {

/// Values at the edges of what sizes, dims, axes and factors may be.
constexpr const char *kInterestingIntegers[] = {
    "0",          "1",          "-1",        "2",
    "3",          "4",          "5",         "7",
    "8",          "16",         "64",        "1000",
    "65536",      "2147483647", "2147483648", "4294967296",
    "4611686018427387904",      "9223372036854775807",
    "-9223372036854775808"};

constexpr const char *kPlacements[] = {
    "R",       "S(0)",   "S(1)",   "S(2)",      "S(7)",    "SS(0, 2)",
    "SS(1, 2)", "SS(0, 4)", "SS(0, 3)", "SS(1, 0)", "P(sum)", "P(avg)",
    "P(max)",  "P(min)", "P(prod)"};

constexpr const char *kMeshShapes[] = {
    "1",   "2",     "4",       "8",         "2x2",         "2x4",
    "4x2", "1x1",   "2x3",     "3x3",       "2x2x2",       "1x2x1",
    "2x2x2x2", "0", "2x0",     "1024x1024", "65536x65536", "2x4294967296",
    "2x2x2x2x2x2x2x2x2x2x2x2", "1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1"};

/// Text that can be dropped at a random place.
constexpr const char *kSnippets[] = {
    ", order = {0 = [1, 0]}", ", strides = {0 = [2]}",
    ", strides = {0 = [1, 2]}", ", sizes = {0 = [3, 5]}",
    ", sizes = {0 = [0, 8]}", ", sizes = {1 = [1, 1, 1, 1]}",
    ", R",                     ", S(0)",
    ", P(sum)",                "#shardx.layout<@mesh, [S(0), R]>",
    "tensor<8x8xf32>",         "tensor<?x8xf32>",
    "tensor<0x4xf32>",         "tensor<4xi1>",
    "// -----\n",              "\n"};

struct Mutator {
  std::string text;
  std::mt19937 rng;

  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }
  template <size_t N> const char *pickOf(const char *const (&table)[N]) {
    return table[pick(N)];
  }

  /// The [begin, end) spans of the integer literals that are not part of a
  /// name (dims of shapes such as 8x4 are added by the caller).
  std::vector<std::pair<size_t, size_t>> integers() {
    std::vector<std::pair<size_t, size_t>> spans;
    for (size_t i = 0; i < text.size();) {
      bool digit = std::isdigit(static_cast<unsigned char>(text[i]));
      bool negative = text[i] == '-' && i + 1 < text.size() &&
                      std::isdigit(static_cast<unsigned char>(text[i + 1]));
      bool partOfName =
          i > 0 && (std::isalnum(static_cast<unsigned char>(text[i - 1])) ||
                    text[i - 1] == '_' || text[i - 1] == '%' ||
                    text[i - 1] == '#');
      if ((digit || negative) && !partOfName) {
        size_t j = i + 1;
        while (j < text.size() &&
               std::isdigit(static_cast<unsigned char>(text[j])))
          ++j;
        spans.push_back({i, j});
        i = j;
      } else {
        ++i;
      }
    }
    return spans;
  }

  void replace(size_t begin, size_t end, const std::string &with) {
    text.replace(begin, end - begin, with);
  }

  bool mutateInteger() {
    auto spans = integers();
    // Dims of shapes such as 8x4 follow an 'x', which the scan above treats
    // as part of a name; take those too.
    for (size_t i = 1; i + 1 < text.size(); ++i)
      if (text[i] == 'x' && std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
          std::isdigit(static_cast<unsigned char>(text[i + 1]))) {
        size_t j = i + 1;
        while (j < text.size() &&
               std::isdigit(static_cast<unsigned char>(text[j])))
          ++j;
        spans.push_back({i + 1, j});
      }
    if (spans.empty())
      return false;
    auto [begin, end] = spans[pick(spans.size())];
    std::string old = text.substr(begin, end - begin);
    std::string with;
    switch (pick(4)) {
    case 0:
    case 1:
      with = pickOf(kInterestingIntegers);
      break;
    case 2: {
      long long v = std::strtoll(old.c_str(), nullptr, 10);
      with = std::to_string(pick(2) ? v + 1 : v - 1);
      break;
    }
    default: {
      long long v = std::strtoll(old.c_str(), nullptr, 10);
      with = std::to_string(v * static_cast<long long>(2 + pick(3)));
      break;
    }
    }
    replace(begin, end, with);
    return true;
  }

  /// Finds `S(`, `SS(`, `P(` or a lone `R` inside `[...]` of a layout.
  bool mutatePlacement() {
    std::vector<std::pair<size_t, size_t>> spans;
    for (size_t at = text.find("#shardx.layout<"); at != std::string::npos;
         at = text.find("#shardx.layout<", at + 1)) {
      size_t open = text.find('[', at), close = text.find(']', at);
      if (open == std::string::npos || close == std::string::npos ||
          close < open)
        continue;
      size_t i = open + 1;
      while (i < close) {
        while (i < close && (text[i] == ' ' || text[i] == ','))
          ++i;
        size_t j = i;
        int depth = 0;
        while (j < close && (depth > 0 || text[j] != ',')) {
          depth += text[j] == '(';
          depth -= text[j] == ')';
          ++j;
        }
        if (j > i)
          spans.push_back({i, j});
        i = j + 1;
      }
    }
    if (spans.empty())
      return false;
    auto [begin, end] = spans[pick(spans.size())];
    replace(begin, end, pickOf(kPlacements));
    return true;
  }

  bool mutateMeshShape() {
    std::vector<std::pair<size_t, size_t>> spans;
    for (size_t at = text.find("shape = "); at != std::string::npos;
         at = text.find("shape = ", at + 1)) {
      size_t begin = at + 8, end = begin;
      while (end < text.size() &&
             (std::isdigit(static_cast<unsigned char>(text[end])) ||
              text[end] == 'x'))
        ++end;
      if (end > begin)
        spans.push_back({begin, end});
    }
    if (spans.empty())
      return false;
    auto [begin, end] = spans[pick(spans.size())];
    replace(begin, end, pickOf(kMeshShapes));
    return true;
  }

  std::vector<std::pair<size_t, size_t>> lines() {
    std::vector<std::pair<size_t, size_t>> result;
    size_t begin = 0;
    while (begin < text.size()) {
      size_t end = text.find('\n', begin);
      end = end == std::string::npos ? text.size() : end + 1;
      result.push_back({begin, end});
      begin = end;
    }
    return result;
  }

  bool mutateLines() {
    auto all = lines();
    if (all.empty())
      return false;
    auto [begin, end] = all[pick(all.size())];
    std::string line = text.substr(begin, end - begin);
    switch (pick(3)) {
    case 0: // duplicate
      text.insert(end, line);
      break;
    case 1: // drop
      text.erase(begin, end - begin);
      break;
    default: { // move elsewhere
      text.erase(begin, end - begin);
      auto rest = lines();
      size_t at = rest.empty() ? 0 : rest[pick(rest.size())].first;
      text.insert(at, line);
      break;
    }
    }
    return true;
  }

  bool insertSnippet() {
    size_t at = text.empty() ? 0 : pick(text.size() + 1);
    // Clauses go right before the closing '>' of a layout when there is one.
    size_t layout = text.find("#shardx.layout<", at > 40 ? at - 40 : 0);
    const char *snippet = pickOf(kSnippets);
    if (snippet[0] == ',' && layout != std::string::npos) {
      size_t close = text.find(']', layout);
      if (close != std::string::npos)
        at = close + 1;
    }
    text.insert(at, snippet);
    return true;
  }

  bool splice() {
    if (text.size() < 2)
      return false;
    size_t begin = pick(text.size()), length = 1 + pick(std::min<size_t>(
                                                       64, text.size() - begin));
    std::string piece = text.substr(begin, length);
    text.insert(pick(text.size() + 1), piece);
    return true;
  }
};

} // namespace

size_t mutateMlirText(uint8_t *data, size_t size, size_t maxSize,
                      unsigned seed) {
  Mutator m{std::string(reinterpret_cast<const char *>(data), size),
            std::mt19937(seed)};
  int rounds = 1 + static_cast<int>(m.pick(3));
  for (int r = 0; r < rounds; ++r) {
    for (int attempt = 0; attempt < 4; ++attempt) {
      bool done = false;
      switch (m.pick(10)) {
      case 0:
      case 1:
      case 2:
        done = m.mutateInteger();
        break;
      case 3:
      case 4:
        done = m.mutatePlacement();
        break;
      case 5:
        done = m.mutateMeshShape();
        break;
      case 6:
      case 7:
        done = m.mutateLines();
        break;
      case 8:
        done = m.insertSnippet();
        break;
      default:
        done = m.splice();
        break;
      }
      if (done)
        break;
    }
  }
  size_t newSize = std::min(m.text.size(), maxSize);
  std::memcpy(data, m.text.data(), newSize);
  return newSize;
}

} // namespace mlir::shardx::fuzz

/// Half of the mutations are MLIR-aware, the other half libFuzzer's own
/// byte-level ones (which also use the dictionary, fuzz/shardx.dict).
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size,
                                          size_t maxSize, unsigned seed) {
  if (seed % 2 == 0)
    return LLVMFuzzerMutate(data, size, maxSize);
  return mlir::shardx::fuzz::mutateMlirText(data, size, maxSize, seed / 2);
}

/// AddressSanitizer's defaults in the fuzz build. MLIR and LLVM come
/// uninstrumented from the system, but the inline parts of their allocators
/// (BumpPtrAllocator) compiled into ShardX's instrumented code poison slab
/// memory that the libraries' own copies then hand out: user poisoning
/// would only report those false use-after-poison errors. Leak checking is
/// off: a crash's MLIR context is not torn down.
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0:detect_leaks=0";
}
