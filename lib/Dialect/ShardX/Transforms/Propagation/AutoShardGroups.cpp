//===- AutoShardGroups.cpp - shardx-auto-shard's decisions ---------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The groups shardx-auto-shard decides a layout for (a parameter with its
// optimizer state and updated copies, the inputs' batch dim), and the tying
// of the groups of repeated layers into one decision (AutoShard.h).
//
//===----------------------------------------------------------------------===//

#include "AutoShard.h"
#include "LayoutUtils.h"

using namespace mlir;
using namespace mlir::shardx;
using namespace mlir::shardx::autoshard;

LogicalResult AutoSharder::findGroups() {
  unsigned numArgs = pricer.fn.getNumArguments();
  pinnedArg.assign(numArgs, false);
  pinnedResult.assign(pricer.fn.getNumResults(), false);
  for (unsigned i = 0; i < numArgs; ++i)
    pinnedArg[i] =
        bool(pricer.fn.getArgAttr(i, ShardXDialect::getLayoutAttrName()));
  for (unsigned i = 0, e = pricer.fn.getNumResults(); i < e; ++i)
    pinnedResult[i] =
        bool(pricer.fn.getResultAttr(i, ShardXDialect::getLayoutAttrName()));
  // Roles as the memory model tells them: parameters before the first
  // optimizer state, inputs after the last.
  int firstState = -1, lastState = -1;
  for (unsigned i = 0; i < numArgs; ++i)
    if (pricer.fn.getArgAttr(i, "torch.state")) {
      if (firstState < 0)
        firstState = i;
      lastState = i;
    }
  unsigned numParams = firstState < 0 ? numArgs : firstState;
  unsigned firstInput = firstState < 0 ? numArgs : lastState + 1;
  // A train step returns (loss, parameters, state): result k + 1 is the
  // update of argument k.
  bool tied = firstState >= 0 && pricer.fn.getNumResults() == firstInput + 1;
  for (unsigned k = 0; tied && k < firstInput; ++k)
    tied = pricer.fn.getResultTypes()[k + 1] == pricer.fn.getArgumentTypes()[k];

  DenseMap<Value, int64_t> firstUse;
  int64_t pos = 0;
  for (Operation &op : pricer.fn.getBody().front()) {
    for (Value v : op.getOperands())
      firstUse.try_emplace(v, pos);
    ++pos;
  }
  auto argType = [&](unsigned i) {
    return dyn_cast<RankedTensorType>(pricer.fn.getArgument(i).getType());
  };
  SmallVector<bool> grouped(numArgs, false);
  for (unsigned p = 0; p < numParams; ++p) {
    RankedTensorType type = argType(p);
    if (!type || pinnedArg[p])
      continue;
    Group g;
    g.name = "%arg" + std::to_string(p);
    g.args.push_back(p);
    // Its optimizer state: the state arguments at its position in each
    // block of `numParams` states, when of its type.
    for (unsigned s = numParams; s < firstInput; s += numParams)
      if (s + p < firstInput && argType(s + p) == type && !pinnedArg[s + p])
        g.args.push_back(s + p);
    for (unsigned a : g.args) {
      grouped[a] = true;
      if (tied && !pinnedResult[a + 1])
        g.results.push_back(a + 1);
    }
    g.choices = layoutChoices(type, pricer.meshShape, /*batchOnly=*/false);
    g.firstUse = firstUse.lookup(pricer.fn.getArgument(p));
    g.argsPerLayer = g.args.size();
    if (g.choices.size() > 1)
      groups.push_back(std::move(g));
  }
  // What makes two ops the same in two layers: their names, result types
  // and the names of the ops in their bodies (a ReLU and a subtraction are
  // both linalg.generic).
  SmallVector<llvm::hash_code> &opNames = opKeys;
  SmallVector<llvm::hash_code> firstUser;
  for (Operation &op : pricer.fn.getBody().front()) {
    llvm::hash_code key =
        llvm::hash_combine(op.getName().getAsOpaquePointer(),
                           llvm::hash_combine_range(op.getResultTypes().begin(),
                                                    op.getResultTypes().end()));
    op.walk([&](Operation *inner) {
      if (inner != &op)
        key = llvm::hash_combine(key, inner->getName().getAsOpaquePointer());
    });
    opNames.push_back(key);
  }
  for (const Group &g : groups)
    firstUser.push_back(opNames[g.firstUse]);
  tieLayers(opNames, firstUser);
  llvm::stable_sort(groups, [](const Group &a, const Group &b) {
    return a.firstUse < b.firstUse;
  });
  // The inputs: one layout of their batch dim (dim 0), unless the user
  // gave any of them one.
  Group data;
  data.name = "inputs";
  data.isData = true;
  bool dataPinned = false;
  for (unsigned i = firstInput; i < numArgs; ++i) {
    RankedTensorType type = argType(i);
    if (!type || type.getRank() == 0)
      continue;
    dataPinned |= pinnedArg[i];
    data.args.push_back(i);
  }
  if (!data.args.empty() && !dataPinned) {
    data.choices = layoutChoices(argType(data.args.front()), pricer.meshShape,
                                 /*batchOnly=*/true);
    // Every input must divide as the first does.
    llvm::erase_if(data.choices, [&](const Choice &c) {
      return llvm::any_of(data.args, [&](unsigned i) {
        RankedTensorType t = argType(i);
        int64_t split = 1;
        for (auto [a, p] : llvm::enumerate(c.placements))
          if (p.isShard())
            split *= pricer.meshShape[a];
        return t.isDynamicDim(0) || t.getDimSize(0) % split != 0;
      });
    });
    if (data.choices.size() > 1) {
      dataGroup = groups.size();
      groups.push_back(std::move(data));
    }
  }
  return success();
}

