//===- RuntimeCApiTest.cpp - The runtime's C ABI --------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/CApi.h"

#include <gtest/gtest.h>

#include <random>

using namespace shardx;
using namespace shardx::rt;

extern "C" int shardx_test_c_all_reduce(shardx_rt_comm *comm);

TEST(CApi, CollectivesFromC) {
  auto statuses = runThreads({2, 2}, [](Communicator &c) -> Status {
    if (int rc = shardx_test_c_all_reduce(getCHandle(c)))
      return Status::error("C all_reduce check failed with " +
                           std::to_string(rc));
    return Status::ok();
  });
  for (const Status &s : statuses)
    EXPECT_TRUE(s) << s.message();
}

TEST(CApi, CollectivesAndQueries) {
  auto statuses = runThreads({2, 3}, [](Communicator &c) -> Status {
    shardx_rt_comm *h = getCHandle(c);
    int64_t axes[1] = {1};
    if (shardx_rt_axis_index(h, axes, 1) != c.getCoords()[1])
      return Status::error("axis_index");
    // all_gather of one i64 per member over axis 1.
    int64_t mine = shardx_rt_rank(h), all[3];
    int64_t counts[3] = {1, 1, 1};
    if (shardx_rt_all_gather(h, &mine, all, counts, 3, SHARDX_RT_I64, axes, 1))
      return Status::error(shardx_rt_last_error(h));
    for (int64_t i = 0; i < 3; ++i)
      if (all[i] != c.getCoords()[0] * 3 + i)
        return Status::error("all_gather value");
    // permute: member i sends to i + 1 (mod 3).
    int64_t pairs[6] = {0, 1, 1, 2, 2, 0}, got = -1;
    if (shardx_rt_permute(h, &mine, &got, 1, SHARDX_RT_I64, pairs, 3, axes, 1))
      return Status::error(shardx_rt_last_error(h));
    int64_t from = (c.getCoords()[1] + 2) % 3;
    if (got != c.getCoords()[0] * 3 + from)
      return Status::error("permute value");
    // broadcast from member 2, then a barrier.
    double value = static_cast<double>(mine);
    if (shardx_rt_broadcast(h, &value, 1, SHARDX_RT_F64, 2, axes, 1) ||
        shardx_rt_barrier(h, axes, 1))
      return Status::error(shardx_rt_last_error(h));
    if (value != c.getCoords()[0] * 3 + 2)
      return Status::error("broadcast value");
    return Status::ok();
  });
  for (const Status &s : statuses)
    EXPECT_TRUE(s) << s.message();
}

TEST(CApi, BadCallsReportErrors) {
  auto statuses = runThreads({2}, [](Communicator &c) -> Status {
    shardx_rt_comm *h = getCHandle(c);
    int64_t axes[1] = {0};
    float x = 1, y = 0;
    if (shardx_rt_all_reduce(h, &x, &y, 1, /*dtype=*/9, SHARDX_RT_SUM, axes,
                             1) == 0 ||
        std::string(shardx_rt_last_error(h)) != "all_reduce: unknown dtype 9")
      return Status::error("bad dtype not reported: " +
                           std::string(shardx_rt_last_error(h)));
    if (shardx_rt_all_reduce(h, &x, &y, 1, SHARDX_RT_F32, /*reduce=*/7, axes,
                             1) == 0)
      return Status::error("bad reduction not reported");
    int64_t badAxes[1] = {3};
    if (shardx_rt_barrier(h, badAxes, 1) == 0 ||
        std::string(shardx_rt_last_error(h))
                .find("mesh axis 3 is out of "
                      "range") == std::string::npos)
      return Status::error("bad axis not reported");
    return Status::ok();
  });
  for (const Status &s : statuses)
    EXPECT_TRUE(s) << s.message();
}

namespace {
template <typename T>
void naiveGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha,
               const std::vector<T> &a, int64_t lda, const std::vector<T> &b,
               int64_t ldb, T beta, std::vector<T> &c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T acc = 0;
      for (int64_t p = 0; p < k; ++p)
        acc += (ta ? a[p * lda + i] : a[i * lda + p]) *
               (tb ? b[j * ldb + p] : b[p * ldb + j]);
      c[i * ldc + j] = alpha * acc + beta * c[i * ldc + j];
    }
}
} // namespace

TEST(CApi, GemmsMatchANaiveLoop) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(-1, 1);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      int64_t m = 5, n = 7, k = 3, batch = 3;
      int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 1;
      int64_t sa = (ta ? k : m) * lda, sb = (tb ? n : k) * ldb, sc = m * ldc;
      std::vector<double> a(batch * sa), b(batch * sb), c(batch * sc);
      for (auto *v : {&a, &b, &c})
        for (double &x : *v)
          x = dist(rng);
      std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end()),
          cf(c.begin(), c.end());
      std::vector<double> want = c;
      for (int64_t i = 0; i < batch; ++i) {
        std::vector<double> ai(a.begin() + i * sa, a.begin() + (i + 1) * sa),
            bi(b.begin() + i * sb, b.begin() + (i + 1) * sb),
            ci(want.begin() + i * sc, want.begin() + (i + 1) * sc);
        naiveGemm<double>(ta, tb, m, n, k, 1.5, ai, lda, bi, ldb, 0.5, ci, ldc);
        std::copy(ci.begin(), ci.end(), want.begin() + i * sc);
      }
      ASSERT_EQ(shardx_rt_dgemm_batched(batch, ta, tb, m, n, k, 1.5, a.data(),
                                        lda, sa, b.data(), ldb, sb, 0.5,
                                        c.data(), ldc, sc),
                0);
      ASSERT_EQ(shardx_rt_sgemm_batched(batch, ta, tb, m, n, k, 1.5f, af.data(),
                                        lda, sa, bf.data(), ldb, sb, 0.5f,
                                        cf.data(), ldc, sc),
                0);
      for (size_t i = 0; i < want.size(); ++i) {
        // Only the n of every ldc columns are written.
        EXPECT_NEAR(c[i], want[i], 1e-12) << "dgemm ta=" << ta << " tb=" << tb;
        EXPECT_NEAR(cf[i], want[i], 1e-5) << "sgemm ta=" << ta << " tb=" << tb;
      }
    }
}

TEST(CApi, GemmRejectsBadShapes) {
  std::vector<float> a(6), b(6), c(4);
  // lda smaller than k.
  EXPECT_NE(shardx_rt_sgemm(0, 0, 2, 2, 3, 1, a.data(), 2, b.data(), 2, 0,
                            c.data(), 2),
            0);
  EXPECT_NE(
      shardx_rt_dgemm(0, 0, -1, 2, 3, 1, nullptr, 3, nullptr, 2, 0, nullptr, 2),
      0);
  EXPECT_NE(shardx_rt_sgemm_batched(-1, 0, 0, 2, 2, 3, 1, a.data(), 3, 0,
                                    b.data(), 2, 0, 0, c.data(), 2, 0),
            0);
}
