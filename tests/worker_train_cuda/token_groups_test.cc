// SPDX-License-Identifier: Apache-2.0
// The embedding gradient without atomics (token_groups.h): the host grouping (runs without a
// GPU), and on a GPU the sums against a float64 reference, bit for bit the same on a rerun.
#include "worker/train/cuda/token_groups.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "tests/worker_train_cuda/cuda_test_util.h"

namespace fp8::train::cuda {
namespace {

TEST(GroupTokens, PositionsByTokenInOrderCutIntoChunks) {
  // Token 5 at 70 positions (chunks of 32, 32, 6), token 2 at 4, token 9 at 1; vocabulary 12.
  std::vector<int32_t> tokens;
  for (int i = 0; i < 74; ++i) tokens.push_back(i < 8 && i % 2 == 1 ? 2 : 5);  // 2 at 1, 3, 5, 7
  tokens.push_back(9);
  ASSERT_EQ(std::count(tokens.begin(), tokens.end(), 5), 70);

  HostTokenGroups g;
  ASSERT_TRUE(GroupTokens(tokens.data(), static_cast<int64_t>(tokens.size()), 12, &g).ok());
  // order: the 2s' positions, then the 5s', then the 9's, ascending within each token.
  std::vector<int32_t> expect_order;
  for (int32_t want : {2, 5, 9})
    for (int32_t i = 0; i < static_cast<int32_t>(tokens.size()); ++i)
      if (tokens[static_cast<size_t>(i)] == want) expect_order.push_back(i);
  EXPECT_EQ(g.order, expect_order);
  EXPECT_EQ(g.chunk_begin, (std::vector<int32_t>{0, 4, 36, 68, 74, 75}));
  EXPECT_EQ(g.chunk_token, (std::vector<int32_t>{2, 5, 5, 5, 9}));
  EXPECT_EQ(g.chunk_slot, (std::vector<int32_t>{-1, 0, 1, 2, -1}));
  EXPECT_EQ(g.multi_begin, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(g.multi_token, (std::vector<int32_t>{5}));
  EXPECT_LE(g.num_chunks(), HostTokenGroups::MaxChunks(75));
  EXPECT_LE(g.num_multi(), HostTokenGroups::MaxMulti(75));
  EXPECT_LE(g.multi_begin.back(), HostTokenGroups::MaxSlots(75));
}

TEST(GroupTokens, BoundsHoldForOneTokenEverywhere) {
  for (int64_t n : {1, 32, 33, 64, 65, 1000, 4096}) {
    std::vector<int32_t> tokens(static_cast<size_t>(n), 3);
    HostTokenGroups g;
    ASSERT_TRUE(GroupTokens(tokens.data(), n, 4, &g).ok());
    EXPECT_LE(g.num_chunks(), HostTokenGroups::MaxChunks(n)) << n;
    EXPECT_LE(g.num_multi(), HostTokenGroups::MaxMulti(n)) << n;
    EXPECT_LE(g.multi_begin.back(), HostTokenGroups::MaxSlots(n)) << n;
    EXPECT_EQ(g.chunk_begin.back(), n);
  }
}

TEST(GroupTokens, RejectsTokenOutsideTheVocabularyNamingItsPosition) {
  const std::vector<int32_t> tokens = {1, 2, 7, 0};
  HostTokenGroups g;
  const Status s = GroupTokens(tokens.data(), 4, 7, &g);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("inputs[2] = 7"), std::string::npos) << s.message();
  const std::vector<int32_t> negative = {-1};
  EXPECT_EQ(GroupTokens(negative.data(), 1, 7, &g).code(), StatusCode::kInvalidArgument);
}

TEST(TokenGroupsGpu, WteGradMatchesFloat64AndRepeatsBitForBit) {
  SKIP_WITHOUT_GPU();
  // 3000 positions over a vocabulary of 300, a third of them on token 7 (many chunks); width
  // 300 (two channel slices, the second partial).
  const int64_t n = 3000, vocab = 300, c = 300;
  std::mt19937 rng(41);
  std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = rng() % 3 == 0 ? 7 : any(rng);
  const std::vector<float> dout = Random(static_cast<size_t>(n * c), 5);
  const std::vector<float> dwte0 = Random(static_cast<size_t>(vocab * c), 6);

  std::vector<double> ref(dwte0.begin(), dwte0.end());
  std::vector<double> sums(static_cast<size_t>(vocab * c), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) sums[static_cast<size_t>(tokens[static_cast<size_t>(i)] * c + j)] += dout[static_cast<size_t>(i * c + j)];
  for (size_t k = 0; k < ref.size(); ++k) ref[k] += sums[k];
  const std::vector<float> ref_f(ref.begin(), ref.end());

  TokenGroups groups;
  ASSERT_OK(groups.Allocate(n, c));
  ASSERT_OK(groups.Build(tokens.data(), n, vocab, nullptr));
  Dev<float> d_dout(dout);
  std::vector<float> runs[2];
  for (auto& out : runs) {
    Dev<float> dwte(dwte0);
    ASSERT_OK(groups.AccumulateWteGrad(d_dout.get(), dwte.get(), nullptr));
    out = dwte.Host();
  }
  EXPECT_LT(RelErr(runs[0].data(), ref_f.data(), ref_f.size()), 1e-6);
  EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)), 0);
  EXPECT_EQ(groups.Build(tokens.data(), n + 1, vocab, nullptr).code(), StatusCode::kInvalidArgument) << "more than allocated";
}

}  // namespace
}  // namespace fp8::train::cuda