void AutoSharder::tieLayers(ArrayRef<llvm::hash_code> opNames,
                            ArrayRef<llvm::hash_code> firstUser) {
  size_t n = groups.size();
  auto same = [&](size_t a, size_t b) {
    const Group &x = groups[a], &y = groups[b];
    return pricer.fn.getArgument(x.args.front()).getType() ==
               pricer.fn.getArgument(y.args.front()).getType() &&
           x.args.size() == y.args.size() &&
           x.results.size() == y.results.size() &&
           x.choices.size() == y.choices.size() && firstUser[a] == firstUser[b];
  };
  // Candidate runs (start, period, repeats), the most groups covered first.
  struct Run {
    size_t start, period, repeats;
    int64_t distance;
  };
  SmallVector<Run> runs;
  for (size_t period = 1; 2 * period <= n; ++period)
    for (size_t i = 0; i + period < n;) {
      int64_t distance = groups[i + period].firstUse - groups[i].firstUse;
      if (!same(i, i + period) || distance <= 0) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j + period < n && same(j, j + period) &&
             groups[j + period].firstUse - groups[j].firstUse == distance)
        ++j;
      size_t repeats = (j - i + period) / period;
      if (repeats >= 2)
        runs.push_back({i, period, repeats, distance});
      i = j + 1;
    }
  llvm::stable_sort(runs, [](const Run &a, const Run &b) {
    return a.period * a.repeats > b.period * b.repeats;
  });
  for (const Run &run : llvm::ArrayRef(runs).take_front(16)) {
    // The ops from the first repeat's first use to the last repeat's last
    // one repeat every `distance` ops (what lies between the repeats, a
    // layer's ops before its first parameter, is compared with the
    // repeat before; what follows the last, the loss, is not).
    size_t from = groups[run.start].firstUse;
    size_t to =
        groups[run.start + run.period * run.repeats - 1].firstUse + 1 -
        run.distance;
    if (to + run.distance > opNames.size())
      continue;
    bool periodic = true;
    for (size_t k = from; k < to && periodic; ++k)
      periodic = opNames[k] == opNames[k + run.distance];
    // Two repeats: nothing above compares what follows a repeat's last
    // parameter. Two same-width Linears of one MLP would pass (their
    // layouts must be free to differ: Megatron splits one by columns, the
    // other by rows), so the ops after the first repeat's last parameter,
    // up to the second repeat, must also follow the second one (a stack of
    // layers ends with one more norm, as GPT's and Llama's do).
    for (size_t k = to; run.repeats == 2 && k < from + run.distance && periodic;
         ++k)
      periodic = k + run.distance < opNames.size() &&
                 opNames[k] == opNames[k + run.distance];
    if (!periodic)
      continue;
    std::vector<Group> tied;
    for (size_t g = 0; g < n; ++g) {
      if (g < run.start || g >= run.start + run.period * run.repeats) {
        tied.push_back(std::move(groups[g]));
        continue;
      }
      if (g >= run.start + run.period)
        continue;
      Group merged = std::move(groups[g]);
      for (size_t r = 1; r < run.repeats; ++r) {
        Group &other = groups[g + r * run.period];
        merged.args.append(other.args.begin(), other.args.end());
        merged.results.append(other.results.begin(), other.results.end());
      }
      merged.layers = run.repeats;
      pricer.tiedLayers = run.repeats;
      tied.push_back(std::move(merged));
    }
    groups = std::move(tied);
    return;
  }
}
