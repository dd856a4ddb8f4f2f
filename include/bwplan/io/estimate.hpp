// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// The estimate JSON: one writer for the document `bwplan estimate --format json` prints and every command
// that reports a plan with its numbers embeds (recommend, sweep points, check, the report). Shape in docs/cli.md.

#include <bwplan/calibration.hpp>
#include <bwplan/memory.hpp>
#include <bwplan/model.hpp>
#include <bwplan/plan.hpp>
#include <bwplan/throughput.hpp>
#include <bwplan/training.hpp>

#include <nlohmann/json.hpp>

namespace bwplan::io {

/// The training settings of `c` for model `m` (the "config" object of an estimate): every field of the
/// configuration, in plan-file spelling, plus what follows from it (data-parallel degree, global batch).
[[nodiscard]] inline nlohmann::ordered_json config_to_json(const model_spec& m, const training_config& c) {
  return {{"micro_batch_size", c.micro_batch},
          {"seq_len", c.seq_len},
          {"grad_accum", c.grad_accum},
          {"dp", c.dp()},
          {"global_batch_size", c.micro_batch * c.grad_accum * c.dp()},
          {"global_batch_tokens", global_batch_tokens(c)},
          {"world_size", c.world_size},
          {"gpus_per_node", c.gpus_per_node},
          {"activation_checkpointing", to_string(c.ac)},
          {"ac_every", c.ac.recomputes_blocks() ? c.ac.every : 0},
          {"sharding", to_string(c.shard)},
          {"shard_size", c.shard_size()},
          {"tp", c.tp},
          {"cp", c.cp},
          {"ep", c.ep},
          {"pp", c.pp},
          {"pp_schedule", to_string(c.schedule)},
          {"vpp", c.vpp},
          {"master_weights", to_string(c.master)},
          {"precision", to_string(c.format)},
          {"bf16_layers", c.bf16_layers ? to_string(*c.bf16_layers) : std::string("default")},
          {"bf16_blocks", {{"first", c.bf16_kept().first}, {"last", c.bf16_kept().last_for(m.layers)}}},
          {"quantized_blocks", c.quantized_blocks(m.layers)},
          {"fp8_all_gather", c.fp8_all_gather},
          {"optimizer_impl", to_string(c.optimizer)},
          {"loss", to_string(c.loss)},
          {"optimizer", to_string(c.optim)},
          {"finetune", to_string(c.finetune)},
          {"stack", to_string(c.stack)},
          {"compile", c.compile},
          {"modules", to_string(c.modules)},
          {"expandable_segments", c.expandable_segments},
          {"offload", offload_to_string(c.offload)},
          {"optimizer_in_backward", c.optimizer_in_backward},
          {"sequence_parallel", c.sequence_parallel},
          {"fsdp_embedding_units", c.fsdp_embedding_units},
          {"tp_comm_overlap", c.tp_comm_overlap},
          {"moe_a2a_overlap", c.moe_a2a_overlap},
          {"lora", c.adapters() ? nlohmann::ordered_json{{"rank", c.lora.rank},
                                                          {"alpha", c.lora.alpha},
                                                          {"targets", lora_targets_to_string(c.lora.targets)},
                                                          {"dropout", c.lora.dropout}}
                                : nlohmann::ordered_json()}};
}

/// Communication seconds by parallelism; the parts add up to the total.
[[nodiscard]] inline nlohmann::ordered_json comm_to_json(const communication_breakdown& b) {
  return {{"data_parallel", b.data_parallel.raw()},
          {"tensor_parallel", b.tensor_parallel.raw()},
          {"context_parallel", b.context_parallel.raw()},
          {"expert_parallel", b.expert_parallel.raw()},
          {"pipeline_parallel", b.pipeline_parallel.raw()}};
}

/// The pipeline of configuration `c` (pp > 1): schedule, micro-batches, the blocks and in-flight micro-batches of
/// every rank (pipeline_rank_of), the bubble as a share of the ideal step, the rank whose memory is the peak and
/// the one that sets the step time, and the P2P message per micro-batch and where it travels.
[[nodiscard]] inline nlohmann::ordered_json pipeline_to_json(const model_spec& m, const training_config& c, const memory_estimate& me,
                                                             const throughput_estimate& te) {
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (int r = 0; r < c.pp; ++r) {
    const pipeline_rank st = pipeline_rank_of(c, m.layers, leading_dense_blocks(m), r);
    ranks.push_back({{"rank", r}, {"blocks", st.blocks}, {"embedding", st.embedding}, {"head", st.head}, {"in_flight_micro_batches", st.in_flight}});
  }
  const double T = static_cast<double>(c.tokens_per_micro_batch()) / (static_cast<double>(c.tp) * c.cp);
  return {{"pp", c.pp},
          {"schedule", to_string(c.schedule)},
          {"virtual_stages_per_rank", c.virtual_stages()},
          {"micro_batches", c.grad_accum},
          {"bubble_fraction", static_cast<double>(c.pp - 1) / (static_cast<double>(c.virtual_stages()) * static_cast<double>(c.grad_accum))},
          {"bubble_s", te.bubble.raw()},
          {"peak_memory_rank", me.pipeline_rank},
          {"step_time_rank", te.pipeline_rank},
          {"p2p_bytes_per_send", 2 * T * static_cast<double>(m.hidden)},
          {"p2p_link", c.world_size > c.nvlink_domain_gpus() ? "efa" : "nvlink"},
          {"ranks", ranks}};
}

/// JSON of one configuration with its memory and throughput estimates (docs/cli.md#estimate-json): model and
/// parameter counts, config (config_to_json), memory (bytes: peaks, breakdown at the peak, phases), fits,
/// throughput (seconds, tokens/s, MFU, communication by parallelism).
[[nodiscard]] inline nlohmann::ordered_json estimate_to_json(const model_spec& m, const training_config& c,
                                                             const memory_estimate& me, const throughput_estimate& te) {
  const parameter_count pc = count_parameters(m);
  nlohmann::ordered_json j;
  j["model"] = {{"name", m.name}, {"family", m.family}};
  j["params"] = {{"total", pc.total()}, {"active", pc.active()}, {"non_embedding", pc.non_embedding()},
                 {"embedding", pc.embedding}, {"lm_head", pc.lm_head}, {"per_block", pc.block()}};
  if (pc.positions > 0) j["params"]["position_embedding"] = pc.positions;
  if (m.is_moe())
    j["params"]["moe"] = {{"experts", m.experts}, {"top_k", m.top_k}, {"moe_layers", m.moe_layers},
                          {"routed_experts", pc.routed_experts}};
  if (pc.mtp > 0) j["params"]["mtp"] = pc.mtp;
  j["config"] = config_to_json(m, c);
  const auto& b = me.at_peak;
  nlohmann::ordered_json mem;
  mem["peak_allocated_bytes"] = me.peak_allocated.raw();
  mem["peak_reserved_bytes"] = me.peak_reserved.raw();
  mem["peak_phase"] = to_string(me.peak_phase);
  mem["non_pytorch_bytes"] = me.non_pytorch.raw();
  mem["device_peak_bytes"] = me.device_peak().raw();
  mem["capacity_bytes"] = me.capacity.raw();
  mem["headroom"] = me.headroom();
  mem["breakdown"] = {{"parameters", b.parameters.raw()},     {"optimizer_states", b.optimizer_states.raw()},
                      {"gradients", b.gradients.raw()},       {"compute_weights", b.compute_weights.raw()},
                      {"activations", b.activations.raw()},   {"logits", b.logits.raw()},
                      {"transient", b.transient.raw()},       {"workspace", b.workspace.raw()},
                      {"ddp_buckets", b.ddp_buckets.raw()}};
  mem["phases"] = {{"before_forward_bytes", me.before_forward.raw()}, {"forward_peak_bytes", me.forward_peak.raw()},
                   {"after_forward_bytes", me.after_forward.raw()},   {"backward_peak_bytes", me.backward_peak.raw()},
                   {"after_backward_bytes", me.after_backward.raw()}, {"optimizer_peak_bytes", me.optimizer_peak.raw()}};
  mem["replayed"] = me.replayed;
  if (me.replay_stand_in) mem["replayed_without"] = me.replay_stand_in;  // the stand-in's replay (terms::replay_stand_in)
  if (!me.replayed)  // what keeps the caching-allocator replay from describing the plan (terms::replay_blocker)
    if (const char* why = terms::replay_blocker(m, c)) mem["not_replayed_because"] = why;
  mem["reserved_note"] = reserved_source_note(m, c, me);
  mem["allocator_setting"] = me.allocator_setting == allocator_setting_verdict::needs_expandable     ? "needs expandable_segments"
                             : me.allocator_setting == allocator_setting_verdict::fits_if_expandable ? "fits with expandable_segments"
                             : me.allocator_setting == allocator_setting_verdict::needs_expandable_for_headroom
                                 ? "needs expandable_segments for the headroom"
                                 : "unaffected";
  if (const std::string note = allocator_setting_note(me); !note.empty()) mem["allocator_note"] = note;
  if (me.paged_states.raw() > 0) {  // PagedAdamW8bit: CUDA managed memory outside the caching allocator
    mem["paged_optimizer_states_bytes"] = me.paged_states.raw();
    mem["paged_on_host_bytes"] = me.paged_on_host.raw();
  }
  if (c.offload != 0) {  // CPU offload: what one rank and one node keep in host memory (terms::host_offload)
    mem["host"] = {{"per_gpu_bytes", me.host_per_gpu.raw()},
                   {"per_node_bytes", host_memory_per_node(me, c).raw()},
                   {"ranks_per_node", std::max(1, std::min(c.gpus_per_node, c.world_size))}};
  }
  j["memory"] = mem;
  j["fits"] = me.fits;
  j["throughput"] = {{"tokens_per_s", te.tokens_per_s},
                     {"tokens_per_s_per_gpu", te.tokens_per_s_per_gpu},
                     {"step_time_s", te.step.raw()},
                     {"mfu", te.mfu},
                     {"mfu_basis", "bf16 dense peak (bf16-equivalent)"},
                     {"mfu_format_peak", te.mfu_format},
                     {"mfu_format_basis", std::string(to_string(c.format)) + " dense peak"},
                     {"model_flops_per_step", te.step_flops.model.raw()},
                     {"recompute_flops_per_step", te.step_flops.recompute.raw()},
                     {"compute_s", te.compute.raw()},
                     {"gemm_s", te.gemm.raw()},
                     {"attention_s", te.attention.raw()},
                     {"memory_bound_s", te.memory_bound.raw()},
                     {"communication_s", te.communication.raw()},
                     {"exposed_communication_s", te.exposed_communication.raw()},
                     {"communication_by_parallelism_s", comm_to_json(te.comm)},
                     {"exposed_by_parallelism_s", comm_to_json(te.exposed)},
                     {"pipeline_bubble_s", te.bubble.raw()},
                     {"tokens_per_step", te.tokens_per_step}};
  if (c.offload != 0) {  // CPU offload's part of the step (terms::offload_times)
    j["throughput"]["offload_s"] = te.offload.raw();
    j["throughput"]["offload_cpu_step_s"] = te.offload_cpu_step.raw();
    j["throughput"]["offload_pcie_s"] = te.offload_pcie.raw();
  }
  if (c.pp > 1) j["pipeline"] = pipeline_to_json(m, c, me, te);
  return j;
}

/// The error band and the three-state verdict of an estimate as JSON members of `j` (docs/calibration.md#bands):
/// `band` (its group, rows, relative half-widths, the peak-reserved and tokens/s intervals, the device bytes at the
/// band's top) and `verdict` ("fits", "tight", "does not fit"). Nothing without a band.
inline void add_band_json(nlohmann::ordered_json& j, const memory_estimate& me, const throughput_estimate& te,
                          const std::optional<error_band>& band) {
  if (!band) return;
  const double r = me.peak_reserved.raw(), t = te.tokens_per_s;
  j["band"] = {{"group", band->label()},
               {"memory_from", band->memory_from.empty() ? band->label() : band->memory_from},
               {"tokens_per_s_from", band->tokens_per_s_from.empty() ? band->label() : band->tokens_per_s_from},
               {"rows", band->rows},
               {"memory", band->memory},
               {"tokens_per_s", band->tokens_per_s},
               {"peak_reserved_bytes", {r * std::max(0.0, 1 - band->memory), r * (1 + band->memory)}},  // a band past 100 % ends at 0
               {"device_peak_top_bytes", band_top(me, band->memory).raw()},
               {"tokens_per_s_range", {t * std::max(0.0, 1 - band->tokens_per_s), t * (1 + band->tokens_per_s)}},
               {"tight_margin", tight_margin}};
  j["verdict"] = to_string(verdict_of(me, band->memory));
}

}  // namespace bwplan::io
