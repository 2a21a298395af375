#include "worker/trainer_env.h"

#include "worker/visible_devices.h"

namespace shardline::worker {

absl::StatusOr<launch::RankEnv> TrainerEnvFor(const Assignment& a, const TrainerEnvNode& node) {
  launch::RankEnv e;
  e.rank = a.rank();
  e.world_size = a.world_size();
  e.local_rank = a.local_rank();
  e.local_world_size = a.local_world_size();
  e.master_addr = a.master_addr();
  e.coordinator = node.coordinator_address;
  // The attempt credential: the trainers' only token (never the join token); it reports for this
  // job attempt and reads its rendezvous namespace, and ends with the attempt.
  e.job_id = a.job_id();
  e.attempt = a.attempt();
  e.rdzv_namespace = a.rendezvous_namespace();
  e.rdzv_secret = a.rendezvous_secret();
  e.resume_step = a.resume_step();
  e.resume_from_job = a.resume_from_job_id();
  // 0 for a rank's first process; a replacement (>= 1) joins the running job instead of starting
  // or resuming from a checkpoint.
  e.rank_generation = a.generation();
  e.advertise_address = node.advertise_address;
  e.node_name = node.node_name;
  const spec::PathPolicy& policy = node.path_policy;
  if (!policy.read_roots.empty() && !policy.checkpoint_roots.empty()) {
    e.open_roots = policy.read_roots;
    e.open_roots.insert(e.open_roots.end(), policy.checkpoint_roots.begin(),
                        policy.checkpoint_roots.end());
  }
  // Checkpoints and TensorBoard files are written beneath the checkpoint roots alone, whether or
  // not reads are bounded.
  e.write_roots = policy.checkpoint_roots;
  if (a.spec().device().kind() == DeviceSpec::CUDA) {
    // One GPU per rank: its slot's entry of the inherited list (an index or a UUID), and NCCL's
    // sockets on the interface of --address unless the user chose one.
    absl::StatusOr<launch::DeviceEnv> device =
        RankDeviceEnv(node.visible_devices, a.slot_index(), node.nccl_ifname,
                      node.inherited_nccl_ifname, node.inherited_device_order);
    if (!device.ok()) return device.status();
    e.device = *std::move(device);
  }
  return e;
}

}  // namespace shardline::worker
