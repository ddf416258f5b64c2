// SPDX-License-Identifier: Apache-2.0
// The queues' config (`queues:` in fp8d's --config, daemon/server/server_config.h), the quota
// check against the cluster, and the create path's queue admission (daemon/api/queue_admission.h):
// every refusal names the field.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/api/http_metrics.h"
#include "daemon/api/queue_admission.h"
#include "daemon/server/server_config.h"

namespace fp8d {
namespace {

using core::QueueConfig;

std::string ErrorOf(const std::string& yaml) {
  auto parsed = server::ParseQueues(yaml);
  EXPECT_FALSE(parsed.ok()) << yaml;
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), fp8::StatusCode::kInvalidArgument);
  return std::string(parsed.status().message());
}

bool StartsWith(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

TEST(QueueConfig, ParsesEveryKey) {
  auto parsed = server::ParseQueues(
      "- name: team-a\n  quota: {gpus: 4, cpu_slots: 2}\n  weight: 2.5\n  principals: [alice, bob]\n"
      "- name: team-b\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 2u);
  const QueueConfig& a = (*parsed)[0];
  EXPECT_EQ(a.name, "team-a");
  EXPECT_EQ(a.quota_gpus, 4);
  EXPECT_EQ(a.quota_cpu_slots, 2);
  EXPECT_DOUBLE_EQ(a.weight, 2.5);
  EXPECT_EQ(a.principals, (std::vector<std::string>{"alice", "bob"}));
  const QueueConfig& b = (*parsed)[1];  // defaults: quota 0, weight 1, every principal
  EXPECT_EQ(b.quota_gpus, 0);
  EXPECT_EQ(b.quota_cpu_slots, 0);
  EXPECT_DOUBLE_EQ(b.weight, 1);
  EXPECT_TRUE(b.principals.empty());
}

TEST(QueueConfig, RefusalsNameTheEntryAndKey) {
  EXPECT_TRUE(StartsWith(ErrorOf("- name: a\n- name: a\n"), "queues[1].name a: duplicate")) << ErrorOf("- name: a\n- name: a\n");
  EXPECT_TRUE(StartsWith(ErrorOf("- name: a\n- quota: {gpus: 1}\n"), "queues[1].name: required"));
  EXPECT_TRUE(StartsWith(ErrorOf("- name: ''\n"), "queues[0].name: required"));
  EXPECT_TRUE(StartsWith(ErrorOf("- name: 'team a'\n"), "queues[0].name team a: 1 to 64"));
  EXPECT_TRUE(StartsWith(ErrorOf("- name: -a\n"), "queues[0].name -a:"));
  EXPECT_TRUE(StartsWith(ErrorOf("- name: a\n  quota: {gpus: -1}\n"), "queues[0].quota.gpus: must be >= 0"));
  EXPECT_TRUE(StartsWith(ErrorOf("- name: a\n  quota: {cpu_slots: -2}\n"), "queues[0].quota.cpu_slots: must be >= 0"));
  EXPECT_TRUE(StartsWith(ErrorOf("- name: a\n  quota: {memory: 1}\n"), "queues[0].quota.memory: unknown"));
  EXPECT_TRUE(StartsWith(ErrorOf("- name: a\n- name: b\n  weight: 0\n"), "queues[1].weight: must be > 0"));
  EXPECT_TRUE(StartsWith(ErrorOf("- name: a\n  weight: -1\n"), "queues[0].weight: must be > 0"));
  EXPECT_TRUE(StartsWith(ErrorOf("- name: a\n  weight: lots\n"), "queues[0].weight:"));
  EXPECT_TRUE(StartsWith(ErrorOf("- name: a\n  colour: red\n"), "queues[0].colour: unknown"));
  EXPECT_TRUE(StartsWith(ErrorOf("[]"), "queues: must be a non-empty list"));
  EXPECT_TRUE(StartsWith(ErrorOf("name: a"), "queues: must be a non-empty list"));
}

TEST(QueueConfig, AQuotaAboveTheClusterIsRefusedNamingIt) {
  const std::vector<QueueConfig> queues = {{"a", 0, 2, 1, {}}, {"b", 0, 4, 1, {}}, {"g", 9, 0, 1, {}}};
  fp8::Status s = server::CheckQueueQuotas(queues, 8, 3);
  EXPECT_EQ(s.code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_TRUE(StartsWith(std::string(s.message()), "queues[1].quota.cpu_slots: queue b has a quota of 4 CPU slots but the cluster has 3"))
      << s.message();
  s = server::CheckQueueQuotas(queues, 8, 4);
  EXPECT_TRUE(StartsWith(std::string(s.message()), "queues[2].quota.gpus: queue g has a quota of 9 GPU slots but the cluster has 8"))
      << s.message();
  // Quotas may add up to more than the cluster; each one must fit.
  EXPECT_TRUE(server::CheckQueueQuotas(queues, 9, 4).ok());
  EXPECT_TRUE(server::CheckQueueQuotas({}, 0, 0).ok());
}

TEST(QueueConfig, TheConfigFileCarriesQueuesAndRefusesABadOne) {
  char dir[] = "/tmp/queue_config_testXXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/fp8d.yaml";
  auto parse = [&](const std::string& text) {
    std::ofstream(path) << text;
    std::string config_flag = "--config=" + path;
    std::vector<char*> argv = {const_cast<char*>("fp8d"), config_flag.data()};
    int exit_code = 0;
    return server::ParseServerConfig(static_cast<int>(argv.size()), argv.data(), &exit_code);
  };
  auto ok = parse("cpu_slots: 4\nqueues:\n  - name: team-a\n    quota: {cpu_slots: 2}\n  - name: team-b\n    quota: {cpu_slots: 2}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->queues.size(), 2u);
  EXPECT_EQ(ok->queues[1].name, "team-b");
  auto none = parse("cpu_slots: 4\n");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->queues.empty());  // one implicit `default`
  auto bad = parse("queues:\n  - name: a\n  - name: b\n    weight: 0\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(StartsWith(std::string(bad.status().message()), "queues[1].weight")) << bad.status().message();
  std::remove(path.c_str());
  rmdir(dir);
}

fp8d::v1::Job JobIn(const std::string& queue) {
  fp8d::v1::Job job;
  job.set_queue(queue);
  return job;
}

TEST(QueueAdmission, WithoutQueuesOnlyDefaultExistsAndIsTheDefault) {
  fp8d::v1::Job job = JobIn("");
  ASSERT_TRUE(api::AdmitToQueue({}, "alice", &job).ok());
  EXPECT_EQ(job.queue(), "default");
  job = JobIn("default");
  EXPECT_TRUE(api::AdmitToQueue({}, "alice", &job).ok());
  job = JobIn("team-a");
  fp8::Status s = api::AdmitToQueue({}, "alice", &job);
  EXPECT_EQ(s.code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_TRUE(StartsWith(std::string(s.message()), "job.queue: unknown queue team-a")) << s.message();
}

TEST(QueueAdmission, UnknownQueuesAndExcludedPrincipalsAreRefusedNamingTheField) {
  const std::vector<QueueConfig> queues = {{"team-a", 0, 2, 1, {"alice"}}, {"team-b", 0, 2, 1, {}}};
  fp8d::v1::Job job = JobIn("team-a");
  EXPECT_TRUE(api::AdmitToQueue(queues, "alice", &job).ok());
  fp8::Status s = api::AdmitToQueue(queues, "bob", &job);
  EXPECT_EQ(s.code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()), "job.queue: principal bob may not submit to queue team-a");
  job = JobIn("team-b");  // no principals: everyone
  EXPECT_TRUE(api::AdmitToQueue(queues, "bob", &job).ok());
  job = JobIn("team-c");
  s = api::AdmitToQueue(queues, "alice", &job);
  EXPECT_EQ(std::string(s.message()), "job.queue: unknown queue team-c (the queues are team-a, team-b)");
  // No queue is named default: a job must name one.
  job = JobIn("");
  s = api::AdmitToQueue(queues, "alice", &job);
  EXPECT_EQ(s.code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_TRUE(StartsWith(std::string(s.message()), "job.queue: required")) << s.message();
  // With a queue named default, an unnamed job goes there.
  const std::vector<QueueConfig> with_default = {{"default", 0, 1, 1, {}}, {"team-a", 0, 1, 1, {}}};
  job = JobIn("");
  EXPECT_TRUE(api::AdmitToQueue(with_default, "bob", &job).ok());
  EXPECT_EQ(job.queue(), "default");
}

TEST(QueueMetrics, EachQueueHasItsUsedSlotsPendingJobsAndPreemptions) {
  core::ManagerFigures figures;
  fp8d::v1::QueueStatus* a = figures.queues.add_queues();
  a->set_name("team-a");
  a->set_used_cpu_slots(3);
  a->set_pending_jobs(1);
  a->set_preemptions(2);
  figures.queues.add_queues()->set_name("team-b");
  const std::string text = api::RenderMetrics({}, figures);
  for (const char* line : {"fp8d_queue_used_slots{kind=\"cpu\",queue=\"team-a\"} 3",
                           "fp8d_queue_used_slots{kind=\"gpu\",queue=\"team-a\"} 0",
                           "fp8d_queue_pending_jobs{queue=\"team-a\"} 1",
                           "fp8d_queue_pending_jobs{queue=\"team-b\"} 0",
                           "fp8d_queue_preemptions_total{queue=\"team-a\"} 2",
                           "# TYPE fp8d_queue_preemptions_total counter"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  EXPECT_EQ(api::RenderMetrics({}, core::ManagerFigures{}).find("fp8d_queue_"), std::string::npos);
}

}  // namespace
}  // namespace fp8d
