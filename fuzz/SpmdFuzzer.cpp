//===- SpmdFuzzer.cpp - Fuzz target of the shardx-spmd pipeline -----------===//
//
// Part of ShardX.
//
// An input is a module in MLIR text. It is parsed and verified; a module
// that verifies goes through `shardx-spmd` (or the pipeline given with
// `-pipeline=...`), which must end in success or diagnostics. When it
// succeeds, the printed result must parse and verify again.
//
//===----------------------------------------------------------------------===//

#include "FuzzTarget.h"
#include "TestPasses.h"

#include "shardx/Dialect/ShardX/Transforms/Passes.h"
#include "shardx/InitAll.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstring>
#include <string>

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// The textual pass pipeline of `-pipeline=`; empty: shardx-spmd.
std::string pipeline;

/// Whether `input` would crash MLIR's own parser, outside ShardX. Such
/// inputs are skipped; each entry names the upstream code.
///  - linalg.transpose, linalg.broadcast and linalg.reduce parse their
///    `permutation = [...]` / `dimensions = [...]` with
///    `parseDenseI64ArrayAttr` (mlir/lib/Dialect/Linalg/IR/LinalgOps.cpp),
///    which stores the attribute without checking that it parsed: a
///    malformed list (an element past int64 too) is a null attribute and a
///    segfault in NamedAttrList::set. Between the tokens, skipMlirSpace skips
///    what MLIR's lexer skips, no more and no less (CI fuzz runs crashed on
///    `[1, 0\v]`, where StringRef::ltrim took \v for a space, and on
///    `dimensions\0= ...`, where a NUL, which the lexer skips, hid the `=`).
///  - linalg.generic's custom parser (GenericOp::parse, same file) reads
///    `iterator_types = [...]` with `getAsValueRange<StringAttr>()`, an
///    unchecked cast of every element: an element that is not a string
///    (an integer, an #linalg.iterator_type) is read as a string of garbage
///    length (segfault, or an allocation of 0xbebebebe... bytes under
///    ASan). Inputs whose `iterator_types` list is anything but strings
///    are skipped (the op's generic form, which verifies the elements, too).
///  - tensor.from_elements sizes its operand types from the result type's
///    element count before checking the operand count: a huge type is a
///    fatal "SmallVector unable to grow". Inputs where the numbers after a
///    from_elements multiply past 2^24 are skipped (which also skips some
///    that would parse).

/// `text` past what MLIR's lexer skips between tokens: spaces, tabs, line
/// ends, NUL bytes and `//` comments.
StringRef skipMlirSpace(StringRef text) {
  // Five characters: the NUL is one of them.
  const StringRef space(" \t\n\r\0", 5);
  while (true) {
    text = text.ltrim(space);
    if (!text.starts_with("//"))
      return text;
    size_t eol = text.find_first_of("\n\r");
    text = eol == StringRef::npos ? StringRef() : text.drop_front(eol);
  }
}

/// Whether some `keyword = [...]` in `input` is not a well-formed list: `[`
/// then `]`, or elements that `element` consumes separated by commas.
bool malformedList(StringRef input, StringRef keyword,
                   llvm::function_ref<bool(StringRef &)> element) {
  for (size_t at = input.find(keyword); at != StringRef::npos;
       at = input.find(keyword, at + 1)) {
    StringRef rest = skipMlirSpace(input.drop_front(at + keyword.size()));
    if (!rest.consume_front("="))
      continue;
    rest = skipMlirSpace(rest);
    if (!rest.consume_front("["))
      return true;
    bool expectValue = true, empty = true;
    while (true) {
      rest = skipMlirSpace(rest);
      if (rest.consume_front("]")) {
        if (expectValue && !empty)
          return true;
        break;
      }
      if (expectValue) {
        if (!element(rest))
          return true;
        expectValue = false;
        empty = false;
      } else if (!rest.consume_front(",")) {
        return true;
      } else {
        expectValue = true;
      }
    }
  }
  return false;
}

bool crashesUpstreamParser(StringRef input) {
  for (size_t at = input.find("from_elements"); at != StringRef::npos;
       at = input.find("from_elements", at + 1)) {
    StringRef window = input.substr(at, 1000);
    double product = 1;
    while (!window.empty()) {
      size_t digits = window.find_first_of("0123456789");
      if (digits == StringRef::npos)
        break;
      window = window.drop_front(digits);
      size_t end = window.find_first_not_of("0123456789");
      double value = 0;
      for (char c : window.take_front(end))
        value = value * 10 + (c - '0');
      product *= std::max(value, 1.0);
      if (product > double(1 << 24))
        return true;
      window = window.drop_front(std::min(end, window.size()));
    }
  }
  // A string literal, to its closing quote past escaped characters.
  auto stringLiteral = [](StringRef &rest) {
    if (!rest.consume_front("\""))
      return false;
    size_t end = 0;
    while (end < rest.size() && rest[end] != '"')
      end += rest[end] == '\\' ? 2 : 1;
    if (end >= rest.size())
      return false;
    rest = rest.drop_front(end + 1);
    return true;
  };
  // An integer, optionally negative, whose magnitude fits int64: a larger
  // one fails to parse as an i64 element (fuzzing found `permutation = [1,
  // 7777...70]`, a null attribute and the same segfault).
  auto integer = [](StringRef &rest) {
    rest.consume_front("-");
    size_t digits = rest.find_first_not_of("0123456789");
    if (digits == 0 || rest.empty())
      return false;
    int64_t magnitude;
    if (rest.take_front(digits).getAsInteger(10, magnitude))
      return false;
    rest = rest.drop_front(std::min(digits, rest.size()));
    return true;
  };
  return malformedList(input, "iterator_types", stringLiteral) ||
         malformedList(input, "permutation", integer) ||
         malformedList(input, "dimensions", integer);
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *argc, char ***argv) {
  mlir::shardx::registerShardXPasses();
  // The test-only passes too (-pipeline=shardx-test-local-shards).
  mlir::shardx::test::registerShardXTestPasses();
  for (int i = 1; i < *argc; ++i)
    if (std::strncmp((*argv)[i], "-pipeline=", 10) == 0)
      pipeline = (*argv)[i] + 10;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // MLIR's lexer stops at a nul character: parse a nul-terminated copy.
  std::string input(reinterpret_cast<const char *>(data), size);
  if (crashesUpstreamParser(input))
    return 0;
  std::unique_ptr<MLIRContext> context =
      fuzz::makeContext(/*allDialects=*/true);
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(input, ParserConfig(context.get()));
  if (!module)
    return 0;
  PassManager pm(context.get());
  if (pipeline.empty()) {
    mlir::shardx::buildSpmdPipeline(pm);
  } else if (failed(parsePassPipeline(pipeline, pm, llvm::errs()))) {
    fuzz::reportBug("the -pipeline= option does not parse", pipeline);
  }
  if (failed(pm.run(*module)))
    return 0;
  std::string printed;
  llvm::raw_string_ostream os(printed);
  module->print(os);
  std::unique_ptr<MLIRContext> again =
      fuzz::makeContext(/*allDialects=*/true);
  if (!parseSourceString<ModuleOp>(printed, ParserConfig(again.get())))
    fuzz::reportBug("the pipeline's output does not parse back",
                            printed);
  return 0;
}
