// SPDX-License-Identifier: Apache-2.0
// The Collective seam's all-to-all with variable counts (expert parallelism moves token rows with
// it): one process copies its one block; three Gloo ranks (threads of this test, over loopback)
// exchange blocks of every size from 0 up, floats and integers, each landing where its sender
// and position say; counts that do not fit are refused.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "worker/train/collective.h"

namespace fp8::train {
namespace {

constexpr int kWorld = 3;

// Elements rank r sends rank q: 0 on some pairs (also r to itself), up to 4.
int64_t Count(int r, int q) { return (r + 2 * q) % 3 + (q == 2 ? 2 : 0); }
// The i-th element r sends q: who, to whom, which.
double Value(int r, int q, int64_t i) { return r * 1000 + q * 100 + static_cast<double>(i); }

struct Exchange {
  std::vector<int64_t> send_counts, recv_counts;
  std::vector<float> send_f;
  std::vector<int64_t> send_i;
  int64_t recv_total = 0;
};

Exchange ExchangeOf(int r) {
  Exchange x;
  for (int q = 0; q < kWorld; ++q) {
    x.send_counts.push_back(Count(r, q));
    x.recv_counts.push_back(Count(q, r));
    x.recv_total += Count(q, r);
    for (int64_t i = 0; i < Count(r, q); ++i) {
      x.send_f.push_back(static_cast<float>(Value(r, q, i)));
      x.send_i.push_back(static_cast<int64_t>(Value(r, q, i)) + (int64_t{1} << 40));
    }
  }
  return x;
}

TEST(AllToAll, OneProcessCopiesItsBlock) {
  auto coll = MakeSingleProcessCollective();
  const std::vector<float> send = {1, 2, 3};
  std::vector<float> recv(3, 0);
  ASSERT_TRUE(coll->AllToAllV(send.data(), {3}, recv.data(), {3}).ok());
  EXPECT_EQ(recv, send);
  const std::vector<int64_t> isend = {int64_t{1} << 50};
  std::vector<int64_t> irecv(1, 0);
  ASSERT_TRUE(coll->AllToAllV(isend.data(), {1}, irecv.data(), {1}).ok());
  EXPECT_EQ(irecv, isend);
  ASSERT_TRUE(coll->AllToAllV(send.data(), {0}, recv.data(), {0}).ok());  // nothing to move
  EXPECT_EQ(coll->AllToAllV(send.data(), {3}, recv.data(), {2}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(coll->AllToAllV(send.data(), {3, 0}, recv.data(), {3, 0}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(coll->AllToAllV(send.data(), {-1}, recv.data(), {-1}).code(), StatusCode::kInvalidArgument);
}

TEST(AllToAll, GlooRanksExchangeBlocksOfEverySize) {
  const std::string root = testing::MakeTempDir("alltoall"), dir = root + "/rdzv";
  std::vector<std::string> failures(kWorld);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      auto coll = MakeGlooCollective(r, kWorld, dir, std::chrono::seconds(30));
      if (!coll.ok()) {
        failures[r] = coll.status().ToString();
        return;
      }
      const Exchange x = ExchangeOf(r);
      std::vector<float> recv_f(static_cast<size_t>(x.recv_total), -1);
      std::vector<int64_t> recv_i(static_cast<size_t>(x.recv_total), -1);
      for (int round = 0; round < 2; ++round) {  // twice: tags advance, buffers are reused
        Status s = (*coll)->AllToAllV(x.send_f.data(), x.send_counts, recv_f.data(), x.recv_counts);
        if (s.ok()) s = (*coll)->AllToAllV(x.send_i.data(), x.send_counts, recv_i.data(), x.recv_counts);
        if (!s.ok()) {
          failures[r] = s.ToString();
          return;
        }
      }
      size_t at = 0;
      for (int q = 0; q < kWorld; ++q)
        for (int64_t i = 0; i < Count(q, r); ++i, ++at) {
          if (recv_f[at] != static_cast<float>(Value(q, r, i)) ||
              recv_i[at] != static_cast<int64_t>(Value(q, r, i)) + (int64_t{1} << 40))
            failures[r] += "rank " + std::to_string(r) + ": element " + std::to_string(i) + " from " + std::to_string(q) + "; ";
        }
      // Counts this rank does not agree with itself on are refused before anything is sent.
      std::vector<int64_t> bad = x.send_counts;
      bad[static_cast<size_t>(r)] += 1;
      if ((*coll)->AllToAllV(x.send_f.data(), bad, recv_f.data(), x.recv_counts).code() != StatusCode::kInvalidArgument)
        failures[r] += "mismatched own count accepted; ";
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
  // The table has empty blocks, including a rank's block to itself.
  EXPECT_EQ(Count(0, 0), 0);
  EXPECT_EQ(Count(1, 1), 0);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace fp8::train
