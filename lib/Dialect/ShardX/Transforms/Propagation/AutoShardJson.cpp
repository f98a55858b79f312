//===- AutoShardJson.cpp - shardx-auto-shard's auto-json dump -------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The decision space, the surrogates, the plan and the solve's figures as
// JSON (`auto-json`), which python/tests/test_auto_shard.py solves exactly
// (an ILP) and bench/auto_shard_bench.py reads (docs/Memory.md).
//
//===----------------------------------------------------------------------===//

#include "AutoShard.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace mlir;
using namespace mlir::shardx;
using namespace mlir::shardx::autoshard;

void AutoSharder::writeJson(StringRef path, const std::optional<Picks> &pick,
                            double limit, Priced real, double solveSeconds) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_Text);
  if (ec) {
    pricer.fn.emitError() << "cannot write " << path << ": " << ec.message();
    return;
  }
  llvm::json::OStream j(os, 1);
  auto number = [&](double v) {
    if (std::isfinite(v))
      j.value(v);
    else
      j.value(nullptr);
  };
  j.object([&] {
    j.attribute("function", pricer.fn.getSymName());
    j.attribute("mesh", llvm::json::Array(llvm::to_vector(
                            llvm::map_range(pricer.meshShape, [](int64_t s) {
                              return llvm::json::Value(s);
                            }))));
    j.attribute("budget", pricer.budget);
    j.attributeBegin("surrogate_budget");
    number(limit);
    j.attributeEnd();
    j.attribute("data_group", dataGroup);
    j.attributeArray("groups", [&] {
      for (const Group &g : groups)
        j.object([&] {
          j.attribute("name", g.name);
          j.attribute("data", g.isData);
          j.attributeArray("args", [&] {
            for (unsigned a : g.args)
              j.value(a);
          });
          j.attributeArray("choices", [&] {
            for (const Choice &c : g.choices)
              j.value(c.text);
          });
        });
    });
    j.attributeArray("surrogates", [&] {
      for (const Surrogate &s : surrogates)
        j.object([&] {
          j.attributeBegin("base_time");
          number(s.baseTime);
          j.attributeEnd();
          j.attribute("base_peak", s.basePeak);
          j.attributeArray("time", [&] {
            for (auto &row : s.time)
              j.array([&] {
                for (double v : row)
                  number(v);
              });
          });
          j.attributeArray("bytes", [&] {
            for (auto &row : s.bytes)
              j.array([&] {
                for (double v : row)
                  number(v);
              });
          });
          j.attributeArray("pairs", [&] {
            for (const Surrogate::Pair &p : s.pairs)
              j.object([&] {
                j.attribute("g", p.g);
                j.attribute("h", p.h);
                j.attributeArray("time", [&] {
                  for (auto &row : p.time)
                    j.array([&] {
                      for (double v : row)
                        number(v);
                    });
                });
              });
          });
        });
    });
    if (solverPick) {
      unsigned d = dataGroup >= 0 ? (*solverPick)[dataGroup] : 0;
      auto [t, m] = evaluate(surrogates[d], *solverPick);
      j.attributeObject("solver", [&] {
        j.attribute("surrogate", d);
        j.attributeArray("choices", [&] {
          for (unsigned c : *solverPick)
            j.value(c);
        });
        j.attribute("surrogate_time", t);
        j.attribute("surrogate_peak", m);
      });
      Priced r = *pricer.pool.lookup(*solverPick);
      j.attributeObject("solver_real", [&] {
        j.attributeBegin("time");
        number(r.time);
        j.attributeEnd();
        j.attribute("peak", r.peak);
      });
    }
    if (pick) {
      unsigned d = dataGroup >= 0 ? (*pick)[dataGroup] : 0;
      // Without groups there is no surrogate: the plan's own numbers.
      auto [t, m] = surrogates.empty()
                        ? std::make_pair(real.time, double(real.peak))
                        : evaluate(surrogates[d], *pick);
      j.attributeObject("plan", [&] {
        j.attribute("surrogate", d);
        j.attributeArray("choices", [&] {
          for (unsigned c : *pick)
            j.value(c);
        });
        // Null where the plan's input layout was left out of the last round.
        j.attributeBegin("surrogate_time");
        number(t);
        j.attributeEnd();
        j.attributeBegin("surrogate_peak");
        number(std::isfinite(t) ? m : kInf);
        j.attributeEnd();
        j.attribute("time", real.time);
        j.attribute("peak", real.peak);
        // The recomputation the plan needs to fit its budget (in `time`
        // and `peak`): the policy, its copies and their compute.
        j.attribute("recompute", recomputeName(real.recompute));
        j.attribute("recomputed_ops", real.recomputedOps);
        j.attribute("recompute_us", real.recomputeUs);
      });
    }
    j.attribute("priced_plans", pricer.priced + pricer.pricedFull);
    j.attribute("priced_in_full", pricer.pricedFull);
    // Of the plans priced, those searched warm from their center's search
    // (without a budget, the surrogates' terms; PlanPricer::warmTime).
    j.attribute("priced_warm", pricer.warm.priced);
    // Without a budget the plans are priced by time alone (their peaks and
    // the surrogates' bytes those of the arguments), the plan chosen in
    // full.
    j.attribute("peaks_priced", pricer.budget > 0);
    // The input layouts whose first-round unary terms were not priced
    // (their centers too slow; no budget only).
    j.attribute("unary_left_out", unaryLeftOut);
    j.attribute("solve_seconds", solveSeconds);
    j.attribute("search_seconds", pricer.searchSeconds);
    j.attribute("pipeline_seconds", pricer.pipelineSeconds);
    // Whether a plan may fit by recomputing (under a budget, no calls),
    // and the seconds spent pricing recomputation.
    j.attribute("recompute_considered", pricer.recompute);
    j.attribute("recompute_seconds", pricer.recomputeSeconds);
    // The plans priced and the seconds per phase of the solve.
    j.attributeObject("phases", [&] {
      for (auto &[name, counts] : phases)
        j.attributeObject(name, [&] {
          j.attribute("plans", counts.first);
          j.attribute("seconds", counts.second);
        });
    });
    if (cutRejected)
      j.attribute("layer_cut", "rejected: the cut step's time of the "
                               "replicated plan was off by over 1%");
    if (pricer.cutDepth)
      j.attributeObject("layer_cut", [&] {
        j.attribute("layers", pricer.tiedLayers);
        // The copies built: the second, for peaks, only under a budget.
        j.attributeArray("depths", [&] {
          j.value(pricer.cutDepth);
          if (pricer.cuts[1])
            j.value(pricer.cutDepth + 1);
        });
        // The time is priced on the first copy (and its middle layer's
        // share); the second is priced for peaks only, under a budget.
        j.attribute("time_depth", pricer.cutDepth);
        j.attribute("stretches", int64_t(stretches.size()));
        j.attribute("confirmed", confirmed);
        j.attribute("confirm_seconds", confirmSeconds);
        if (extrapolated) {
          j.attributeBegin("extrapolated_time");
          number(extrapolated->time);
          j.attributeEnd();
          j.attributeBegin("extrapolated_peak");
          // Not priced without a budget (plans priced by time alone).
          if (pricer.budget > 0)
            j.value(extrapolated->peak);
          else
            j.value(nullptr);
          j.attributeEnd();
        }
      });
  });
}
