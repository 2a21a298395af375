#include "coordinator/testing/test_jobs.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace shardline::coordinator {

std::string TestTmpPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

JobSpec TestJobSpec(const std::string& name, int world_size, int max_restarts) {
  JobSpec s;
  s.set_name(name);
  s.set_world_size(world_size);
  ModelSpec* m = s.mutable_model();
  m->set_architecture(ModelSpec::GPT);
  m->set_n_embd(32);
  m->set_n_layer(1);
  m->set_n_head(2);
  m->set_vocab_size(256);
  m->set_block_size(16);
  DataSpec* d = s.mutable_data();
  d->set_path("/data/on/the/workers.txt");
  d->set_format(DataSpec::TEXT);
  d->set_val_fraction(0.1f);
  d->set_seq_len(16);
  OptimizerSpec* o = s.mutable_optimizer();
  o->set_kind(OptimizerSpec::ADAMW);
  o->set_lr(1e-3);
  o->set_beta1(0.9);
  o->set_beta2(0.95);
  o->set_eps(1e-8);
  o->set_min_lr(1e-3);
  FsdpSpec* f = s.mutable_fsdp();
  f->set_sharding_strategy(FsdpSpec::FULL_SHARD);
  f->set_auto_wrap_policy(FsdpSpec::TRANSFORMER_BLOCK);
  f->set_backward_prefetch(FsdpSpec::BACKWARD_PRE);
  f->set_collective_timeout_s(60);
  TrainSpec* t = s.mutable_train();
  t->set_steps(10);
  t->set_global_batch_size(2 * world_size);
  t->set_micro_batch_size(2);
  t->set_log_every(1);
  t->set_eval_batches(1);
  s.mutable_checkpoint()->set_dir("/ckpt");
  s.mutable_checkpoint()->set_keep_last(3);
  s.mutable_restart()->set_max_restarts(max_restarts);
  s.mutable_device()->set_kind(DeviceSpec::CPU);
  return s;
}

RegisterWorkerRequest TestWorkerRequest(const std::string& node, int slots) {
  RegisterWorkerRequest r;
  r.set_node_name(node);
  r.set_address("127.0.0.1");
  for (int i = 0; i < slots; ++i) {
    Slot* s = r.add_slots();
    s->set_kind(Slot::CPU);
    s->set_index(i);
    s->set_device_name("cpu");
  }
  return r;
}

}  // namespace shardline::coordinator
